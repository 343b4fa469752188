"""Mixed-precision recipes (issue 20 item 4), against hand-computed values (harness.passes.precision rules).

Shape: hidden 64, feedforward 256, sequence 32, 8 heads of 8, 2 blocks; TP = PP = DP = 1, microbatch 1, bf16
(2 bytes): mlp.fc1 is Y[32, 256] = X[32, 64] W[64, 256], so X = 2048, W = 16384, Y = 8192 elements."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower

SHAPE = dict(hidden=64, feedforward=256, sequence_length=32, attention_heads=8, head_size=8, blocks=2)
X, W, Y = 2048, 16384, 8192
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=1,
              datatype="bfloat16", network_tiers={"tensor": 0, "pipeline": 0, "data": 0})


def plan(precision, system="b200", **changes):
    return lower(EstimateInput(model=SHAPE, execution={**LAYOUT, "precision": precision, **changes},
                               system=system)).plan


def task(p, name):
    return next(t for t in p.tasks if t.name == name)


def test_fp8_gemms_read_quantized_operands_and_write_bf16():
    p = plan("fp8_delayed")
    fc1 = task(p, "mlp.fc1")
    assert fc1.forward.datatype == fc1.activation_grad.datatype == fc1.weight_grad.datatype == "float8"
    assert fc1.forward.operations == 2 * 32 * 64 * 256
    assert (fc1.forward.bytes_read, fc1.forward.bytes_written) == (X + W, Y * 2)  # fp8 X, W -> bf16 Y
    assert (fc1.activation_grad.bytes_read, fc1.activation_grad.bytes_written) == (W + Y, X * 2)
    assert (fc1.weight_grad.bytes_read, fc1.weight_grad.bytes_written) == (X + Y, W * 2)
    assert fc1.capacity.activation_bytes == X  # the fp8 input kept for the weight gradient
    # bf16 weights, fp32 main weights and two fp32 Adam moments
    assert fc1.capacity.weight_bytes == 2 * W and fc1.capacity.optimizer_bytes == 12 * W
    assert task(p, "attn.qk_matmul").forward.datatype is None  # the scores stay bf16


def test_quantization_work_of_each_recipe():
    q = task(plan("fp8_delayed"), "mlp.fc1.quantize")
    assert (q.forward.operations, q.forward.bytes_read, q.forward.bytes_written) == (2 * (X + W), 2 * (X + W), X + W)
    assert (q.activation_grad.operations, q.activation_grad.bytes_read, q.activation_grad.bytes_written) == (
        2 * Y, 2 * Y, Y)
    assert q.capacity.activation_bytes == 0
    current = task(plan("fp8_current"), "mlp.fc1.quantize")  # an amax pass first: 1 op and a read more
    assert (current.forward.operations, current.forward.bytes_read) == (3 * (X + W), 2 * 2 * (X + W))
    mx = plan("mxfp8")  # one E8M0 scale byte per 32 elements
    assert task(mx, "mlp.fc1.quantize").forward.bytes_written == (X + W) * (1 + 1 / 32)
    assert task(mx, "mlp.fc1").forward.bytes_read == (X + W) * (1 + 1 / 32)
    fp4 = plan("nvfp4")  # half a byte per element, one E4M3 scale per 16, a per-tensor amax pass
    assert task(fp4, "mlp.fc1").forward.datatype == "float4"
    assert task(fp4, "mlp.fc1").forward.bytes_read == (X + W) * (0.5 + 1 / 16)
    assert task(fp4, "mlp.fc1.quantize").forward.operations == 3 * (X + W)


def test_each_work_is_priced_at_its_datatype_s_peak():
    p = plan("fp8_delayed")
    raw = yaml.safe_load((Path(__file__).parent.parent / "evidence" / "b200.yaml").read_text())
    pricer = pricer_for(load_profile("b200"), COST_VIEWS["peak_only"], p.datatype)
    fc1, qk = task(p, "mlp.fc1"), task(p, "attn.qk_matmul")
    assert pricer.work(fc1.forward).compute_s == fc1.forward.operations / raw["matrix"]["float8"]["peak_flops_per_s"]
    assert pricer.work(qk.forward).compute_s == qk.forward.operations / raw["matrix"]["bfloat16"]["peak_flops_per_s"]


def test_recipes_without_quantization_change_nothing():
    assert plan("bf16").digest() == plan(None).digest()
    assert plan("fp16", datatype="float16").digest() == plan(None, datatype="float16").digest()


@pytest.mark.parametrize("changes, field", [
    (dict(precision="fp8_delayed", datatype="float16"), "execution.datatype"),
    (dict(precision="fp16"), "execution.datatype"),
])
def test_recipes_refuse_what_they_cannot_price(changes, field):
    problems = layout_problems(TransformerShape(**SHAPE), ExecutionLayout(**{**LAYOUT, **changes}))
    assert field in [f for f, _ in problems]


# --- the quantized weight copies (harness.passes.precision.weight_copy_bytes) -----------------------------

def test_each_quantized_linear_keeps_a_row_wise_and_a_column_wise_weight_copy():
    """Block linears: query, key, value, out_proj 64 x 64 = 4096 weights each, fc1 64 x 256 and fc2 256 x 64 =
    16 384 each: 49 152 per block. fp8: 2 copies x 1 byte; MXFP8: 2 x (1 + 1/32); NVFP4: 2 x (0.5 + 1/16)."""
    from harness.schedule.memory import block_memory, stage_memory

    weights = 4 * 4096 + 2 * 16384
    assert weights == 49152
    base = plan("bf16")
    assert task(base, "mlp.fc1").capacity.quantized_weight_bytes is None  # no recipe: no copies, digests kept
    m0 = stage_memory(base, block_memory(base))
    for recipe, per_weight in (("fp8_delayed", 2 * 1), ("fp8_current", 2 * 1), ("mxfp8", 2 * (1 + 1 / 32)),
                               ("nvfp4", 2 * (0.5 + 1 / 16))):
        p = plan(recipe)
        assert task(p, "mlp.fc1").capacity.quantized_weight_bytes == per_weight * W
        assert task(p, "mlp.fc1").capacity.weight_bytes == 2 * W  # the bf16 weights as before
        block = block_memory(p)
        assert block.quantized_weight_bytes == per_weight * weights
        m = stage_memory(p, block)
        assert m.weight - m0.weight == 2 * per_weight * weights  # 2 blocks
        assert (m.weight_grad, m.optimizer) == (m0.weight_grad, m0.optimizer)
        without = stage_memory(p, dataclasses.replace(block, quantized_weight_bytes=0.0))
        assert m.tier1_total - without.tier1_total == pytest.approx(2 * per_weight * weights, rel=1e-12)
    # the data-parallel message is the bf16 gradient, without the copies
    dp = {**LAYOUT, "data_parallel": 2, "global_batch": 4, "network_tiers": {"tensor": 0, "pipeline": 0, "data": 1}}
    two = lower(EstimateInput(model=SHAPE, execution={**dp, "precision": "fp8_delayed"}, system="b200")).plan
    plain = lower(EstimateInput(model=SHAPE, execution={**dp, "precision": "bf16"}, system="b200")).plan
    assert two.data_parallel.gradient_bytes == plain.data_parallel.gradient_bytes


# --- fp8 under TP overlap (the overlapped linears quantized, their all-gathers in fp8) --------------------

OVERLAP = dict(tensor_parallel=2, tp_overlap="ring", tp_communication="rs_ag", seq_par_ag_redo=True)


def test_an_fp8_recipe_with_tp_overlap_is_accepted():
    problems = layout_problems(TransformerShape(**SHAPE), ExecutionLayout(**{**LAYOUT, **OVERLAP,
                                                                             "precision": "fp8_current"}))
    assert problems == []


def test_overlapped_fp8_linears_read_quantized_operands_and_their_all_gathers_carry_fp8():
    """TP 2, rs_ag: mlp.fc1_ag is Y[32, 128] = X[32, 64] W[64, 128] with f's all-gather of X (32 x 64 = 2048
    elements); it keeps its input shard (2048 / 2 = 1024 elements) and reads dY (32 x 128 = 4096). mlp.fc2_rs is
    Y[32, 64] = X[32, 128] W[128, 64] with g's reduce-scatter of Y (2048 elements); it keeps X (4096) and holds
    the partial output gradient and its network buffer (2 x 2048 / 2 = 2048)."""
    p = plan("fp8_delayed", **OVERLAP)
    fc1, fc2 = task(p, "mlp.fc1_ag"), task(p, "mlp.fc2_rs")
    ops = 2 * 32 * 64 * 128
    for t in (fc1, fc2):
        assert t.forward.datatype == t.activation_grad.datatype == t.weight_grad.datatype == "float8"
        assert t.forward.operations == t.activation_grad.operations == t.weight_grad.operations == ops
    # fc1: fp8 X (2048) and W (8192) -> bf16 Y (4096 x 2); dgrad: fp8 W, dY (4096) -> bf16 dX at the kept shard
    assert (fc1.forward.bytes_read, fc1.forward.bytes_written) == (2048 + 8192, 4096 * 2)
    assert (fc1.activation_grad.bytes_read, fc1.activation_grad.bytes_written) == (8192 + 4096, 1024 * 2)
    assert (fc1.weight_grad.bytes_read, fc1.weight_grad.bytes_written) == (1024 + 4096, 8192 * 2)
    assert fc1.capacity.activation_bytes == 1024  # the fp8 input shard
    assert fc1.capacity.quantized_weight_bytes == 2 * 8192  # a row-wise and a column-wise fp8 copy
    assert (fc2.forward.bytes_read, fc2.forward.bytes_written) == (4096 + 8192, 2048 * 2)
    assert (fc2.activation_grad.bytes_read, fc2.activation_grad.bytes_written) == (8192 + 2048, 4096 * 2)
    assert (fc2.weight_grad.bytes_read, fc2.weight_grad.bytes_written) == (4096 + 2048, 8192 * 2)
    # the tiled collectives: all-gathers of 2048 fp8 bytes, reduce-scatters of 2048 bf16 elements (4096 bytes)
    m1, m2 = fc1.messages, fc2.messages
    assert (m1.forward_base.collective, m1.forward_base.message_bytes) == ("all_gather", 2048)
    assert (m1.backward_base.collective, m1.backward_base.message_bytes) == ("reduce_scatter", 4096)
    assert (m2.forward_base.collective, m2.forward_base.message_bytes) == ("reduce_scatter", 4096)
    assert (m2.backward_base.collective, m2.backward_base.message_bytes) == ("all_gather", 2048)
    redo = task(p, "recommunication/mlp.fc1_ag").messages.forward_base  # the input gathered again, in fp8
    assert (redo.collective, redo.message_bytes) == ("all_gather", 2048)
    mx = task(plan("mxfp8", **OVERLAP), "mlp.fc1_ag").messages  # one E8M0 scale byte per 32 elements
    assert (mx.forward_base.message_bytes, mx.backward_base.message_bytes) == (2048 * (1 + 1 / 32), 4096)
    bf16 = task(plan(None, **OVERLAP), "mlp.fc1_ag").messages
    assert (bf16.forward_base.message_bytes, bf16.backward_base.message_bytes) == (4096, 4096)


def test_overlapped_fp8_linears_are_quantized_as_the_non_overlapped_ones():
    """The same quantize task before each overlapped linear as before a linear: fc1_ag casts X (32 x 64) and W
    (64 x 128) forward, dY (32 x 128) backward, 2 operations per element (delayed scaling)."""
    p = plan("fp8_delayed", **OVERLAP)
    q = task(p, "mlp.fc1_ag.quantize")
    assert (q.forward.operations, q.forward.bytes_read, q.forward.bytes_written) == (
        2 * (2048 + 8192), 2 * (2048 + 8192), 2048 + 8192)
    assert (q.activation_grad.operations, q.activation_grad.bytes_written) == (2 * 4096, 4096)
    linear = task(plan("fp8_delayed", tensor_parallel=2, tp_communication="rs_ag"), "mlp.fc1.quantize")
    assert (linear.forward, linear.activation_grad) == (q.forward, q.activation_grad)


def test_an_overlapped_fp8_gemm_is_priced_at_the_fp8_peak_and_tiled_against_its_fp8_message():
    """peak_only on B200: the GEMM's compute time is its operations over the float8 peak; the tile model
    (harness.schedule.projection, Calculon's LinearOverlapped) runs it against the fp8 all-gather's time."""
    from harness.schedule.projection import _Tiles

    p = plan("fp8_delayed", **OVERLAP)
    raw = yaml.safe_load((Path(__file__).parent.parent / "evidence" / "b200.yaml").read_text())
    pricer = pricer_for(load_profile("b200"), COST_VIEWS["peak_only"], p.datatype)
    fc1 = task(p, "mlp.fc1_ag")
    cost = pricer.task(fc1).passes["forward"]
    assert cost.compute_s == 2 * 32 * 64 * 128 / raw["matrix"]["float8"]["peak_flops_per_s"]
    pu = pricer.profile.networks[0].processor_usage
    net = pricer.message_s(fc1.messages.forward_base)  # an all-gather reduces nothing
    time, exposed = _Tiles(pricer, pu, 2, False).time(cost, net)
    f, m, n = cost.compute_s, cost.memory_s, 2
    fs = f / (1 - pu)
    if net / n > fs / n:
        assert (time, exposed) == pytest.approx(((f + m) / n + (n - 1) * (fs + m) / n, (n - 1) * (net / n - fs / n)),
                                                rel=1e-12)
    else:
        assert (time, exposed) == pytest.approx((f + m + (n - 1) * net / n * pu, 0), rel=1e-12)
    bf16 = plan(None, **OVERLAP)
    assert pricer.message_s(fc1.messages.forward_base) < pricer.message_s(task(bf16, "mlp.fc1_ag").messages.forward_base)
