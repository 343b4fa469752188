"""Family gradient_accumulation: the unfused in-place add of each weight gradient per microbatch after the first.

Expected values are built here from the model's shapes (the weight tensors of one block on one TP rank, counted by
hand) and priced by the Pricer; the composition's multiples are the module rule written out for each case."""

from __future__ import annotations

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS, CostView, Pricer, profile_families
from harness.estimate import cost_view, estimate_lowering
from harness.evidence.families import GradientAccumulation
from harness.evidence.profile import load_profile
from harness.explain import attribute, by_task
from harness.ir.portable import Work
from harness.pipeline import lower
from harness.trace import build_trace
from harness.vocabulary import CURVE_FAMILIES

from conftest import CASES_DIR

SYSTEM, PEAK = COST_VIEWS["system_evidence"], COST_VIEWS["peak_only"]
FAMILY = GradientAccumulation(kind="unfused_in_place_add")


@pytest.fixture(scope="module")
def profiles():
    """(a100_measured without the family, with it)."""
    measured = load_profile("a100_measured")
    return (measured.model_copy(update={"gradient_accumulation": None}),
            measured.model_copy(update={"gradient_accumulation": FAMILY}))


def lowered(name: str):
    return lower(load_case(CASES_DIR / f"{name}.yaml").estimate_input())


