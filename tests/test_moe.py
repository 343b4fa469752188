"""Mixture of experts (issue 21): the model and layout fields, their rules, and (once priced) the MoE block.

Every expected value is computed by hand in the test from the rule it checks (harness/ir/model.py's
MixtureOfExperts, harness/ir/checks.py's expert_problems, harness/ir/mesh.py's folded dimensions)."""

from __future__ import annotations

import json
import re
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


def plan_of(data: EstimateInput):
    from harness.pipeline import lower
    return lower(data).plan


def task(plan, name):
    return next(t for t in plan.tasks if t.name == name)


# --- the MoE block (harness.passes.patterns.MixtureOfExpertsMLP), hand-computed ---------------------------------

def test_the_dispatch_all_to_all_sends_p_minus_1_over_p_of_the_token_copies():
    from harness.cost.views import COST_VIEWS, Pricer
    from harness.evidence.profile import load_profile
    from harness.ir.experts import all_to_all_bytes_sent_per_rank

    plan = plan_of(case())
    dispatch = task(plan, "mlp.dispatch").messages.forward_base
    # T = microbatch 1 x sequence 4096 (TP 1, CP 1) tokens, each copied to top_k 8 experts, hidden 2048, 2 bytes
    assert dispatch.collective == "all_to_all" and dispatch.message_bytes == 4096 * 8 * 2048 * 2
    assert (dispatch.participants, dispatch.network_tier) == (16, 1)  # the EP group, on network_tiers.expert
    assert task(plan, "mlp.combine").messages.backward_base == dispatch  # the gradients the other way: same bytes
    sent = all_to_all_bytes_sent_per_rank(dispatch.message_bytes, 16)
    assert sent == 134217728 * 15 / 16 == 125829120
    profile = load_profile("h100_sxm_80g")
    tier = profile.networks[1]
    assert "all_to_all" not in tier.collectives  # the documented fallback: all_gather's volume model
    pricer = Pricer(profile, COST_VIEWS["peak_only"], "bfloat16")
    assert pricer.message_s(dispatch) == pytest.approx(tier.latency_s + sent / tier.bandwidth_bytes_per_s, rel=1e-12)
    # a profile that states an all_to_all volume model is priced with it (twice the bytes here)
    from harness.evidence.profile import VolumeModel
    doubled = profile.model_copy(update={"networks": [
        n.model_copy(update={"collectives": {**n.collectives, "all_to_all": VolumeModel(
            volume_multiplier=2.0, participant_offset=-1.0)}}) for n in profile.networks]})
    assert Pricer(doubled, COST_VIEWS["peak_only"], "bfloat16").message_s(dispatch) == pytest.approx(
        tier.latency_s + 2 * sent / tier.bandwidth_bytes_per_s, rel=1e-12)


