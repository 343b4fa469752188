"""``recompute: selective`` with ``recompute_modules`` (Megatron-Core's), against hand-computed values.

Small shapes in bfloat16 (2 bytes), TP 1, one microbatch of 2 x 512 tokens; every byte and operation count is
computed here from the shapes, never read back from the code under test.
"""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.estimate import estimate
from harness.ir.checks import layout_problems, unsupported_features
from harness.pipeline import lower
from harness.schedule.memory import block_memory

B = 2  # bfloat16
TOKENS = 2 * 512
SHAPE = dict(hidden=256, feedforward=1024, sequence_length=512, attention_heads=8, head_size=32, blocks=2,
             mlp="swiglu", norm="rmsnorm", position="rope", attention_dropout=0.0)
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=2,
              datatype="bfloat16", network_tiers={"tensor": 0, "pipeline": 0, "data": 0})
#: 16 routed experts (top 2, 128 wide), one node of 8 with EP 8
MOE = dict(experts=16, top_k=2, expert_ffn=128)
MLA = dict(q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32)


def data(shape=None, system="h100_sxm_80g", **execution) -> EstimateInput:
    return EstimateInput.model_validate({"model": {**SHAPE, **(shape or {})}, "execution": {**LAYOUT, **execution},
                                         "system": system})


def experts(**execution) -> EstimateInput:
    return data({"moe": MOE}, data_parallel=8, global_batch=16, expert_parallel=8,
                network_tiers={"tensor": 0, "pipeline": 0, "data": 0, "expert": 0}, **execution)


def selective(*modules: str) -> dict:
    return dict(recompute="selective", recompute_modules=list(modules))


def names(lowering) -> set[str]:
    return {t.name for t in lowering.plan.tasks}


def forward_ops(lowering, name: str) -> float:
    return next(t for t in lowering.plan.tasks if t.name == name).forward.operations


def stored(lowering) -> float:
    return block_memory(lowering.plan).activation_storage_bytes


def test_selective_core_attn_is_attn_only():
    for kernel in ("materialized", "flash"):
        a = estimate(data(attention_kernel=kernel, recompute="attn_only"))
        b = estimate(data(attention_kernel=kernel, **selective("core_attn")))
        assert a.views_json() == b.views_json()
        assert a.views["system_evidence"].components_s.recompute > 0


def test_layernorm_discards_only_the_norms_megatron_keeps_apart_from_a_linear():
    """Megatron-Core's Transformer Engine spec fuses a dense block's two norms into the next linear
    (TELayerNormColumnParallelLinear; the norm's spec entry is IdentityOp, which ``layernorm`` leaves alone); a
    MoE block's pre-MLP norm and latent attention's input norm are TENorms of their own, recomputed and their
    output (TOKENS x hidden) not kept."""
    dense, dense_norms = lower(data()), lower(data(**selective("layernorm")))
    assert not any(n.startswith("recompute/") for n in names(dense_norms))
    assert stored(dense) == stored(dense_norms)
    moe, moe_norms = lower(experts()), lower(experts(**selective("layernorm")))
    assert {n for n in names(moe_norms) if n.startswith("recompute/")} == {"recompute/mlp.layer_norm"}
    assert forward_ops(moe_norms, "recompute/mlp.layer_norm") == forward_ops(moe, "mlp.layer_norm") > 0
    assert stored(moe) - stored(moe_norms) == TOKENS * 256 * B
    mla = lower(data({"mla": MLA}, attention_kernel="flash", **selective("layernorm")))
    assert {n for n in names(mla) if n.startswith("recompute/")} == {"recompute/attn.layer_norm"}


def test_moe_act_discards_the_routed_experts_activation_output():
    plain, act = lower(experts()), lower(experts(**selective("moe_act")))
    assert "recompute/mlp.experts_swiglu" in names(act)
    assert [n for n in names(act) if n.startswith("recompute/")] == ["recompute/mlp.experts_swiglu"]
    # 2 local experts (16 / EP 8), each on the busiest expert's tokens: the 8 ranks' 8 x 1024 tokens x top 2 over
    # 16 experts = 1024 each; its output 128 wide
    assert stored(plain) - stored(act) == 2 * 1024 * 128 * B


def test_mla_up_proj_discards_the_up_projections_and_rotary_outputs():
    plain = lower(data({"mla": MLA}, attention_kernel="flash"))
    up = lower(data({"mla": MLA}, attention_kernel="flash", **selective("mla_up_proj")))
    assert {n for n in names(up) if n.startswith("recompute/")} == {"recompute/attn.q_up", "recompute/attn.kv_up",
                                                                    "recompute/attn.rope"}
    # Q: 8 heads x (16 + 16); K nope and V: 8 x (16 + 32); the rotated parts: 16 x (8 heads + the shared key)
    assert stored(plain) - stored(up) == TOKENS * (8 * 32 + 8 * 48 + 16 * 9) * B
    assert forward_ops(up, "recompute/attn.q_up") == forward_ops(plain, "attn.q_up") == 2 * TOKENS * 64 * 8 * 32


