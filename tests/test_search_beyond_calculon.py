"""The search beyond Calculon's space: context parallelism and the precision recipes (harness/search/space.py).

The reference is a brute-force enumeration written here, independently of the space's code: every layout of a
tiny model on 2 processors (TP, CP, PP, DP, recompute, sharding, TP communication, precision, all-gather redo,
microbatch, network tiers), each estimated by ``harness.estimate`` on its own; the search's rows must be exactly
those executions with exactly those figures."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest

from harness.cli import main
from harness.evidence.profile import load_profile
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.search.evaluate import SearchProblem
from harness.search.request import precision_choices
from harness.search.run import run_search
from harness.search.space import SpaceOptions, groups
from conftest import brute_force_outcome

SHAPE = TransformerShape(hidden=512, feedforward=2048, sequence_length=512, attention_heads=8, head_size=64, blocks=2)


@pytest.fixture(scope="module")
def profile():
    """h100_sxm_80g (float8 GEMMs) without memory tier 2 (no offload choices)."""
    base = load_profile("h100_sxm_80g")
    return base.model_copy(update={"name": "h100_no_tier2",
                                   "memory_tier2": base.memory_tier2.model_copy(update={"capacity_bytes": 0})})


def test_the_precisions_are_the_recipes_whose_gemm_datatype_the_profile_has(profile):
    assert precision_choices(profile, "bfloat16") == (None, "fp8_delayed", "fp8_current", "mxfp8")  # no float4
    assert precision_choices(load_profile("b200"), "bfloat16") == (None, "fp8_delayed", "fp8_current", "mxfp8",
                                                                   "nvfp4")
    assert precision_choices(profile, "float16") == (None,)  # the quantizing recipes run in bfloat16


def test_without_the_options_the_groups_are_calculons():
    plain = groups(SHAPE, 8, 8)
    assert groups(SHAPE, 8, 8, SpaceOptions()) == plain
    assert {(g.cp, g.precision) for g in plain} == {(1, None)}


def brute_force(profile, precisions):
    """{execution key: (status, total_s)} of every layout, enumerated here (2 processors, batch <= 2)."""
    out = {}
    networks = range(len(profile.networks))
    for tp, cp, pp in itertools.product((1, 2), (1, 2), (1, 2)):
        if tp * cp * pp > 2:
            continue
        dp = 2 // (tp * cp * pp)
        batch = 2 // dp * dp
        for recompute, sharding, comm, precision in itertools.product(
                ("full", "attn_only", "none"), (True, False) if dp * cp > 1 else (False,),
                ("ar", "p2p_rs_ag", "rs_ag"), precisions):
            redos = (True, False) if comm == "rs_ag" and recompute != "full" else (False,)
            microbatches = [m for m in (1, 2) if (batch // dp) % m == 0 and m * (512 // cp) % tp == 0]
            for redo, microbatch in itertools.product(redos, microbatches):
                for tn, pn, dn, cn in itertools.product(*(networks if n > 1 else (0,) for n in (tp, pp, dp, cp))):
                    execution = ExecutionLayout(
                        tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, global_batch=batch,
                        microbatch=microbatch, datatype="bfloat16", recompute=recompute, tp_communication=comm,
                        seq_par_ag_redo=redo, optimizer_sharding=sharding, fused_activation=True,
                        network_tiers={"tensor": tn, "pipeline": pn, "data": dn, **({"context": cn} if cp > 1 else {})},
                        **({"context_parallel": cp} if cp > 1 else {}),
                        **({"precision": precision} if precision else {}))
                    key = (tp, cp, pp, dp, recompute, sharding, comm, precision, redo, microbatch, tn, pn, dn, cn)
                    out[key] = brute_force_outcome(SHAPE, execution, profile)
    return out


def test_every_execution_with_cp_and_precision_equals_the_brute_force_estimate(profile):
    precisions = precision_choices(profile, "bfloat16")
    options = SpaceOptions(tp_overlap=False, dp_overlap=False, context_parallel=True, precisions=precisions)
    problem = SearchProblem(SHAPE, 2, 2, "bfloat16", profile, options, 3, prune=False, collect_rows=True)
    tables = []
    result = run_search(problem, workers=1, on_rows=tables.append)
    rows = pa.concat_tables(tables).to_pylist()
    got = {(r["tensor_par"], r["context_par"], r["pipeline_par"], r["data_par"], r["activation_recompute"],
            r["optimizer_sharding"], r["tensor_par_comm_type"], r["precision"], r["seq_par_ag_redo"],
            r["microbatch_size"], r["tensor_par_net"], r["pipeline_par_net"], r["data_par_net"],
            r["context_par_net"]): (r["status"], None if r["status"] == "invalid" else r["total_s"]) for r in rows}
    expected = brute_force(profile, precisions)
    assert len(rows) == len(got) == len(expected)
    assert got == expected
    assert {k[1] for k, (status, _) in got.items() if status == "ok"} == {1, 2}  # CP 2 feasible
    assert {k[7] for k, (status, _) in got.items() if status == "ok"} == set(precisions)
    best = min((total, key) for key, (status, total) in expected.items() if status == "ok")
    assert result.best[0].total_s == best[0]


def test_the_command_searches_cp_and_precision_and_emits_the_best_as_a_case(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text('{"hidden": 512, "feedforward": 2048, "seq_size": 512, "attn_heads": 8, "attn_size": 64, '
                     '"num_blocks": 2}')
    out, case = tmp_path / "top.json", tmp_path / "best.yaml"
    assert main(["search", "--model", str(model), "--system", "h100_sxm_80g", "--procs", "2", "--max-batch", "2",
                 "--datatype", "bfloat16", "--context-parallel", "--precision", "all", "--no-tp-overlap",
                 "--no-dp-overlap", "--no-progress", "--output", str(out), "--emit-case", str(case)]) == 0
    capsys.readouterr()
    best = json.loads(out.read_text())["executions"][0]["execution"] if "executions" in json.loads(
        out.read_text()) else json.loads(out.read_text())[0]["execution"]
    text = case.read_text()
    # the header reruns the search: every option that shaped the space (hostile-input probe: it named none of them)
    assert "--datatype bfloat16 --no-tp-overlap --no-dp-overlap --context-parallel --precision all`: " in \
        text.splitlines()[0]
    assert ("context_parallel: " in text) == ("context_par" in best)
    if "context_par" in best:
        assert f"context_parallel: {best['context_par']}" in text
    assert ("precision: " in text) == ("precision" in best)
    if "precision" in best:
        assert f"precision: {best['precision']}" in text
    assert main(["estimate", str(case), "--json"]) == 0
    assert '"status": "ok"' in capsys.readouterr().out


def test_a_context_parallel_execution_becomes_the_case_it_stands_for(profile):
    """best_case_text turns a CP execution (its extension keys) into the case fields context_parallel and
    network_tiers.context; the case estimates to the search row's total."""
    from types import SimpleNamespace

    from harness.cases import load_case
    from harness.commands.search import best_case_text
    from harness.search.results import calculon_execution
    from harness.search.space import layouts

    options = SpaceOptions(tp_overlap=False, dp_overlap=False, context_parallel=True)
    problem = SearchProblem(SHAPE, 2, 2, "bfloat16", profile, options, 1)
    layout = next(l for l in layouts(SHAPE, 2, 2, options, 2, False) if l.group.cp == 2)
    inner, tiers = layout.inner[0], layout.placements[-1]
    execution = calculon_execution(problem, layout, inner, layout.microbatches[0], tiers)
    assert (execution["context_par"], execution["context_par_net"]) == (2, tiers[3])
    args = SimpleNamespace(model="tiny.json", fused_activation="true", mbs_break=False, no_tp_overlap=False,
                           no_dp_overlap=False, context_parallel=True, precision="none")  # the parser's defaults
    text = best_case_text(args, problem, SimpleNamespace(execution=execution, rate=1.0))
    assert "--context-parallel`: 1.0 samples/s." in text.splitlines()[0]
    assert "context_parallel: 2" in text and f"context: {tiers[3]}" in text


def test_context_parallelism_with_tp_or_dp_overlap_is_invalid_in_the_search_not_an_error(profile):
    """The estimate prices CP with TP/DP overlap through the ConcretePlanIR; the search's shared block sums place
    the tensor group only, so those executions are invalid with one line naming the field (before: KeyError)."""
    options = SpaceOptions(tp_overlap=True, dp_overlap=True, context_parallel=True, fused_activation=(True,))
    problem = SearchProblem(SHAPE, 4, 2, "bfloat16", profile, options, 3, prune=False, collect_rows=True)
    tables = []
    run_search(problem, workers=1, on_rows=tables.append)
    rows = pa.concat_tables(tables).to_pylist()
    concurrent = [r for r in rows if r["context_par"] > 1 and (r["tensor_par_overlap"] != "none"
                                                                or r["data_par_overlap"])]
    assert concurrent and {r["status"] for r in concurrent} == {"invalid"}
    assert {r["reason"].split(":")[0] for r in concurrent} == {"execution.context_parallel"}
    plain = [r for r in rows if r["context_par"] > 1 and r["tensor_par_overlap"] == "none"
             and not r["data_par_overlap"]]
    assert "ok" in {r["status"] for r in plain}
