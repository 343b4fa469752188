"""Overlap/offload estimates against estimates without them (pytest-benchmark; ``tox -e bench``).

The same 100 layouts of the vendored overlap corpus, as drawn (with TP/DP
overlap or offload) and with every overlap and offload option switched off:
cold (every memo cleared before each round) and warm. The budget of issue 14
is a ratio (an overlap/offload estimate costs no more than twice one without):
compare the two medians of one run, or run scripts/compare_concrete_speed.py.
"""

from __future__ import annotations

import pytest

from harness.estimate import clear_caches, estimate
from harness.interop.calculon_batch import require_valid
from harness.oracles.records import vendor_dir

LAYOUTS = [d for _, d in require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz")[:100]]


def without_concurrency(data):
    execution = data.execution.model_copy(update={"tp_overlap": "none", "dp_overlap": False,
                                                  "offload": data.execution.offload.model_copy(
                                                      update={"weights": False, "activations": False,
                                                              "optimizer": False})})
    return data.model_copy(update={"execution": execution})


INPUTS = {"overlap": LAYOUTS, "plain": [without_concurrency(d) for d in LAYOUTS]}


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_batch_cold(benchmark, kind):
    inputs = INPUTS[kind]

    def batch():
        for data in inputs:
            estimate(data)

    benchmark.pedantic(batch, setup=clear_caches, rounds=5)
    benchmark.extra_info["estimates_per_round"] = len(inputs)