def test_the_grouped_gemms_run_each_local_expert_on_the_busiest_experts_tokens():
    plan_shape = lambda data, name: next(t.shape for t in lower_tasks(data) if t.name == name)  # noqa: E731
    # EP 16: 128 / 16 = 8 local experts; the 4096 x 16 tokens of the EP group pick 8 of 128 experts each:
    # 4096 x 16 x 8 / 128 = 4096 tokens per expert (balanced)
    fc1 = plan_shape(case(), "mlp.experts_fc1")
    assert (fc1.groups, fc1.m, fc1.n, fc1.k) == (8, 4096, 2048, 2 * 768)  # SwiGLU: gate and up, 2 x expert_ffn
    fc2 = plan_shape(case(), "mlp.experts_fc2")
    assert (fc2.groups, fc2.m, fc2.n, fc2.k) == (8, 4096, 768, 2048)
    # the busiest expert at 1.5 x the mean: 6144 tokens; capped by a capacity factor of 1.25: 5120
    moe = dict(QWEN3_30B_A3B["moe"])
    assert plan_shape(case(dict(moe={**moe, "load_imbalance": 1.5})), "mlp.experts_fc1").m == 6144
    assert plan_shape(case(dict(moe={**moe, "load_imbalance": 1.5, "capacity_factor": 1.25})),
                      "mlp.experts_fc1").m == 5120
    # a capacity factor below 1 caps every expert under the mean (it was an internal error): 4096 x 0.5 = 2048,
    # and a tiny one still leaves one token, and the estimate stays finite
    from harness.estimate import estimate

    assert plan_shape(case(dict(moe={**moe, "capacity_factor": 0.5})), "mlp.experts_fc1").m == 2048
    tiny = case(dict(moe={**moe, "capacity_factor": 1e-300}))
    assert plan_shape(tiny, "mlp.experts_fc1").m == 1
    assert all(0 < v.total_s < float("inf") for v in estimate(tiny).views.values())
    # EP 8 x ETP 2 over DP 16: 16 local experts, each on 4096 x 8 x 2 x 8 / 128 = 4096 tokens, width 768 / 2
    folded = case(execution=dict(expert_parallel=8, expert_tensor_parallel=2, network_tiers=dict(
        tensor=0, pipeline=1, data=1, expert=0, expert_tensor=0)))
    fc1 = plan_shape(folded, "mlp.experts_fc1")
    assert (fc1.groups, fc1.m, fc1.k) == (16, 4096, 2 * 384)
    gather = plan_shape(folded, "mlp.expert_gather")  # the dispatched 4096 x 8 copies, gathered over ETP 2
    assert (gather.elements, gather.participants, gather.base_forward) == (4096 * 8 * 2 * 2048, 2, "all_gather")


def lower_tasks(data):
    from harness.pipeline import lower
    return lower(data).distributed.tasks


def test_a_grouped_gemm_is_priced_at_one_experts_gemm_size():
    from harness.cost.views import COST_VIEWS, Pricer
    from harness.evidence.profile import load_profile

    fc1 = task(plan_of(case()), "mlp.experts_fc1")
    one = 2 * 4096 * 2048 * 1536  # one expert's GEMM, 2 m n k
    assert fc1.forward.operations == 8 * one and fc1.forward.gemm_operations == one
    profile = load_profile("h100_sxm_80g")
    pricer = Pricer(profile, COST_VIEWS["system_evidence"], "bfloat16")
    engine = profile.matrix["bfloat16"]
    efficiency = engine.operation_size_efficiency.efficiency(one, "test", "matrix")
    assert pricer.work(fc1.forward).compute_s == pytest.approx(8 * one / (engine.peak_flops_per_s * efficiency),
                                                               rel=1e-12)


def test_router_work_is_a_hidden_by_experts_gemm_and_a_top_k_on_every_token():
    plan = plan_of(case())
    router, top = task(plan, "mlp.router"), task(plan, "mlp.top_k")
    assert router.forward.operations == 2 * 4096 * 2048 * 128 and router.forward.engine == "matrix"
    assert router.capacity.weight_bytes == 2048 * 128 * 2  # dense weights, hidden x experts
    # softmax (5 per score) + top_k 8 compares, over 4096 x 128 scores
    assert top.forward.operations == 4096 * 128 * (5 + 8) and top.forward.engine == "vector"
    # fp8 recipes quantize the expert GEMMs but never the router
    fp8 = plan_of(case(execution=dict(precision="fp8_current")))
    assert task(fp8, "mlp.router").forward.datatype is None
    assert task(fp8, "mlp.experts_fc1").forward.datatype == "float8"
    assert task(fp8, "mlp.experts_fc1.quantize").forward.operations > 0


