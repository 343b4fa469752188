"""The expert-parallel all-to-all priced by tier (issue 21): a group spread over the islands of the tier below its
own runs, with the hierarchical family, inside each island on that tier and across the islands on its own tier
(harness.cost.views.hierarchical_parts, the one rule of the family).

Every expected time is written out from the profile's numbers: h100_measured has 8-GPU NVLink islands (tier 0:
450 GB/s x 0.65, 10 us) under InfiniBand (tier 1: 50 GB/s x 0.9, 20 us), an all_gather volume model of
1 x (1 - 1/n) on both (the all_to_all's fallback), no measured collective curves."""

from __future__ import annotations

import pytest

from harness.cost.views import COST_VIEWS, CostView, Pricer, hierarchical_parts, members_per_island
from harness.evidence.profile import load_profile
from harness.ir.portable import Message
from test_moe import case, plan_of, task

NVLINK = 450e9 * 0.65  # h100_measured tier 0, bytes/s
INFINIBAND = 50e9 * 0.9  # tier 1
B = 4096 * 8 * 2048 * 2  # a rank's dispatch buffer: 4096 tokens x top_k 8 x hidden 2048 x 2 bytes
# TP 2 with sequence parallelism, DP 8, EP 8, ETP 2: 16 GPUs, the expert group spanning both nodes
ETP_2 = dict(tensor_parallel=2, tp_communication="rs_ag", data_parallel=8, global_batch=256, expert_parallel=8,
             expert_tensor_parallel=2, network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1, expert_tensor=0))


@pytest.fixture(scope="module")
def measured():
    return load_profile("h100_measured")


def test_an_expert_all_to_all_on_the_upper_tier_carries_its_members_stride():
    plan = plan_of(case())  # EP 16, ETP 1 on tier 1
    dispatch = task(plan, "mlp.dispatch").messages.forward_base
    assert (dispatch.participants, dispatch.network_tier, dispatch.member_stride_processors) == (16, 1, 1)
    etp = plan_of(case(execution=ETP_2))
    assert task(etp, "mlp.dispatch").messages.forward_base.member_stride_processors == 2  # EP members ETP apart
    on_nvlink = plan_of(case(execution=dict(expert_parallel=8, network_tiers=dict(tensor=0, pipeline=1, data=1,
                                                                                  expert=0))))
    local = task(on_nvlink, "mlp.dispatch").messages.forward_base
    assert local.member_stride_processors == 1  # the layout's fact on any tier (the search re-tiers plans)
    gradients = on_nvlink.data_parallel.messages[0]  # any other message: no stride, absent from its dump
    assert "member_stride_processors" not in gradients.model_dump()  # (absent if None: digests kept)


def test_ep_16_over_two_nodes_sends_its_own_nodes_part_on_nvlink_and_the_rest_on_infiniband(measured):
    dispatch = task(plan_of(case()), "mlp.dispatch").messages.forward_base
    # 16 ranks, 8 per node: 8/16 of the buffer is for this node (7/16 leaves the GPU over NVLink), 8/16 for the
    # other node, over InfiniBand: an all-to-all of B/2 over 8 on tier 0, one of B over the 2 nodes on tier 1
    inside = 1e-5 + (B * 8 / 16) * (1 - 1 / 8) / NVLINK
    across = 2e-5 + B * (1 - 1 / 2) / INFINIBAND
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16")
    assert pricer.message_s(dispatch) == pytest.approx(inside + across, rel=1e-12)
    # the bytes are the flat all-to-all's, split: 7/16 + 8/16 = 15/16 of the buffer
    assert (B * 8 / 16) * (1 - 1 / 8) + B * (1 - 1 / 2) == B * 15 / 16
    # without the family (or on a profile without it) the group is priced whole on tier 1, as before
    flat = 2e-5 + B * (1 - 1 / 16) / INFINIBAND
    without = CostView.with_curves(COST_VIEWS["system_evidence"].curves - {"hierarchical"})
    assert Pricer(measured, without, "bfloat16").message_s(dispatch) == pytest.approx(flat, rel=1e-12)
    assert Pricer(load_profile("h100_sxm_80g"), COST_VIEWS["system_evidence"], "bfloat16").message_s(
        dispatch) == pytest.approx(flat, rel=1e-12)
    assert inside + across < flat  # the over-pricing removed


