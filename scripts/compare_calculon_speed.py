#!/usr/bin/env python3
"""Time Calculon 0.1.0 and the harness on the same batch, side by side.

Usage::

    python scripts/compare_calculon_speed.py --calculon-src /path/to/calculon [--corpus FILE] [--repetitions 5]

The batch is the 400-configuration public differential corpus by default
(``../shared/reference/oracle-records/differential-public.json``; any record
file with ``model``/``execution``/``system`` per record, or a Calculon-format
JSONL batch, works). Two comparisons, each alternating the two tools (the
order flips every repetition) and reporting the median:

- in-process, per estimate: one child process per tool and repetition imports
  only that tool, warms up on three configurations, then times one pass over
  the batch: Calculon ``Llm`` compile + run + ``get_stats_json`` with the
  system exported from our evidence profile, against
  ``harness.estimate.estimate`` of the translated input (both cost views) with
  every memo cleared first (a fresh process's first pass); separate processes
  keep one tool's heap from slowing the other's garbage collector;
- whole process, wall clock: ``python -m harness estimate --calculon-batch
  IN.jsonl --output OUT.json`` against a small runner (written by this script
  into its work directory, never committed) that imports the Calculon checkout
  and runs the same JSONL, reading the exported systems from JSON files.
  Both run with bytecode caches, as installed code does: the children get
  ``PYTHONPYCACHEPREFIX`` set to a directory of the work directory and
  ``PYTHONDONTWRITEBYTECODE`` unset, so an untimed first run of each tool
  compiles its sources (into that directory: neither checkout is written)
  and the timed runs load the compiled code; ``--no-bytecode-cache`` instead
  keeps the caller's environment (under ``PYTHONDONTWRITEBYTECODE=1`` every
  run compiles both tools' sources again).

Nothing of Calculon is vendored: the checkout is only imported from
``--calculon-src``. Calculon prices one system per configuration; the harness
estimate prices both views (peak-only and system-evidence) of the same plan.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "reference" / "oracle-records" / "differential-public.json"

# The whole-process Calculon runner: a JSONL batch in, a JSON list of stats out.
CALCULON_RUNNER = '''\
import json, logging, sys
calculon_src, systems_dir, batch, output = sys.argv[1:5]
sys.path.insert(0, calculon_src)
from calculon import System
from calculon.llm import Llm
log = logging.getLogger("calculon"); log.setLevel(logging.WARNING)
systems = {}
out = []
with open(batch) as lines:
    for text in lines:
        if not text.strip():
            continue
        line = json.loads(text)
        name = line["system"]
        if name not in systems:
            with open(f"{systems_dir}/{name}.json") as f:
                systems[name] = json.load(f)
        try:
            llm = Llm(Llm.Application(line["model"]), log)
            llm.compile(System(systems[name]), Llm.Execution.from_json(line["execution"]))
            llm.run(llm.sys)
            out.append({"id": line["id"], "stats": llm.get_stats_json(False)})
        except Llm.Error as error:
            out.append({"id": line["id"], "error": str(error)})
with open(output, "w") as f:
    json.dump(out, f, indent=1)
print(f"calculon: {len(out)} configurations to {output}", file=sys.stderr)
'''


def read_corpus(path: Path) -> list[dict[str, Any]]:
    """``{"id", "model", "execution", "system"}`` per configuration."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = json.loads(path.read_text())["records"]
    return [{"id": r.get("case") or r.get("id"), "model": r["model"], "execution": r["execution"],
             "system": r["system"]} for r in records]


def alternated(measurements: list[Callable[[], float]], repetitions: int) -> tuple[list[float], ...]:
    """Run the measurements in turn, the order rotated every repetition (two: flipped), each one's results in
    a list of its own."""
    results: tuple[list[float], ...] = tuple([] for _ in measurements)
    for rep in range(repetitions):
        for k in range(len(measurements)):
            which = (rep + k) % len(measurements)
            results[which].append(measurements[which]())
    return results


def measure_in_process(tool: str, calculon_src: Path, corpus: Path) -> float:
    """Seconds per estimate of one pass over the batch, in this (fresh) process.

    Only ``tool`` is imported; a few configurations warm up imports and
    first-use work, then (harness) every memo is cleared, so the timed pass is
    the first pass of a fresh process over the batch.
    """
    configs = read_corpus(corpus)
    if tool == "calculon":
        sys.path.insert(0, str(calculon_src))
        from calculon import System
        from calculon.llm import Llm

        from harness.evidence.calculon_export import calculon_system
        from harness.evidence.profile import load_profile

        systems = {name: calculon_system(load_profile(name)) for name in {c["system"] for c in configs}}
        log = logging.getLogger("calculon")
        log.setLevel(logging.WARNING)

        def one(c: dict[str, Any]) -> None:
            try:
                llm = Llm(Llm.Application(c["model"]), log)
                llm.compile(System(systems[c["system"]]), Llm.Execution.from_json(c["execution"]))
                llm.run(llm.sys)
                llm.get_stats_json(False)
            except Llm.Error:
                pass

        for c in configs[:3]:
            one(c)
    else:
        from harness.estimate import clear_caches, estimate
        from harness.interop.calculon_format import input_from_calculon

        def one(c: dict[str, Any]) -> None:
            estimate(input_from_calculon(c["model"], c["execution"], c["system"]))

        for c in configs[:3]:
            one(c)
        clear_caches()
    start = time.perf_counter()
    for c in configs:
        one(c)
    return (time.perf_counter() - start) / len(configs)


