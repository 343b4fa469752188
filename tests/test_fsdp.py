"""Fully sharded data parallelism (``execution.fsdp``: Megatron-FSDP's optim_grads_params, ZeRO-3), against
hand-computed values.

Shape: hidden 64, feedforward 256, sequence 32, 8 heads of 8, 4 blocks, fp16 (2 bytes). Layout: TP 1, PP 1,
DP 4 on tier 1, microbatch 1, optimizer sharding: one block's weights are Q, K, V and the output projection
(4 x 64 x 64), fc1 and fc2 (2 x 64 x 256) and two layer norms (2 x 2 x 64): 49 408 elements, 98 816 bytes."""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.estimate import cost_view
from harness.evidence.profile import load_profile
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower
from harness.schedule.memory import block_memory, stage_memory

SHAPE = dict(hidden=64, feedforward=256, sequence_length=32, attention_heads=8, head_size=8, blocks=4)
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=4, global_batch=8, microbatch=1,
              optimizer_sharding=True, network_tiers={"tensor": 0, "pipeline": 0, "data": 1})
WEIGHTS = 4 * 64 * 64 + 2 * 64 * 256 + 2 * 2 * 64
assert WEIGHTS == 49408


def plan(**changes):
    return lower(EstimateInput(model=SHAPE, execution={**LAYOUT, **changes}, system="a100_80g")).plan


def test_a_fully_sharded_block_gathers_its_weights_twice_and_scatters_its_gradients_every_microbatch():
    dp = plan(fsdp=True).data_parallel
    assert dp.fully_sharded is True and dp.gradient_bytes == WEIGHTS * 2
    assert [(m.collective, m.message_bytes, m.participants, m.network_tier) for m in dp.messages] == [
        ("all_gather", 98816, 4, 1), ("all_gather", 98816, 4, 1), ("reduce_scatter", 98816, 4, 1)]
    # absent or false: the plan of today (absent-if-None keeps every digest)
    assert plan().digest() == plan(fsdp=None).digest()
    assert [m.collective for m in plan(fsdp=False).data_parallel.messages] == ["reduce_scatter", "all_gather"]


