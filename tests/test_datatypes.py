"""A work carries its datatype (issue 19 item 2): each is priced at its own engine peak and curve.

Hand-computed from evidence/h100_80g_nvl8.yaml (float8 matrix 2e15 FLOP/s, float16 1e15 FLOP/s; both with the
step curve 0.95 above 1.28e11 operations, 0.9 above 1.6e10, 0.6 above 1e9, 0.1 below) and HBM 3.35e12 B/s."""

from __future__ import annotations

import pytest
import yaml

from harness.cost.views import COST_VIEWS, Pricer
from harness.errors import EvidenceError
from harness.evidence.profile import load_profile
from harness.ir.portable import Work
from pathlib import Path

PROFILE = load_profile("h100_80g_nvl8")
RAW = yaml.safe_load((Path(__file__).parent.parent / "evidence" / "h100_80g_nvl8.yaml").read_text())


def gemm(datatype: str | None) -> Work:
    # 2 x 4096 x 4096 x 4096 = 1.374e11 operations: the 0.95 step; fp8 operands, 1 byte
    return Work(operations=2 * 4096**3, bytes_read=0, bytes_written=0, engine="matrix", datatype=datatype)


def test_a_work_is_priced_at_the_peak_of_its_own_datatype():
    fp16 = Pricer(PROFILE, COST_VIEWS["system_evidence"], "float16")
    ops = 2 * 4096**3
    assert RAW["matrix"]["float8"]["peak_flops_per_s"] == 2e15 and RAW["matrix"]["float16"]["peak_flops_per_s"] == 1e15
    assert fp16.work(gemm(None)).compute_s == ops / (1e15 * 0.95)
    assert fp16.work(gemm("float16")).compute_s == ops / (1e15 * 0.95)
    assert fp16.work(gemm("float8")).compute_s == ops / (2e15 * 0.95)
    small = Work(operations=5e8, bytes_read=0, bytes_written=0, engine="matrix", datatype="float8")
    assert fp16.work(small).compute_s == 5e8 / (2e15 * 0.1)  # the float8 curve's step below 1e9


def test_a_datatype_the_profile_lacks_is_an_error_naming_it():
    fp16 = Pricer(PROFILE, COST_VIEWS["peak_only"], "float16")
    with pytest.raises(EvidenceError, match="no bfloat16 engine"):
        fp16.work(gemm("bfloat16"))


def test_a_work_without_datatype_keeps_its_canonical_text():
    assert "datatype" not in gemm(None).model_dump()
    assert gemm("float8").model_dump()["datatype"] == "float8"
