"""The measured evidence families price by their documented rules (values computed here by hand), and a
profile without them prices exactly as before."""

from __future__ import annotations

import math

import pytest

from harness.cases import load_case
from harness.passes.output_layer import model_plan_tasks, padded_vocabulary
from harness.cost.views import COST_VIEWS, CostView, Pricer, profile_families
from harness.errors import EvidenceError
from harness.estimate import cost_view, estimate_lowering
from harness.evidence.families import (
    CollectiveCurve,
    GradientAccumulation,
    GroupedGemm,
    HierarchicalCollectives,
    LaunchOverhead,
    OutputLayer,
    PartitionedP2P,
    SaturatingCurve,
    SizePoint,
    curve_for,
)
from harness.evidence.profile import Curve, load_profile
from harness.explain import attribute, by_task
from harness.ir.portable import Message, Work
from harness.pipeline import lower
from harness.vocabulary import CURVE_FAMILIES

from conftest import CASES_DIR

SYSTEM = COST_VIEWS["system_evidence"]
PEAK = COST_VIEWS["peak_only"]


def curve(*points):
    return CollectiveCurve(participants=points[0][0], points=tuple(SizePoint(size_bytes=s, efficiency=e)
                                                                     for s, e in points[1:]), source="test")


def test_saturating_curve_is_max_times_x_over_x_plus_half():
    c = SaturatingCurve(max_efficiency=0.8, half_size=1e9)
    assert c.efficiency(1e9, "s", "f") == pytest.approx(0.4, rel=1e-15)
    assert c.efficiency(3e9, "s", "f") == pytest.approx(0.6, rel=1e-15)
    assert SaturatingCurve(max_efficiency=0.7, half_size=0.0).efficiency(5.0, "s", "f") == 0.7
    with pytest.raises(EvidenceError, match="no efficiency at size 0"):
        c.efficiency(0.0, "profile", "matrix")


def test_a_curve_has_steps_or_a_saturating_form_exactly_one():
    with pytest.raises(ValueError, match="exactly one"):
        Curve()
    with pytest.raises(ValueError, match="exactly one"):
        Curve(points=({"threshold": 0.0, "efficiency": 0.5},), saturating={"max_efficiency": 0.5, "half_size": 1.0})


def test_collective_curve_interpolates_in_log_size_and_keeps_the_time_below_its_first_point():
    c = curve((4,), (1e6, 0.1), (4e6, 0.3))
    assert c.efficiency(2e6) == pytest.approx(0.2, rel=1e-12)  # half way in log(size)
    assert c.efficiency(5e5) == pytest.approx(0.05, rel=1e-12)  # below: efficiency proportional to the size
    assert c.efficiency(1e9) == 0.3  # above: the largest point's
    with pytest.raises(ValueError, match="strictly increase"):
        curve((4,), (4e6, 0.3), (1e6, 0.1))


def test_curve_for_takes_the_most_participants_not_above_the_group():
    curves = tuple(curve((n,), (1e6, 0.1)) for n in (2, 4, 8))
    assert [curve_for(curves, n).participants for n in (2, 3, 4, 7, 8, 16)] == [2, 2, 4, 4, 8, 8]


@pytest.fixture(scope="module")
def base():
    return load_profile("a100_80g")


def with_families(base, **update):
    return base.model_copy(update={"name": "a100_test", **update})


def test_launch_makes_an_operation_wait_for_its_issue_but_not_the_optimizer_step(base):
    profile = with_families(base, launch=LaunchOverhead(issue_s_per_operation=1e-4))
    tiny = Work(operations=1e6, bytes_read=0.0, bytes_written=0.0, engine="matrix")
    big = Work(operations=1e13, bytes_read=0.0, bytes_written=0.0, engine="matrix")
    measured = Pricer(profile, SYSTEM, "float16")
    plain = Pricer(base, SYSTEM, "float16")
    assert measured.work(tiny).processing_s == 1e-4  # 1e6 / (312e12 x 0.1) = 3.2e-8 s < 1e-4 s
    assert measured.work(big).processing_s == plain.work(big).processing_s  # 1e13 / (312e12 x 0.95) > 1e-4
    assert measured.work(tiny, optimizer=True).processing_s == plain.work(tiny, optimizer=True).processing_s
    assert Pricer(profile, PEAK, "float16").work(tiny).processing_s == 1e6 / 312e12  # peak_only applies none


