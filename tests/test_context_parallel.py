"""Context parallelism (issue 20 item 3), against hand-computed values.

Shape: hidden 64, feedforward 256, sequence 32, 8 heads of 8, 2 blocks, fp16 (2 bytes). Layout: TP 2,
CP 2, DP 2, microbatch 1: each rank holds 32 / 2 = 16 of a sample's positions (2 x CP = 4 chunks of 8,
rank r holding chunks r and 3 - r) and 8 / 2 = 4 heads of width 8 (TP-local attention width 32)."""

from __future__ import annotations

import pytest

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.estimate import cost_view
from harness.evidence.profile import load_profile
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower

SHAPE = dict(hidden=64, feedforward=256, sequence_length=32, attention_heads=8, head_size=8, blocks=2)
TIERS = {"tensor": 0, "pipeline": 0, "data": 1, "context": 0}


def plan(cp: int | None = 2, **changes):
    execution = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=2, global_batch=4, microbatch=1,
                     network_tiers=TIERS, context_parallel=cp)
    execution.update(changes)
    return lower(EstimateInput(model=SHAPE, execution=execution, system="a100_80g")).plan


def task(p, name):
    return next(t for t in p.tasks if t.name == name)


def test_the_sequence_is_split_over_the_context_ranks():
    p = plan()
    # local queries 16 against all 32 keys, 4 local heads: 2 x 4 x 16 x 8 x 32
    assert task(p, "attn.qk_matmul").forward.operations == 2 * 4 * 16 * 8 * 32 == 32768
    assert task(p, "attn.softmax").forward.operations == 5 * 4 * 16 * 32  # 5 per score element
    assert task(p, "mlp.fc1").forward.operations == 2 * 16 * 64 * 128  # 16 local tokens
    one = plan(None)
    assert task(one, "attn.qk_matmul").forward.operations == 2 * 4 * 32 * 8 * 32
    # every primitive's work is linear in the local tokens or in (local queries x all keys): CP 2 halves it
    total = sum(t.forward.operations + t.activation_grad.operations + t.weight_grad.operations for t in p.tasks)
    assert 2 * total == sum(t.forward.operations + t.activation_grad.operations + t.weight_grad.operations
                            for t in one.tasks)
    assert p.processors == 8


def test_k_and_v_go_round_the_ring_on_the_context_group():
    m = task(plan(), "attn.context_exchange").messages
    # K and V of 16 positions x 32 local width, 2 bytes: 2 x 16 x 32 x 2
    assert (m.forward_base.collective, m.forward_base.message_bytes, m.forward_base.network_tier) == ("p2p", 2048, 0)
    assert m.backward_base.message_bytes == 4096  # K, V and their gradients
    assert m.ring_steps == 1 and m.spans == ("context",)
    m4 = task(plan(4, network_tiers={**TIERS, "context": 1}), "attn.context_exchange").messages
    # CP 4: 8 positions per rank, 3 steps, on the context tier
    assert (m4.forward_base.message_bytes, m4.ring_steps, m4.forward_base.network_tier) == (2 * 8 * 32 * 2, 3, 1)


def test_the_printer_shows_a_rings_group_steps_and_the_tasks_it_hides_behind():
    """``harness lower``'s text of a ring task: its messages, then the group, the steps and the hidden tasks
    (the fields a TP collective has not: a printer that read them as messages failed on every CP plan)."""
    from harness.ir.printer import render_portable

    lines = render_portable(plan(4, network_tiers={**TIERS, "context": 1}))
    at = lines.index("  %attn.context_exchange = context_exchange[forward]")
    hidden = task(plan(4, network_tiers={**TIERS, "context": 1}), "attn.context_exchange").messages.hides_behind
    assert hidden  # the scores' tasks run while a step travels
    assert lines[at + 1:at + 8] == [
        "      forward_base: p2p 1024B x2 tier 1",  # 2 x 8 positions x 32 local width x 2 bytes
        "      forward_edge: p2p 1024B x2 tier 1",
        "      backward_base: p2p 2048B x2 tier 1",  # K, V and their gradients
        "      backward_edge: p2p 2048B x2 tier 1",
        "      group: context",
        "      ring: 3 steps",  # CP 4: three steps round the ring
        f"      hides behind: {', '.join(hidden)}"]


