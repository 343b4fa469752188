#!/usr/bin/env python3
"""Time Calculon 0.1.0's optimal-execution search and ``harness search`` side by side.

Usage::

    python scripts/compare_search_speed.py --calculon-src /path/to/calculon [--model cases/megatron-22B_full.yaml]
        [--system a100_80g] [--procs 4] [--max-batch 4] [--datatype float16] [--mbs-break] [--top 5]
        [--repetitions 3] [--cpus N] [--skip-calculon]

Each repetition runs both tools as whole processes, wall clock, alternating
which goes first, and the medians are compared:

- Calculon: its stock ``llm-optimal-execution`` command with ``-c CPUS`` (all
  cores by default), from a small runner written into a temporary directory
  (never committed) that switches Calculon's debug logging off in-process
  (``logging.disable(logging.DEBUG)``, inherited by its worker pool) and then
  runs the checkout's ``bin/calculon`` unchanged. The model is the harness
  model translated to Calculon's JSON, the system our evidence profile
  exported to Calculon's format (``harness.evidence.calculon_export``);
- the harness: ``python -m harness search`` with the same request and
  ``--workers CPUS`` (a Dask LocalCluster of that many workers; 1 runs in
  process), progress bar off.

Both best sample rates are printed as a sanity check (they agree where the
harness estimates the whole space). Nothing of Calculon is vendored.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CALCULON_RUNNER = '''\
import logging, runpy, sys
calculon_src = sys.argv[1]
sys.path.insert(0, calculon_src)
logging.disable(logging.DEBUG)  # Calculon's per-evaluation debug records are never built
sys.argv = [calculon_src + "/bin/calculon", *sys.argv[2:]]
runpy.run_path(calculon_src + "/bin/calculon", run_name="__main__")
'''


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calculon-src", type=Path, help="Calculon 0.1.0 source checkout")
    parser.add_argument("--model", type=Path, default=ROOT / "cases" / "megatron-22B_full.yaml",
                        help="Calculon model JSON or case YAML (default: Megatron-22B)")
    parser.add_argument("--system", default="a100_80g", help="evidence profile (default: a100_80g)")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--datatype", default="float16")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--mbs-break", action="store_true", help="Calculon's -m (and the harness's --mbs-break)")
    parser.add_argument("--repetitions", type=int, default=3, help="alternated repetitions (default: 3)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="Calculon -c and harness --workers")
    parser.add_argument("--skip-calculon", action="store_true", help="time the harness only")
    args = parser.parse_args(argv)
    if not args.skip_calculon and (args.calculon_src is None
                                   or not (args.calculon_src / "bin" / "calculon").is_file()):
        parser.error("--calculon-src must be a Calculon source checkout (or give --skip-calculon)")

    sys.path.insert(0, str(ROOT))
    from harness.evidence.calculon_export import calculon_system
    from harness.interop.calculon_format import MODEL_FIELDS
    from harness.search.request import load_model, resolve_profile

    shape = load_model(args.model).model_dump()
    profile = resolve_profile(args.system)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="compare-search-speed-") as tmp:
        work = Path(tmp)
        (work / "model.json").write_text(json.dumps({theirs: shape[ours] for theirs, ours in MODEL_FIELDS.items()}))
        (work / "system.json").write_text(json.dumps(calculon_system(profile)))
        (work / "runner.py").write_text(CALCULON_RUNNER)
        calculon = [sys.executable, str(work / "runner.py"), str(args.calculon_src), "llm-optimal-execution",
                    str(work / "model.json"), str(args.procs), str(args.max_batch), args.datatype,
                    str(work / "system.json"), str(work / "calculon.json"), "-c", str(args.cpus), "-t", str(args.top),
                    "-n", *(["-m"] if args.mbs_break else [])]
        harness = [sys.executable, "-m", "harness", "search", "--model", str(args.model), "--system", args.system,
                   "--procs", str(args.procs), "--max-batch", str(args.max_batch), "--datatype", args.datatype,
                   "--top", str(args.top), "--workers", str(args.cpus), "--output", str(work / "harness.json"),
                   "--no-progress", *(["--mbs-break"] if args.mbs_break else [])]
        print(f"search: {args.model.name}, {args.procs} processors, batch <= {args.max_batch}, {args.datatype}, "
              f"{profile.name}; {args.cpus} cpus; {args.repetitions} alternated repetitions; "
              f"Python {sys.version.split()[0]}", flush=True)
        calc_times, ours_times = [], []
        for rep in range(args.repetitions):
            order = ("harness", "calculon") if rep % 2 else ("calculon", "harness")
            for tool in order:
                if tool == "calculon" and args.skip_calculon:
                    continue
                seconds = timed(calculon if tool == "calculon" else harness, env)
                (calc_times if tool == "calculon" else ours_times).append(seconds)
                print(f"  repetition {rep + 1}: {tool:8s} {seconds:8.2f} s", flush=True)
        ours_best = json.loads((work / "harness.json").read_text())
        print(f"harness best sample rate: {ours_best[0]['sample_rate_per_s'] if ours_best else None!r}")
        ours = statistics.median(ours_times)
        if args.skip_calculon:
            print(f"median harness: {ours:.2f} s")
            return 0
        calc_best = json.loads((work / "calculon.json").read_text())
        print(f"Calculon best sample rate: {calc_best['0']['stats']['sample_rate'] if calc_best else None!r}")
    calc = statistics.median(calc_times)
    print(f"{'median wall clock':24s} {'Calculon':>10s} {'harness':>10s} {'harness/Calculon':>17s} {'speed-up':>9s}")
    print(f"{'whole process, s':24s} {calc:10.2f} {ours:10.2f} {ours / calc:17.4f} {calc / ours:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
