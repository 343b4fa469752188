#!/usr/bin/env python
"""Measure the memory one reported execution (a :class:`~harness.search.results.Candidate`) takes in a search
holding its top K, the figure behind :data:`harness.search.run.CANDIDATE_BYTES`.

    python scripts/measure_top_memory.py [--procs 4] [--max-batch 4]

Runs the search of ``cases/megatron-22B_full.yaml``'s model on ``a100_80g`` in this process twice, with
``--top 1`` and with a top K as large as the space (every feasible execution kept), under ``tracemalloc``, and
prints the difference of the peaks divided by the number of executions kept: bytes per held execution (the
driver's merged top K, the worker's running top K and the group outcomes in flight together).
"""

from __future__ import annotations

import argparse
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak(problem) -> tuple[int, int]:
    from harness.search.run import run_search

    tracemalloc.start()
    result = run_search(problem, workers=1)
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return top, len(result.best)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=4)
    args = parser.parse_args()
    from harness.search.request import search_problem

    model = ROOT / "cases" / "megatron-22B_full.yaml"
    small = search_problem(model, "a100_80g", args.procs, args.max_batch, "float16", top=1, prune=False)
    large = search_problem(model, "a100_80g", args.procs, args.max_batch, "float16", top=10**6, prune=False)
    base, _ = peak(small)
    held_peak, held = peak(large)
    print(f"{held} executions held: peak {held_peak / 1e6:.1f} MB vs {base / 1e6:.1f} MB with --top 1: "
          f"{(held_peak - base) / max(held, 1):.0f} bytes per held execution")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