def test_weight_gradients_are_reduced_over_data_x_context():
    p = plan(optimizer_sharding=True)
    weights = 3 * 64 * 32 + 32 * 64 + 64 * 128 + 128 * 64 + 2 * (2 * 64)  # per TP rank, one block
    dp = p.data_parallel
    assert dp.spans == ("data", "context") and dp.gradient_bytes == weights * 2 == 49664
    # 4 ranks hold the same weights; the group's tier is the higher of data's (1) and context's (0)
    assert [(m.collective, m.participants, m.network_tier) for m in dp.messages] == [
        ("reduce_scatter", 4, 1), ("all_gather", 4, 1)]
    # fp32 master weights and two fp32 moments, sharded over the 4 ranks
    assert sum(t.capacity.optimizer_bytes for t in p.tasks) == weights * 12 / 4


def test_activation_memory_is_per_rank():
    p = plan()
    # the QK^T input kept for backward: 4 heads x (16 x 8 local queries + 8 x 32 keys) x 2 bytes
    assert task(p, "attn.qk_matmul").capacity.activation_bytes == 4 * (16 * 8 + 8 * 32) * 2
    assert task(p, "mlp.fc1").capacity.activation_bytes == 16 * 64 * 2
    assert task(p, "attn.softmax").capacity.activation_bytes == 4 * 16 * 32 * 2


def test_a_ring_step_is_exposed_where_the_scores_do_not_hide_it():
    p = plan()
    profile = load_profile("a100_80g")
    view = COST_VIEWS["peak_only"]
    pricer = pricer_for(profile, view, p.datatype)
    block, _ = cost_view(p, profile, view)
    scores = ("attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul")
    ring = task(p, "attn.context_exchange").messages
    compute = sum(pricer.task(t)["forward"].processing_s for t in p.tasks
                  if t.phase == "forward" and t.exchange == "none")
    hidden = sum(pricer.task(task(p, n))["forward"].processing_s for n in scores)
    step = pricer.message_s(ring.forward_base)
    assert step > hidden / 2  # a 2 KB step costs its latency, the tiny scores hide little
    # one step while the first of 2 chunks of scores runs (the second runs on the received K/V)
    assert block.forward_s == pytest.approx(compute + (step - hidden / 2), rel=1e-12)
    back_hidden = sum(pricer.task(task(p, n))["activation_grad"].processing_s for n in scores)
    back_compute = sum(pricer.task(t)["activation_grad"].processing_s for t in p.tasks
                       if t.phase == "forward" and t.exchange == "none")
    back_step = pricer.message_s(ring.backward_base)
    assert block.activation_grad_s == pytest.approx(back_compute + max(0.0, back_step - back_hidden / 2), rel=1e-12)


@pytest.mark.parametrize("changes, field", [
    (dict(context_parallel=3), "execution.context_parallel"),  # 32 positions are not 6 chunks
    (dict(network_tiers={"tensor": 0, "pipeline": 0, "data": 1}), "execution.network_tiers.context"),
    (dict(offload={"weights": True}), "execution.offload"),
    (dict(context_parallel=None, cp_comm="p2p"), "execution.cp_comm"),
])
def test_layouts_context_parallelism_cannot_price_are_refused_naming_the_field(changes, field):
    execution = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=2, global_batch=4, microbatch=1,
                     network_tiers=TIERS, context_parallel=2)
    execution.update(changes)
    problems = layout_problems(TransformerShape(**SHAPE), ExecutionLayout(**execution))
    assert field in [f for f, _ in problems]


# --- flash attention with context parallelism (harness.passes.rules.context_tiles) ------------------------

FLASH_SHAPE = dict(hidden=512, feedforward=2048, sequence_length=1024, attention_heads=8, head_size=64, blocks=2)


