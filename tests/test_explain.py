"""By-task breakdown and Shapley attribution of the evidence gap."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.errors import InputError
from harness.cost.views import COST_VIEWS as VIEWS, CostView, Pricer
from harness.estimate import cost_view
from harness.evidence.profile import load_profile
from harness.explain import attribute, by_task, contributors, explain_input, shapley
from harness.pipeline import lower
from harness.schedule.block import block_times
from harness.vocabulary import COMPONENTS, CURVE_FAMILIES

from conftest import calculon_figures

CASES = Path(__file__).resolve().parents[1] / "cases"
ALL = sorted(p.stem for p in CASES.glob("*.yaml"))


def prepared(name: str, **execution):
    data = load_case(CASES / f"{name}.yaml").estimate_input()
    if execution:
        data = data.model_copy(update={"execution": data.execution.model_copy(update=execution)})
    return data, load_profile(data.system), lower(data)


def with_dp() -> dict:
    """gpt3-175B/full with DP=2 and optimizer sharding (reduce_scatter + all_gather per block)."""
    return {"data_parallel": 2, "global_batch": 128, "optimizer_sharding": True}


@pytest.mark.parametrize("name", ALL)
def test_task_contributions_add_up_to_every_component(name):
    """Each component (as Calculon 0.1.0 recorded it) is the sum of its tasks' separately computed shares."""
    data, profile, lowering = prepared(name)
    for view in VIEWS.values():
        calculon = calculon_figures(name, view.name)
        result = by_task(lowering.plan, profile, view)
        assert result.total_s == calculon["total_s"]
        assert [c.component for c in result.components] == list(COMPONENTS)
        for c in result.components:
            assert c.time_s == calculon[f"components_s.{c.component}"]
            assert sum(t.time_s for t in c.tasks) == pytest.approx(c.time_s, rel=1e-9, abs=1e-15)


def test_forward_component_is_forward_compute_tasks_times_blocks_and_microbatches():
    data, profile, lowering = prepared("gpt3-175B_seqsel")
    plan, view = lowering.plan, VIEWS["peak_only"]
    pricer = Pricer(profile, view, plan.datatype)
    forward = next(c for c in by_task(plan, profile, view).components if c.component == "forward")
    s = plan.schedule
    expected = {t.name: pricer.task(t)["forward"].processing_s * s.blocks_per_stage * s.microbatches
                for t in plan.tasks if t.phase == "forward" and t.primitive != "tp_collective"
                and pricer.task(t)["forward"].processing_s}
    assert {t.task: t.time_s for t in forward.tasks} == pytest.approx(expected, rel=1e-12)
    query = next(t for t in forward.tasks if t.task == "attn.query")
    assert query.operations == next(t.forward.operations for t in plan.tasks if t.name == "attn.query")


def test_tensor_parallel_is_the_collectives_and_pipeline_rows_are_messages():
    data, profile, lowering = prepared("megatron-1T_seqsel")
    comps = {c.component: c for c in by_task(lowering.plan, profile, VIEWS["system_evidence"]).components}
    assert {t.primitive for t in comps["tensor_parallel"].tasks} == {"tp_collective"}
    assert all(t.message_bytes > 0 for t in comps["tensor_parallel"].tasks)
    assert {t.task for t in comps["pipeline_parallel"].tasks} == {"pipeline.forward", "pipeline.backward"}
    assert {t.phase for t in comps["recommunication"].tasks} == {"recommunication"}
    assert not comps["data_parallel"].tasks


def test_data_parallel_messages_are_contributors():
    data, profile, lowering = prepared("gpt3-175B_full", **with_dp())
    plan = lowering.plan
    comps = {c.component: c for c in by_task(plan, profile, VIEWS["system_evidence"]).components}
    dp = comps["data_parallel"]
    assert dp.time_s > 0
    assert {t.task for t in dp.tasks} == {"data_parallel.reduce_scatter", "data_parallel.all_gather"}
    assert sum(t.time_s for t in dp.tasks) == pytest.approx(dp.time_s, rel=1e-12)


@pytest.mark.parametrize("name", ["gpt3-175B_full", "turing-530B_seqsel", "inference_megatron-1T_ar"])
def test_contributor_blocks_add_up_to_block_times(name):
    data, profile, lowering = prepared(name)
    pricer = Pricer(profile, VIEWS["system_evidence"], lowering.plan.datatype)
    whole = block_times(lowering.plan, tuple(pricer.task(t) for t in lowering.plan.tasks), pricer)
    parts = contributors(lowering.plan, pricer)
    for field in dataclasses.fields(whole):
        assert sum(getattr(c.block, field.name) for c in parts) == pytest.approx(getattr(whole, field.name), rel=1e-12)


def test_shapley_on_hand_computed_games():
    players = ("a", "b", "c")
    subsets = [frozenset(s) for n in range(4) for s in itertools.combinations(players, n)]
    additive = {s: sum({"a": 1.0, "b": 2.0, "c": 4.0}[p] for p in s) for s in subsets}
    assert shapley(additive, players) == pytest.approx({"a": 1.0, "b": 2.0, "c": 4.0})
    both = {s: 6.0 if {"a", "b"} <= s else 0.0 for s in subsets}  # a and b only pay off together
    assert shapley(both, players) == pytest.approx({"a": 3.0, "b": 3.0, "c": 0.0})