def test_modules_add_their_recompute_time_and_cut_the_stored_activations():
    none, some = estimate(experts()), estimate(experts(**selective("layernorm", "moe_act")))
    for view in ("peak_only", "system_evidence"):
        a, b = none.views[view], some.views[view]
        assert a.components_s.recompute == 0 < b.components_s.recompute
        assert b.memory_bytes.activation < a.memory_bytes.activation


@pytest.mark.parametrize("execution, shape, message", [
    (dict(recompute="selective"), None, "recompute: selective needs the modules it recomputes"),
    (dict(recompute="attn_only", recompute_modules=["layernorm"]), None, "needs recompute: selective"),
    (selective("layernorm", "layernorm"), None, "'layernorm' is named twice"),
    (selective("mla_up_proj"), None, "'mla_up_proj' needs model.mla"),
    (selective("moe_act"), None, "'moe_act' needs model.moe"),
])
def test_a_module_list_that_does_not_fit_is_one_error_naming_the_field(execution, shape, message):
    d = data(shape, **execution)
    [(field, text)] = layout_problems(d.model, d.execution)
    assert field == "execution.recompute_modules" and message in text
    with pytest.raises(InputError) as error:
        validate_input("x.yaml", d)
    assert error.value.field == "execution.recompute_modules"


def test_an_unknown_module_name_is_refused_by_the_schema():
    with pytest.raises(Exception, match="recompute_modules"):
        data(**selective("attention"))


@pytest.mark.parametrize("module", ["mlp", "moe", "shared_experts"])
def test_whole_submodules_are_refused_as_not_modelled(module):
    d = experts(**selective("layernorm", module))
    [(field, text)] = unsupported_features(d.model, d.execution)
    assert field == "execution.recompute_modules" and "not modelled yet" in text and repr(module) in text
    with pytest.raises(UnsupportedFeatureError):
        validate_input("x.yaml", d)


def test_dense_blocks_of_a_mixed_model_leave_the_experts_module_out():
    from harness.ir.blocks import variants

    d = experts(**selective("moe_act"))
    mixed = d.model.model_copy(update={"moe": d.model.moe.model_copy(update={"dense_layers": 1})})
    (_, moe_layout), (_, dense_layout) = variants(mixed, d.execution)
    assert moe_layout.recompute_modules == ("moe_act",)
    assert (dense_layout.recompute, dense_layout.recompute_modules) == ("none", None)
    both = experts(**selective("moe_act", "layernorm"))
    (_, dense_layout) = variants(mixed, both.execution)[1]
    assert (dense_layout.recompute, dense_layout.recompute_modules) == ("selective", ("layernorm",))
    est = estimate(EstimateInput(model=mixed, execution=both.execution, system=both.system))
    assert est.status == "ok" and est.views["system_evidence"].components_s.recompute > 0


def test_a_layout_without_modules_keeps_its_digests():
    # the ModelIR's canonical text (its digest's input) names the field only when it is stated
    assert "recompute_modules" not in lower(data()).model.canonical()
    assert '"recompute_modules":["layernorm"]' in lower(data(**selective("layernorm"))).model.canonical()


# --- recompute_blocks: Megatron-Core's recompute_method: block (the first N blocks of each chunk recomputed) ---

PIPELINED = dict(pipeline_parallel=2, data_parallel=4, global_batch=32, microbatch=1, attention_kernel="flash")


def pipelined(**execution) -> EstimateInput:
    return data({"blocks": 8}, **{**PIPELINED, **execution})


@pytest.mark.parametrize("n, chunks", [(1, 1), (2, 1), (3, 1), (1, 2)])
def test_recomputing_n_blocks_of_each_chunk_costs_n_of_them(n, chunks):
    """8 blocks over PP 2: 4 per stage, in ``chunks`` chunks of 4 / chunks. The recompute component is n / (blocks
    per chunk) of full recomputation's, the checkpoints too; the stored activations are those of the blocks
    kept: the working block plus (blocks per stage x in-flight factor - 1) stored ones, each the plain block's
    storage weighted by the share kept."""
    per_chunk = 4 // chunks
    none, full = estimate(pipelined(pipeline_interleaving=chunks)), estimate(
        pipelined(pipeline_interleaving=chunks, recompute="full"))
    part = estimate(pipelined(pipeline_interleaving=chunks, recompute="full", recompute_blocks=n))
    share = n / per_chunk
    plain = block_memory(lower(pipelined(pipeline_interleaving=chunks)).plan)
    in_flight = 2  # min(microbatches 8, PP 2)
    factor = in_flight * (1 + 1 / (chunks * 2)) if chunks > 1 else in_flight
    for view in ("peak_only", "system_evidence"):
        p, f, o = part.views[view], full.views[view], none.views[view]
        assert p.components_s.recompute == pytest.approx(share * f.components_s.recompute, rel=1e-12)
        assert p.components_s.forward == pytest.approx(o.components_s.forward, rel=1e-12)
        assert p.memory_bytes.activation_checkpoint == pytest.approx(share * f.memory_bytes.activation_checkpoint,
                                                                     rel=1e-12) and p.memory_bytes.activation_checkpoint > 0
        kept = plain.activation_storage_bytes * (1 - share)
        assert p.memory_bytes.activation == pytest.approx(plain.activation_working_bytes + kept * (4 * factor - 1),
                                                          rel=1e-12)
        assert o.total_s < p.total_s < f.total_s
    assert any(k.startswith("recomputed_") for k in part.digests)