def flash_lowering(cp, kernel="flash", **model):
    execution = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=1, microbatch=1,
                     network_tiers=TIERS, context_parallel=cp, attention_kernel=kernel)
    return lower(EstimateInput(model={**FLASH_SHAPE, **model}, execution=execution, system="a100_80g"))


def flash_plan(cp, kernel="flash", **model):
    return flash_lowering(cp, kernel, **model).plan


def executed_tiles_by_counting(sequence, cp, rank, tile=128):
    """Count the causal tiles rank ``rank`` computes: its query tiles are those of chunks rank and 2CP-1-rank
    (2 x CP chunks of sequence / 2CP tokens); a (query tile, key tile) pair runs when key <= query."""
    chunk = sequence // (2 * cp) // tile  # tiles per chunk
    queries = [c * chunk + t for c in (rank, 2 * cp - 1 - rank) for t in range(chunk)]
    keys = range(sequence // tile)
    return sum(1 for i in queries for j in keys if j <= i), len(queries) * len(keys)


def test_flash_with_cp_executes_the_load_balanced_causal_tiles():
    """sequence 1024, CP 2: 4 chunks of 256 tokens (2 tiles of 128 each); every rank runs 18 of its 32 tiles
    (rank 0: query tiles 0, 1, 6, 7 -> 1 + 2 + 7 + 8; rank 1: 2, 3, 4, 5 -> 3 + 4 + 5 + 6)."""
    assert executed_tiles_by_counting(1024, 2, 0) == executed_tiles_by_counting(1024, 2, 1) == (18, 32)
    for cp in (2, 4):
        counts = {executed_tiles_by_counting(4096, cp, r) for r in range(cp)}
        assert len(counts) == 1  # the load balancing: every rank the same tiles
    flash = task(flash_plan(2), "attn.flash")
    product = 2 * 1 * 8 * 512 * 1024 * 64  # 2 B H x (512 local queries x 1024 keys) x d: 536 870 912
    assert flash.forward.operations == 2 * product * 18 / 32 == 603_979_776  # QK^T and PV
    assert flash.activation_grad.operations == 5 * product * 18 / 32 == 1_509_949_440
    # CP 4 of 4096: chunks of 512 tokens (m = 4 tiles); (2 CP - 1) m^2 + m (m + 1) = 7 x 16 + 4 x 5 = 132 of
    # 4 CP m^2 = 256 tiles
    big = task(flash_plan(4, sequence_length=4096), "attn.flash")
    assert executed_tiles_by_counting(4096, 4, 0) == (132, 256)
    assert big.forward.operations == 2 * (2 * 8 * 1024 * 4096 * 64) * 132 / 256


def test_flash_with_cp_moves_the_ranks_tensors_once_per_ring_step():
    """Per rank: Q and O 8 heads x 512 positions x 64 = 262 144 elements, K and V 524 288, log-sum-exp 8 x 512
    x 4 B = 16 384 B, fp16; 2 ring steps each read Q and the step's K/V and write O and the log-sum-exp."""
    flash = task(flash_plan(2), "attn.flash")
    q = o = 262_144
    kv = 524_288
    lse = 16_384
    assert (flash.forward.bytes_read, flash.forward.bytes_written) == (2 * (q + kv) * 2, 2 * (o * 2 + lse)) == (
        3_145_728, 1_081_344)
    assert (flash.activation_grad.bytes_read, flash.activation_grad.bytes_written) == (
        2 * ((q + kv + 2 * o) * 2 + lse), 2 * (q + kv) * 2) == (5_275_648, 3_145_728)
    assert flash.capacity.activation_bytes == (q + kv) * 2 + lse == 1_589_248  # the rank's Q, K, V, LSE, once
    ring = task(flash_plan(2), "attn.context_exchange").messages
    assert ring.hides_behind == ("attn.flash",) and ring.forward_base.message_bytes == 2 * 512 * 512 * 2


def test_flash_with_cp_stands_for_the_same_products_as_the_materialized_kernel():
    from harness.workload import matrix_flops_per_block

    flash, materialized = flash_lowering(2), flash_lowering(2, kernel="materialized")
    qk = task(materialized.plan, "attn.qk_matmul").forward.operations
    assert qk == 2 * 8 * 512 * 1024 * 64
    assert matrix_flops_per_block(flash.distributed) == matrix_flops_per_block(materialized.distributed)
    assert matrix_flops_per_block(flash.distributed).attention == 3 * 2 * qk  # QK^T and PV, forward + 2 x backward


def test_flash_with_cp_estimates_and_a_sliding_window_is_refused_by_name():
    p = flash_plan(2)
    profile = load_profile("a100_80g")
    block, comp = cost_view(p, profile, COST_VIEWS["peak_only"])
    assert comp.total_s > 0
    s = TransformerShape(**{**FLASH_SHAPE, "sliding_window": 256})
    e = ExecutionLayout(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, global_batch=1, microbatch=1,
                        network_tiers=TIERS, context_parallel=2, attention_kernel="flash")
    assert layout_problems(s, e)[0][0] == "model.sliding_window"


# --- Ulysses: cp_comm a2a (two all-to-alls on the context group per attention) ----------------------------

def test_ulysses_sends_qkv_and_the_output_by_all_to_all_and_attends_over_the_whole_sequence_with_heads_over_cp():
    """TP 2, CP 2: a rank holds 16 positions of 4 heads of 8 (Q, K, V 32 wide each); the all-to-all gives it all
    32 positions of 2 heads. QKV: 16 x (32 + 32 + 32) = 1536 elements = 3072 B; the output 16 x 32 = 512 = 1024
    B; both all_to_all forward and backward on the context tier, 2 participants."""
    p = plan(cp_comm="a2a")
    names = [t.name for t in p.tasks if t.phase == "forward"]
    assert "attn.context_exchange" not in names
    assert names.index("attn.context_qkv_a2a") < names.index("attn.qk_matmul") < names.index(
        "attn.context_out_a2a") < names.index("attn.out_proj")
    for name, size in (("attn.context_qkv_a2a", 3072), ("attn.context_out_a2a", 1024)):
        m = task(p, name).messages
        for message in (m.forward_base, m.forward_edge, m.backward_base, m.backward_edge):
            assert (message.collective, message.message_bytes, message.participants, message.network_tier) == (
                "all_to_all", size, 2, 0)
        assert m.spans == ("context",)
    qk = task(p, "attn.qk_matmul")  # 2 heads x all 32 queries x 32 keys x 8: the ring's 1/CP of the scores too
    assert qk.forward.operations == 2 * 2 * 32 * 8 * 32 == task(plan(), "attn.qk_matmul").forward.operations
    assert task(p, "attn.softmax").forward.operations == 5 * 2 * 32 * 32
    flash = task(plan(cp_comm="a2a", attention_kernel="flash"), "attn.flash")
    # the whole 32-token sequence, one tile: 2 heads, causal tiles 1 of 1 (no ring, no context_parallel field)
    assert flash.forward.operations == 2 * (2 * 1 * 2 * 32 * 32 * 8)
    # the exposed all-to-alls are in the estimate: the plan prices with them
    profile = load_profile("a100_80g")
    pricer = pricer_for(profile, COST_VIEWS["peak_only"], "float16")
    net = profile.networks[0]
    model = net.collectives.get("all_to_all") or net.collectives["all_gather"]  # the volume model's fallback
    adjusted = 3072 * model.volume_multiplier
    adjusted += adjusted / 2 * model.participant_offset
    assert pricer.message_s(task(p, "attn.context_qkv_a2a").messages.forward_base) == pytest.approx(
        net.latency_s + adjusted / net.bandwidth_bytes_per_s, rel=1e-12)


def test_ulysses_needs_cp_to_divide_the_heads_of_a_rank():
    execution = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=1, global_batch=2, microbatch=1,
                     network_tiers=TIERS, context_parallel=8, cp_comm="a2a")
    shape = TransformerShape(**{**SHAPE, "sequence_length": 64})
    problems = layout_problems(shape, ExecutionLayout(**execution))  # 4 heads per TP rank, CP 8
    assert [f for f, _ in problems] == ["execution.cp_comm"]