def hand_block_s(pricer: Pricer, hidden: int, feedforward: int, tp: int, fused_qkv: bool = False) -> float:
    """One block's accumulation on one TP rank, from the plan's weight-holding tasks: the query, key and value
    [h, h/TP] each, the attention output [h/TP, h], the MLP's [h, ff/TP] and [ff/TP, h], two norms' scale and
    shift (2h each); fp16 gradients, each add reading the stored and the new gradient and writing the sum.
    ``fused_qkv``: the TP-overlapped layout's one [h, 3h/TP] query-key-value weight instead of three."""
    elements = ([hidden * 3 * hidden // tp] if fused_qkv else [hidden * hidden // tp] * 3) + [hidden // tp * hidden, hidden * feedforward // tp,
                                              feedforward // tp * hidden, 2 * hidden, 2 * hidden]
    return sum(pricer.work(Work(operations=e, bytes_read=4 * e, bytes_written=2 * e, engine="vector")).processing_s
               for e in elements)


def test_the_iteration_gets_m_minus_1_stage_accumulations_and_the_drain_of_the_earlier_stages(profiles):
    without, with_family = profiles
    low = lowered("gpt3-175B_full")  # h 12288, ff 49152, TP 8, PP 8, 96 blocks, 3 chunks per stage, 64 microbatches
    s = low.plan.schedule
    assert (s.microbatches, s.blocks_per_stage, s.blocks_per_chunk, s.pipeline_parallel) == (64, 12, 4, 8)
    a = hand_block_s(Pricer(with_family, SYSTEM, "float16"), 12288, 49152, 8)
    _, plain = cost_view(low.plan, without, SYSTEM, model=low.model)
    _, added = cost_view(low.plan, with_family, SYSTEM, model=low.model)
    assert added.components_s["backward"] - plain.components_s["backward"] == pytest.approx(63 * 12 * a, rel=1e-9)
    assert added.components_s["pipeline_bubble"] - plain.components_s["pipeline_bubble"] == \
           pytest.approx(7 * 4 * a, rel=1e-9)
    assert added.total_s - plain.total_s == pytest.approx((63 * 12 + 7 * 4) * a, rel=1e-9)
    others = set(plain.components_s) - {"backward", "pipeline_bubble"}
    assert {k: added.components_s[k] for k in others} == {k: plain.components_s[k] for k in others}


def test_one_microbatch_and_inference_accumulate_nothing(profiles):
    without, with_family = profiles
    for name in ("megatron-22B_full", "inference_megatron-22B_ar"):  # one microbatch; inference
        low = lowered(name)
        assert cost_view(low.plan, with_family, SYSTEM, model=low.model)[1].total_s == \
               cost_view(low.plan, without, SYSTEM, model=low.model)[1].total_s


def test_a_profile_without_the_family_or_a_view_without_it_prices_bit_identically(profiles):
    without, with_family = profiles
    base = load_profile("a100_80g")
    assert "gradient_accumulation" not in profile_families(base)
    assert "gradient_accumulation" not in base.to_data()
    assert profile_families(with_family)[-1] == "gradient_accumulation"
    leave_out = CostView.with_curves(set(CURVE_FAMILIES) - {"gradient_accumulation"})
    for name in ("gpt3-175B_full", "megatron-1T_seqsel"):
        low = lowered(name)
        for view in (PEAK, leave_out):
            a = cost_view(low.plan, with_family, view, model=low.model)[1]
            b = cost_view(low.plan, without, view, model=low.model)[1]
            assert a.total_s == b.total_s and a.components_s == b.components_s


def test_an_overlapped_configuration_gets_the_same_accumulation(profiles):
    without, with_family = profiles
    low = lower(load_case(CASES_DIR / "concurrency" / "megatron-22B_overlap.yaml").estimate_input())
    assert low.concurrent
    s = low.plan.schedule
    a = hand_block_s(Pricer(with_family, SYSTEM, "float16"), low.model.shape.hidden, low.model.shape.feedforward,
                     low.model.execution.tensor_parallel, fused_qkv=True)
    added = estimate_lowering(low, with_family).views["system_evidence"]
    plain = estimate_lowering(low, without).views["system_evidence"]
    expected = ((s.microbatches - 1) * s.blocks_per_stage + (s.pipeline_parallel - 1) * s.blocks_per_chunk) * a
    assert expected > 0 and added.total_s - plain.total_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", ["gpt3-175B_full", "megatron-1T_full", "turing-530B_seqsel"])
def test_the_event_simulation_runs_it_after_the_first_microbatch_and_equals_the_closed_form(profiles, name):
    _, with_family = profiles
    low = lowered(name)
    doc, sim = build_trace(low.plan, with_family, SYSTEM, model=low.model, task_microbatches=2)
    assert sim.exact and sim.total_s == pytest.approx(cost_view(low.plan, with_family, SYSTEM,
                                                                model=low.model)[1].total_s, rel=1e-9)
    accumulate = [e for e in doc["traceEvents"] if e.get("cat") == "accumulate"]
    assert accumulate and {e["args"]["microbatch"] for e in accumulate} == {1}  # not in the first microbatch
    assert {e["args"]["phase"] for e in accumulate} == {"backward"}
    weights = [t.name for t in low.plan.tasks if t.phase == "forward" and t.capacity.weight_bytes > 0]
    assert len(weights) == 8 and {e["name"] for e in accumulate} == {f"accumulate/{t}" for t in weights}


def test_explain_lists_each_weight_and_the_shares_add_up(profiles):
    _, with_family = profiles
    low = lowered("gpt3-175B_full")
    tasks = by_task(low.plan, with_family, SYSTEM, model=low.model)
    pricer = Pricer(with_family, SYSTEM, "float16")
    a = hand_block_s(pricer, 12288, 49152, 8)
    for component in tasks.components:
        assert sum(t.time_s for t in component.tasks) == pytest.approx(component.time_s, rel=1e-9, abs=1e-15)
    backward = [t for c in tasks.components if c.component == "backward" for t in c.tasks if t.phase == "accumulate"]
    bubble = [t for c in tasks.components if c.component == "pipeline_bubble" for t in c.tasks
              if t.phase == "accumulate"]
    assert len(backward) == len(bubble) == 8
    assert sum(t.time_s for t in backward) == pytest.approx(63 * 12 * a, rel=1e-9)
    assert sum(t.time_s for t in bubble) == pytest.approx(7 * 4 * a, rel=1e-9)
    assert all(t.task.startswith("accumulate/") and t.memory_bytes == 3 * 2 * t.operations for t in backward)


def test_shapley_gives_the_family_its_share(profiles):
    without, with_family = profiles
    low = lower(load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input().model_copy(
        update={"system": "a100_measured"}))
    a = attribute(low, with_family)
    assert a.attribution_s["gradient_accumulation"] > 0
    assert sum(a.attribution_s.values()) == pytest.approx(a.gap_s, rel=1e-9)
    assert "gradient_accumulation" not in attribute(low, without).attribution_s


def test_an_unknown_rule_is_one_line_naming_the_field(tmp_path, capsys):
    text = (CASES_DIR.parent / "evidence" / "a100_80g.yaml").read_text()
    project = tmp_path / "project"
    (project / "evidence").mkdir(parents=True)
    (project / "evidence" / "a100_test.yaml").write_text(
        text.replace("name: a100_80g", "name: a100_test") + "gradient_accumulation:\n  kind: fused\n")
    case = tmp_path / "case.yaml"
    case.write_text((CASES_DIR / "megatron-22B_full.yaml").read_text().replace("system: a100_80g",
                                                                               "system: a100_test"))
    assert main(["--project", str(project), "estimate", str(case)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gradient_accumulation.kind" in err, err
