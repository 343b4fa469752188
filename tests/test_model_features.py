"""Model features selected by the ModelIR (issue 19 item 4, issue 20 items 1, 2, 9), against hand-computed values.

Every figure below is computed by hand from the rule stated in docs/model-features.md and in
harness/passes/rules.py, on small shapes, never read back from the code under test.
"""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.interop.calculon_format import calculon_from_input
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower

from conftest import ROOT

SHAPE = dict(hidden=256, feedforward=1024, sequence_length=512, attention_heads=8, head_size=32, blocks=2)
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=2,
              network_tiers={"tensor": 0, "pipeline": 0, "data": 0})


def data(shape=None, **execution) -> EstimateInput:
    return EstimateInput.model_validate({"model": {**SHAPE, **(shape or {})}, "execution": {**LAYOUT, **execution},
                                         "system": "a100_80g"})


def plan_task(lowering, name):
    return next(t for t in lowering.plan.tasks if t.name == name)


def forward_names(lowering):
    return [t.name for t in lowering.distributed.tasks if t.phase == "forward"]


def test_a_qkv_bias_under_tp_overlap_is_on_the_fused_overlapped_gemm():
    low = lower(data({"qkv_bias": True}, tensor_parallel=2, tp_overlap="ring"))
    qkv = plan_task(low, "attn.qkv_ag")
    local = (256 + 2 * 256) // 2  # Q, K, V of 8 heads x 32, over TP 2
    assert qkv.capacity.weight_bytes == (256 * local + local) * B
    plain = plan_task(lower(data(tensor_parallel=2, tp_overlap="ring")), "attn.qkv_ag")
    assert qkv.forward.operations == plain.forward.operations == 2 * 1024 * 256 * local
    assert qkv.forward.bytes_read == plain.forward.bytes_read + local * B
    assert qkv.activation_grad.bytes_read == plain.activation_grad.bytes_read
    # multi-query under TP overlap: the query's overlapped GEMM and the replicated K and V linears carry it
    mq = lower(data({"qkv_bias": True, "kv_heads": 1}, tensor_parallel=2, tp_overlap="ring"))
    assert plan_task(mq, "attn.query_ag").capacity.weight_bytes == (256 * 128 + 128) * B
    assert plan_task(mq, "attn.key").capacity.weight_bytes == (256 * 32 + 32) * B


def test_calculon_translation_refuses_every_new_field_instead_of_dropping_it():
    for shape, execution, field in (({"mlp": "swiglu"}, {}, "model.mlp"), ({"kv_heads": 2}, {}, "model.kv_heads"),
                                    ({}, {"attention_kernel": "flash"}, "execution.attention_kernel")):
        with pytest.raises(InputError, match=f"x: {field}: Calculon 0.1.0 has no counterpart of this field"):
            calculon_from_input(data(shape, **execution), "x")


# Small shape (hand arithmetic): hidden 256, feedforward 1024, 8 heads of 32, 512 tokens, microbatch 2, float16.
TOKENS = 2 * 512  # microbatch x sequence
B = 2  # bytes per element (float16)


def test_grouped_query_attention_narrows_k_and_v_to_the_key_value_heads():
    low = lower(data({"kv_heads": 2}))
    key = plan_task(low, "attn.key")
    assert key.forward.operations == 2 * 1024 * 256 * 64  # k = 2 heads x 32
    assert key.capacity.weight_bytes == 256 * 64 * 2
    assert plan_task(low, "attn.query").forward.operations == 2 * 1024 * 256 * 256
    # the materialized scores expand K/V to the 8 query heads (Megatron-Core's DotProductAttention)
    qk = plan_task(low, "attn.qk_matmul")
    assert qk.forward.operations == 2 * (2 * 8) * 512 * 32 * 512


@pytest.mark.parametrize("execution", [{}, {"tensor_parallel": 2, "tp_communication": "rs_ag"},
                                       {"tensor_parallel": 2, "tp_overlap": "ring"}])