# --- CP with TP and DP overlap: the ConcretePlanIR (harness.schedule.projection, harness.passes.concretize) --

def concrete_plan(system="a100_80g", **changes):
    from harness.passes.concretize import TransformerConcretize

    execution = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=2, global_batch=4, microbatch=1,
                     network_tiers=TIERS, context_parallel=2, tp_communication="rs_ag", dp_overlap=True)
    execution.update(changes)
    data = EstimateInput(model=SHAPE, execution=execution, system=system)
    return TransformerConcretize.for_layout(data.execution).run(lower(data).plan)[0]


def test_tp_and_dp_overlap_with_context_parallelism_are_accepted():
    execution = ExecutionLayout(tensor_parallel=2, pipeline_parallel=1, data_parallel=2, global_batch=4,
                                microbatch=1, network_tiers=TIERS, context_parallel=2, tp_communication="rs_ag",
                                tp_overlap="ring", dp_overlap=True)
    assert layout_problems(TransformerShape(**SHAPE), execution) == []


@pytest.mark.parametrize("overlap", ["none", "ring"])
def test_the_concrete_projection_exposes_the_ring_by_the_portable_rule(overlap):
    """The block sums of the ConcretePlanIR are those without the ring task plus one step's exposed time,
    max(0, step - scores / 2) (CP 2: one step, two chunks of scores), in the forward pass (and, the scores not
    recomputed, not in the recompute time) and max(0, backward step - score gradients / 2) in the backward."""
    from harness.schedule.projection import block_sums

    c = concrete_plan(tp_overlap=overlap)
    pricer = pricer_for(load_profile("a100_80g"), COST_VIEWS["peak_only"], c.datatype)
    scores = ("attn.qk_matmul", "attn.softmax", "attn.probs_dropout", "attn.pv_matmul")
    ring = task(c, "attn.context_exchange").messages
    step, back_step = pricer.message_s(ring.forward_base), pricer.message_s(ring.backward_base)
    hidden = sum(pricer.task(task(c, n))["forward"].processing_s for n in scores)
    back_hidden = sum(pricer.task(task(c, n))["activation_grad"].processing_s for n in scores)
    assert step > hidden / 2  # a 2 KB step costs its latency, the tiny scores hide little

    def sums(tasks):
        return block_sums(tasks, True, 2, 0, 2 if overlap != "none" else 1, False, pricer)

    with_ring = sums(c.tasks)
    without = sums(tuple(t for t in c.tasks if t.name != "attn.context_exchange"))
    assert with_ring.forward_s == pytest.approx(without.forward_s + (step - hidden / 2), rel=1e-12)
    assert with_ring.forward_edge_s == pytest.approx(without.forward_edge_s + (step - hidden / 2), rel=1e-12)
    assert with_ring.recompute_s == without.recompute_s == 0
    exposed_back = max(0.0, back_step - back_hidden / 2)
    assert with_ring.activation_grad_s == pytest.approx(without.activation_grad_s + exposed_back, rel=1e-12)
    assert with_ring.forward_tp_exposed_base_s == without.forward_tp_exposed_base_s  # the TP collectives as before