def in_process(calculon_src: Path, corpus: Path, repetitions: int) -> tuple[list[float], list[float]]:
    """Seconds per estimate, Calculon and harness, one child process per tool and repetition."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def child(tool: str) -> float:
        out = subprocess.run([sys.executable, __file__, "--calculon-src", str(calculon_src), "--corpus", str(corpus),
                              "--measure-in-process", tool], check=True, cwd=ROOT, env=env,
                             capture_output=True, text=True).stdout
        return float(out.strip().splitlines()[-1])

    return alternated([lambda: child("calculon"), lambda: child("harness")], repetitions)


def whole_process_environment(work: Path, bytecode_cache: bool) -> dict[str, str]:
    """The children's environment: ours on PYTHONPATH; with ``bytecode_cache``, compiled code cached in
    ``work/pycache`` (written by the untimed first run) whatever the caller's PYTHONDONTWRITEBYTECODE."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def whole_process(calculon_src: Path, batch: Path, systems_dir: Path, work: Path, repetitions: int,
                  bytecode_cache: bool = True, jobs: int = 1) -> tuple[list[float], ...]:
    """Wall-clock seconds of one whole process per tool, per repetition; with ``jobs`` > 1 a third contender,
    the harness with ``--jobs jobs`` (worker processes: it uses that many cores, Calculon's runner one), in
    the same alternation (the order rotates every repetition)."""
    runner = work / "calculon_batch_runner.py"
    runner.write_text(CALCULON_RUNNER)
    env = whole_process_environment(work, bytecode_cache)

    def timed(command: list[str]) -> float:
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start

    calculon = [sys.executable, str(runner), str(calculon_src), str(systems_dir), str(batch), str(work / "calculon.json")]
    harness = [sys.executable, "-m", "harness", "estimate", "--calculon-batch", str(batch),
               "--output", str(work / "harness.json")]
    timed(calculon), timed(harness)  # warm the file cache and bytecode caches
    commands = [calculon, harness] + ([harness + ["--jobs", str(jobs)]] if jobs > 1 else [])
    return alternated([lambda command=command: timed(command) for command in commands], repetitions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calculon-src", type=Path, required=True, help="Calculon 0.1.0 source checkout")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"record file or JSONL (default: {DEFAULT_CORPUS})")
    parser.add_argument("--repetitions", type=int, default=5, help="alternated repetitions per comparison (default: 5)")
    parser.add_argument("--skip-in-process", action="store_true", help="only the whole-process comparison")
    parser.add_argument("--skip-whole-process", action="store_true", help="only the in-process comparison")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="whole process: keep the caller's environment (PYTHONDONTWRITEBYTECODE=1 then compiles "
                             "both tools' sources in every run) instead of caching compiled code in the work directory")
    parser.add_argument("--harness-jobs", type=int, default=1, metavar="N",
                        help="whole process: also time the harness with --jobs N worker processes (N cores against "
                             "Calculon's one; a row of its own)")
    parser.add_argument("--measure-in-process", choices=("calculon", "harness"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_in_process:  # child mode of the in-process comparison
        sys.path.insert(0, str(ROOT))
        print(measure_in_process(args.measure_in_process, args.calculon_src, args.corpus))
        return 0
    if not (args.calculon_src / "calculon" / "llm" / "llm.py").is_file():
        parser.error(f"{args.calculon_src}: not a Calculon source checkout")
    if not args.corpus.is_file():
        parser.error(f"{args.corpus}: no such corpus")

    sys.path.insert(0, str(ROOT))
    from harness.evidence.calculon_export import calculon_system
    from harness.evidence.profile import load_profile
    from harness.interop.calculon_batch import batch_line_json

    configs = read_corpus(args.corpus)
    systems = {name: calculon_system(load_profile(name)) for name in sorted({c["system"] for c in configs})}
    cache = "no bytecode cache of its own" if args.no_bytecode_cache else "bytecode cached in its work directory"
    print(f"batch: {len(configs)} configurations from {args.corpus}; {args.repetitions} alternated repetitions; "
          f"Python {sys.version.split()[0]}; whole process: {cache}")
    rows = []
    if not args.skip_in_process:
        calc, ours = in_process(args.calculon_src, args.corpus, args.repetitions)
        rows.append(("in-process, ms per estimate", statistics.median(calc) * 1e3, statistics.median(ours) * 1e3))
    if not args.skip_whole_process:
        with tempfile.TemporaryDirectory(prefix="compare-calculon-speed-") as tmp:
            work = Path(tmp)
            systems_dir = work / "systems"
            systems_dir.mkdir()
            for name, system in systems.items():
                (systems_dir / f"{name}.json").write_text(json.dumps(system))
            batch = work / "batch.jsonl"
            batch.write_text("".join(batch_line_json(c["id"], c["model"], c["execution"], c["system"]) + "\n"
                                     for c in configs))
            times = whole_process(args.calculon_src, batch, systems_dir, work, args.repetitions,
                                  bytecode_cache=not args.no_bytecode_cache, jobs=args.harness_jobs)
        rows.append(("whole process, s per batch", statistics.median(times[0]), statistics.median(times[1])))
        if args.harness_jobs > 1:
            rows.append((f"  the same, harness --jobs {args.harness_jobs}", statistics.median(times[0]),
                         statistics.median(times[2])))
    print(f"{'median':32s} {'Calculon':>10s} {'harness':>10s} {'harness/Calculon':>17s} {'speed-up':>9s}")
    for label, calc, ours in rows:
        print(f"{label:32s} {calc:10.3f} {ours:10.3f} {ours / calc:17.3f} {calc / ours:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
