"""Multi-head latent attention (``model.mla``, issue 21 item 3) against hand-computed values.

Small shape (hand arithmetic): hidden 256, 8 heads, query/key heads 32 + 16 = 48 wide (head_size 48), value
heads 40 wide, query latent 96, key/value latent 64; microbatch 2 x 512 tokens = 1024 tokens; float16 (2 bytes).
Every figure below is written out from the rule in docs/model-features.md ("Multi-head latent attention"),
never read back from the code under test.
"""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.pipeline import lower
from harness.schedule.memory import block_memory
from harness.workload import matrix_flops_per_block

MLA = dict(q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=40)
SHAPE = dict(hidden=256, feedforward=1024, sequence_length=512, attention_heads=8, head_size=48, blocks=2,
             norm="rmsnorm", mlp="swiglu", mla=MLA)
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=2,
              network_tiers={"tensor": 0, "pipeline": 0, "data": 0})
TOKENS = 2 * 512
B = 2  # bytes per element (float16)
ATTENTION_TASKS = ("attn.latent_fork", "attn.kv_down", "attn.kv_latent_norm", "attn.q_down", "attn.q_latent_norm",
                   "attn.tp_f", "attn.q_up", "attn.query", "attn.kv_up", "attn.rope", "attn.qk_matmul",
                   "attn.softmax", "attn.probs_dropout", "attn.pv_matmul", "attn.flash", "attn.out_proj")


def data(mla=None, shape=None, **execution) -> EstimateInput:
    model = {**SHAPE, **(shape or {}), "mla": {**MLA, **(mla or {})}}
    model["mla"] = {k: v for k, v in model["mla"].items() if v is not None}
    return EstimateInput.model_validate({"model": model, "execution": {**LAYOUT, **execution}, "system": "a100_80g"})


def gemms(lowering) -> dict[str, tuple[int, int, int]]:
    """(rows, contraction, columns) of every forward linear and batch matmul of the attention sub-block."""
    out = {}
    for task in lowering.distributed.tasks:
        if task.phase == "forward" and task.shape.kind in ("linear", "batch_matmul") and task.name.startswith("attn."):
            out[task.name] = (task.shape.m, task.shape.n, task.shape.k)
    return out


def plan_task(lowering, name):
    return next(t for t in lowering.plan.tasks if t.name == name)


def test_every_gemm_shape_without_tensor_parallelism():
    low = lower(data())
    assert [t.name for t in low.distributed.tasks if t.phase == "forward"][2:14] == [
        "attn.latent_fork", "attn.kv_down", "attn.kv_latent_norm", "attn.q_down", "attn.q_latent_norm", "attn.q_up",
        "attn.kv_up", "attn.rope", "attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul"]
    assert gemms(low) == {
        "attn.kv_down": (1024, 256, 64 + 16),  # hidden -> kv_lora_rank + qk_rope_head_dim
        "attn.q_down": (1024, 256, 96),  # hidden -> q_lora_rank
        "attn.q_up": (1024, 96, 8 * (32 + 16)),  # q_lora_rank -> heads x (nope + rope)
        "attn.kv_up": (1024, 64, 8 * (32 + 40)),  # kv_lora_rank -> heads x (nope + v)
        "attn.qk_matmul": (512, 48, 512),  # batch 2 samples x 8 heads; scores over nope + rope = 48
        "attn.pv_matmul": (512, 512, 40),  # values of v_head_dim
        "attn.out_proj": (1024, 8 * 40, 256),  # heads x v_head_dim -> hidden
    }
    assert low.distributed.task("attn.qk_matmul").shape.batch == 2 * 8
    # the rotary part of the 8 query heads and the one shared rotary key: 1024 x 16 x (8 + 1)
    assert low.distributed.task("attn.rope").shape.elements == 1024 * 16 * 9
    assert low.distributed.task("attn.q_latent_norm").shape.elements == 1024 * 96
    assert low.distributed.task("attn.kv_latent_norm").shape.elements == 1024 * 64  # not the rotary 16