def test_expert_weights_are_sharded_by_ep_and_reduced_over_expert_data_parallel():
    from harness.ir.experts import expert_parameters_per_rank

    # DP 16, EP 8: 16 local experts; expert-DP = TP x CP x DP / (EP x ETP) = 16 / 8 = 2
    data = case(execution=dict(expert_parallel=8))
    plan = plan_of(data)
    experts = [t for t in plan.tasks if t.primitive == "grouped_linear" and t.phase == "forward"]
    parameters = expert_parameters_per_rank(2048, 768, 128, 8, 1)
    assert parameters == 3 * 2048 * 768 * 16 == 75497472
    assert sum(t.capacity.weight_bytes for t in experts) == parameters * 2
    # the distributed optimizer shards the expert state over expert-DP (2), the dense state over DP (16):
    # fp32 master + two fp32 moments = 12 bytes per parameter
    assert sum(t.capacity.optimizer_bytes for t in experts) == parameters * 12 / 2
    router = task(plan, "mlp.router")
    assert router.capacity.optimizer_bytes == 2048 * 128 * 12 / 16
    dense_bytes = sum(t.capacity.weight_bytes for t in plan.tasks if t.phase == "forward") - parameters * 2
    dp = plan.data_parallel
    assert dp.gradient_bytes == dense_bytes and {m.participants for m in dp.messages} == {16}
    assert dp.expert.gradient_bytes == parameters * 2
    assert [(m.collective, m.participants, m.message_bytes) for m in dp.expert.messages] == [
        ("reduce_scatter", 2, parameters * 2), ("all_gather", 2, parameters * 2)]
    # EP 16 over DP 16: expert-DP 1, no expert gradient sync at all
    assert plan_of(case()).data_parallel.expert is None


def test_shared_experts_run_on_every_token_over_tp():
    # DeepSeek-V2-like section: 2 shared experts of 1536 (their MLP 3072 wide), TP 2 with sequence parallelism
    moe = dict(experts=160, top_k=6, expert_ffn=1536, shared_experts=2, shared_expert_ffn=1536)
    data = case(dict(moe=moe, hidden=2048, attention_heads=32, kv_heads=4), dict(
        tensor_parallel=2, data_parallel=8, global_batch=256, expert_parallel=8, tp_communication="rs_ag"))
    tasks = {t.name: t.shape for t in lower_tasks(data) if t.phase == "forward"}
    # the whole microbatch (4096 tokens, gathered by the shared experts' f), width 3072 / TP 2, gated
    assert (tasks["mlp.shared_fc1"].m, tasks["mlp.shared_fc1"].k) == (4096, 2 * 1536)
    assert tasks["mlp.shared_tp_f"].base_forward == "all_gather"
    # the routed tokens stay sequence-sharded: 4096 / 2 = 2048 per rank, x top 6 copies
    assert tasks["mlp.dispatch"].elements == 2048 * 6 * 2048
    assert tasks["mlp.router"].m == 2048
    assert "mlp.tp_f" not in tasks and "mlp.tp_g" not in tasks  # the MoE layer has no f / g of its own


def test_the_allgather_dispatcher_gathers_every_token_over_the_expert_group():
    tasks = {t.name: t.shape for t in lower_tasks(case(execution=dict(moe_dispatcher="allgather")))
             if t.phase == "forward"}
    gather = tasks["mlp.dispatch_gather"]
    # every rank's 4096 tokens x hidden over EP 16 x ETP 1
    assert (gather.elements, gather.participants, gather.base_forward, gather.base_backward) == (
        4096 * 2048 * 16, 16, "all_gather", "reduce_scatter")
    assert "mlp.dispatch" not in tasks and tasks["mlp.combine_scatter"].base_forward == "reduce_scatter"


@pytest.mark.parametrize("system, tier", [("h100_sxm_80g", 1), ("gb200_nvl72", 0)])
def test_a_qwen3_30b_a3b_like_case_estimates(system, tier):
    from harness.estimate import estimate

    data = case(execution=dict(network_tiers=dict(tensor=0, pipeline=tier, data=tier, expert=tier)), system=system)
    est = estimate(data)
    for view in est.views.values():
        assert view.total_s > 0 and view.components_s.tensor_parallel > 0  # the all-to-alls are there
        assert view.memory_bytes.weight > 0


