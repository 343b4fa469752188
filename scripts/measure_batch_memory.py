"""Measure the peak memory of ``harness estimate --calculon-batch`` against the number of lines.

Usage (from the repository root)::

    python scripts/measure_batch_memory.py [--lines 5000 50000] [--seed 20240611] [--keep DIR]

For each line count, writes a Calculon-format batch of that many configurations
(drawn like the differential corpus by ``harness.oracles.configspace``, ids
made unique), runs ``python -m harness estimate --calculon-batch IN --output
OUT`` in a child process, and prints its wall time, its peak resident memory
(``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that child alone: each run is
measured in a fresh process that spawns only it), the batch summary, and
checks that the output is a JSON list with one entry per line. Streaming
means the peak does not grow with the line count (issue 12 budget: 50,000
lines under 300 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEASURE = r"""
import resource, subprocess, sys, time
start = time.perf_counter()
run = subprocess.run([sys.executable, "-m", "harness", "estimate", "--calculon-batch", sys.argv[1], "--output", sys.argv[2]],
                     capture_output=True, text=True)
elapsed = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{elapsed:.1f} {peak_kib} {run.returncode} {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ''}")
"""


def write_batch(path: Path, lines: int, seed: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from generate_differential import generate

    with path.open("w", encoding="utf-8") as handle:
        for index, (line, _) in enumerate(generate(seed, lines)):
            data = json.loads(line)
            data["id"] = f"memory/{index:06d}/{data['id'].rsplit('/', 1)[-1]}"
            handle.write(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")


def count_entries(path: Path) -> int:
    """Entries of the output list, counted line by line (the output is json.dumps(entries, indent=1))."""
    with path.open(encoding="utf-8") as handle:
        first = handle.readline()
        if first.strip() == "[]":
            return 0
        assert first == "[\n", first
        return sum(1 for line in handle if line.startswith(" {"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[5000, 50000], help="line counts (default 5000 50000)")
    parser.add_argument("--seed", type=int, default=20240611, help="configuration seed")
    parser.add_argument("--keep", type=Path, help="keep the batches and outputs in this directory")
    args = parser.parse_args(argv)
    directory = Path(args.keep or tempfile.mkdtemp(prefix="batch-memory-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"{'lines':>7s} {'seconds':>8s} {'peak MB':>8s}  exit  summary")
    for lines in args.lines:
        batch, output = directory / f"batch-{lines}.jsonl", directory / f"out-{lines}.json"
        write_batch(batch, lines, args.seed)
        result = subprocess.run([sys.executable, "-c", MEASURE, str(batch), str(output)], capture_output=True,
                                text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        seconds, peak_kib, status, summary = result.stdout.strip().split(" ", 3)
        entries = count_entries(output)
        assert entries == lines, f"{entries} output entries for {lines} lines"
        print(f"{lines:7d} {float(seconds):8.1f} {int(peak_kib) / 1024:8.1f}  {status:>4s}  {summary}")
        if not args.keep:
            batch.unlink()
            output.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