def test_every_gemm_shape_split_over_tp_with_sequence_parallelism():
    low = lower(data(tensor_parallel=2, tp_communication="rs_ag"))
    assert gemms(low) == {
        # duplicated down projections on this rank's 1024 / 2 sequence-sharded tokens, full weights
        "attn.kv_down": (512, 256, 80),
        "attn.q_down": (512, 256, 96),
        # column-parallel up projections on the gathered 1024 tokens, 8 / 2 = 4 heads per rank
        "attn.q_up": (1024, 96, 4 * 48),
        "attn.kv_up": (1024, 64, 4 * 72),
        "attn.qk_matmul": (512, 48, 512),
        "attn.pv_matmul": (512, 512, 40),
        "attn.out_proj": (1024, 4 * 40, 256),  # row-parallel
    }
    assert low.distributed.task("attn.qk_matmul").shape.batch == 2 * 4
    f = low.distributed.task("attn.tp_f")
    # the latents enter the TP region, not the hidden states: 1024 tokens x (96 + 64 + 16)
    assert (f.shape.elements, f.shape.base_forward, f.shape.base_backward) == (1024 * 176, "all_gather",
                                                                               "reduce_scatter")
    assert f.depends_on == ("attn.q_latent_norm", "attn.kv_latent_norm", "attn.kv_down")
    assert [t.name for t in low.distributed.tasks].count("attn.tp_f") == 1  # the sub-block adds no second one
    plain = lower(data(tensor_parallel=2)).distributed.task("attn.tp_f").shape  # all-reduce mode
    assert (plain.elements, plain.base_forward, plain.base_backward) == (1024 * 176, None, "all_reduce")


def test_without_query_compression_one_projection_reads_the_hidden_states():
    low = lower(data({"q_lora_rank": None}, tensor_parallel=2, tp_communication="rs_ag"))
    shapes = gemms(low)
    assert "attn.q_down" not in shapes and "attn.q_up" not in shapes
    assert shapes["attn.query"] == (1024, 256, 4 * 48)  # column-parallel hidden -> heads x (nope + rope)
    # the gathered hidden states (256) take the query latent's place in the collective
    assert low.distributed.task("attn.tp_f").shape.elements == 1024 * (256 + 64 + 16)
    assert "attn.q_latent_norm" not in [t.name for t in low.distributed.tasks]


def test_weights_per_rank():
    def weights(low):
        return {t.name: t.capacity.weight_bytes / B for t in low.plan.tasks
                if t.phase == "forward" and t.name.startswith("attn.") and t.capacity.weight_bytes}

    assert weights(lower(data(tensor_parallel=2, tp_communication="rs_ag"))) == {
        "attn.layer_norm": 256,  # the sub-block's RMSNorm gain
        "attn.kv_down": 256 * 80,  # duplicated: full on each rank
        "attn.kv_latent_norm": 64,
        "attn.q_down": 256 * 96,
        "attn.q_latent_norm": 96,
        "attn.q_up": 96 * 4 * 48,  # split: heads / TP
        "attn.kv_up": 64 * 4 * 72,
        "attn.out_proj": 4 * 40 * 256,
    }
    # the whole attention at TP 1: 256 + 256 x 80 + 64 + 256 x 96 + 96 + 96 x 384 + 64 x 576 + 320 x 256
    total = sum(t.capacity.weight_bytes for t in lower(data()).plan.tasks
                if t.phase == "forward" and t.name.startswith("attn."))
    assert total == (256 + 20480 + 64 + 24576 + 96 + 36864 + 36864 + 81920) * B
    # optimizer state follows the weights: fp32 master + two fp32 moments = 12 bytes per parameter
    assert plan_task(lower(data()), "attn.kv_up").capacity.optimizer_bytes == 64 * 576 * 12


def test_stored_activations_of_the_latent_attention_tasks():
    low = lower(data(tensor_parallel=2, tp_communication="rs_ag"))
    stored = {}
    for task in low.plan.tasks:
        if task.phase == "forward" and task.name in ATTENTION_TASKS:
            c, r = task.capacity, task.retention
            stored[task.name] = (c.activation_bytes * r.activation_stored
                                 - (0 if r.output_stored else c.output_bytes))
    assert stored == {
        "attn.latent_fork": 512 * 256 * B,  # the normalized input, sequence-sharded, kept once for both downs
        "attn.kv_down": 0, "attn.q_down": 0,  # they read the fork's
        "attn.kv_latent_norm": 512 * 64 * B,  # their inputs (the down projections' outputs)
        "attn.q_latent_norm": 512 * 96 * B,
        "attn.tp_f": 1024 * 176 * B / 2,  # the local shard of the gathered latents
        "attn.q_up": 1024 * 96 * B,  # the gathered latents
        "attn.kv_up": 1024 * 64 * B,
        "attn.rope": 0,  # its gradient is the inverse rotation
        "attn.qk_matmul": 8 * (512 * 48 + 48 * 512) * B,  # Q and K of 2 x 4 heads, 48 wide
        "attn.softmax": 8 * 512 * 512 * B,
        "attn.probs_dropout": 8 * 512 * 512,  # a one-byte mask
        "attn.pv_matmul": 8 * (512 * 512 + 512 * 40) * B,  # probabilities and V, 40 wide
        "attn.out_proj": 1024 * 160 * B,
    }
    # no recomputation: the block stores every one of them (and the other tasks, the same as a dense block's)
    assert block_memory(low.plan).activation_storage_bytes >= sum(stored.values())


