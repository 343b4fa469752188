"""Mixture of experts (issue 21): the model and layout fields, their rules, and (once priced) the MoE block.

Every expected value is computed by hand in the test from the rule it checks (harness/ir/model.py's
MixtureOfExperts, harness/ir/checks.py's expert_problems, harness/ir/mesh.py's folded dimensions)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.inputs import validate
from harness.ir import mesh
from harness.ir.model import MixtureOfExperts
from harness.vocabulary import COLLECTIVES, PARALLEL_DIMENSIONS

# Qwen3-30B-A3B (Hugging Face Qwen/Qwen3-30B-A3B config.json): 48 blocks, hidden 2048, 32 query heads of 128,
# 4 key/value heads, 128 experts, top 8, expert width 768, no shared experts, every block MoE.
QWEN3_30B_A3B = dict(hidden=2048, feedforward=6144, sequence_length=4096, attention_heads=32, head_size=128,
                     blocks=48, vocabulary=151936, kv_heads=4, mlp="swiglu", norm="rmsnorm", position="rope",
                     qk_norm=True, attention_dropout=0.0,
                     moe=dict(experts=128, top_k=8, expert_ffn=768))
# The measured rows' H100 layout (mb-26.04/qwen3_30b_a3b/h100): 16 GPUs, TP 1, DP 16, EP 16.
QWEN_LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=16, global_batch=512, microbatch=1,
                   datatype="bfloat16", attention_kernel="flash", optimizer_sharding=True,
                   expert_parallel=16, expert_tensor_parallel=1,
                   network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1))


def case(model: dict | None = None, execution: dict | None = None, system: str = "h100_sxm_80g") -> EstimateInput:
    data = EstimateInput.model_validate({"model": {**QWEN3_30B_A3B, **(model or {})},
                                         "execution": {**QWEN_LAYOUT, **(execution or {})}, "system": system})
    return data


def problems_of(data: EstimateInput) -> list[tuple[str, str]]:
    from harness.ir.checks import layout_problems
    return layout_problems(data.model, data.execution)


# --- the fields --------------------------------------------------------------------------------------------------

def test_the_moe_section_reads_its_agreed_subfields_with_their_defaults():
    moe = MixtureOfExperts(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3)
    assert (moe.dense_blocks, moe.frequency, moe.imbalance) == (3, 1, 1.0)
    assert moe.shared_width == 1 * 2048  # shared_expert_ffn absent: the routed width
    assert MixtureOfExperts(experts=160, top_k=6, expert_ffn=1536, shared_experts=2,
                            shared_expert_ffn=1536).shared_width == 3072
    # the busiest expert is capped by the capacity: min(1.5, 1.25)
    assert MixtureOfExperts(experts=8, top_k=2, expert_ffn=64, load_imbalance=1.5,
                            capacity_factor=1.25).imbalance == 1.25
    assert set(MixtureOfExperts.model_fields) == {"experts", "top_k", "expert_ffn", "shared_experts",
                                                  "shared_expert_ffn", "dense_layers", "layer_frequency", "router",
                                                  "capacity_factor", "load_imbalance"}
    assert all(f.description for f in MixtureOfExperts.model_fields.values())


def test_which_blocks_are_moe_follows_dense_layers_and_the_frequency():
    # dense_layers 3, frequency 2: blocks 0-2 dense, then every even index: 4, 6, 8
    moe = MixtureOfExperts(experts=8, top_k=2, expert_ffn=64, dense_layers=3, layer_frequency=2)
    assert [i for i in range(10) if moe.is_moe_block(i)] == [4, 6, 8]


@pytest.mark.parametrize("moe, field, words", [
    (dict(experts=8, top_k=9, expert_ffn=64), "model.moe", "top_k=9 exceeds experts=8"),
    (dict(experts=8, top_k=2, expert_ffn=64, shared_expert_ffn=64), "model.moe", "needs shared_experts > 0"),
    (dict(experts=8, top_k=2, expert_ffn=64, load_imbalance=0.9), "model.moe.load_imbalance", "greater than or equal to 1"),
    (dict(experts=8, top_k=2, expert_ffn=64, router="relu"), "model.moe.router", "softmax"),
    (dict(experts=8, top_k=True, expert_ffn=64), "model.moe.top_k", "integer"),
    (dict(experts=8, top_k=2, expert_ffn=64, experts_per_rank=1), "model.moe.experts_per_rank", "unknown field"),
])
def test_a_bad_moe_section_is_one_line_naming_its_field(moe, field, words):
    data = {"model": {**QWEN3_30B_A3B, "moe": moe}, "execution": QWEN_LAYOUT, "system": "h100_sxm_80g"}
    with pytest.raises(InputError) as error:
        validate(EstimateInput, data, "case.yaml")
    assert error.value.field == field and words in str(error.value) and "\n" not in str(error.value)


def test_the_expert_dimensions_are_folded_out_of_the_processors():
    assert PARALLEL_DIMENSIONS[-2:] == ("expert", "expert_tensor")
    assert PARALLEL_DIMENSIONS.of_kind("folded") == ("expert", "expert_tensor")
    e = case(execution=dict(tensor_parallel=2, data_parallel=8, expert_parallel=8, expert_tensor_parallel=2,
                            tp_communication="rs_ag",
                            network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1, expert_tensor=0))).execution
    # TP x PP x DP = 2 x 1 x 8 = 16 GPUs; EP and ETP re-partition them (2 x 8 = 16 = TP x DP)
    assert e.processors == 16 == mesh.processors(e)
    assert (mesh.degree(e, "expert"), mesh.degree(e, "expert_tensor")) == (8, 2)
    assert mesh.group_tier(e, mesh.EXPERT) == 1 and mesh.group_size(e, mesh.EXPERT) == 8
    dense = EstimateInput.model_validate({"model": {**QWEN3_30B_A3B, "moe": None}, "execution": {
        k: v for k, v in QWEN_LAYOUT.items() if k not in ("expert_parallel", "expert_tensor_parallel")
    } | {"network_tiers": dict(tensor=0, pipeline=1, data=1)}, "system": "h100_sxm_80g"}).execution
    assert mesh.degree(dense, "expert") == 1 and mesh.tier(dense, "expert") == 0  # absent: the tensor tier


def test_all_to_all_is_an_optional_collective():
    assert COLLECTIVES == ("all_reduce", "reduce_scatter", "all_gather", "p2p", "all_to_all")
    assert COLLECTIVES.of_kind("optional") == ("all_to_all",)


def test_absent_moe_fields_keep_the_digests():
    from harness.ir.model import ModelIR
    dense_model = {k: v for k, v in QWEN3_30B_A3B.items() if k != "moe"}
    dense_layout = {k: v for k, v in QWEN_LAYOUT.items() if k not in ("expert_parallel", "expert_tensor_parallel")}
    dense_layout["network_tiers"] = dict(tensor=0, pipeline=1, data=1)
    plain = ModelIR.model_validate({"shape": dense_model, "execution": dense_layout})
    stated = ModelIR.model_validate({"shape": {**dense_model, "moe": None}, "execution": {
        **dense_layout, "expert_parallel": None, "expert_tensor_parallel": None, "moe_dispatcher": None,
        "network_tiers": dict(tensor=0, pipeline=1, data=1, expert=None, expert_tensor=None)}})
    assert stated.digest() == plain.digest()
    assert not {"moe", "expert", "expert_parallel", "expert_tensor", "moe_dispatcher"} & set(
        plain.canonical().replace('"', " ").replace(":", " ").replace(",", " ").split())


# --- the layout rules (Megatron-Core's folding constraints) ----------------------------------------------------

@pytest.mark.parametrize("model, execution, field, words", [
    # EP must divide the 128 experts: 16 does, 12 does not (and 12 x 1 does divide DP 12 x TP 1)
    ({}, dict(data_parallel=12, global_batch=48, expert_parallel=12), "execution.expert_parallel",
     "EP=12 does not divide model.moe.experts=128"),
    # ETP x EP = 2 x 16 = 32 does not divide TP x CP x DP = 16
    ({}, dict(expert_tensor_parallel=2, network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1,
                                                          expert_tensor=0)),
     "execution.expert_parallel", "ETP x EP = 32 does not divide TP x CP x DP = 16"),
    # ETP must divide the expert width 768: 5 does not (EP 1 so that the product divides 16... 5 does not either:
    # the width is the first rule broken)
    ({}, dict(expert_parallel=1, expert_tensor_parallel=5,
              network_tiers=dict(tensor=0, pipeline=1, data=1, expert_tensor=0)),
     "execution.expert_tensor_parallel", "ETP=5 does not divide model.moe.expert_ffn=768"),
    ({}, dict(network_tiers=dict(tensor=0, pipeline=1, data=1)), "execution.network_tiers.expert", "tier"),
    ({"moe": dict(experts=128, top_k=8, expert_ffn=768, dense_layers=48)}, {}, "model.moe.dense_layers",
     "no MoE block among the 48 blocks"),
    # TP 2 with EP 8 needs sequence parallelism (Megatron-Core's argument check)
    ({}, dict(tensor_parallel=2, data_parallel=8, global_batch=256, expert_parallel=8), "execution.tp_communication",
     "needs sequence parallelism"),
])
def test_the_expert_layout_rules_name_their_field(model, execution, field, words):
    got = problems_of(case(model, execution))
    assert got and got[0][0] == field and words in got[0][1], got


def test_expert_fields_need_a_moe_model():
    data = case(model=dict(moe=None))
    assert problems_of(data)[0] == ("execution.expert_parallel", "expert_parallel needs model.moe (a dense model "
                                                                 "has no experts)")


def test_a_valid_moe_case_passes_the_layout_rules():
    assert problems_of(case()) == []


def test_a_moe_case_is_refused_naming_model_moe_until_it_is_priced():
    with pytest.raises(UnsupportedFeatureError) as error:
        validate_input("qwen.yaml", case())
    assert error.value.field == "model.moe" and "\n" not in str(error.value)
