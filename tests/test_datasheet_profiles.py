"""The data-sheet profiles (a100_sxm_80g, h100_sxm_80g, b200, gb200_nvl72, b300, gb300_nvl72) and the Calculon conversions beside them.

Every per-GPU number of a data-sheet profile is recomputed here from the figure NVIDIA publishes (a sparse
Tensor Core rate for a whole HGX board or NVL72 rack, a bidirectional link bandwidth, ...) with the rule
docs/profiles.md states, so a wrong division or a typo in a YAML file fails.
"""

from __future__ import annotations

import json

import pytest

from harness.errors import EvidenceError
from harness.evidence.calculon_import import profile_from_calculon
from harness.evidence.profile import load_profile, parse_profile
from harness.schedule.memory import network_problem

from conftest import ROOT, shared_reference

T, P = 1e12, 1e15
GiB = 1024**3

#: name -> (GPUs the published figure covers, {datatype: published Tensor Core FLOP/s *with sparsity* for them},
#: published FP32 FLOP/s for them, GPU memory GB, memory bandwidth B/s for them, NVLink B/s per GPU (both
#: directions), NVLink domain, scale-out Gb/s per GPU, host memory GB per GPU, host link B/s per GPU (both directions))
PUBLISHED = {
    "a100_sxm_80g": (1, {"float16": 624 * T, "bfloat16": 624 * T}, 19.5 * T, 80, 2039e9, 600e9, 8, 200, 2048 / 8, 64e9),
    "h100_sxm_80g": (1, {"float8": 3958 * T, "float16": 1979 * T, "bfloat16": 1979 * T}, 67 * T,
                     80, 3.35e12, 900e9, 8, 400, 2048 / 8, 128e9),
    "b200": (8, {"float4": 144 * P, "float8": 72 * P, "float16": 36 * P, "bfloat16": 36 * P}, 600 * T,
             1440 / 8, 64e12, 14.4e12 / 8, 8, 400, 2048 / 8, 128e9),
    "gb200_nvl72": (72, {"float4": 1440 * P, "float8": 720 * P, "float16": 360 * P, "bfloat16": 360 * P}, 5760 * T,
                    13.4e3 / 72, 576e12, 1.8e12, 72, 400, 480 / 2, 900e9 / 2),
    "b300": (8, {"float4": 144 * P, "float8": 72 * P, "float16": 36 * P, "bfloat16": 36 * P}, 600 * T,
             2.3e3 / 8, 64e12, 14.4e12 / 8, 8, 800, 2048 / 8, 128e9),
    "gb300_nvl72": (72, {"float4": 1440 * P, "float8": 720 * P, "float16": 360 * P, "bfloat16": 360 * P}, 5760 * T,
                    20e3 / 72, 576e12, 1.8e12, 72, 800, 480 / 2, 900e9 / 2),
}
#: Blackwell Ultra publishes its FP4 rate dense as well, and the dense figure is not half the sparse one (108 of
#: 144 PFLOPS for 8 GPUs, 1,080 of 1,440 for 72): name -> {datatype: published dense FLOP/s for the same GPUs}.
PUBLISHED_DENSE = {"b300": {"float4": 108 * P}, "gb300_nvl72": {"float4": 1080 * P}}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_number_is_the_published_figure_per_gpu(name):
    gpus, sparse, fp32, memory_gb, memory_bw, nvlink, domain, scale_out_gbit, host_gb, host_link = PUBLISHED[name]
    profile = load_profile(name)
    # dense = the published dense figure where there is one, else half the 'with sparsity' figure (the data
    # sheets' footnote), per GPU
    dense = {dt: PUBLISHED_DENSE.get(name, {}).get(dt, rate / 2) for dt, rate in sparse.items()}
    assert {dt: e.peak_flops_per_s for dt, e in profile.matrix.items()} == pytest.approx(
        {dt: rate / gpus for dt, rate in dense.items()}, rel=1e-12)
    # every datatype with a matrix engine has a vector engine, at the FP32 CUDA-core rate
    assert {dt: e.peak_flops_per_s for dt, e in profile.vector.items()} == pytest.approx(
        {dt: fp32 / gpus for dt in sparse}, rel=1e-12)
    # capacities: the published GB figure read as GiB (the Calculon convention of the existing profiles)
    assert profile.memory_tier1.capacity_bytes == round(memory_gb) * GiB
    assert profile.memory_tier1.bandwidth_bytes_per_s == pytest.approx(memory_bw / gpus, rel=1e-12)
    assert profile.memory_tier2.capacity_bytes == round(host_gb) * GiB
    assert profile.memory_tier2.bandwidth_bytes_per_s == pytest.approx(host_link / 2, rel=1e-12)  # one direction
    nvlink_tier, scale_out = profile.networks
    assert nvlink_tier.bandwidth_bytes_per_s == pytest.approx(nvlink / 2, rel=1e-12)  # one direction
    assert (nvlink_tier.size_processors, nvlink_tier.must_be_filled) == (domain, True)
    assert scale_out.bandwidth_bytes_per_s == scale_out_gbit * 1e9 / 8
    # the ring volume models: all-reduce 2 (1 - 1/n), reduce-scatter and all-gather 1 (1 - 1/n), p2p 1
    for tier in profile.networks:
        volumes = {op: (v.volume_multiplier, v.participant_offset) for op, v in tier.collectives.items()}
        assert volumes == {"p2p": (1, 0), "all_reduce": (2, -1), "reduce_scatter": (1, -1), "all_gather": (1, -1)}


def test_blackwell_has_fp4_and_hopper_does_not():
    for name in ("b200", "gb200_nvl72", "b300", "gb300_nvl72"):
        assert "float4" in load_profile(name).matrix
    assert "float4" not in load_profile("h100_sxm_80g").matrix
    for name in PUBLISHED:
        assert "bfloat16" in load_profile(name).matrix


def test_the_nvl72_domain_holds_72_gpus_in_groups_that_tile_it():
    gb200, h100 = load_profile("gb200_nvl72"), load_profile("h100_sxm_80g")
    assert network_problem([(0, 8), (0, 9)], gb200) is None  # TP 8 x DP 9 fill the rack
    assert network_problem([(0, 8), (0, 2)], gb200) == (
        "network tier 0 is not fully used: groups of 16 do not tile its 72 processors")
    assert network_problem([(0, 72), (1, 4)], gb200) is None
    assert network_problem([(0, 16)], h100) == (
        "network tier 0 is not big enough: its groups need 16 processors, it connects 8")


def test_an_engine_keyed_by_an_unknown_datatype_is_refused_naming_the_field():
    text = (ROOT / "evidence" / "b200.yaml").read_text().replace("  float4:", "  fp4:", 1)
    with pytest.raises(EvidenceError) as caught:
        parse_profile(text.encode(), "b200.yaml")
    assert caught.value.field == "matrix.fp4.[key]" and "'float4'" in caught.value.message


@pytest.mark.parametrize("name", ["a100_80g", "a100_80e", "h100_80g_nvl8"])
def test_the_calculon_profiles_are_the_faithful_conversion_of_calculons_systems(name):
    """a100_80g, a100_80e and h100_80g_nvl8 are Calculon 0.1.0's systems, number for number: the vendored
    Calculon records name their revisions, so they keep Calculon's datatypes (float16; float8 on the H100) and
    gain no bfloat16 (bf16 is in the data-sheet profiles; docs/profiles.md)."""
    system = json.loads(shared_reference(f"calculon-0.1.0/systems/{name}.json").read_text())
    shipped = load_profile(name)
    converted = profile_from_calculon(name, system, shipped.provenance)
    assert converted.revision() == shipped.revision()
