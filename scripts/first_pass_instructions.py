#!/usr/bin/env python3
"""Count the machine instructions of a cold first-pass estimate, stage by stage (callgrind: deterministic).

Usage::

    python scripts/first_pass_instructions.py [--estimates 100] [--corpus PATH]

Wall-clock time on a shared machine varies by 2x with the load; an instruction count does not, so it is how
a change to the estimate path is compared with the commit before it (run this script on both checkouts).
For each stage, valgrind's callgrind counts this script's worker in a fresh process over the first
``--estimates`` configurations of the corpus (the 400-configuration public differential corpus by default), after
three warm-up estimates and ``harness.estimate.clear_caches()``; one more run over no configuration counts the
start-up and warm-up, so the difference divided by ``--estimates`` is the instructions of one
first-pass estimate without start-up. The stages are cumulative:

- ``translate``: ``harness.interop.calculon_format.input_from_calculon`` of each configuration;
- ``lower``: and ``harness.pipeline.lower`` (import, both passes, the ModelIR digest that keys the lowering);
- ``digests``: and ``Lowering.digests()`` (the DistributedTaskIR's and PortablePlanIR's canonical text);
- ``estimate``: instead, ``harness.estimate.estimate`` (all of it: what ``compare_calculon_speed.py`` times
  in process).

``--no-collector`` counts with the cyclic garbage collector disabled: its collections start whenever enough
objects have been allocated, so any change that allocates a little more or less moves them, and a whole
collection more or fewer swings a count by about 1 %; small changes are compared without them.

Needs valgrind on the PATH. Figures are for the Python that runs the script (``sys.executable``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "reference" / "oracle-records" / "differential-public.json"
STAGES = ("translate", "lower", "digests", "estimate")


def worker(stage: str, count: int, corpus: Path, collector: bool = True) -> None:
    """What callgrind counts: warm-up, cleared caches, then ``count`` configurations up to ``stage`` (without
    ``collector``: the cyclic garbage collector disabled first)."""
    if not collector:
        import gc

        gc.disable()
    from harness.estimate import clear_caches, estimate
    from harness.interop.calculon_format import input_from_calculon
    from harness.pipeline import lower

    records = json.loads(corpus.read_text())["records"]
    for record in records[:3]:
        estimate(input_from_calculon(record["model"], record["execution"], record["system"]))
    clear_caches()
    for record in records[:count]:
        data = input_from_calculon(record["model"], record["execution"], record["system"])
        if stage == "estimate":
            estimate(data)
        elif stage != "translate":
            lowering = lower(data)
            if stage == "digests":
                lowering.digests()


def instructions(stage: str, count: int, corpus: Path, collector: bool = True) -> int:
    """Instructions callgrind collected over one worker process."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--worker", stage, "--estimates", str(count), "--corpus", str(corpus),
               *(() if collector else ("--no-collector",))]
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    for line in result.stderr.splitlines():
        if "Collected" in line:
            return int(line.split()[-1])
    raise SystemExit(f"callgrind counted nothing for stage {stage} (exit {result.returncode}):\n{result.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimates", type=int, default=100, help="configurations counted (default 100)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a Calculon-records corpus")
    parser.add_argument("--no-collector", action="store_true",
                        help="disable the cyclic garbage collector in the counted processes: its collections move "
                             "with any change in allocation and swing a count by about 1 %% either way, so compare "
                             "small changes without them (and the collector's cost apart, with them)")
    parser.add_argument("--worker", choices=STAGES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.estimates, args.corpus, collector=not args.no_collector)
        return 0
    if args.estimates < 1:
        parser.error("--estimates must be at least 1")
    if not args.corpus.is_file():
        parser.error(f"--corpus: no file {args.corpus}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on the PATH")
    print(f"{args.estimates} cold first-pass estimates of {args.corpus.name}; Python {sys.version.split()[0]}")
    print(f"{'stage (cumulative)':22s} {'M instructions per estimate':>28s}")
    collector = not args.no_collector
    base = instructions("translate", 0, args.corpus, collector)  # start-up and warm-up: the same for every stage
    for stage in STAGES:
        counted = instructions(stage, args.estimates, args.corpus, collector)
        print(f"{stage:22s} {(counted - base) / args.estimates / 1e6:28.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