def test_dense_and_moe_blocks_are_refused_where_only_one_kind_of_block_is_lowered():
    from harness.errors import PassError
    from harness.pipeline import lower

    mixed = case(dict(moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3)))
    validate_input("deepseek.yaml", mixed)  # the estimate prices it (estimate_mixed)
    with pytest.raises(UnsupportedFeatureError) as refused:
        lower(mixed, "deepseek.yaml")  # one plan holds one kind of block: lower, trace, explain refuse it
    assert (refused.value.source, refused.value.field) == ("deepseek.yaml", "model.moe.dense_layers")
    assert "two plans" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(PassError, match="model.moe.dense_layers"):  # the pass itself still refuses it
        from harness.ir.model import ModelIR
        from harness.passes.distribute import TransformerDistribute

        TransformerDistribute().requires(ModelIR(shape=mixed.model, execution=mixed.execution))
    with pytest.raises(UnsupportedFeatureError) as error:  # the offload transfers are one kind of block's
        validate_input("deepseek.yaml", case(dict(moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3)),
                                             dict(offload=dict(weights=True))))
    assert error.value.field == "model.moe.dense_layers" and "\n" not in str(error.value)
    validate_input("deepseek.yaml", case(dict(moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3)),
                                         dict(dp_overlap=True)))  # DP overlap: both kinds' ConcretePlanIRs


def test_a_moe_plan_has_a_compiled_canonical_writer():
    from harness.ir import canonical

    for ir in (plan_of(case(execution=dict(expert_parallel=8))),):
        assert canonical.write(ir, (("schema_name", '"x"'), ("schema_version", "0"))) is not None


# --- dense and MoE blocks in one model (harness.ir.blocks, harness.estimate.estimate_mixed) ----------------------

def test_each_stage_holds_the_blocks_megatron_assigns_it():
    from harness.ir.blocks import stage_blocks

    # 16 blocks, PP 4, 2 chunks per stage: 8 virtual stages of 2 blocks; stage j holds virtual stages j and j + 4
    data = case(dict(blocks=16, moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3)),
                dict(pipeline_parallel=4, pipeline_interleaving=2, data_parallel=4, global_batch=64,
                     expert_parallel=4))
    # stage 0: blocks 0, 1 (dense), 8, 9; stage 1: 2 (dense), 3, 10, 11; stages 2, 3: MoE only
    assert stage_blocks(data.model, data.execution) == [(2, 2), (3, 1), (4, 0), (4, 0)]
    every_other = case(dict(blocks=8, moe=dict(experts=128, top_k=8, expert_ffn=768, layer_frequency=2)),
                       dict(pipeline_parallel=2, data_parallel=8, global_batch=64, expert_parallel=8))
    # MoE blocks 0, 2, 4, 6: two per stage of four
    assert stage_blocks(every_other.model, every_other.execution) == [(2, 2), (2, 2)]



#: Megatron-Bridge's DeepSeek-V3 layouts (``set_deepseek_v3_pipeline_model_parallel_layout``,
#: recipes/deepseek/deepseek_v3.py at 066adea): the decoder blocks of each virtual stage, (PP, v) -> counts,
#: copied from the recipe's ``layout_map`` (the embedding rides on the first, the MTP layer and loss on the last)
DEEPSEEK_V3_LAYOUTS = {(4, 1): [16, 16, 16, 13], (8, 1): [8] * 7 + [5], (4, 2): [8] * 7 + [5],
                       (16, 1): [4] * 15 + [1], (8, 2): [4] * 15 + [1], (4, 4): [4] * 15 + [1]}


@pytest.mark.parametrize("pp, chunks", sorted(DEEPSEEK_V3_LAYOUTS))
def test_uneven_virtual_stages_hold_the_blocks_of_megatron_bridge_s_deepseek_v3_layouts(pp, chunks):
    from harness.ir.blocks import stage_blocks

    data = case(dict(blocks=61, moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3), mtp_layers=1),
                dict(pipeline_parallel=pp, pipeline_interleaving=chunks, data_parallel=16, global_batch=512,
                     expert_parallel=16))
    assert problems_of(data) == []
    sizes = DEEPSEEK_V3_LAYOUTS[pp, chunks]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    want = []
    for stage in range(pp):  # stage j holds virtual stages j, j + PP, ...: blocks 0-2 are dense
        held = [b for c in range(chunks) for b in range(starts[c * pp + stage], starts[c * pp + stage] + sizes[c * pp + stage])]
        dense = sum(1 for b in held if b < 3)
        want.append((len(held) - dense + (stage == pp - 1), dense))  # the MTP layer (a MoE block) on the last stage
    assert stage_blocks(data.model, data.execution) == want