def test_etp_2_puts_four_ep_members_on_each_node(measured):
    data = case(execution=ETP_2)
    dispatch = task(plan_of(data), "mlp.dispatch").messages.forward_base
    buffer = dispatch.message_bytes
    # TP 2 with SP: 4096 / 2 tokens per rank, top_k 8, hidden 2048, 2 bytes
    assert buffer == 2048 * 8 * 2048 * 2
    # EP 8 members two ranks apart span 16 GPUs: 8 // 2 = 4 per node, 2 nodes
    inside = 1e-5 + (buffer * 4 / 8) * (1 - 1 / 4) / NVLINK
    across = 2e-5 + buffer * (1 - 1 / 2) / INFINIBAND
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16")
    assert pricer.message_s(dispatch) == pytest.approx(inside + across, rel=1e-12)


def test_members_one_island_apart_all_cross_the_upper_tier(measured):
    """ETP 8 puts each EP member on its own node: nothing travels inside an island, priced whole on tier 1."""
    message = Message(collective="all_to_all", message_bytes=1e8, participants=2, network_tier=1,
                      member_stride_processors=8)
    assert members_per_island(2, 8, 8) == 1
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16")
    assert pricer.message_s(message) == pytest.approx(2e-5 + 1e8 * (1 - 1 / 2) / INFINIBAND, rel=1e-12)


def test_a_partial_island_counts_as_an_island(measured):
    """EP 12 over 8-GPU islands: 8 members on the first, 4 on the second: ceil(12 / 8) = 2 islands; the part for
    one's own island is priced as a full island's, 8/12 of the buffer."""
    message = Message(collective="all_to_all", message_bytes=1.2e8, participants=12, network_tier=1,
                      member_stride_processors=1)
    inside = 1e-5 + (1.2e8 * 8 / 12) * (1 - 1 / 8) / NVLINK
    across = 2e-5 + 1.2e8 * (1 - 1 / 2) / INFINIBAND
    assert Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16").message_s(message) == pytest.approx(
        inside + across, rel=1e-12)


def test_the_split_is_the_families_one_rule_for_every_collective():
    # a reduction or a gather carries 1/island across; an all-to-all its whole buffer, 1/P-ths of it inside
    assert hierarchical_parts("all_reduce", 8e8, 16, 8) == ((8e8, 8), (1e8, 2))
    assert hierarchical_parts("all_gather", 8e8, 12, 8) == ((8e8, 8), (1e8, 2))
    assert hierarchical_parts("all_to_all", 8e8, 16, 8) == ((4e8, 8), (8e8, 2))
    assert hierarchical_parts("all_to_all", 8e8, 32, 4) == ((1e8, 4), (8e8, 8))


def test_a_group_on_the_first_tier_is_priced_whole_there(measured):
    """EP 8 on tier 0 (one NVLink island): no tier below, no split, as before."""
    message = Message(collective="all_to_all", message_bytes=1e8, participants=8, network_tier=0,
                      member_stride_processors=1)
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16")
    assert pricer.message_s(message) == pytest.approx(1e-5 + 1e8 * (1 - 1 / 8) / NVLINK, rel=1e-12)


def test_a_group_placed_above_the_island_it_fits_in_is_priced_where_placed(measured):
    """EP 8 (ETP 1) fits one 8-GPU island; a case that places it on tier 1 anyway is priced whole there."""
    message = Message(collective="all_to_all", message_bytes=1e8, participants=8, network_tier=1,
                      member_stride_processors=1)
    assert members_per_island(8, 1, 8) == 8
    pricer = Pricer(measured, COST_VIEWS["system_evidence"], "bfloat16")
    assert pricer.message_s(message) == pytest.approx(2e-5 + 1e8 * (1 - 1 / 8) / INFINIBAND, rel=1e-12)


def test_the_breakdown_names_the_all_to_alls_inside_the_tensor_parallel_component():
    """The all-to-all keeps no component of its own (the estimate's components, goldens and records unchanged):
    ``explain --by-task`` names it. TP 1: the tensor_parallel component is the dispatch and combine only, each
    32 microbatches (512 / DP 16) x 48 blocks x (forward + its gradient backward) of the split price."""
    from harness.explain import explain_input

    views = explain_input(case(system="h100_measured"), (COST_VIEWS["system_evidence"],), mode="by_task").tasks
    component = next(c for c in views[0].components if c.component == "tensor_parallel")
    one = 1e-5 + (B * 8 / 16) * (1 - 1 / 8) / NVLINK + 2e-5 + B * (1 - 1 / 2) / INFINIBAND
    assert [(t.task, t.primitive) for t in component.tasks] == [("mlp.dispatch", "expert_all_to_all"),
                                                                ("mlp.combine", "expert_all_to_all")]
    for share in component.tasks:
        assert share.time_s == pytest.approx(32 * 48 * 2 * one, rel=1e-12) and share.message_bytes == 2 * B
    assert component.time_s == pytest.approx(2 * 32 * 48 * 2 * one, rel=1e-12)
