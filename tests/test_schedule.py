"""Schedule composition rules on small hand-computed cases (not via Calculon)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.ir.portable import Schedule
from harness.schedule.block import BlockTimes
from harness.schedule.compose import compose

BLOCK = BlockTimes(forward_s=1.0, recompute_s=0.5, activation_grad_s=2.0, weight_grad_s=1.0, optimizer_s=0.1,
                   tp_forward_base_s=0.2, tp_forward_edge_s=0.3, tp_backward_base_s=0.2, tp_backward_edge_s=0.3,
                   recomm_base_s=0.05, recomm_edge_s=0.05, pp_forward_s=0.01, pp_backward_s=0.01, dp_s=0.4)
# Hand-computed block critical paths of BLOCK:
BASE_FW, EDGE_FW = 1.0 + 0.2, 1.0 + 0.3 + 0.01
BASE_BW, EDGE_BW = 0.5 + 0.05 + 2.0 + 1.0 + 0.2, 0.5 + 0.05 + 2.0 + 1.0 + 0.3 + 0.01


def schedule(blocks, pp, microbatches, interleaving=1):
    per_stage = -(-blocks // pp)
    per_chunk = per_stage // interleaving
    return Schedule(training=True, recompute="attn_only", global_batch=microbatches, microbatches=microbatches,
                    blocks=blocks, pipeline_parallel=pp, blocks_per_stage=per_stage,
                    bubble_reduction_blocks=(pp - blocks % pp) if blocks % pp else 0,
                    chunks_per_stage=interleaving, blocks_per_chunk=per_chunk, base_blocks_per_chunk=per_chunk - 1,
                    edge_blocks_per_chunk=1, activation_checkpoint_bytes=0)


def run(blocks, pp, microbatches, interleaving=1):
    return compose(schedule(blocks, pp, microbatches, interleaving), BLOCK)


def test_pp1_has_no_bubble_and_no_pp_traffic():
    c = run(blocks=4, pp=1, microbatches=2)
    comps = c.components_s
    assert comps["pipeline_bubble"] == 0 and comps["pipeline_parallel"] == 0
    assert comps["forward"] == pytest.approx(4 * 2 * 1.0)
    assert comps["backward"] == pytest.approx(4 * 2 * 3.0)
    assert comps["recompute"] == pytest.approx(4 * 2 * 0.5)
    assert comps["optimizer"] == pytest.approx(4 * 0.1)
    # 3 base + 1 edge block per chunk, 2 microbatches
    assert comps["tensor_parallel"] == pytest.approx(2 * (3 * 0.2 + 0.3) * 2)
    assert comps["recommunication"] == pytest.approx(2 * 4 * 0.05)
    assert comps["data_parallel"] == pytest.approx(4 * 0.4)
    assert c.total_s == pytest.approx(8.0 + 24.0 + 4.0 + 0.4 + 3.6 + 0.4 + 1.6)  # by hand, the rows above


def test_1f1b_bubble_is_pp_minus_one_chunk_critical_paths():
    c = run(blocks=8, pp=4, microbatches=8)
    chunk = BASE_FW + EDGE_FW + BASE_BW + EDGE_BW
    assert c.chunks.chunk_forward_s + c.chunks.chunk_backward_s == pytest.approx(chunk)
    assert c.components_s["pipeline_bubble"] == pytest.approx(3 * chunk)
    assert c.components_s["pipeline_parallel"] == pytest.approx(8 * 1 * 0.01 * 2)


def test_interleaving_divides_the_chunk_and_multiplies_pp_transfers():
    c = run(blocks=16, pp=2, microbatches=4, interleaving=2)  # 8 blocks per stage, 4 per chunk
    chunk = 3 * BASE_FW + EDGE_FW + 3 * BASE_BW + EDGE_BW
    assert c.components_s["pipeline_bubble"] == pytest.approx(1 * chunk)
    assert c.components_s["pipeline_parallel"] == pytest.approx(4 * 2 * 0.01 * 2)


def test_interleaving_with_microbatches_not_a_multiple_of_pp_adds_chunks():
    c = run(blocks=8, pp=2, microbatches=3, interleaving=2)  # shortage 2 - 3 % 2 = 1, one overlappable chunk
    chunk = BASE_FW + EDGE_FW + BASE_BW + EDGE_BW
    assert c.chunks.bubble_extra_chunks == 1
    assert c.components_s["pipeline_bubble"] == pytest.approx((1 + 1) * chunk)


def test_extra_chunks_count_the_stages_left_idle_not_the_microbatches_left_over():
    """PP 4 and 5 microbatches: 5 mod 4 = 1 microbatch left over, 4 - 1 = 3 stages without one; each of the
    (3 - 1) extra chunks of an interleaving of 3 waits on those 3 stages: (3 - 1) x 3 = 6 extra chunks
    (the earlier cases have shortage = PP - shortage and cannot tell the two apart)."""
    c = run(blocks=48, pp=4, microbatches=5, interleaving=3)  # 12 blocks per stage, 4 per chunk
    chunk = 3 * BASE_FW + EDGE_FW + 3 * BASE_BW + EDGE_BW
    assert c.chunks.bubble_extra_chunks == 6
    assert c.components_s["pipeline_bubble"] == pytest.approx((3 + 6) * chunk)


def test_microbatches_fewer_than_pp():
    plain = run(blocks=8, pp=4, microbatches=2)
    interleaved = run(blocks=16, pp=4, microbatches=2, interleaving=2)
    chunk = BASE_FW + EDGE_FW + BASE_BW + EDGE_BW
    assert plain.components_s["pipeline_bubble"] == pytest.approx(3 * chunk)
    assert interleaved.chunks.bubble_extra_chunks == (2 - 1) * (4 - 2)
    assert interleaved.components_s["pipeline_bubble"] == pytest.approx((3 + 2) * chunk)


def test_uneven_blocks_shorten_the_bubble_by_the_missing_blocks():
    c = run(blocks=7, pp=4, microbatches=8)  # 2 blocks on the first stage, one stage has one block fewer
    chunk = BASE_FW + EDGE_FW + BASE_BW + EDGE_BW
    missing = 1 * (BASE_FW + EDGE_FW + BASE_BW + EDGE_BW) / 2
    assert c.components_s["pipeline_bubble"] == pytest.approx(3 * chunk - missing)
    single = run(blocks=3, pp=4, microbatches=4)  # one block per chunk: a whole edge block is cut
    assert single.components_s["pipeline_bubble"] == pytest.approx(3 * (EDGE_FW + EDGE_BW) - 1 * (EDGE_FW + EDGE_BW))


def test_the_one_composition_follows_each_summation_rule_switched_off():
    """The portable composition is the closed forms' (harness.schedule.calculon_forms.iteration): switching a
    summation rule of harness.calculon_compat off changes it to the alternative form, written out here
    (the block times are chosen so that the two forms round differently)."""
    from harness.calculon_compat import switched_off

    block = dataclasses.replace(BLOCK, pp_forward_s=0.011, pp_backward_s=0.017, forward_s=2.3)
    s = schedule(blocks=48, pp=4, microbatches=5, interleaving=3)  # 3 full and 6 extra chunks, no reduction
    on = compose(s, block)
    with switched_off("bubble-grouping", "pipeline-parallel-by-direction"):
        off = compose(s, block)
    chunk = on.chunks.chunk_forward_s + on.chunks.chunk_backward_s
    assert on.components_s["pipeline_bubble"] == 3 * chunk + (6 * chunk - 0.0)
    assert off.components_s["pipeline_bubble"] == (3 + 6) * chunk - 0.0
    assert on.components_s["pipeline_parallel"] == 5 * 3 * 0.011 + 5 * 3 * 0.017
    assert off.components_s["pipeline_parallel"] == 5 * (3 * 0.011 + 3 * 0.017)
    assert on.components_s["pipeline_bubble"] != off.components_s["pipeline_bubble"]
    assert on.components_s["pipeline_parallel"] != off.components_s["pipeline_parallel"]


def test_the_outside_work_is_added_once_for_every_caller_and_a_portable_total_is_summed_again():
    """harness.schedule.calculon_forms.with_outside_work, the one post-composition step (closed form, projection,
    search): components grow by microbatches x the per-microbatch pair, the per-iteration pair and the
    accumulation pair; a projection's total grows by each pair's sum, a portable plan's total is its components
    summed again in Calculon's order (rule portable-total-summed-again) before the accumulation is added.
    The values are chosen so that the two orders round differently."""
    from harness.calculon_compat import switched_off
    from harness.schedule.calculon_forms import OutsideWork, with_outside_work
    from harness.vocabulary import COMPONENTS

    components = dict.fromkeys(COMPONENTS, 0.0) | {"forward": 0.1, "backward": 0.7, "optimizer": 0.3,
                                                   "data_parallel": 0.05, "pipeline_bubble": 0.2}
    total = 0.1 + 0.7 + 0.3 + 0.2 + 0.05  # composed (Calculon's order: forward, backward, optimizer, bubble, DP)
    work = OutsideWork(per_microbatch_s=(0.01, 0.03), per_iteration_s=(0.002, 0.007), accumulation_s=(0.11, 0.13))
    forward, backward = 0.1 + 3 * 0.01, 0.7 + 3 * 0.03
    optimizer, data_parallel = 0.3 + 0.002, 0.05 + 0.007
    grown = {"forward": forward, "backward": backward + 0.11, "optimizer": optimizer,
             "data_parallel": data_parallel, "pipeline_bubble": 0.2 + 0.13}

    projected_c, projected_total = with_outside_work(components, total, 3, work, portable=False)
    assert {k: v for k, v in projected_c.items() if v} == grown
    assert projected_total == total + (3 * 0.01 + 3 * 0.03) + (0.002 + 0.007) + (0.11 + 0.13)

    portable_c, portable_total = with_outside_work(components, total, 3, work, portable=True)
    assert portable_c == projected_c
    assert portable_total == forward + backward + optimizer + 0.2 + data_parallel + (0.11 + 0.13)
    assert portable_total != projected_total  # the two orders round apart on these values

    with switched_off("portable-total-summed-again"):  # the alternative: every plan's total added to
        assert with_outside_work(components, total, 3, work, portable=True)[1] == projected_total
    # nothing outside: the composition is returned as it is (the same objects)
    assert with_outside_work(components, total, 3, OutsideWork(), portable=True) == (components, total)
    only_accumulation = with_outside_work(components, total, 3, OutsideWork(accumulation_s=(0.11, 0.13)),
                                          portable=True)
    assert only_accumulation[1] == total + (0.11 + 0.13)  # no re-sum without per-microbatch or per-iteration work