def test_a_layout_whose_last_virtual_stage_would_hold_no_block_is_refused():
    # 11 blocks over PP 5: ceil(11 / 5) = 3 per stage leaves 11 - 12 = -1 for the last
    data = case(dict(blocks=11, moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=1)),
                dict(pipeline_parallel=5, data_parallel=16, global_batch=512, expert_parallel=16))
    from harness.ir.checks import unsupported_features

    assert problems_of(data) == []  # a valid layout: Megatron-Core would take an explicit one
    [(field, message)] = unsupported_features(data.model, data.execution)
    assert field == "execution.pipeline_parallel" and "leave none for the last" in message
    with pytest.raises(UnsupportedFeatureError) as error:
        validate_input("uneven.yaml", data)
    assert error.value.field == "execution.pipeline_parallel"
    # 10 blocks over PP 4 (3, 3, 3, 1) are priced
    ten = case(dict(blocks=10, moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=1)),
               dict(pipeline_parallel=4, data_parallel=16, global_batch=512, expert_parallel=16))
    assert unsupported_features(ten.model, ten.execution) == []

SMALL = dict(hidden=1024, feedforward=16384, sequence_length=1024, attention_heads=8, head_size=128, blocks=8,
             kv_heads=8, mlp="swiglu", norm="rmsnorm", position="rope", attention_dropout=0.0)
SMALL_LAYOUT = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=8, global_batch=64, microbatch=1,
                    datatype="bfloat16", attention_kernel="flash",
                    network_tiers=dict(tensor=0, pipeline=1, data=0))


#: TP 2 with its ring overlap and the DP sync overlapped: every model of the test goes through its ConcretePlanIR
OVERLAPPED = dict(dp_overlap=True, optimizer_sharding=True, tensor_parallel=2, data_parallel=4,
                  tp_communication="rs_ag", tp_overlap="ring")


@pytest.mark.parametrize("overlap", [{}, OVERLAPPED], ids=["portable", "tp-and-dp-overlap"])
def test_the_iteration_follows_the_slowest_stage_s_blocks(overlap):
    """8 blocks over PP 2: stage 0 holds blocks 0-2 dense and 3 MoE, stage 1 four MoE blocks. The dense MLP
    (16384 wide) is far slower than the experts (2 of 64, 512 wide), so stage 0 is the slowest: per block,
    (3 x dense + 1 x MoE) / 4 of each uniform model's per-block time, and so of its forward and backward (their
    output layer is the same). Under overlap each model goes through its ConcretePlanIR (the mixed one through
    mixed_concrete_iteration): the same holds, the exposed DP sync lies between the uniform models' (it is not
    additive), and the overlap hides time."""
    from harness.estimate import estimate

    moe = dict(experts=64, top_k=2, expert_ffn=512, dense_layers=3)
    experts = dict(expert_parallel=8, network_tiers=dict(tensor=0, pipeline=1, data=0, expert=0))

    def run(model, execution):
        return estimate(EstimateInput.model_validate({"model": {**SMALL, **model},
                                                      "execution": {**SMALL_LAYOUT, **overlap, **execution},
                                                      "system": "h100_sxm_80g"}))
    mixed = run(dict(moe=moe), experts)
    all_moe = run(dict(moe={**moe, "dense_layers": None}), experts)
    all_dense = run({}, {})
    for name in ("peak_only", "system_evidence"):
        got, m, d = (x.views[name].components_s for x in (mixed, all_moe, all_dense))
        assert d.forward > m.forward
        for component in ("forward", "backward"):
            assert getattr(got, component) == pytest.approx((3 * getattr(d, component) + getattr(m, component)) / 4,
                                                            rel=1e-12)
        if overlap:
            assert min(m.data_parallel, d.data_parallel) <= got.data_parallel <= max(m.data_parallel,
                                                                                  d.data_parallel)
            # the concrete projection's figures; the TP bandwidth the overlapped GEMMs need is the larger kind's
            tp_needs = [x.views[name].requirements.tp_overlap_per_s for x in (mixed, all_moe, all_dense)]
            assert tp_needs[0] == max(tp_needs[1:]) > 0
    assert any(k.startswith("dense_") for k in mixed.digests)  # both plans named
    if overlap:
        exposed = run(dict(moe=moe), {**experts, "dp_overlap": False})
        assert all(mixed.views[v].total_s < exposed.views[v].total_s for v in mixed.views)