@pytest.mark.parametrize("overlap", [dict(dp_overlap=True, optimizer_sharding=True),
                                     dict(tensor_parallel=2, data_parallel=2, tp_communication="rs_ag",
                                          tp_overlap="ring")], ids=["dp-overlap", "tp-overlap"])
def test_under_overlap_the_projection_recomputes_n_blocks_of_each_chunk(overlap):
    """Through the ConcretePlanIRs (estimate.mixed_concrete_iteration): half the blocks of each chunk recomputed
    cost half of full recomputation's recompute component."""
    half, full = (estimate(pipelined(recompute="full", **overlap, **n)) for n in ({"recompute_blocks": 2}, {}))
    for view in ("peak_only", "system_evidence"):
        h, f = half.views[view].components_s, full.views[view].components_s
        assert h.recompute == pytest.approx(f.recompute / 2, rel=1e-12) and f.recompute > 0


@pytest.mark.parametrize("n, chunks", [(4, 1), (5, 1), (2, 2), (3, 2)])
def test_recomputing_at_least_every_block_of_a_chunk_is_full_recomputation(n, chunks):
    # Megatron-Core's block method recomputes layer l of a chunk when l < recompute_num_layers
    every = estimate(pipelined(recompute="full", recompute_blocks=n, pipeline_interleaving=chunks))
    full = estimate(pipelined(recompute="full", pipeline_interleaving=chunks))
    assert every.views_json() == full.views_json()
    assert set(every.digests) == set(full.digests)


@pytest.mark.parametrize("execution, field, message, error", [
    (dict(recompute_blocks=2), "execution.recompute_blocks", "needs recompute: full", InputError),
    (dict(recompute="full", recompute_blocks=2, offload={"activations": True}), "execution.recompute_blocks",
     "with offload is not modelled yet", UnsupportedFeatureError),
])
def test_recompute_blocks_that_do_not_fit_are_one_error_naming_the_field(execution, field, message, error):
    with pytest.raises(error) as caught:
        validate_input("x.yaml", pipelined(**execution))
    assert caught.value.field == field and message in str(caught.value) and "\n" not in str(caught.value)


def test_recompute_blocks_with_dense_and_moe_blocks_is_refused_and_one_plan_views_refuse_it():
    mixed = data({"blocks": 8, "moe": {**MOE, "dense_layers": 1}},
                 **{**PIPELINED, "data_parallel": 8, "global_batch": 64, "expert_parallel": 8,
                    "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0, "expert": 0}},
                 recompute="full", recompute_blocks=2)
    problems = unsupported_features(mixed.model, mixed.execution)
    assert problems[0] == ("execution.recompute_blocks", "recomputing some blocks of each chunk with dense and MoE "
                                                         "blocks or MTP layers is not modelled yet")
    assert {field for field, _ in problems} == {"execution.recompute_blocks"}
    with pytest.raises(UnsupportedFeatureError) as caught:  # lower, explain, trace show one plan
        lower(pipelined(recompute="full", recompute_blocks=2))
    assert caught.value.field == "execution.recompute_blocks"


def test_the_stages_of_a_partly_recomputed_model_hold_every_block_once():
    from harness.ir.blocks import recompute_stage_blocks

    # 10 blocks over PP 4: stages of 3, 3, 2, 2 (ceil(10 / 4) = 3; 4 x 3 - 10 = 2 stages one fewer), 2 recomputed
    ten = data({"blocks": 10}, pipeline_parallel=4, global_batch=8, microbatch=1, recompute="full", recompute_blocks=2)
    assert recompute_stage_blocks(ten.model, ten.execution) == [(1, 2), (1, 2), (0, 2), (0, 2)]
    # 16 blocks over PP 4 x 2 chunks of 2: one of each chunk recomputed
    chunks = data({"blocks": 16}, pipeline_parallel=4, pipeline_interleaving=2, global_batch=8, microbatch=1,
                  recompute="full", recompute_blocks=1)
    assert recompute_stage_blocks(chunks.model, chunks.execution) == [(2, 2)] * 4
