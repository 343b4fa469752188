"""The Table 5 experiment as parametrized tests: one per case id.

Fixtures run in order: lowering, both estimates, then (released by the
comparison gate) the Calculon oracle and the paper holdout.
"""

from __future__ import annotations

import pytest

from harness.experiment.report import Budgets
from harness.oracles.calculon import check_view, signed_error_pct

BUDGETS = Budgets()


@pytest.mark.calibration
@pytest.mark.baseline_regression
def test_both_views_equal_calculon(case, peak_only_estimate, evidence_estimate, calculon_oracle, comparison_gate):
    assert ("oracle", case.id) in comparison_gate.events
    estimated_before = comparison_gate.events.index(("oracle", case.id))
    assert {("estimate", f"{case.id}:{v}") for v in ("peak_only", "system_evidence")} <= set(
        comparison_gate.events[:estimated_before])
    for est in (peak_only_estimate, evidence_estimate):
        (view, _), = est.views.items()
        record = calculon_oracle[view]
        parity = check_view(case.id, view, est, record.stats, record.error, case.execution.training)
        assert parity.verdict_match, parity.describe()
        assert parity.failures == [], parity.describe()
        assert len(parity.comparisons) >= 19 + 8 + 10 + 7


@pytest.mark.calibration
def test_paper_holdout_within_the_pin(case, evidence_estimate, paper_holdout):
    """PIN, not a budget: no case moves further from the paper than the largest measured error (8.87 % + 0.01)."""
    error = signed_error_pct(evidence_estimate.views["system_evidence"].total_s, paper_holdout.iteration_s)
    assert abs(error) <= BUDGETS.paper_max_abs_pct
