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

``--batch`` counts the stages of one line of ``harness estimate --calculon-batch`` instead (every configuration
of the corpus written as a batch line first, in the base count too), also cumulative:

- ``line``: ``harness.interop.calculon_batch.parse_line`` (the line's JSON, its translation and checks, the
  evidence profile);
- ``entry``: and ``harness.commands.estimate.batch_entry_json`` (the estimate without digests, as the batch
  makes it, and its entry);
- ``text``: and ``harness.commands.estimate.indented_json`` of the entry (what the batch writes for it).

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
BATCH_STAGES = ("line", "entry", "text")


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


def batch_worker(stage: str, count: int, corpus: Path, collector: bool = True) -> None:
    """:func:`worker` for the stages of a batch line (:data:`BATCH_STAGES`)."""
    if not collector:
        import gc

        gc.disable()
    from harness.commands.estimate import batch_entry_json, indented_json
    from harness.estimate import clear_caches
    from harness.interop.calculon_batch import batch_line_json, parse_line

    records = json.loads(corpus.read_text())["records"]
    # every record, whatever the count: the same work in the base count
    lines = [batch_line_json(str(r.get("case") or r.get("id") or f"line-{n}"), r["model"], r["execution"],
                             r["system"]) for n, r in enumerate(records, 1)]
    for number, text in enumerate(lines[:3], 1):
        indented_json(batch_entry_json(parse_line(text, number)), " ")
    clear_caches()
    for number, text in enumerate(lines[:count], 1):
        entry = parse_line(text, number)
        if stage != "line":
            result = batch_entry_json(entry)
            if stage == "text":
                indented_json(result, " ")


def instructions(stage: str, count: int, corpus: Path, collector: bool = True) -> int:
    """Instructions callgrind collected over one worker process (of a batch stage's worker for a name of
    :data:`BATCH_STAGES`)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--batch-worker" if stage in BATCH_STAGES else "--worker", stage, "--estimates", str(count),
               "--corpus", str(corpus),
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
    parser.add_argument("--batch", action="store_true",
                        help="count the stages of a line of `harness estimate --calculon-batch` instead")
    parser.add_argument("--worker", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--batch-worker", choices=BATCH_STAGES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.estimates, args.corpus, collector=not args.no_collector)
        return 0
    if args.batch_worker:
        batch_worker(args.batch_worker, args.estimates, args.corpus, collector=not args.no_collector)
        return 0
    if args.estimates < 1:
        parser.error("--estimates must be at least 1")
    if not args.corpus.is_file():
        parser.error(f"--corpus: no file {args.corpus}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on the PATH")
    what, unit = ("batch lines", "line") if args.batch else ("first-pass estimates", "estimate")
    print(f"{args.estimates} cold {what} of {args.corpus.name}; Python {sys.version.split()[0]}")
    print(f"{'stage (cumulative)':22s} {'M instructions per ' + unit:>28s}")
    collector = not args.no_collector
    stages = BATCH_STAGES if args.batch else STAGES
    base = instructions(stages[0], 0, args.corpus, collector)  # start-up and warm-up: the same for every stage
    for stage in stages:
        counted = instructions(stage, args.estimates, args.corpus, collector)
        print(f"{stage:22s} {(counted - base) / args.estimates / 1e6:28.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