def test_multiquery_is_a_spelling_of_one_key_value_head_with_identical_figures(execution):
    spelled = lower(data(attention="multiquery", **execution))
    counted = lower(data({"kv_heads": 1}, **execution))
    assert spelled.plan.digest() == counted.plan.digest()  # every task's work, bytes, messages, capacity
    assert spelled.distributed.tasks == counted.distributed.tasks


def test_key_value_heads_split_over_tp_or_replicated_when_fewer():
    # 4 K/V heads over TP 2: 2 per rank; 2 over TP 4: one per rank (replicated, unsplit weights)
    assert plan_task(lower(data({"kv_heads": 4}, tensor_parallel=2)), "attn.key").forward.operations == \
        2 * 1024 * 256 * 64
    assert plan_task(lower(data({"kv_heads": 2}, tensor_parallel=4)), "attn.key").forward.operations == \
        2 * 1024 * 256 * 32
    fused = lower(data({"kv_heads": 4}, tensor_parallel=2, tp_overlap="ring")).distributed.task("attn.qkv_ag")
    assert (fused.shape.n, fused.shape.k) == (256, (256 + 2 * 128) // 2)  # Q 8x32 and K, V 4x32 each, over TP


@pytest.mark.parametrize("shape, execution, field, message", [
    ({"kv_heads": 3}, {}, "model.kv_heads", "3 does not divide attention_heads=8"),
    ({"kv_heads": 2}, {"attention": "multiquery"}, "model.kv_heads", "2 contradicts execution.attention: multiquery"),
    ({"kv_heads": 8}, {"tensor_parallel": 8, "data_parallel": 1}, None, None),
])
def test_key_value_head_rules(shape, execution, field, message):
    if field is None:
        validate_input("c.yaml", data(shape, **execution))
        return
    with pytest.raises(InputError, match=f"c.yaml: {field}: {message}"):
        validate_input("c.yaml", data(shape, **execution))


def test_head_size_independent_of_hidden_over_heads():
    low = lower(data({"head_size": 64}))  # Q width 8 x 64 = 512 != hidden 256
    assert plan_task(low, "attn.query").forward.operations == 2 * 1024 * 256 * 512
    assert plan_task(low, "attn.out_proj").forward.operations == 2 * 1024 * 512 * 256
    assert plan_task(low, "attn.qk_matmul").forward.operations == 2 * 16 * 512 * 64 * 512
    assert plan_task(low, "attn.pv_matmul").forward.operations == 2 * 16 * 512 * 512 * 64


@pytest.mark.parametrize("mlp, fc1_width, forward, backward", [
    ("swiglu", 2048, 6, 16), ("geglu", 2048, 9, 23), ("squared_relu", 1024, 2, 3)])
def test_mlp_variants(mlp, fc1_width, forward, backward):
    low = lower(data({"mlp": mlp}))
    assert forward_names(low)[-5:-2] == ["mlp.fc1", f"mlp.{mlp}", "mlp.fc2"]
    assert plan_task(low, "mlp.fc1").forward.operations == 2 * 1024 * 256 * fc1_width
    assert plan_task(low, "mlp.fc2").forward.operations == 2 * 1024 * 1024 * 256
    act = plan_task(low, f"mlp.{mlp}")
    a = 1024 * 1024  # output elements: tokens x feedforward
    inputs = 2 * a if mlp != "squared_relu" else a
    assert (act.forward.operations, act.activation_grad.operations) == (forward * a, backward * a)
    assert (act.forward.bytes_read, act.forward.bytes_written) == (inputs * B, a * B)
    assert (act.activation_grad.bytes_read, act.activation_grad.bytes_written) == ((inputs + a) * B, inputs * B)
    assert act.capacity.activation_bytes == inputs * B and act.capacity.activation_grad_bytes == a * B
    fused = plan_task(lower(data({"mlp": mlp}, fused_activation=True)), f"mlp.{mlp}")
    assert fused.capacity.activation_bytes == 0


def test_rmsnorm_has_a_gain_only_and_its_own_operations():
    low = lower(data({"norm": "rmsnorm"}))
    norm = plan_task(low, "attn.layer_norm")
    a = 1024 * 256
    assert norm.primitive == "rms_norm"
    assert (norm.forward.operations, norm.activation_grad.operations, norm.weight_grad.operations) == (
        4 * a, 7 * a, 3 * a)
    assert norm.capacity.weight_bytes == 256 * B  # layernorm: 2 x 256 x 2
    assert norm.activation_grad.bytes_read == (2 * a + 256) * B
    assert plan_task(lower(data()), "attn.layer_norm").capacity.weight_bytes == 2 * 256 * B


def test_rope_rotates_q_and_k():
    low = lower(data({"position": "rope", "kv_heads": 2}))
    rope = plan_task(low, "attn.rope")
    a = 1024 * (256 + 64)  # tokens x (Q 8 x 32 + K 2 x 32)
    assert (rope.forward.operations, rope.activation_grad.operations) == (3 * a, 3 * a)
    assert rope.capacity.activation_bytes == 0  # its gradient is the inverse rotation of dY
    assert low.distributed.task("attn.qk_matmul").depends_on == ("attn.rope",)
    assert lower(data({"position": "learned"})).plan.digest() == lower(data()).plan.digest()


def test_qkv_bias_adds_parameters_not_matrix_operations():
    low, plain = lower(data({"qkv_bias": True, "kv_heads": 2})), lower(data({"kv_heads": 2}))
    for name, width in (("attn.query", 256), ("attn.key", 64), ("attn.value", 64)):
        biased, unbiased = plan_task(low, name), plan_task(plain, name)
        assert biased.forward.operations == unbiased.forward.operations == 2 * 1024 * 256 * width
        assert biased.capacity.weight_bytes == (256 * width + width) * B
        assert biased.forward.bytes_read == unbiased.forward.bytes_read + width * B
        assert biased.activation_grad.bytes_read == unbiased.activation_grad.bytes_read  # dgrad: W and dY only
        assert biased.weight_grad.bytes_written == unbiased.weight_grad.bytes_written + width * B
    assert low.plan.data_parallel is None
    dp = lower(data({"qkv_bias": True, "kv_heads": 2}, data_parallel=2, global_batch=4)).plan.data_parallel
    dp_plain = lower(data({"kv_heads": 2}, data_parallel=2, global_batch=4)).plan.data_parallel
    assert dp.gradient_bytes == dp_plain.gradient_bytes + (256 + 64 + 64) * B


def test_qk_norm_normalises_each_head_of_q_and_k():
    low = lower(data({"qk_norm": True, "kv_heads": 2}))
    q, k = plan_task(low, "attn.q_norm"), plan_task(low, "attn.k_norm")
    assert q.primitive == k.primitive == "rms_norm"
    assert (q.forward.operations, k.forward.operations) == (4 * 1024 * 256, 4 * 1024 * 64)
    assert q.capacity.weight_bytes == k.capacity.weight_bytes == 32 * B


def test_attention_dropout_zero_has_no_dropout_primitive():
    low = lower(data({"attention_dropout": 0.0}))
    assert "attn.probs_dropout" not in forward_names(low)
    assert low.distributed.task("attn.pv_matmul").depends_on == ("attn.softmax", "attn.value")
    assert lower(data({"attention_dropout": 0.1})).plan.digest() == lower(data()).plan.digest()


def test_a_sliding_window_saves_no_work_in_a_materialized_kernel():
    assert lower(data({"sliding_window": 128})).plan.digest() == lower(data()).plan.digest()


# Flash: 512 tokens are 4 tiles of 128 a side; the causal mask executes 4 x 5 / 2 = 10 of the 16 tiles.
SCORE_PRODUCT = 2 * 2 * 8 * 512 * 512 * 32  # one s x s product (QK^T or PV): 2 B H s^2 d


def test_causal_tiles_at_tile_granularity():
    from harness.passes.rules import causal_tiles
    assert causal_tiles(512, 512) == (10, 16)
    assert causal_tiles(4096, 4096) == (32 * 33 // 2, 1024)  # the fraction 33/64 of the full scores
    assert causal_tiles(100, 100) == (1, 1)  # one tile, computed whole and masked
    # a window of 128: a query tile needs its own and the one before (tokens 1 to 255 apart): 1 + 3 x 2 tiles
    assert causal_tiles(512, 128) == (7, 16)
    assert causal_tiles(512, 200) == (3 + 2 * 3, 16)  # 2 tiles back (the nearest pair 129 apart)
    assert causal_tiles(512, 1) == (4, 16)  # the diagonal only
    assert causal_tiles(4096, 1024) == (36 + 24 * 9, 1024)


def test_flash_kernel_work_bytes_and_memory():
    flash, materialized = lower(data(attention_kernel="flash")), lower(data())
    names = forward_names(flash)
    assert "attn.flash" in names and not {"attn.qk_matmul", "attn.softmax", "attn.probs_dropout",
                                          "attn.pv_matmul"} & set(names)
    assert flash.distributed.task("attn.flash").depends_on == ("attn.query", "attn.key", "attn.value")
    task = plan_task(flash, "attn.flash")
    assert task.forward.engine == task.activation_grad.engine == "matrix"
    assert task.forward.operations == 2 * SCORE_PRODUCT * 10 / 16
    assert task.activation_grad.operations == 5 * SCORE_PRODUCT * 10 / 16  # S recomputed, dV, dP, dQ, dK
    assert task.weight_grad.operations == 0
    q = o = 2 * 8 * 512 * 32
    kv = 2 * q
    lse = 2 * 8 * 512 * 4  # fp32 per row and head
    assert (task.forward.bytes_read, task.forward.bytes_written) == ((q + kv) * B, o * B + lse)
    assert (task.activation_grad.bytes_read, task.activation_grad.bytes_written) == (
        (q + kv + o + o) * B + lse, (q + kv) * B)  # reads Q, K, V, O, dO, LSE
    assert task.capacity.activation_bytes == (q + kv) * B + lse
    # no s x s tensor: the block keeps Q, K (QK^T), the scores (softmax), the mask, the probabilities and V
    # (PV) when materialized, Q, K, V and the log-sum-exp with flash
    from harness.schedule.memory import block_memory
    kept_materialized = 16 * (512 * 32 * 2) * B + 16 * 512 * 512 * B + 16 * 512 * 512 + 16 * (512 * 512 + 512 * 32) * B
    assert block_memory(materialized.plan).activation_storage_bytes - \
        block_memory(flash.plan).activation_storage_bytes == kept_materialized - ((q + kv) * B + lse)


def test_flash_kernel_with_a_window_grouped_query_heads_and_recomputation():
    task = plan_task(lower(data({"sliding_window": 128, "kv_heads": 2}, attention_kernel="flash")), "attn.flash")
    assert task.forward.operations == 2 * SCORE_PRODUCT * 7 / 16
    assert task.forward.bytes_read == (2 * 8 * 512 * 32 + 2 * 2 * 2 * 512 * 32) * B  # K and V of 2 heads
    # checkpointing the attention core (attn_only: Megatron-Core's _checkpointed_attention_forward) runs the
    # kernel's forward again before its backward, as full recomputation does; without recomputation it is not cloned
    none = lower(data(attention_kernel="flash"))
    assert "recompute/attn.flash" not in [t.name for t in none.distributed.tasks]
    for mode in ("attn_only", "full"):
        again = lower(data(attention_kernel="flash", recompute=mode))
        assert plan_task(again, "recompute/attn.flash").forward.operations == 2 * SCORE_PRODUCT * 10 / 16


def _matrix_flops(d):
    from harness.estimate import estimate
    return estimate(d).views_json()["peak_only"]["workload"]["matrix_flops_per_block"]


def test_matrix_flops_per_block_in_the_oracle_convention():
    # linear: 3 passes x 2 x tokens x (Q, K, V, O: 4 x 256 x 256 + fc1, fc2: 2 x 256 x 1024)
    # attention: QK^T and PV, forward once and backward twice each: 6 x 2 B H s^2 d
    expected = {"linear": 6 * 1024 * (4 * 256 * 256 + 2 * 256 * 1024), "attention": 6 * SCORE_PRODUCT}
    assert _matrix_flops(data()) == expected
    # a causal flash kernel executes 10/16 of the tiles and recomputes, but the convention is the full scores
    assert _matrix_flops(data(attention_kernel="flash")) == expected
    # grouped-query, head_dim != hidden / heads, QKV bias (not mm FLOPs), QK-norm (none), SwiGLU (three matrices)
    modern = data({"kv_heads": 2, "head_size": 64, "qkv_bias": True, "qk_norm": True, "mlp": "swiglu",
                   "norm": "rmsnorm", "position": "rope"})
    assert _matrix_flops(modern) == {
        "linear": 6 * 1024 * (256 * 512 + 2 * 256 * 128 + 512 * 256 + 256 * 2048 + 1024 * 256),
        "attention": 6 * 2 * 2 * 8 * 512 * 512 * 64}
    # multi-query over TP 2: the replicated K and V projections count on each processor; Q, O and the MLP halve
    mq = _matrix_flops(data({"kv_heads": 1}, tensor_parallel=2))
    assert mq == {"linear": 6 * 1024 * (2 * 256 * 128 + 2 * 256 * 32 + 2 * 256 * 512),
                  "attention": 6 * 2 * 2 * 4 * 512 * 512 * 32}


def _shape_of_hf_config(config: dict, sequence_length: int) -> dict:
    """The case's model section of a vendored FLOP-oracle config, mapped by hand (its matrix-relevant fields)."""
    if config["model_type"] == "gpt2":
        hidden, heads = config["n_embd"], config["n_head"]
        return dict(hidden=hidden, feedforward=config["n_inner"] or 4 * hidden, attention_heads=heads,
                    head_size=hidden // heads, sequence_length=sequence_length, blocks=1, mlp="gelu")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    shape = dict(hidden=hidden, feedforward=config["intermediate_size"], attention_heads=heads,
                 head_size=config.get("head_dim") or hidden // heads, sequence_length=sequence_length, blocks=1,
                 position="rope")
    if config["model_type"] == "gpt_neox":
        return {**shape, "mlp": "gelu"}
    shape.update(kv_heads=config["num_key_value_heads"], mlp="swiglu", norm="rmsnorm")
    if config["model_type"] == "qwen2":
        shape["qkv_bias"] = True
    if config["model_type"] == "qwen3":
        shape["qk_norm"] = True
    if config["model_type"] == "deepseek_v3":
        shape.update(head_size=config["qk_nope_head_dim"] + config["qk_rope_head_dim"], mla={
            k: config[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                   "v_head_dim")})
    return shape


def test_every_vendored_flop_oracle_record_equals_the_plans_matrix_operations():
    """PyTorch's FlopCounterMode on the transformers decoder layer (vendor/flops, docs/flop-oracle.md) against
    workload.matrix_flops_per_block of the same shape, exactly, under both attention kernels."""
    import json

    from harness.workload import matrix_flops_per_block

    records = sorted((ROOT / "vendor" / "flops").glob("*.json"))
    assert len(records) >= 10
    for path in records:
        record = json.loads(path.read_text())
        if record["provenance"].get("routing"):  # mixture of experts: the plan has no experts yet
            continue
        config = json.loads((path.parent / "configs" / f"{record['id'].rsplit('_b', 1)[0]}.json").read_text())
        shape = _shape_of_hf_config(config, record["sequence_length"])
        mb = record["microbatch"]
        for kernel in ("materialized", "flash"):
            figures = matrix_flops_per_block(lower(EstimateInput.model_validate({
                "model": shape, "system": "a100_80g",
                "execution": {**LAYOUT, "global_batch": mb, "microbatch": mb, "attention_kernel": kernel}})).distributed)
            assert (figures.linear, figures.attention) == (record["linear_flops"], record["attention_flops"]), path.name


def test_vocabulary_padding_is_megatrons_multiple_of_128_x_tp():
    from harness.passes.output_layer import padded_vocabulary
    assert padded_vocabulary(128256, 1) == 1002 * 128 == 128256
    assert padded_vocabulary(128256, 8) == 126 * 1024 == 129024
