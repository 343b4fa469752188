"""Every pricer provides what its Protocol names (harness.cost.views.BlockPricer, PlanPricer), and a
re-pricer keeps the wrapped pricer's compute and memory times (it changes network times only)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from harness.cases import load_case
from harness.cost.views import COST_VIEWS, BlockPricer, PlanPricer, Pricer
from harness.evidence.profile import load_profile
from harness.ir.portable import Work
from harness.pipeline import lower
from harness.search.concurrent import TierPricer
from harness.search.placement import PlacementPricer, ZeroNetworkPricer

from conftest import CASES_DIR


@pytest.fixture(scope="module")
def pricers():
    pricer = Pricer(load_profile("a100_80g"), COST_VIEWS["system_evidence"], "float16")
    plan = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()).plan
    placements = np.array([[0, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=np.int64)  # PLACED_DIMENSIONS
    return pricer, {"Pricer": pricer, "PlacementPricer": PlacementPricer(pricer, plan, placements, 2),
                    "ZeroNetworkPricer": ZeroNetworkPricer(pricer), "TierPricer": TierPricer(pricer, {"tensor": 1})}


def test_the_protocols_name_every_member_their_consumers_read():
    members = {name for name, _ in inspect.getmembers(PlanPricer) if not name.startswith("_")}
    members |= set(PlanPricer.__annotations__) | set(BlockPricer.__annotations__)
    assert members == {"profile", "view", "roofline", "work", "task", "message_s", "compute_s", "memory_s",
                       "tier2_s", "boundary_s"}


@pytest.mark.parametrize("name, protocol", [("Pricer", PlanPricer), ("PlacementPricer", PlanPricer),
                                            ("ZeroNetworkPricer", PlanPricer), ("TierPricer", BlockPricer)])
def test_each_pricer_implements_its_protocol(pricers, name, protocol):
    assert isinstance(pricers[1][name], protocol)


@pytest.mark.parametrize("name", ["PlacementPricer", "ZeroNetworkPricer", "TierPricer"])
def test_a_re_pricer_keeps_compute_and_memory_times(pricers, name):
    pricer, other = pricers[0], pricers[1][name]
    gemm = Work(operations=3e12, bytes_read=2e8, bytes_written=1e8, engine="matrix")
    assert other.work(gemm) == pricer.work(gemm)
    assert other.compute_s(3e12, "matrix") == pricer.compute_s(3e12, "matrix")
    assert (other.memory_s(2e8), other.tier2_s(2e8), other.roofline) == (pricer.memory_s(2e8), pricer.tier2_s(2e8),
                                                                          pricer.roofline)


def test_the_fits_array_prices_equal_the_pricers_on_step_and_saturating_curves():
    """Pricer.processing_s_of (the fit's design matrix) and Pricer.work price the same passes bit for bit:
    the step curves of a100_80g (sizes on, between and below thresholds) and the saturating curves and
    launch floor of a100_measured, matrix and vector engines, issued or not."""
    sizes = np.array([1.0, 5e5, 1e6, 3e7, 1e9, 4e9, 1e11, 2e12, 7e13])
    for name in ("a100_80g", "a100_measured"):
        pricer = Pricer(load_profile(name), COST_VIEWS["system_evidence"], "float16")
        for matrix in (True, False):
            operations, size = sizes, sizes[::-1] * 3
            got = pricer.processing_s_of(operations, size, np.full(len(sizes), matrix), np.ones(len(sizes), bool))
            engine = "matrix" if matrix else "vector"
            expected = [pricer.work(Work(operations=float(o), bytes_read=float(b) / 2, bytes_written=float(b) / 2,
                                         engine=engine)).processing_s for o, b in zip(operations, size)]
            assert got.tolist() == expected, (name, engine)


def test_the_tier_pricers_task_memo_is_bounded(pricers, monkeypatch):
    """With a bound of 2, three distinct tasks leave at most 2 remembered, and each price is still the
    wrapped pricer's task re-priced on the tier (the memo changes no result)."""
    import harness.search.concurrent as concurrent

    monkeypatch.setattr(concurrent, "MEMO_LIMIT", 2)
    pricer = pricers[0]
    tier = TierPricer(pricer, {"tensor": 1})
    plan = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()).plan
    messaged = [t for t in plan.tasks if t.messages is not None][:3]
    assert len({id(t) for t in messaged}) == 3
    first = [tier.task(t) for t in messaged]
    assert len(tier._tasks) <= 2
    fresh = TierPricer(pricer, {"tensor": 1})
    assert [c.passes for c in first] == [fresh.task(t).passes for t in messaged]
