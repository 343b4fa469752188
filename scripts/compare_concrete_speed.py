"""Ratio of overlap/offload estimates to estimates of the same layouts without overlap or offload.

Usage: ``python scripts/compare_concrete_speed.py [--count 200] [--rounds 3]``. Prints ms per estimate
(first pass: every memo cleared; repeated: the same inputs again), medians over the rounds, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from harness.estimate import clear_caches, estimate
from harness.interop.calculon_batch import require_valid
from harness.oracles.records import vendor_dir


def _plain(data):
    e = data.execution
    off = e.offload.model_copy(update={"weights": False, "activations": False, "optimizer": False})
    return data.model_copy(update={"execution": e.model_copy(update={"tp_overlap": "none", "dp_overlap": False,
                                                                     "offload": off})})


def _ms(inputs) -> float:
    start = time.perf_counter()
    for data in inputs:
        estimate(data)
    return (time.perf_counter() - start) / len(inputs) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    overlap = [d for _, d in require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz")[:args.count]]
    sets = {"overlap": overlap, "plain": [_plain(d) for d in overlap]}
    cold = {k: [] for k in sets}
    warm = {k: [] for k in sets}
    for _ in range(args.rounds):
        for name, inputs in sets.items():
            clear_caches()
            cold[name].append(_ms(inputs))
            warm[name].append(_ms(inputs))
    for label, table in (("first pass", cold), ("repeated", warm)):
        o, p = statistics.median(table["overlap"]), statistics.median(table["plain"])
        print(f"{label}: overlap/offload {o:.3f} ms, same layouts without {p:.3f} ms, ratio {o / p:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