def test_uneven_stages_follow_the_slowest_stage_s_blocks():
    """61 blocks over PP 16 (Megatron-Bridge's DeepSeek-V3 split: 15 virtual stages of 4, the last of 1): stage 0
    holds blocks 0-2 dense and 3 MoE, so (as above, the dense MLP being far slower) its forward and backward are
    (3 x dense + 1 x MoE) / 4 of the 64-block uniform models' over PP 16, whose stages hold 4 blocks each. The
    bubble is smaller than the 64-block mixed split's would be: three blocks fewer in the pipeline."""
    from harness.estimate import estimate

    moe = dict(experts=64, top_k=2, expert_ffn=512)
    experts = dict(expert_parallel=8, network_tiers=dict(tensor=0, pipeline=1, data=0, expert=0))

    def run(model, execution):
        return estimate(EstimateInput.model_validate({
            "model": {**SMALL, **model}, "execution": {**SMALL_LAYOUT, "pipeline_parallel": 16, **execution},
            "system": "h100_sxm_80g"}))
    mixed = run(dict(blocks=61, moe={**moe, "dense_layers": 3}), experts)
    even = run(dict(blocks=64, moe={**moe, "dense_layers": 3}), experts)
    all_moe = run(dict(blocks=64, moe=moe), experts)
    all_dense = run(dict(blocks=64), {})
    for name in ("peak_only", "system_evidence"):
        got, m, d = (x.views[name].components_s for x in (mixed, all_moe, all_dense))
        for component in ("forward", "backward"):
            assert getattr(got, component) == pytest.approx((3 * getattr(d, component) + getattr(m, component)) / 4,
                                                            rel=1e-12)
        assert 0 < got.pipeline_bubble < even.views[name].components_s.pipeline_bubble


def test_a_deepseek_v3_like_model_estimates_with_dense_and_moe_blocks_on_different_stages():
    from harness.estimate import estimate
    from harness.ir.blocks import stage_blocks

    # DeepSeek-V3 (Hugging Face deepseek-ai/DeepSeek-V3 config.json), truncated to 16 blocks: hidden 7168,
    # 128 heads of MLA (q_lora 1536, kv_lora 512, rope 64, nope 128, value 128), dense MLP 18432 in the first 3
    # blocks, then 256 routed experts (top 8, width 2048, sigmoid router) and 1 shared expert
    model = dict(hidden=7168, feedforward=18432, sequence_length=4096, attention_heads=128, head_size=192,
                 blocks=16, vocabulary=129280, mlp="swiglu", norm="rmsnorm", position="rope", attention_dropout=0.0,
                 mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                          v_head_dim=128),
                 moe=dict(experts=256, top_k=8, expert_ffn=2048, shared_experts=1, dense_layers=3, router="sigmoid"))
    layouts = {
        # 64 H100: TP 2 (sequence parallel) x DP 8 x PP 4, EP 16 over two nodes
        "h100_sxm_80g": dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=8, global_batch=64, microbatch=1,
                             expert_parallel=16, tp_communication="rs_ag",
                             network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1)),
        # 144 GB200: TP 2 x DP 36 fill an NVL72 rack, PP 2 across two racks, EP 8
        "gb200_nvl72": dict(tensor_parallel=2, pipeline_parallel=2, data_parallel=36, global_batch=72, microbatch=1,
                            expert_parallel=8, tp_communication="rs_ag",
                            network_tiers=dict(tensor=0, pipeline=1, data=0, expert=0)),
    }
    for system, layout in layouts.items():
        data = EstimateInput.model_validate({"model": model, "execution": {
            "datatype": "bfloat16", "attention_kernel": "flash", "optimizer_sharding": True, **layout},
            "system": system})
        stages = stage_blocks(data.model, data.execution)
        assert stages[0][1] == 3 and all(dense == 0 for _, dense in stages[1:])  # the dense blocks: stage 0 only
        est = estimate(data)
        for view in est.views.values():
            assert view.total_s > 0 and view.components_s.tensor_parallel > 0 and view.memory_bytes.weight > 0