def test_flash_kernel_over_query_key_and_value_heads_of_their_own_widths():
    flash, materialized = lower(data(attention_kernel="flash")), lower(data())
    task = plan_task(flash, "attn.flash")
    assert flash.distributed.task("attn.flash").depends_on == ("attn.rope", "attn.kv_up")
    qk_product = 2 * 2 * 8 * 512 * 512 * 48  # 2 B H s^2 d over the query/key width
    pv_product = 2 * 2 * 8 * 512 * 512 * 40  # and over the value width
    executed = 10 / 16  # 4 tiles of 128 a side: 4 x 5 / 2 of 16
    assert task.forward.operations == (qk_product + pv_product) * executed
    assert task.activation_grad.operations == (3 * qk_product + 2 * pv_product) * executed
    q = k = 2 * 8 * 512 * 48
    v = o = 2 * 8 * 512 * 40
    lse = 2 * 8 * 512 * 4
    assert task.forward.bytes_read == (q + k + v) * B and task.forward.bytes_written == o * B + lse
    assert task.activation_grad.bytes_read == (q + k + v + 2 * o) * B + lse
    assert task.capacity.activation_bytes == (q + k + v) * B + lse
    # both kernels count the same full-score products in the oracle's convention: 3 x (QK + PV)
    for low in (flash, materialized):
        assert matrix_flops_per_block(low.distributed).attention == 3 * (qk_product + pv_product)


def test_matrix_flops_per_block_in_the_oracle_convention():
    figures = matrix_flops_per_block(lower(data()).distributed)
    attention_weights = 256 * 80 + 256 * 96 + 96 * 384 + 64 * 576 + 320 * 256
    mlp_weights = 3 * 256 * 1024  # SwiGLU
    assert figures.linear == 6 * TOKENS * (attention_weights + mlp_weights)
    no_compression = matrix_flops_per_block(lower(data({"q_lora_rank": None})).distributed)
    assert no_compression.linear == 6 * TOKENS * (256 * 80 + 256 * 384 + 64 * 576 + 320 * 256 + mlp_weights)


def test_context_parallel_ring_sends_every_heads_key_and_value():
    low = lower(data(context_parallel=2, network_tiers={"tensor": 0, "pipeline": 0, "data": 0, "context": 0}))
    ring = low.distributed.task("attn.context_exchange")
    # 512 local tokens x 8 heads x (48 key + 40 value)
    assert ring.shape.elements == 2 * 256 * 8 * (48 + 40) and ring.depends_on == ("attn.rope", "attn.kv_up")
    assert low.distributed.task("attn.qk_matmul").shape.m == 256  # this rank's queries


def test_full_recomputation_clones_the_latent_tasks_and_resends_the_gather():
    low = lower(data(tensor_parallel=2, tp_communication="rs_ag", recompute="full"))
    names = {t.name for t in low.distributed.tasks}
    assert {"recompute/attn.q_down", "recompute/attn.kv_up", "recompute/attn.rope",
            "recommunication/attn.tp_f"} <= names


@pytest.mark.parametrize("shape, mla, execution, field, message", [
    ({"head_size": 32}, {}, {}, "model.head_size", "32 differs from mla.qk_nope_head_dim"),
    ({"kv_heads": 2}, {}, {}, "model.kv_heads", "gives every head its own key and value"),
    ({}, {}, {"attention": "multiquery"}, "execution.attention", "gives every head its own key and value"),
])
def test_contradictions_are_one_line_errors(shape, mla, execution, field, message):
    with pytest.raises(InputError, match=f"c.yaml: {field}: .*{message}"):
        validate_input("c.yaml", data(mla, shape, **execution))


@pytest.mark.parametrize("shape, execution, field", [
    ({"qkv_bias": True}, {}, "model.qkv_bias"), ({"qk_norm": True}, {}, "model.qk_norm"),
    ({"position": "learned"}, {}, "model.position"),
    ({}, {"tensor_parallel": 2, "tp_overlap": "ring"}, "execution.tp_overlap"),
])
def test_what_latent_attention_cannot_price_is_refused_naming_the_field(shape, execution, field):
    with pytest.raises(UnsupportedFeatureError, match=f"c.yaml: {field}: "):
        validate_input("c.yaml", data(None, shape, **execution))


def test_bad_latent_attention_fields_name_the_field():
    with pytest.raises(Exception, match="kv_lora_rank"):
        data({"kv_lora_rank": 0})
    with pytest.raises(Exception, match="v_head_dim"):
        data({"v_head_dim": "40"})  # strict: a string is not a width