def test_launch_gives_gemms_their_own_issue_time_when_the_profile_states_one(base):
    both = with_families(base, launch=LaunchOverhead(issue_s_per_operation=2e-5, issue_s_per_matrix_operation=7e-5))
    one = with_families(base, launch=LaunchOverhead(issue_s_per_operation=2e-5))
    gemm = Work(operations=1e6, bytes_read=0.0, bytes_written=0.0, engine="matrix")
    pointwise = Work(operations=1e3, bytes_read=1e3, bytes_written=1e3, engine="vector")
    assert Pricer(both, SYSTEM, "float16").work(gemm).processing_s == 7e-5
    assert Pricer(both, SYSTEM, "float16").work(pointwise).processing_s == 2e-5
    assert Pricer(one, SYSTEM, "float16").work(gemm).processing_s == 2e-5  # absent: the one issue time
    big = Work(operations=1e13, bytes_read=0.0, bytes_written=0.0, engine="matrix")  # 34 ms on the device
    assert Pricer(both, SYSTEM, "float16").work(big).processing_s == Pricer(base, SYSTEM, "float16").work(big).processing_s
    # an absent field is not part of the canonical content: the revision of the one-time profile is unchanged
    assert "issue_s_per_matrix_operation" not in one.to_data()["launch"]
    with pytest.raises(ValueError, match="greater than 0"):
        LaunchOverhead(issue_s_per_operation=2e-5, issue_s_per_matrix_operation=0.0)


def test_launch_adds_the_hosts_microbatch_time_once_per_training_microbatch(base):
    launch = LaunchOverhead(issue_s_per_operation=2e-5, issue_s_per_microbatch=3e-3)
    profile = with_families(base, launch=launch)
    no_host = with_families(base, launch=launch.model_copy(update={"issue_s_per_microbatch": None}))
    lowering = lower(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input())
    mb = lowering.plan.schedule.microbatches
    _, host = cost_view(lowering.plan, profile, SYSTEM, model=lowering.model)
    _, plain = cost_view(lowering.plan, no_host, SYSTEM, model=lowering.model)
    assert host.components_s["forward"] == pytest.approx(plain.components_s["forward"] + mb * 3e-3, rel=1e-12)
    assert {k: v for k, v in host.components_s.items() if k != "forward"} == \
           {k: v for k, v in plain.components_s.items() if k != "forward"}
    assert cost_view(lowering.plan, profile, PEAK, model=lowering.model)[1].total_s == \
           cost_view(lowering.plan, base, PEAK)[1].total_s  # peak_only applies no family
    forward = next(c for c in by_task(lowering.plan, profile, SYSTEM, model=lowering.model).components
                   if c.component == "forward")
    assert [t.time_s for t in forward.tasks if t.task == "host.microbatch"] == [mb * 3e-3]
    inference = lower(load_case(CASES_DIR / "inference_megatron-22B_ar.yaml").estimate_input())
    assert cost_view(inference.plan, profile, SYSTEM)[1].total_s == cost_view(inference.plan, no_host, SYSTEM)[1].total_s


def test_collective_curves_replace_the_tier_efficiency_for_their_collective(base):
    c = curve((8,), (1e6, 0.1), (4e6, 0.3))
    tier0 = base.networks[0].model_copy(update={"measured_collectives": {"all_reduce": (c,)}})
    profile = with_families(base, networks=(tier0, base.networks[1]))
    pricer = Pricer(profile, SYSTEM, "float16")
    msg = Message(collective="all_reduce", message_bytes=2e6, participants=8, network_tier=0)
    adjusted = 2e6 * 2.0 * (1 - 1 / 8)  # a100_80g tier 0 all_reduce: multiplier 2, offset -1
    assert pricer.message_s(msg) == pytest.approx(1e-5 + adjusted / (300e9 * 0.2), rel=1e-12)
    gather = Message(collective="all_gather", message_bytes=2e6, participants=8, network_tier=0)
    assert pricer.message_s(gather) == Pricer(base, SYSTEM, "float16").message_s(gather)  # no curve: efficiency 0.65


