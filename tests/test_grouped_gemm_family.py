"""Family ``grouped_gemm`` (harness/evidence/families.py GroupedGemm, priced in harness/cost/views.py): a grouped
GEMM's efficiency is the matrix engine's at one expert's GEMM size g times g / (g + half_size_operations).

Expected values are written out from that rule with the profile's own peak and curve."""

from __future__ import annotations

import pytest

from harness.cost.views import COST_VIEWS, CostView, Pricer
from harness.errors import InputError
from harness.evidence.families import GroupedGemm
from harness.evidence.profile import EvidenceProfile, defines_family, load_profile
from harness.inputs import validate
from harness.ir.portable import Work
from harness.vocabulary import CURVE_FAMILIES

ONE = 2 * 1024 * 2048 * 1536  # one expert's GEMM: 2 m n k, m = 1024 tokens, n = 2048, k = 1536
GROUPS = 16


def grouped(operations: float = GROUPS * ONE) -> Work:
    return Work.trusted(operations=operations, bytes_read=0, bytes_written=0, engine="matrix", datatype=None,
                        gemm_operations=ONE)


def with_family(half_size: float) -> EvidenceProfile:
    return load_profile("b200").model_copy(update={"grouped_gemm": GroupedGemm(half_size_operations=half_size)})


def test_a_grouped_gemm_runs_at_the_engines_efficiency_times_the_families_factor():
    profile = with_family(3.0e9)
    engine = profile.matrix["bfloat16"]
    curve_efficiency = engine.operation_size_efficiency.efficiency(ONE, "test", "matrix")
    factor = ONE / (ONE + 3.0e9)  # 6.442e9 / 9.442e9 = 0.6823
    assert factor == pytest.approx(0.68227, rel=1e-4)
    pricer = Pricer(profile, COST_VIEWS["system_evidence"], "bfloat16")
    expected = GROUPS * ONE / (engine.peak_flops_per_s * curve_efficiency * factor)
    assert pricer.work(grouped()).compute_s == pytest.approx(expected, rel=1e-12)
    # a GEMM that is not grouped (no gemm_operations) is priced as without the family
    plain = Work.trusted(operations=ONE, bytes_read=0, bytes_written=0, engine="matrix", datatype=None)
    assert pricer.work(plain).compute_s == pytest.approx(
        ONE / (engine.peak_flops_per_s * curve_efficiency), rel=1e-12)


def test_without_the_family_or_a_view_that_leaves_it_out_the_price_is_unchanged():
    base = load_profile("b200")
    assert base.grouped_gemm is None and not defines_family(base, "grouped_gemm")
    assert "grouped_gemm" not in base.to_data()  # absent: not content, the revision is unchanged
    view = CostView.with_curves(set(CURVE_FAMILIES) - {"grouped_gemm"})
    with_it = Pricer(with_family(3.0e9), view, "bfloat16").work(grouped()).compute_s
    without = Pricer(base, view, "bfloat16").work(grouped()).compute_s
    assert with_it == without
    assert defines_family(with_family(3.0e9), "grouped_gemm")


def test_a_non_positive_half_size_is_refused_naming_the_field():
    data = load_profile("b200").to_data()
    data["grouped_gemm"] = {"half_size_operations": 0.0}
    with pytest.raises(InputError, match="grouped_gemm.half_size_operations"):
        validate(EvidenceProfile, data, "b200.yaml")