def by_permutations(values, players):
    """Shapley values by averaging marginal contributions over all orderings (an independent algorithm)."""
    out = dict.fromkeys(players, 0.0)
    for order in itertools.permutations(players):
        seen = frozenset()
        for p in order:
            out[p] += values[seen | {p}] - values[seen]
            seen = seen | {p}
    return {p: v / math.factorial(len(players)) for p, v in out.items()}


@pytest.mark.parametrize("name", ALL)
def test_attribution_adds_up_to_the_gap(name):
    """The Shapley parts add up to the gap between Calculon 0.1.0's two recorded views, total and components."""
    data, profile, lowering = prepared(name)
    a = attribute(lowering, profile)
    peak, full = calculon_figures(name, "peak_only"), calculon_figures(name, "system_evidence")
    assert (a.peak_only_total_s, a.system_evidence_total_s) == (peak["total_s"], full["total_s"])
    # the cases' profile (a100_80g) defines the four Calculon families only: explain leaves the measured ones out
    assert list(a.attribution_s) == list(CURVE_FAMILIES.of_kind("calculon"))
    assert sum(a.attribution_s.values()) == pytest.approx(full["total_s"] - peak["total_s"], rel=1e-9)
    for component, parts in a.by_component.items():
        gap = full[f"components_s.{component}"] - peak[f"components_s.{component}"]
        assert sum(parts.values()) == pytest.approx(gap, rel=1e-9, abs=1e-15)
        assert a.by_component[component]["network"] == 0.0 or component in (
            "tensor_parallel", "pipeline_parallel", "data_parallel", "recommunication", "pipeline_bubble")
    assert a.by_component["forward"]["network"] == 0.0  # null player: no message in forward compute


def test_attribution_matches_the_permutation_definition():
    data, profile, lowering = prepared("megatron-1T_full")
    players = CURVE_FAMILIES.of_kind("calculon")  # what a100_80g defines
    values = {frozenset(s): cost_view(lowering.plan, profile, CostView.with_curves(s))[1].total_s
              for n in range(len(players) + 1) for s in itertools.combinations(players, n)}
    a = attribute(lowering, profile)
    assert a.attribution_s == pytest.approx(by_permutations(values, players), rel=1e-12)
    assert a.attribution_s["network"] > a.attribution_s["vector"] > 0


def test_explain_json_shape(capsys):
    assert main(["explain", str(CASES / "megatron-22B_full.yaml"), str(CASES / "gpt3-175B_full.yaml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["id"] for o in out] == ["megatron-22B/full", "gpt3-175B/full"]
    first = out[0]
    assert set(first) == {"id", "peak_only_total_s", "system_evidence_total_s", "attribution_s", "by_component",
                          "status", "reason"}
    assert (first["status"], first["reason"]) == ("ok", None)
    assert set(first["attribution_s"]) == set(CURVE_FAMILIES.of_kind("calculon"))  # what a100_80g defines
    assert set(first["by_component"]) == set(COMPONENTS)
    peak, full = calculon_figures("megatron-22B_full", "peak_only"), calculon_figures("megatron-22B_full",
                                                                                      "system_evidence")
    assert (first["peak_only_total_s"], first["system_evidence_total_s"]) == (peak["total_s"], full["total_s"])
    assert sum(first["attribution_s"].values()) == pytest.approx(full["total_s"] - peak["total_s"], rel=1e-9)
    assert all(v > 0 for v in first["attribution_s"].values() if v)  # evidence only ever slows an iteration


def test_explain_text_and_by_task(capsys):
    assert main(["explain", str(CASES / "megatron-1T_full.yaml")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("megatron-1T/full: peak_only 81.6511 s -> system_evidence 90.0809 s")
    assert "total" in text and "network" in text
    assert main(["explain", str(CASES / "megatron-22B_seqsel.yaml"), "--by-task", "--view", "peak_only",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    views = out[0]["views"]
    assert [v["view"] for v in views] == ["peak_only"]
    recompute = next(c for c in views[0]["components"] if c["component"] == "recompute")
    assert {t["task"] for t in recompute["tasks"]} == {
        "recompute/attn.qk_matmul", "recompute/attn.softmax", "recompute/attn.probs_dropout"}
    assert main(["explain", str(CASES / "gpt3-175B_full.yaml"), "--by-task"]) == 0
    assert "pipeline.forward" in capsys.readouterr().out


def test_the_by_task_explanation_checks_the_profile_like_the_estimate():
    data = load_case(CASES / "gpt3-175B_full.yaml").estimate_input()
    bad = data.model_copy(update={"execution": data.execution.model_copy(
        update={"network_tiers": data.execution.network_tiers.model_copy(update={"pipeline": 9})})})
    with pytest.raises(InputError, match=r"^src\.yaml: execution\.network_tiers\.pipeline: tier 9 does not exist"):
        explain_input(bad, (VIEWS["peak_only"],), mode="by_task", source="src.yaml")


def test_explain_bad_case_is_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: blueprinting.case.v0\nid: x\n")
    assert main(["explain", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "required field is missing" in err


def test_view_without_by_task_is_refused_not_ignored(capsys):
    """``--view`` selects the view of ``--by-task``; alone it would be silently ignored (both views printed)."""
    from conftest import one_error_line, run_cli

    one_error_line(*run_cli(capsys, "explain", "megatron-22B_full", "--view", "peak_only")[::2],
                   "<command line>: --view: is for --by-task")
    status, out, _ = run_cli(capsys, "explain", "megatron-22B_full", "--by-task", "--view", "peak_only")
    assert status == 0 and "peak_only" in out and "system_evidence" not in out
