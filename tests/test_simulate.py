"""Event-level pipeline simulation: hand-computed schedules and the closed-form check on the Table 5 cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cases import load_case
from harness.cost.views import COST_VIEWS as VIEWS
from harness.errors import HarnessError
from harness.estimate import cost_view
from harness.evidence.profile import load_profile
from harness.ir.portable import Schedule
from harness.pipeline import lower
from harness.schedule.block import BlockTimes
from harness.schedule.compose import compose
from harness.schedule.simulate import BUSY_COMPONENTS, group_size, schedule_table, simulate, stage_order

CASES = Path(__file__).resolve().parents[1] / "cases"
TABLE5 = ("megatron-22B_full", "megatron-22B_seqsel", "gpt3-175B_full", "gpt3-175B_seqsel",
          "turing-530B_full", "turing-530B_seqsel", "megatron-1T_full", "megatron-1T_seqsel")
ZERO = BlockTimes(*(0.0 for _ in dataclasses.fields(BlockTimes)))


def schedule(pp: int, chunks: int, microbatches: int, blocks: int | None = None, training: bool = True) -> Schedule:
    """A schedule shaped like TransformerPlanWork's (blocks per stage rounded up, one edge block per chunk)."""
    blocks = blocks or pp * chunks
    per_stage = -(-blocks // pp)
    per_chunk = per_stage // chunks
    return Schedule(training=training, recompute="none", global_batch=microbatches, microbatches=microbatches,
                    blocks=blocks, pipeline_parallel=pp, blocks_per_stage=per_stage,
                    bubble_reduction_blocks=pp - blocks % pp if blocks % pp else 0, chunks_per_stage=chunks,
                    blocks_per_chunk=per_chunk, base_blocks_per_chunk=per_chunk - 1, edge_blocks_per_chunk=1,
                    activation_checkpoint_bytes=0)


def run(s: Schedule, block: BlockTimes):
    return simulate(s, block, compose(s, block))


def starts(sim, stage: int) -> list[tuple[str, int, int, float]]:
    return [(op.phase[0].upper(), op.chunk, op.microbatch, op.start_s) for op in sim.ops[stage]]


# One block per chunk: forward 1 s, backward 2 s per chunk.
UNIT = dataclasses.replace(ZERO, forward_s=1.0, activation_grad_s=2.0)


def test_pp1_runs_forward_backward_back_to_back():
    sim = run(schedule(1, 1, 3), UNIT)
    assert starts(sim, 0) == [("F", 0, 0, 0.0), ("B", 0, 0, 1.0), ("F", 0, 1, 3.0), ("B", 0, 1, 4.0),
                              ("F", 0, 2, 6.0), ("B", 0, 2, 7.0)]
    assert sim.makespan_s == 9.0 and sim.first_stage_idle_s == 0.0 and sim.closed_form_bubble_s == 0.0


def test_pp2_1f1b_hand_computed():
    sim = run(schedule(2, 1, 3), UNIT)
    # stage 0: one warm-up forward, then 1F1B; it waits for stage 1's backward of microbatch 0 (ends at 4 s).
    assert starts(sim, 0) == [("F", 0, 0, 0.0), ("F", 0, 1, 1.0), ("B", 0, 0, 4.0), ("F", 0, 2, 6.0),
                              ("B", 0, 1, 7.0), ("B", 0, 2, 10.0)]
    assert starts(sim, 1) == [("F", 0, 0, 1.0), ("B", 0, 0, 2.0), ("F", 0, 1, 4.0), ("B", 0, 1, 5.0),
                              ("F", 0, 2, 7.0), ("B", 0, 2, 8.0)]
    assert (sim.makespan_s, sim.first_stage_busy_s, sim.first_stage_idle_s) == (12.0, 9.0, 3.0)
    assert sim.closed_form_bubble_s == 3.0 and sim.bubble_difference_s == 0.0 and sim.exact
    assert "exact" in sim.note


def test_interleaved_pp2_two_chunks_hand_computed():
    s = schedule(2, 2, 4)
    assert schedule_table(4, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    # warm-up: 2 (PP - s - 1) + (chunks - 1) PP = 4 on stage 0, 2 on stage 1
    assert [(p[0], c, m) for p, c, m in stage_order(0, 2, 2, 4, True)][:6] == [
        ("f", 0, 0), ("f", 0, 1), ("f", 1, 0), ("f", 1, 1), ("f", 0, 2), ("b", 1, 0)]
    sim = run(s, UNIT)
    assert [op.start_s for op in sim.ops[0]] == [0, 1, 2, 3, 4, 6, 8, 9, 11, 12, 14, 15, 18, 21, 23, 25]
    assert [op.start_s for op in sim.ops[1]] == [1, 2, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19, 21, 23]
    assert (sim.makespan_s, sim.first_stage_busy_s, sim.first_stage_idle_s) == (27.0, 24.0, 3.0)
    assert sim.closed_form_bubble_s == 3.0 and sim.exact


def test_fewer_microbatches_than_stages_without_interleaving_is_exact():
    sim = run(schedule(3, 1, 2), dataclasses.replace(ZERO, forward_s=1.0, activation_grad_s=1.0))
    assert starts(sim, 0) == [("F", 0, 0, 0.0), ("F", 0, 1, 1.0), ("B", 0, 0, 5.0), ("B", 0, 1, 7.0)]
    assert starts(sim, 2) == [("F", 0, 0, 2.0), ("B", 0, 0, 3.0), ("F", 0, 1, 4.0), ("B", 0, 1, 5.0)]
    assert (sim.makespan_s, sim.first_stage_idle_s, sim.closed_form_bubble_s) == (8.0, 4.0, 4.0)


def test_megatron_group_size_rule():
    assert group_size(64, 8) == 8  # PP divides M
    assert group_size(60, 8) == 10  # last group must be empty or >= PP: 60 = 6 x 10
    assert group_size(23, 8) == 12  # 23 mod 12 = 11 >= PP (9, 10, 11 leave 5, 3, 1)
    assert group_size(3, 2) == 3 and group_size(3, 8) == 3  # one group (Megatron refuses M < PP)


def test_microbatches_not_multiple_of_pp_under_interleaving_shows_the_difference():
    s = schedule(2, 2, 3)
    assert schedule_table(3, 2, group_size(3, 2)) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    sim = run(s, UNIT)
    assert [op.start_s for op in sim.ops[0]] == [0, 1, 2, 3, 4, 5, 7, 10, 13, 15, 17, 19]
    # closed form: (PP-1) + (chunks-1)(PP - 3 mod 2) = 2 chunk times of 3 s; the schedule idles one chunk time
    assert sim.closed_form_bubble_s == 6.0
    assert (sim.makespan_s, sim.first_stage_busy_s, sim.first_stage_idle_s) == (21.0, 18.0, 3.0)
    assert sim.bubble_difference_s == -3.0
    assert not sim.exact and "not a multiple of PP" in sim.note and "groups of 3" in sim.note


def test_group_size_rule_never_deadlocks():
    for pp, chunks in ((3, 2), (4, 3), (8, 3)):
        for m in range(1, 3 * pp + 2):
            sim = run(schedule(pp, chunks, m), UNIT)
            assert sim.first_stage_busy_s == 3.0 * chunks * m
            assert sim.first_stage_idle_s >= (pp - 1) * 3.0 - 1e-9  # never below the (PP-1) chunk fill/drain


def test_single_microbatch_interleaved_is_a_chain():
    sim = run(schedule(2, 2, 1), UNIT)
    assert [op.start_s for op in sim.ops[0]] == [0.0, 2.0, 6.0, 10.0]
    assert sim.makespan_s == 12.0 and sim.first_stage_idle_s == sim.closed_form_bubble_s == 6.0


def test_uneven_blocks_run_short_stages_and_report_the_difference():
    s = schedule(2, 1, 2, blocks=3)  # 2 blocks on stage 0 (base + edge), 1 (edge) on stage 1
    block = dataclasses.replace(ZERO, forward_s=1.0, activation_grad_s=2.0, pp_forward_s=0.5)
    sim = run(s, block)
    assert [op.blocks for op in sim.ops[1]] == [(0, 1)] * 4
    assert [op.duration_s for op in sim.ops[1]] == [1.5, 2.0, 1.5, 2.0]
    assert starts(sim, 0) == [("F", 0, 0, 0.0), ("F", 0, 1, 2.5), ("B", 0, 0, 6.0), ("B", 0, 1, 10.0)]
    # closed form: one chunk (6.5 s) minus half a base and half an edge block (3.25 s)
    assert sim.closed_form_bubble_s == 3.25
    assert (sim.makespan_s, sim.first_stage_busy_s, sim.first_stage_idle_s) == (14.0, 13.0, 1.0)
    assert sim.bubble_difference_s == -2.25 and "one block fewer" in sim.note


def test_inference_runs_forwards_only_and_names_the_backward_slot():
    block = dataclasses.replace(ZERO, forward_s=1.0, pp_backward_s=0.25)
    sim = run(schedule(2, 1, 3, training=False), block)
    assert all(op.phase == "forward" for ops in sim.ops for op in ops)
    assert sim.makespan_s == 4.0 and sim.first_stage_idle_s == 1.0
    assert sim.closed_form_bubble_s == 1.25 and sim.bubble_difference_s == -0.25 and "inference" in sim.note


def test_inconsistent_orders_deadlock_with_a_one_line_error(monkeypatch):
    import harness.schedule.simulate as sim_module

    def reversed_order(stage, pp, chunks, mb, training):
        order = stage_order(stage, pp, chunks, mb, training)
        return order[::-1] if stage == 1 else order

    monkeypatch.setattr(sim_module, "stage_order", reversed_order)
    with pytest.raises(HarnessError, match="deadlocked: stage"):
        run(schedule(2, 1, 2), UNIT)


@pytest.mark.parametrize("name", TABLE5)
def test_table5_simulated_bubble_equals_closed_form(name):
    data = load_case(CASES / f"{name}.yaml").estimate_input()
    profile, plan = load_profile(data.system), lower(data).plan
    for view in VIEWS.values():
        block, comp = cost_view(plan, profile, view)
        sim = simulate(plan.schedule, block, comp)
        c = comp.components_s
        # Budget 1e-9 of the iteration: the simulation adds up to 2 x 64 x 512 operation durations one by one,
        # each addition rounding by at most 1.1e-16 relative (~1e-11 in all); measured: 3e-14 at most.
        budget = 1e-9 * comp.total_s
        assert sim.first_stage_busy_s == pytest.approx(sum(c[n] for n in BUSY_COMPONENTS), abs=budget)
        assert sim.first_stage_idle_s == pytest.approx(c["pipeline_bubble"], abs=budget)
        assert sim.first_stage_busy_s + sim.first_stage_idle_s + c["optimizer"] + c["data_parallel"] == \
            pytest.approx(comp.total_s, abs=budget)
        assert sim.total_s == pytest.approx(comp.total_s, rel=1e-9) and sim.exact
        ops = sum(len(stage) for stage in sim.ops)
        assert ops == 2 * plan.schedule.pipeline_parallel * plan.schedule.chunks_per_stage * plan.schedule.microbatches