def test_hierarchical_groups_run_inside_the_island_then_across_islands(base):
    profile = with_families(base, hierarchical_collectives=HierarchicalCollectives(kind="island_then_next_tier"))
    pricer = Pricer(profile, SYSTEM, "float16")
    msg = Message(collective="all_reduce", message_bytes=8e8, participants=16, network_tier=0)
    inside = 1e-5 + 8e8 * 2 * (1 - 1 / 8) / (300e9 * 0.65)  # 8 processors on tier 0
    across = 2e-5 + 8e8 / 8 * 1.0 / (25e9 * 0.9)  # 2 islands on tier 1 (a100_80g: multiplier 1, offset 0)
    assert pricer.message_s(msg) == pytest.approx(inside + across, rel=1e-12)
    assert Pricer(base, SYSTEM, "float16").message_s(msg) == pytest.approx(1e-5 + 8e8 * 2 * (1 - 1 / 16) /
                                                                           (300e9 * 0.65), rel=1e-12)


def test_hierarchical_counts_a_partial_island_as_an_island(base):
    """12 processors over 8-processor islands are ceil(12 / 8) = 2 islands, not floor = 1: the second tier's
    all-reduce (given a ring model, multiplier 2, offset -1, so that the count matters) moves
    bytes x 2 x (1 - 1/2) of the 1/8 slice; over one island it would move nothing."""
    ring = {**base.networks[1].collectives, "all_reduce": base.networks[0].collectives["all_reduce"]}
    networks = (base.networks[0], base.networks[1].model_copy(update={"collectives": ring}), *base.networks[2:])
    profile = with_families(base, networks=networks,
                            hierarchical_collectives=HierarchicalCollectives(kind="island_then_next_tier"))
    msg = Message(collective="all_reduce", message_bytes=8e8, participants=12, network_tier=0)
    inside = 1e-5 + 8e8 * 2 * (1 - 1 / 8) / (300e9 * 0.65)  # one island: 8 processors on tier 0
    across = 2e-5 + 8e8 / 8 * 2 * (1 - 1 / 2) / (25e9 * 0.9)  # 2 islands on tier 1
    assert Pricer(profile, SYSTEM, "float16").message_s(msg) == pytest.approx(inside + across, rel=1e-12)


def test_partitioned_p2p_sends_one_tp_slice_then_all_gathers(base):
    data = load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()  # TP 8, PP 8, ar
    plan = lower(data).plan
    profile = with_families(base, partitioned_p2p=PartitionedP2P(kind="slice_then_all_gather"))
    pricer = Pricer(profile, SYSTEM, "float16")
    boundary = plan.pipeline.forward
    b = boundary.message_bytes
    p2p = 2e-5 + b / 8 / (25e9 * 0.9)  # tier 1 p2p of 1/8 of the message
    gather = 1e-5 + b * 1.5 * (1 - 1 / 8) / (300e9 * 0.65)  # tier 0 all_gather over TP 8 (multiplier 1.5, offset -1)
    assert pricer.boundary_s(boundary, plan) == pytest.approx(p2p + gather, rel=1e-12)
    assert Pricer(base, SYSTEM, "float16").boundary_s(boundary, plan) == pricer.message_s(boundary)
    seqpar = lower(load_case(CASES_DIR / "gpt3-175B_seqsel.yaml").estimate_input()).plan  # already 1/TP
    assert pricer.boundary_s(seqpar.pipeline.forward, seqpar) == pricer.message_s(seqpar.pipeline.forward)


