"""Execution search throughput (pytest-benchmark; run with ``tox -e bench``).

Megatron-22B on 4 processors, batch 4 (53,352 executions, Calculon's space),
in one process, every memo cleared before each round: the pruned search (top
5) and the full composition with every row kept (``--results``). The
whole-process comparison with Calculon's own search is
``scripts/compare_search_speed.py`` (docs/search.md).
"""

from __future__ import annotations

from harness.estimate import clear_caches
from harness.search.request import search_problem
from harness.search.run import run_search

from conftest import CASES_DIR


def _problem(**options):
    return search_problem(CASES_DIR / "megatron-22B_full.yaml", "a100_80g", 4, 4, "float16", top=5, **options)


def _per_execution(benchmark, executions: int) -> None:
    benchmark.extra_info["executions_per_round"] = executions
    if benchmark.stats is not None:  # None under --benchmark-disable (a smoke run)
        benchmark.extra_info["median_us_per_execution"] = benchmark.stats.stats.median / executions * 1e6


def test_search_22b_4_pruned(benchmark):
    problem = _problem()
    result = benchmark.pedantic(run_search, args=(problem,), kwargs={"workers": 1}, setup=clear_caches, rounds=3)
    assert result.counts.executions == 53_352 and result.best[0].rate == 2.320932707766673
    _per_execution(benchmark, result.counts.executions)


def test_search_22b_4_every_row(benchmark):
    problem = _problem(prune=False, collect_rows=True)
    rows = []
    result = benchmark.pedantic(run_search, args=(problem,), kwargs={"workers": 1, "on_rows": rows.append},
                                setup=clear_caches, rounds=2)
    assert result.counts.executions == 53_352
    _per_execution(benchmark, result.counts.executions)