def _dense_variant(blocks: int) -> EstimateInput:
    """The model without its experts (the dense blocks' uniform model): no ``moe``, no expert layout."""
    model = {k: v for k, v in QWEN3_30B_A3B.items() if k != "moe"}
    layout = {k: v for k, v in QWEN_LAYOUT.items() if k not in ("expert_parallel", "expert_tensor_parallel")}
    layout["network_tiers"] = {k: v for k, v in QWEN_LAYOUT["network_tiers"].items() if k != "expert"}
    return EstimateInput.model_validate({"model": {**model, "blocks": blocks}, "execution": layout,
                                         "system": "h100_sxm_80g"})


def test_the_throughput_of_a_model_priced_stage_by_stage_counts_each_kinds_blocks():
    """A case's MFU figures (``harness estimate CASE``): the model FLOPs of 8 blocks, 3 dense and 5 MoE, are 5/8
    of the all-MoE model's plus 3/8 of the all-dense model's, each read off the one-plan path; an MTP layer
    counts as one more block of the last block's kind (9/8 of the all-MoE model's)."""
    from harness.commands.estimate import case_throughput
    from harness.estimate import estimate

    def flops(data):
        est = estimate(data)
        figures = case_throughput("<t>", data, est)
        return est, {name: t.model_flops_per_iteration for name, t in figures.items()}

    _, moe_only = flops(case(dict(blocks=8)))
    _, dense_only = flops(_dense_variant(8))
    est, mixed = flops(case(dict(blocks=8, moe=dict(experts=128, top_k=8, expert_ffn=768, dense_layers=3))))
    assert set(mixed) == {"peak_only", "system_evidence"}
    for name, value in mixed.items():
        assert value == pytest.approx(moe_only[name] * 5 / 8 + dense_only[name] * 3 / 8, rel=1e-12)
        assert dense_only[name] < value < moe_only[name]  # a dense block does more here than a 3B-active MoE one
    figures = case_throughput("<t>", case(dict(blocks=8, moe=dict(experts=128, top_k=8, expert_ffn=768,
                                                                   dense_layers=3))), est)
    total = est.views["system_evidence"].total_s
    # 512 samples x 4096 tokens over the iteration, per GPU of 16
    assert figures["system_evidence"].tokens_per_s_per_processor == pytest.approx(512 * 4096 / total / 16)
    _, with_mtp = flops(case(dict(blocks=8, mtp_layers=1)))
    for name, value in with_mtp.items():
        assert value == pytest.approx(moe_only[name] * 9 / 8, rel=1e-12)


def test_lower_explain_and_trace_refuse_a_model_of_two_plans_naming_the_file(tmp_path, capsys):
    from conftest import one_error_line, run_cli

    from harness.cases import CASE_SCHEMA

    mixed = {**QWEN3_30B_A3B, "moe": {**QWEN3_30B_A3B["moe"], "dense_layers": 1}}
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump({"schema": CASE_SCHEMA, "id": "mixed", "system": "h100_sxm_80g",
                                    "model": mixed, "execution": QWEN_LAYOUT}))
    for argv in (("lower", path), ("explain", path), ("trace", path, "--output", tmp_path / "t.json")):
        one_error_line(*run_cli(capsys, *argv)[::2], str(path), "model.moe.dense_layers", "two plans")
    every_other = {**QWEN3_30B_A3B, "moe": {**QWEN3_30B_A3B["moe"], "layer_frequency": 2}}  # no dense_layers
    other = tmp_path / "every-other.yaml"
    other.write_text(yaml.safe_dump({"schema": CASE_SCHEMA, "id": "every-other", "system": "h100_sxm_80g",
                                     "model": every_other, "execution": QWEN_LAYOUT}))
    one_error_line(*run_cli(capsys, "lower", other)[::2], f"{other}: model.moe.layer_frequency: ", "two plans")
    assert not (tmp_path / "t.json").exists()
    status, out, _ = run_cli(capsys, "estimate", path)  # the estimate prices it, MFU included
    assert status == 0 and len(re.findall(r"MFU \d+\.\d%", out)) == 2  # one figure per view


