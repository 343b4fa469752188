"""explain for TP/DP-overlap and offload layouts: per-queue hidden/exposed split and the Shapley attribution.

Independent references: Calculon 0.1.0's recorded link times (the first
stage's busy time per queue is each component's link time: the whole
message for pipe tiles and untiled collectives, (TP-1)/TP of it for ring
tiles, which leave the first tile's share local), the estimate itself (the
``estimate_s`` column and the attribution's end points), and the
permutation form of the Shapley value (the code uses the subset form).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS, CostView, profile_families
from harness.errors import InputError
from harness.estimate import estimate
from harness.evidence.profile import load_profile
from harness.explain import attribute, explain_input, iteration, queue_split
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.records import load_record_file
from harness.pipeline import lower
from harness.vocabulary import COMPONENTS

CONCURRENCY = Path(__file__).resolve().parents[1] / "cases" / "concurrency"
CASES = sorted(CONCURRENCY.glob("*.yaml"))


@pytest.fixture(scope="module", params=CASES, ids=lambda p: p.stem)
def split(request):
    data = load_case(request.param).estimate_input()
    lowering, profile = lower(data, str(request.param)), load_profile(data.system)
    return data, tuple(queue_split(lowering, profile, v, source=str(request.param)) for v in COST_VIEWS.values())


def test_hidden_plus_exposed_is_busy_and_exposed_plus_slowdown_is_the_component(split):
    data, views = split
    est = estimate(data)
    for v in views:
        assert [c.component for c in v.components] == list(COMPONENTS)
        ours = est.views[v.view]
        assert v.estimate_total_s == ours.total_s
        for c in v.components:
            assert c.estimate_s == getattr(ours.components_s, c.component)
            for q in c.queues:
                assert min(q.busy_s, q.hidden_s, q.exposed_s, q.slowdown_s) >= 0 and math.isfinite(q.busy_s)
                if q.queue is not None:
                    assert q.hidden_s + q.exposed_s == pytest.approx(q.busy_s, rel=1e-12, abs=1e-18)
            assert math.fsum(q.exposed_s + q.slowdown_s for q in c.queues) == pytest.approx(c.physical_s, rel=1e-12,
                                                                                              abs=1e-18)
        assert math.fsum(c.physical_s for c in v.components) == pytest.approx(v.physical_total_s, rel=1e-12)


def _records(n: int):
    records = [r for r in load_record_file("records/overlap.json.gz").records
               if all(v.error is None for v in r.views.values())]
    return random.Random(29).sample(records, n)


@pytest.mark.parametrize("record", _records(10), ids=lambda r: r.id)
def test_busy_time_per_queue_is_calculons_link_time(record):
    e = record.calculon_execution
    data = input_from_calculon(record.calculon_model, e, record.system, record.id)
    lowering, profile = lower(data), load_profile(data.system)
    tiled = (e["tensor_par"] - 1) / e["tensor_par"] if e["tensor_par_overlap"] == "ring" else 1.0
    for view, recorded in record.views.items():
        stats = recorded.stats
        comps = {c.component: c for c in queue_split(lowering, profile, COST_VIEWS[view]).components}

        def busy(name):
            return math.fsum(q.busy_s for q in comps[name].queues)

        assert busy("tensor_parallel") == pytest.approx(stats["tp_comm_link_time"] * tiled, rel=1e-9)
        assert busy("pipeline_parallel") == pytest.approx(stats["pp_comm_link_time"], rel=1e-9)
        assert busy("data_parallel") == pytest.approx(stats["dp_comm_link_time"], rel=1e-9)
        resent = busy("recommunication")
        if e["tensor_par_overlap"] == "none" or e["tensor_par_overlap"] == "pipe" and \
                e["activation_recompute"] != "full":
            assert resent == pytest.approx(stats["recomm_link_time"], rel=1e-9)
        elif e["tensor_par_overlap"] == "pipe":  # a recomputed reduce-side GEMM's re-sent message reduces again
            assert resent >= stats["recomm_link_time"] * (1 - 1e-12)  # (recommunication-without-reduction)
        # ring mixes tiled re-sends ((TP-1)/TP) with untiled ones


def _shapley_by_permutations(value, players):
    out = {p: 0.0 for p in players}
    orders = list(itertools.permutations(players))
    for order in orders:
        taken = frozenset()
        for p in order:
            out[p] += value(taken | {p}) - value(taken)
            taken = taken | {p}
    return {p: v / len(orders) for p, v in out.items()}


def test_the_attribution_keeps_exact_shapley_values_over_the_curve_families():
    data = load_case(CONCURRENCY / "gpt3-13B_offload.yaml").estimate_input()
    lowering, profile = lower(data), load_profile(data.system)
    result = attribute(lowering, profile)
    est = estimate(data)
    assert result.peak_only_total_s == est.views["peak_only"].total_s
    assert result.system_evidence_total_s == est.views["system_evidence"].total_s
    totals = {}

    def total(subset):
        if subset not in totals:
            totals[subset] = iteration(lowering, profile, CostView.with_curves(subset)).total_s
        return totals[subset]

    expected = _shapley_by_permutations(total, profile_families(profile))  # a100_80g: the four Calculon ones
    assert result.attribution_s == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert math.fsum(result.attribution_s.values()) == pytest.approx(result.gap_s, rel=1e-12)
    for name, parts in result.by_component.items():
        gap = getattr(est.views["system_evidence"].components_s, name) - getattr(est.views["peak_only"].components_s,
                                                                                   name)
        assert math.fsum(parts.values()) == pytest.approx(gap, rel=1e-9, abs=1e-15), name


def test_by_task_is_refused_for_overlap_and_offload_with_one_line():
    data = load_case(CONCURRENCY / "megatron-22B_overlap.yaml").estimate_input()
    with pytest.raises(InputError) as info:
        explain_input(data, (COST_VIEWS["peak_only"],), mode="by_task", source="case.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith("case.yaml: --by-task: ")


def test_explain_command_json_has_the_queues_only_with_concurrency(capsys):
    plain = str(CONCURRENCY.parent / "megatron-22B_full.yaml")
    overlap = str(CONCURRENCY / "megatron-22B_overlap.yaml")
    assert main(["explain", plain, overlap, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "queues" not in out[0]
    views = out[1]["queues"]
    assert [v["view"] for v in views] == list(COST_VIEWS)
    tp = next(c for c in views[1]["components"] if c["component"] == "tensor_parallel")
    assert [q["queue"] for q in tp["queues"]] == ["network.tier0"]
    assert main(["explain", overlap]) == 0
    text = capsys.readouterr().out
    assert "per queue (physical schedule" in text and "network.tier1" in text