def test_the_default_vocabulary_prices_a_vocabulary_parallel_linear_and_a_loss_per_microbatch(base):
    layer = OutputLayer(vocabulary=50257)
    assert padded_vocabulary(50257, 1) == 50304 and padded_vocabulary(50257, 8) == 51200  # 128 x TP, as Megatron
    lowering = lower(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input())  # h 6144, seq 2048, mb 4, TP 8
    logits, loss = model_plan_tasks(lowering.model.shape, lowering.model.execution, 50257)
    tokens, local = 4 * 2048, 51200 // 8
    assert (logits.name, loss.name) == ("output.logits", "output.loss")
    assert logits.forward.operations == 2 * tokens * 6144 * local and logits.forward.engine == "matrix"
    assert logits.activation_grad.operations == logits.weight_grad.operations == 2 * tokens * 6144 * local
    assert logits.optimizer.operations == 0 and logits.capacity.weight_bytes == 0  # the tied embedding's, unmodelled
    # Megatron's cross-entropy on fp16 logits: fp32 cast (2 + 4), max (4), subtract (8), exp (8), sum (4), divide (8)
    assert (loss.forward.bytes_read, loss.forward.bytes_written) == (tokens * local * 22, tokens * local * 16)
    # backward: scale the softmax in place (8), cast the gradient to fp16 (4 + 2)
    assert (loss.activation_grad.bytes_read, loss.activation_grad.bytes_written) == (tokens * local * 8,
                                                                                     tokens * local * 6)
    profile = with_families(base, output_layer=layer)
    _, plain = cost_view(lowering.plan, base, SYSTEM)
    _, with_layer = cost_view(lowering.plan, profile, SYSTEM, model=lowering.model)
    pricer = Pricer(profile, SYSTEM, "float16")
    forward = pricer.work(logits.forward).processing_s + pricer.work(loss.forward).processing_s
    assert with_layer.components_s["forward"] == pytest.approx(plain.components_s["forward"] + 1 * forward,
                                                               rel=1e-12)  # one microbatch
    with pytest.raises(EvidenceError, match="needs the model shape"):
        cost_view(lowering.plan, profile, SYSTEM)


def test_a_model_that_states_its_vocabulary_holds_the_output_tasks_in_its_plan(base):
    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    plain = lower(data)
    stated = lower(data.model_copy(update={"model": data.model.model_copy(update={"vocabulary": 50257})}))
    assert plain.plan.output_tasks is None and plain.distributed.output_tasks is None
    assert [t.name for t in stated.distributed.output_tasks] == ["output.logits", "output.loss"]
    assert stated.plan.output_tasks == model_plan_tasks(stated.model.shape, stated.model.execution, 50257)
    assert stated.plan.tasks == plain.plan.tasks  # the blocks are the same
    # workload: priced under every profile and view, a100_80g included; the blocks' components are untouched
    for view in (SYSTEM, PEAK):
        pricer = Pricer(base, view, "float16")
        logits, loss = stated.plan.output_tasks
        backward = (pricer.work(loss.activation_grad).processing_s + pricer.work(logits.activation_grad).processing_s
                    + pricer.work(logits.weight_grad).processing_s)
        _, a = cost_view(plain.plan, base, view)
        _, b = cost_view(stated.plan, base, view, model=stated.model)
        assert b.components_s["backward"] == pytest.approx(a.components_s["backward"] + 1 * backward, rel=1e-12)
        assert {k: v for k, v in b.components_s.items() if k not in ("forward", "backward")} == \
               {k: v for k, v in a.components_s.items() if k not in ("forward", "backward")}
    # a profile's default vocabulary prices the same tasks as a model that states it
    measured = load_profile("a100_measured")
    assert measured.output_layer.vocabulary == 50257
    assert cost_view(stated.plan, measured, SYSTEM, model=stated.model)[1].total_s == \
           cost_view(plain.plan, measured, SYSTEM, model=plain.model)[1].total_s
    inference = data.execution.model_copy(update={"training": False, "recompute": "none"})
    assert lower(data.model_copy(update={"execution": inference, "model": stated.model.shape})).plan.output_tasks \
        is None


