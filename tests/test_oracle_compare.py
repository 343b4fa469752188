"""The comparison library (harness.oracles.calculon): errors, budgets, mapping, verdicts."""

from __future__ import annotations

import math

import pytest

from harness.errors import OracleRecordError
from harness.oracles.calculon import (
    CAPACITY_FIELDS,
    EFFICIENCY_FIELDS,
    MEMORY_FIELDS,
    METRICS,
    TIMING_FIELDS,
    WORKLOAD_FIELDS,
    MetricComparison,
    calculon_verdict,
    check_record,
    check_view,
    compare,
    estimate_record,
    estimate_verdict,
    explicit_recompute,
    outside_budget,
    signed_error_pct,
)
from harness.oracles.records import RecordIndex
from harness.oracles.reference import read_reference


@pytest.fixture(scope="module")
def full_record():
    """gpt3-175B, full recompute, TP all-reduce (Table 5), recorded with layers."""
    return RecordIndex().get("gpt3-175B/full")


@pytest.fixture(scope="module")
def full_estimate(full_record):
    return estimate_record(full_record)


def test_signed_error_follows_the_project_definition():
    assert signed_error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert signed_error_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert signed_error_pct(0.0, 0.0) == 0.0
    assert signed_error_pct(1e-30, 0.0) == math.inf
    assert signed_error_pct(-2.0, 0.0) == -math.inf


def test_budgets_are_relative_except_memory_bytes():
    assert MetricComparison("total_s", 1.0 + 1e-12, 1.0, signed_error_pct(1.0 + 1e-12, 1.0)).within_budget
    assert not MetricComparison("total_s", 1.0 + 1e-10, 1.0, signed_error_pct(1.0 + 1e-10, 1.0)).within_budget
    assert MetricComparison("memory_bytes.weight", 1e9 + 1, 1e9, 1e-7).within_budget
    assert not MetricComparison("memory_bytes.weight", 1e9 + 2, 1e9, 2e-7).within_budget
    assert not MetricComparison("components_s.forward", 1.0, 0.0, math.inf).within_budget
    assert not MetricComparison("total_s", math.nan, 1.0, math.nan).within_budget


def test_metric_set_is_complete():
    assert (len(TIMING_FIELDS), len(MEMORY_FIELDS), len(WORKLOAD_FIELDS), len(CAPACITY_FIELDS),
            len(EFFICIENCY_FIELDS)) == (12, 8, 19, 8, 5)  # timing: the nine, the two offload ones, the total
    assert len(METRICS) == len(set(METRICS)) == 52


def test_compare_on_a_recorded_case_is_exact(full_record, full_estimate):
    stats = full_record.views["system_evidence"].stats
    comparisons = compare(full_estimate.views["system_evidence"], stats, training=True)
    assert [c.metric for c in comparisons] == list(METRICS)
    assert outside_budget(comparisons) == []
    by_metric = {c.metric: c for c in comparisons}
    assert by_metric["total_s"].oracle == stats["total_time"]
    assert by_metric["total_s"].estimate == pytest.approx(18.0288, abs=1e-4)
    assert by_metric["components_s.pipeline_bubble"].oracle == stats["bubble_time"]
    assert by_metric["memory_bytes.tier1_total"].oracle == stats["proc_mem_tier1_cap_req"]
    # full recompute repeats the forward work of the flagged layers (all but the block's TP reductions)
    assert by_metric["workload.recompute_flops"].oracle == 954439041024.0
    assert by_metric["workload.recompute_flops"].oracle < by_metric["workload.forward_flops"].oracle == 954483081216.0


def test_a_perturbed_oracle_value_is_reported_with_its_signed_error(full_record, full_estimate):
    stats = dict(full_record.views["system_evidence"].stats, total_time=full_record.views["system_evidence"].stats["total_time"] * 1.01)
    failures = outside_budget(compare(full_estimate.views["system_evidence"], stats, training=True))
    assert [f.metric for f in failures] == ["total_s"]
    assert failures[0].error_pct == pytest.approx(100 * (1 / 1.01 - 1))
    stats = dict(full_record.views["system_evidence"].stats, weight_space=full_record.views["system_evidence"].stats["weight_space"] + 2)
    failures = outside_budget(compare(full_estimate.views["system_evidence"], stats, training=True))
    assert [f.metric for f in failures] == ["memory_bytes.weight"]


def test_explicit_recompute_rules(full_record):
    stats = full_record.views["system_evidence"].stats
    derived = explicit_recompute(stats, training=True)
    assert derived.flops == sum(layer["fw_flops"] for layer in stats["layers"] if layer["flags"]["needs_recompute"])
    assert (derived.flops, derived.bytes) == (954439041024.0, 2315354112.0)
    assert explicit_recompute(stats, training=False).flops == 0.0
    assert explicit_recompute({"explicit_recompute": {"flops": 3, "bytes": 4}}).bytes == 4.0
    with pytest.raises(OracleRecordError, match="neither explicit_recompute nor layers"):
        explicit_recompute({k: v for k, v in stats.items() if k != "layers"}, training=True)


def test_compare_a_subset_without_recompute_data(full_record, full_estimate):
    stats = {k: v for k, v in full_record.views["system_evidence"].stats.items() if k != "layers"}
    memory = compare(full_estimate.views["system_evidence"], stats, metrics=MEMORY_FIELDS)
    assert [c.metric for c in memory] == list(MEMORY_FIELDS) and outside_budget(memory) == []
    with pytest.raises(ValueError, match="unknown metric"):
        compare(full_estimate.views["system_evidence"], stats, metrics=["total_time"])


def test_verdict_kinds():
    assert calculon_verdict(None) is None
    assert calculon_verdict("Network tier0 isn't big enough") == "network tier too small (tier 0)"
    assert calculon_verdict("Network tier1 isn't fully used") == "network tier not filled (tier 1)"
    assert calculon_verdict("Mem tier1 needs 229.696 GiB but only has 80 GiB") == "memory tier capacity (tier 1)"
    assert calculon_verdict("something else").startswith("unrecognised")


def test_verdict_mismatch_is_reported(full_record, full_estimate):
    parity = check_view("x", "system_evidence", full_estimate, None, "Network tier0 isn't big enough", True)
    assert not parity.verdict_match and not parity.ok
    assert parity.describe() == "x [system_evidence]: Calculon network tier too small (tier 0), estimate ok"
    assert estimate_verdict(full_estimate) is None


def test_check_record_covers_every_recorded_view(full_record):
    results = check_record(full_record)
    assert [p.view for p in results] == ["peak_only", "system_evidence"]
    assert all(p.ok for p in results) and results[0].max_abs_error_pct <= 1e-9


def test_missing_reference_file_is_one_line(tmp_path):
    with pytest.raises(OracleRecordError) as info:
        read_reference(tmp_path / "nope.json")
    assert "\n" not in str(info.value) and "nope.json: missing" in str(info.value)
