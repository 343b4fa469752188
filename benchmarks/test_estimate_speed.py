"""Estimate latency and throughput (pytest-benchmark; run with ``tox -e bench``).

- per Table 5 case: a cold estimate (every memo cleared before each round:
  lowering, both cost views, schedule composition) and a warm one (the
  lowering of that input cached);
- the 400-configuration public differential corpus as one batch: cold (a fresh
  process's first pass) with and without the Calculon-format translation, and
  warm (the same batch again);
- the whole calibration run (``run_experiment``: estimates, recorded Calculon
  oracle, paper comparison, report).

``extra_info`` carries the per-estimate median of the batch benchmarks.
See docs/performance.md for the figures and the side-by-side comparison
with Calculon (scripts/compare_calculon_speed.py).
"""

from __future__ import annotations

import pytest

from harness.estimate import clear_caches, estimate
from harness.interop.calculon_format import input_from_calculon

from conftest import CASES_DIR


def _per_estimate(benchmark, count: int) -> None:
    benchmark.extra_info["estimates_per_round"] = count
    if benchmark.stats is not None:  # None under --benchmark-disable (a smoke run)
        benchmark.extra_info["median_ms_per_estimate"] = benchmark.stats.stats.median / count * 1e3


def test_case_estimate_cold(benchmark, table5_case):
    data = table5_case.estimate_input()
    estimate(data)  # first-use work (compiled writers, profile load) is not the case's latency
    result = benchmark.pedantic(estimate, args=(data,), setup=clear_caches, rounds=40, warmup_rounds=2)
    assert result.status in ("ok", "infeasible")


def test_case_estimate_warm(benchmark, table5_case):
    data = table5_case.estimate_input()
    estimate(data)
    result = benchmark(estimate, data)
    assert result.status in ("ok", "infeasible")


def test_corpus_batch_cold(benchmark, corpus_inputs):
    def batch():
        for data in corpus_inputs:
            estimate(data)

    estimate(corpus_inputs[0])
    benchmark.pedantic(batch, setup=clear_caches, rounds=5)
    _per_estimate(benchmark, len(corpus_inputs))


def test_corpus_batch_cold_with_translation(benchmark, corpus_configs):
    def batch():
        for config in corpus_configs:
            estimate(input_from_calculon(*config))

    estimate(input_from_calculon(*corpus_configs[0]))
    benchmark.pedantic(batch, setup=clear_caches, rounds=5)
    _per_estimate(benchmark, len(corpus_configs))


def test_corpus_batch_warm(benchmark, corpus_inputs):
    def batch():
        for data in corpus_inputs:
            estimate(data)

    batch()
    benchmark.pedantic(batch, rounds=5)
    _per_estimate(benchmark, len(corpus_inputs))


def test_calibration_run(benchmark):
    try:
        from harness.experiment.run import run_experiment
    except ImportError as error:
        pytest.skip(f"harness.experiment has no run_experiment yet ({error})")
    report = benchmark.pedantic(run_experiment, args=(CASES_DIR,), setup=clear_caches, rounds=3, warmup_rounds=1)
    assert report.cases