def test_the_printer_shows_the_group_of_a_moe_plans_all_to_alls():
    """``harness lower``'s text of an expert-parallel plan: the dispatch's four messages, then its group."""
    from harness.ir.printer import render_portable

    lines = render_portable(plan_of(case()))
    at = lines.index("  %mlp.dispatch = expert_all_to_all[forward]")
    sent = 1 * 4096 * 2048 * 8 * 2  # microbatch x tokens x hidden x top_k copies x 2 bytes
    assert sent == 134217728
    assert lines[at + 1:at + 6] == [f"      {slot}: all_to_all 1.34218e+08B x16 tier 1" for slot in
                                    ("forward_base", "forward_edge", "backward_base", "backward_edge")] + [
        "      group: expert"]


def test_the_search_takes_a_moe_model_and_refuses_dense_and_moe_blocks_naming_dense_layers(tmp_path):
    from harness.search.request import load_model

    path = tmp_path / "qwen.yaml"
    path.write_text(yaml.safe_dump({"model": QWEN3_30B_A3B}))
    assert load_model(path).moe.experts == 128  # every block MoE: searched (tests/test_search_experts.py)
    mixed = {**QWEN3_30B_A3B, "moe": {**QWEN3_30B_A3B["moe"], "dense_layers": 1}}
    path.write_text(yaml.safe_dump({"model": mixed}))
    with pytest.raises(UnsupportedFeatureError) as error:
        load_model(path)
    assert error.value.field == "model.moe.dense_layers" and "\n" not in str(error.value)


STAGE_CASE = """schema: blueprinting.case.v0
id: t/stage
system: h100_sxm_80g
model: {hidden: 2048, feedforward: 8192, sequence_length: 2048, attention_heads: 16, head_size: 128, blocks: 8,
        kv_heads: 4, mlp: swiglu, norm: rmsnorm, position: rope}
execution:
  tensor_parallel: 2
  pipeline_parallel: 2
  data_parallel: 2
  global_batch: 16
  microbatch: 1
  datatype: bfloat16
  attention_kernel: flash
  tp_communication: rs_ag
  network_tiers: {tensor: 0, pipeline: 1, data: 0}
"""


def test_a_stage_of_two_kinds_holds_the_larger_kinds_activation_gradient_buffer(tmp_path, capsys):
    """Metamorphic probe: the activation-gradient buffer, which a stage holds once for the block running, was the
    per-block average of a stage of one dense and three MoE blocks (21 % under the dense block's own) and was
    scaled by 5/4 and 6/4 by one and two MTP layers on a stage of four blocks of one kind. Each uniform model's
    figure is the independent value."""
    import yaml

    from conftest import run_cli

    def activation_grad(model=None, execution=None):
        case = yaml.safe_load(STAGE_CASE)
        case["model"].update(model or {})
        case["execution"].update(execution or {})
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(case))
        status, out, err = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"), "--json")
        assert status == 0, err
        return json.loads(out)[0]["views"]["system_evidence"]["memory_bytes"]["activation_grad"]

    experts = {"moe": {"experts": 16, "top_k": 2, "expert_ffn": 1024}}
    moe_layout = {"expert_parallel": 4, "network_tiers": {"tensor": 0, "pipeline": 1, "data": 0, "expert": 0}}
    dense, moe = activation_grad(), activation_grad(experts, moe_layout)
    assert dense > moe  # the dense MLP's buffer is the wider here
    mixed = activation_grad({"moe": {**experts["moe"], "dense_layers": 1}}, moe_layout)
    assert mixed == dense
    for mtp in (1, 2):
        assert activation_grad({**experts, "mtp_layers": mtp}, moe_layout) == moe