def test_without_concurrency_the_concrete_projection_of_a_cp_plan_is_the_portable_estimate():
    """The ring's exposure is one rule (harness.schedule.block.ring_exposure) in both block sums."""
    from harness.schedule.projection import calculon_projection

    c = concrete_plan(dp_overlap=False)
    p = plan(tp_communication="rs_ag")
    profile = load_profile("a100_80g")
    for view in COST_VIEWS.values():
        _, comp = cost_view(p, profile, view)
        projection = calculon_projection(c, pricer_for(profile, view, c.datatype))
        for name in ("forward", "backward", "recompute", "tensor_parallel", "data_parallel"):
            assert projection.components_s[name] == pytest.approx(comp.components_s[name], rel=1e-12), name


def test_the_dp_sync_of_a_cp_layout_runs_on_the_gradient_group_s_tier():
    """Data on tier 0, context on tier 1: the data x context group (4 ranks) syncs on tier 1, with tier 1's
    processor usage (the DP overlap's slowdown of the compute under it)."""
    from harness.schedule.projection import data_parallel_sync

    tiers = {"tensor": 0, "pipeline": 0, "data": 0, "context": 1}
    c = concrete_plan(network_tiers=tiers)
    profile = load_profile("a100_80g")
    pricer = pricer_for(profile, COST_VIEWS["peak_only"], c.datatype)
    assert [(m.collective, m.participants, m.network_tier) for m in c.data_parallel.messages] == [
        ("all_reduce", 4, 1)]
    assert {cmd.queue for cmd in c.program("data_parallel").commands} == {"network.tier1"}
    sync = data_parallel_sync(c, pricer)
    assert profile.networks[1].processor_usage != profile.networks[0].processor_usage
    assert sync.processor_usage == profile.networks[1].processor_usage
    assert sync.block_s == pricer.message_s(c.data_parallel.messages[0])
    assert (sync.same_tier_as_tp, sync.same_tier_as_pp) == (False, False)