def test_the_gathers_show_where_the_blocks_compute_does_not_hide_them():
    """Per block and microbatch: forward + max(0, gather - forward), backward + max(0, gather + scatter -
    backward); no gradient sync at the end of the iteration (a tiny block on tier 1: the messages' latency
    exceeds its compute)."""
    p, base = plan(fsdp=True), plan()
    profile = load_profile("a100_80g")
    view = COST_VIEWS["peak_only"]
    pricer = pricer_for(profile, view, p.datatype)
    block, _ = cost_view(p, profile, view)
    plain, _ = cost_view(base, profile, view)
    gather, regather, scatter = (pricer.message_s(m) for m in p.data_parallel.messages)
    assert gather == regather
    forward = plain.forward_s
    backward = plain.recompute_s + plain.activation_grad_s + plain.weight_grad_s
    assert gather > forward and gather + scatter > backward  # this block hides nothing
    assert block.forward_s == pytest.approx(forward + (gather - forward), rel=1e-12)
    assert block.activation_grad_s == pytest.approx(plain.activation_grad_s + (gather + scatter - backward),
                                                    rel=1e-12)
    assert block.weight_grad_s == plain.weight_grad_s and block.dp_s == 0.0
    big = lower(EstimateInput(model={**SHAPE, "sequence_length": 4096}, execution={**LAYOUT, "fsdp": True,
                                                                                  "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0}},
                              system="a100_80g")).plan
    hidden, _ = cost_view(big, profile, view)
    unsharded, _ = cost_view(lower(EstimateInput(model={**SHAPE, "sequence_length": 4096}, execution={
        **LAYOUT, "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0}}, system="a100_80g")).plan, profile, view)
    assert hidden.forward_s == unsharded.forward_s  # 4096 tokens of compute hide a 99 KB gather on NVLink


def test_a_fully_sharded_stage_holds_its_shard_of_every_block_and_two_blocks_gathered():
    """Weights: 4 blocks x 98 816 B / 4 ranks + 2 gathered blocks x 98 816 B = 296 448 B (unsharded: 395 264 B);
    gradients and optimizer state as with optimizer sharding."""
    p, base = plan(fsdp=True), plan()
    m, m0 = stage_memory(p, block_memory(p)), stage_memory(base, block_memory(base))
    assert m0.weight == 4 * 98816
    assert m.weight == 4 * 98816 / 4 + 2 * 98816 == 296448
    assert (m.weight_grad, m.optimizer, m.activation) == (m0.weight_grad, m0.optimizer, m0.activation)
    one = lower(EstimateInput(model={**SHAPE, "blocks": 1}, execution={**LAYOUT, "fsdp": True},
                              system="a100_80g")).plan
    assert stage_memory(one, block_memory(one)).weight == 98816 / 4 + 98816  # one block: gathered once


@pytest.mark.parametrize("changes, field", [
    (dict(optimizer_sharding=False), "execution.fsdp"),
    (dict(data_parallel=1, global_batch=2), "execution.fsdp"),
    (dict(dp_overlap=True), "execution.dp_overlap"),
    (dict(tensor_parallel=2, tp_overlap="ring", network_tiers={"tensor": 0, "pipeline": 0, "data": 1}),
     "execution.tp_overlap"),
    (dict(offload={"weights": True}), "execution.offload"),
])
def test_layouts_fsdp_cannot_price_are_refused_naming_the_field(changes, field):
    problems = layout_problems(TransformerShape(**SHAPE), ExecutionLayout(**{**LAYOUT, "fsdp": True, **changes}))
    assert field in [f for f, _ in problems]


def test_explain_by_task_gives_the_gathers_exposed_time_to_one_contributor():
    """The contributors still add up to the block times; the fully sharded gathers' exposed time is the
    contributor data_parallel.fsdp's (forward and activation gradient), no task's."""
    import dataclasses

    from harness.cost.views import Pricer
    from harness.explain.tasks import contributors
    from harness.schedule.block import block_times

    p = plan(fsdp=True)
    pricer = Pricer(load_profile("a100_80g"), COST_VIEWS["peak_only"], p.datatype)
    whole = block_times(p, tuple(pricer.task(t) for t in p.tasks), pricer)
    parts = contributors(p, pricer)
    for field in dataclasses.fields(whole):
        assert sum(getattr(c.block, field.name) for c in parts) == pytest.approx(getattr(whole, field.name),
                                                                               rel=1e-12), field.name
    (fsdp,) = [c for c in parts if c.name == "data_parallel.fsdp"]
    plain = block_times(plan(), tuple(pricer.task(t) for t in plan().tasks), pricer)
    assert fsdp.block.forward_s == pytest.approx(whole.forward_s - plain.forward_s, rel=1e-12) and fsdp.block.forward_s > 0


@pytest.mark.parametrize("changes", [dict(fsdp=True), dict(context_parallel=2, network_tiers={
    "tensor": 0, "pipeline": 0, "data": 1, "context": 0}, global_batch=8)])
def test_the_trace_of_a_fully_sharded_or_context_parallel_plan_is_strict_json(tmp_path, changes):
    """Their block times hold the exposures max(0, ...) of plain floats (they were numpy scalars, and the trace's
    `exact` flag a numpy bool that json refused)."""
    import json

    from harness.trace import trace_lowering, write_trace

    lowering = lower(EstimateInput(model=SHAPE, execution={**LAYOUT, **changes}, system="a100_80g"))
    trace = trace_lowering(lowering, load_profile("a100_80g"), COST_VIEWS["peak_only"])
    write_trace(trace.doc, tmp_path / "trace.json")
    assert isinstance(json.loads((tmp_path / "trace.json").read_text())["otherData"]["exact"], bool)