def test_a_profile_with_every_measured_family_prices_as_its_base_when_the_view_leaves_them_out(base):
    tier0 = base.networks[0].model_copy(update={"measured_collectives": {"all_reduce": (curve((8,), (1e6, 0.1)),)}})
    profile = with_families(base, networks=(tier0, base.networks[1]),
                            launch=LaunchOverhead(issue_s_per_operation=5e-5, issue_s_per_matrix_operation=7e-5,
                                                  issue_s_per_microbatch=3e-3),
                            output_layer=OutputLayer(vocabulary=50257),
                            hierarchical_collectives=HierarchicalCollectives(kind="island_then_next_tier"),
                            partitioned_p2p=PartitionedP2P(kind="slice_then_all_gather"),
                            gradient_accumulation=GradientAccumulation(kind="unfused_in_place_add"),
                            grouped_gemm=GroupedGemm(half_size_operations=3e9))
    assert profile_families(profile) == tuple(CURVE_FAMILIES)
    assert profile_families(base) == CURVE_FAMILIES.of_kind("calculon")
    calculon_only = CostView.with_curves(CURVE_FAMILIES.of_kind("calculon"))
    for name in ("gpt3-175B_full", "megatron-1T_seqsel", "inference_megatron-22B_ar"):
        lowering = lower(load_case(CASES_DIR / f"{name}.yaml").estimate_input())
        for view in (PEAK, calculon_only):
            mine = cost_view(lowering.plan, profile, view, model=lowering.model)[1]
            theirs = cost_view(lowering.plan, base, view)[1]
            assert mine.total_s == theirs.total_s and mine.components_s == theirs.components_s  # bit for bit


def test_absent_families_are_not_content_so_a100_80g_keeps_its_revision(base):
    # pinned: the revision the vendored records and the contract were made with
    assert base.revision() == "a8f8baf10f89981cb6f4a6c5fae9a297462d0e40e8024a1db8887e1cc21aeef9"
    assert "launch" not in base.to_data() and "measured_collectives" not in base.to_data()["networks"][0]


def test_explain_splits_a_measured_profile_over_every_family_it_defines():
    profile = load_profile("a100_measured")
    lowering = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input().model_copy(
        update={"system": "a100_measured"}))
    a = attribute(lowering, profile)
    # every family but grouped_gemm (a100_measured's rows have no mixture of experts)
    assert tuple(a.attribution_s) == tuple(f for f in CURVE_FAMILIES if f != "grouped_gemm")
    assert sum(a.attribution_s.values()) == pytest.approx(a.gap_s, rel=1e-9)
    est = estimate_lowering(lowering, profile)
    assert a.system_evidence_total_s == est.views["system_evidence"].total_s
    assert a.peak_only_total_s == est.views["peak_only"].total_s
    assert a.attribution_s["output_layer"] > 0 and a.attribution_s["partitioned_p2p"] < 0
    assert math.isclose(sum(a.by_component["forward"].values()), a.by_component["forward"]["matrix"]
                        + a.by_component["forward"]["memory"] + a.by_component["forward"]["launch"]
                        + a.by_component["forward"]["output_layer"], rel_tol=1e-9, abs_tol=1e-12)


def test_the_output_layer_joins_an_overlapped_configuration_too():
    measured = load_profile("a100_measured")
    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    data = data.model_copy(update={"system": "a100_measured", "execution": data.execution.model_copy(
        update={"tp_overlap": "ring"})})
    lowering = lower(data)
    assert lowering.concurrent
    without = measured.model_copy(update={"output_layer": None})
    pricer = Pricer(measured, SYSTEM, "float16")
    tasks = model_plan_tasks(lowering.model.shape, lowering.model.execution, measured.output_layer.vocabulary)
    forward = sum(pricer.work(t.forward).processing_s for t in tasks)
    with_layer = estimate_lowering(lowering, measured).views["system_evidence"].components_s.forward
    plain = estimate_lowering(lowering, without).views["system_evidence"].components_s.forward
    assert with_layer == pytest.approx(plain + lowering.plan.schedule.microbatches * forward, rel=1e-12)