def test_the_physical_ring_sends_each_step_under_a_chunk_of_the_scores():
    """Flash, TP 1, CP 2: one send of the K/V chunk on the context queue while the first half of the kernel
    runs (its flop phase slowed by the tier's processor usage while the send runs, rule Q3), the second half
    after it has arrived. Hand-computed: with F and M the kernel's compute and memory time, S the step and pu
    the tier's processor usage, the first chunk's flops end at S + (F/2 - S (1 - pu)) if S < F / 2 / (1 - pu),
    else at F / 2 / (1 - pu); the second chunk starts at max(end of the first, S)."""
    from harness.passes.concretize import TransformerConcretize
    from harness.schedule.physical import run_program

    execution = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=2, global_batch=2, microbatch=1,
                     network_tiers=TIERS, context_parallel=2, attention_kernel="flash", dp_overlap=True)
    data = EstimateInput(model=FLASH_SHAPE, execution=execution, system="a100_80g")
    c = TransformerConcretize.for_layout(data.execution).run(lower(data).plan)[0]
    forward = c.program("forward", "base").commands
    names = [cmd.name for cmd in forward]
    at = names.index("attn.context_exchange/forward/step0.send")
    assert names[at:at + 5] == ["attn.context_exchange/forward/step0.send", "attn.flash/forward/chunk0.flops",
                                "attn.flash/forward/chunk0.memory", "attn.flash/forward/chunk1.flops",
                                "attn.flash/forward/chunk1.memory"]
    send, f0, m0, f1, _ = forward[at:at + 5]
    assert (send.queue, send.kind, send.depends_on, f0.depends_on) == ("network.tier0", "p2p", f0.depends_on,
                                                                        send.depends_on)
    assert set(f1.depends_on) == {m0.name, send.name} and (f0.tile, f0.tiles) == (0, 2)
    profile = load_profile("a100_80g")
    pricer = pricer_for(profile, COST_VIEWS["peak_only"], c.datatype)
    flash = pricer.task(task(c, "attn.flash"))["forward"]
    F, M = flash.compute_s, flash.memory_s
    S = pricer.message_s(task(c, "attn.context_exchange").messages.forward_base)
    pu = profile.networks[0].processor_usage
    flops_end = S + (F / 2 - S * (1 - pu)) if S < F / 2 / (1 - pu) else F / 2 / (1 - pu)
    ring_s = max(flops_end + M / 2, S) + F / 2 + M / 2
    others = sum(pricer.work(cmd.work).processing_s for cmd in forward if cmd.kind == "compute"
                 and cmd.task != "attn.flash")
    assert run_program(c.program("forward", "base"), c, pricer).makespan_s == pytest.approx(others + ring_s,
                                                                                            rel=1e-12)
    backward = [cmd.name for cmd in c.program("backward", "base").commands]
    assert "attn.context_exchange/activation_grad/step0.send" in backward
    assert "attn.flash/activation_grad/chunk1.memory" in backward
