"""The execution search: its space, its equality with per-execution estimates, pruning, workers, outputs.

Independent references: Calculon's own dry-run counts (``llm-optimal-execution
-d``, which walks the space without estimating) for the space sizes; the
per-execution estimate (:func:`harness.search.reference.reference_search`,
one ``estimate`` per execution, nothing shared or pruned) for every figure,
status and the top K; brute-force definitions for the top K order and the
Pareto frontier.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import calculon_compat as compat
from harness.estimate import switched_off
from harness.cases import EstimateInput
from harness.cli import main
from harness.evidence.profile import dump_profile, load_profile
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.passes.plan_work import TransformerPlanWork
from harness.pipeline import lower
from harness.search.evaluate import SearchProblem
from harness.search.pareto import pareto_frontier
from harness.search.reference import reference_row, reference_search
from harness.search.results import COMPONENTS, Candidate, TopK
from harness.search.run import run_search, space
from harness.search.space import FUSED_CHOICES, PLACED_DIMENSIONS, SpaceOptions, layouts

MEGATRON_22B = TransformerShape(hidden=6144, feedforward=24576, sequence_length=2048, attention_heads=64,
                                head_size=96, blocks=48)
SMALL = TransformerShape(hidden=1024, feedforward=4096, sequence_length=512, attention_heads=16, head_size=64,
                         blocks=4)
SMALL_JSON = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64, "num_blocks": 4}


@pytest.fixture(scope="module")
def tight_profile():
    """a100_80g with 0.5 GiB of memory tier 1 and a 2-processor tier 0 (so memory, network and -m breaks occur)."""
    base = load_profile("a100_80g")
    networks = (base.networks[0].model_copy(update={"size_processors": 2}), *base.networks[1:])
    return base.model_copy(update={
        "name": "tight", "networks": networks,
        "memory_tier1": base.memory_tier1.model_copy(update={"capacity_bytes": 2**29})})


def small_problem(profile, processors, *, top=3, prune=True, rows=False, points=False, **options):
    return SearchProblem(SMALL, processors, processors, "float16", profile, SpaceOptions(**options), top,
                         prune=prune, collect_rows=rows, collect_points=points)


# --- the space ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, processors, batch, fused, expected", [
    # Calculon's dry-run counts (llm-optimal-execution -d, a100_80g: 2 network tiers, memory tier 2)
    (MEGATRON_22B, 4, 4, "true", 53_352),
    (MEGATRON_22B, 8, 8, "true", 290_624),
    (MEGATRON_22B, 64, 64, "true", 2_393_240),
    (SMALL, 2, 2, "true", 2_128),
    (SMALL, 4, 4, "all", 40_128),
    (SMALL, 16, 12, "all", 332_576),
])
def test_space_size_is_calculons(shape, processors, batch, fused, expected):
    options = SpaceOptions(fused_activation=FUSED_CHOICES[fused])
    assert sum(g.executions for g in layouts(shape, processors, batch, options, 2, True)) == expected


def test_positions_number_the_nesting_in_order():
    """position(inner, microbatch, placement) enumerates the group's nesting 0, 1, 2, ... outermost first."""
    for layout in layouts(SMALL, 4, 4, SpaceOptions(fused_activation=(False, True)), 2, True):
        walk = [layout.position(i, m, p) for i, m, p in itertools.product(
            range(len(layout.inner)), range(len(layout.microbatches)), range(len(layout.placements)))]
        assert walk == list(range(layout.executions))


# --- equality with the per-execution estimate -----------------------------------------------------------

ROW_COLUMNS = ("group", "position", "status", "total_s", "sample_rate_per_s", "tier1_total_bytes",
               "tier2_total_bytes", *(f"{c}_s" for c in COMPONENTS))


def _rows(problem, workers=1):
    tables = []
    result = run_search(problem, workers=workers, on_rows=tables.append)
    return result, pa.concat_tables(tables)


def _as_rows(table):
    return list(zip(*(table[c].to_pylist() for c in ROW_COLUMNS)))


@pytest.fixture(scope="module")
def one_network(tight_profile):
    """The tight profile with a single network tier (fewer placements: a space small enough to estimate whole)."""
    return tight_profile.model_copy(update={"name": "one_network", "networks": (load_profile("a100_80g").networks[1],)})


def test_every_execution_of_a_small_space_equals_its_own_estimate(one_network):
    """Statuses, totals, sample rates, memory tiers and every component of all 380 executions (TP overlap
    ring and pipe, offload, its refusal below 3 blocks per processor, memory tiers 1 and 2), the counts and
    the top K: bit for bit against one ``estimate`` per execution."""
    problem = SearchProblem(SMALL, 2, 1, "float16", one_network, SpaceOptions(), 5, prune=False, collect_rows=True)
    counts, best, rows = reference_search(problem)
    result, table = _rows(problem)
    assert result.counts == counts and counts.executions == 380
    statuses = {row[2] for row in rows}
    assert statuses == {"ok", "infeasible"}
    assert _as_rows(table) == rows
    assert [c.to_json() for c in result.best] == [c.to_json() for c in best]
    assert [(c.group, c.position) for c in result.best] == [(c.group, c.position) for c in best]


def _stratified_sample(problem, got, per_stratum=2, seed=15):
    """Indices of rows ``got`` of ``problem``: up to ``per_stratum`` of each (status, TP overlap mode, DP
    overlap, the three offloads, PP > 1, TP > 1, DP > 1), and the strata."""
    layouts_by_group = {l.group.index: l for l in space(problem)}
    strata: dict[tuple, list[int]] = {}
    for index, (group, position, status, *_rest) in enumerate(got):
        layout = layouts_by_group[group]
        inner = layout.inner[position // len(layout.placements) // len(layout.microbatches)]
        g = layout.group
        key = (status, inner.tp_overlap, inner.dp_overlap, inner.weight_offload, inner.activations_offload,
               inner.optimizer_offload, g.pp > 1, g.tp > 1, g.dp > 1)
        strata.setdefault(key, []).append(index)
    rnd = random.Random(seed)
    sample = sorted(i for members in strata.values() for i in rnd.sample(members, min(per_stratum, len(members))))
    return sample, strata


def _reference_rows(problem, got, indices):
    layouts_by_group = {l.group.index: l for l in space(problem)}
    out = []
    for index in indices:
        group, position = got[index][:2]
        layout = layouts_by_group[group]
        n, m = len(layout.placements), len(layout.microbatches)
        out.append(reference_row(problem, layout, position // n // m, position // n % m, position % n))
    return out


def test_search_follows_the_calculon_compatibility_rules(one_network):
    """With the overlap/offload compatibility rules switched off, the search still equals the estimate on a
    stratified sample of a space with TP, PP and DP (every status, TP/DP overlap and offload choice; the
    whole space: the slow test below): its vectorized projection reads the same rules."""
    problem = SearchProblem(SMALL, 2, 2, "float16", one_network, SpaceOptions(), 3, prune=False, collect_rows=True)
    with switched_off(*compat.OVERLAP_RULES):
        got = _as_rows(_rows(problem)[1])
        sample, strata = _stratified_sample(problem, got)
        assert len(strata) > 40 and len(sample) > 80
        assert [got[i] for i in sample] == _reference_rows(problem, got, sample)
    with_rules = _as_rows(_rows(problem)[1])
    assert [with_rules[i] for i in sample] != [got[i] for i in sample]  # the rules matter here


@pytest.mark.slow
def test_search_follows_the_calculon_compatibility_rules_on_every_execution(one_network):
    """The same on every execution of the space."""
    problem = SearchProblem(SMALL, 2, 2, "float16", one_network, SpaceOptions(), 3, prune=False, collect_rows=True)
    with switched_off(*compat.OVERLAP_RULES):
        rows = reference_search(problem)[2]
        result, table = _rows(problem)
    assert _as_rows(table) == rows
    with_rules = _as_rows(_rows(problem)[1])
    assert with_rules != rows  # the rules matter here


@pytest.mark.parametrize("profile_name, processors, max_batch, size", [
    pytest.param("tight", 4, 4, 20_064, marks=pytest.mark.slow),  # memory and network breaks (slow: 2x the cost)
    # the fitted profile: roofline processing, launch floor, output layer, measured collective curves,
    # hierarchical collectives (TP and DP groups of 16 over 8-processor islands)
    ("a100_measured", 16, 2, 31_920),
])
def test_sampled_executions_of_a_larger_space_equal_their_own_estimate(tight_profile, profile_name, processors,
                                                                       max_batch, size):
    """A stratified sample (every status, TP overlap mode, DP overlap and offload choice, with and without
    pipeline parallelism) of spaces on two network tiers."""
    profile = tight_profile if profile_name == "tight" else load_profile(profile_name)
    problem = SearchProblem(SMALL, processors, max_batch, "float16", profile, SpaceOptions(), 3, prune=False,
                            collect_rows=True)
    got = _as_rows(_rows(problem)[1])
    sample, strata = _stratified_sample(problem, got)
    assert len(strata) > 40 and len(sample) > 80 and len(got) == size
    for index, expected in zip(sample, _reference_rows(problem, got, sample)):
        assert got[index] == expected, (index, got[index][:2])


@pytest.mark.slow
@pytest.mark.parametrize("profile_name, processors, options", [
    ("tight", 4, dict(mbs_break=True)),
    ("a100_80g", 4, dict(fused_activation=(False, True))),
    ("h100_80g_nvl8", 2, dict()),
])
def test_every_execution_of_larger_spaces_equals_its_own_estimate(tight_profile, profile_name, processors,
                                                                   options):
    profile = tight_profile if profile_name == "tight" else load_profile(profile_name)
    problem = small_problem(profile, processors, top=5, prune=False, rows=True, **options)
    counts, best, rows = reference_search(problem)
    result, table = _rows(problem)
    assert result.counts == counts
    assert _as_rows(table) == rows
    assert [c.to_json() for c in result.best] == [c.to_json() for c in best]


def test_mbs_break_enumerates_fewer_executions(tight_profile):
    """-m stops a microbatch loop at the first size with no feasible execution (Calculon's rule)."""
    full = run_search(small_problem(tight_profile, 2), workers=1).counts
    broken = run_search(small_problem(tight_profile, 2, mbs_break=True), workers=1).counts
    assert broken.executions < full.executions
    assert broken.feasible == full.feasible  # here every skipped size is infeasible


def test_interleavings_share_one_lowering_exactly():
    """TransformerPlanWork.relayout of one interleaving's plan is the plan lowered for another (and ring's
    plan is pipe's): the sharing the search relies on."""
    for tp_overlap in ("none", "ring", "pipe"):
        def layout(interleaving, mode=tp_overlap):
            return ExecutionLayout(tensor_parallel=2, pipeline_parallel=2, data_parallel=1, global_batch=4,
                                   microbatch=2, pipeline_interleaving=interleaving, recompute="attn_only",
                                   tp_communication="rs_ag", seq_par_ag_redo=True, fused_activation=True,
                                   network_tiers={"tensor": 0, "pipeline": 0, "data": 0}, tp_overlap=mode)

        first = lower(EstimateInput(model=MEGATRON_22B, execution=layout(1), system="a100_80g"))
        for interleaving in (2, 3, 12):
            other = lower(EstimateInput(model=MEGATRON_22B, execution=layout(interleaving), system="a100_80g"))
            shared = TransformerPlanWork.relayout(first.plan, first.distributed.trusted_replace(
                execution=layout(interleaving)))
            assert shared.digest() == other.plan.digest()
    ring = lower(EstimateInput(model=MEGATRON_22B, execution=layout(1, "ring"), system="a100_80g"))
    pipe = lower(EstimateInput(model=MEGATRON_22B, execution=layout(1, "pipe"), system="a100_80g"))
    assert ring.plan.digest() == pipe.plan.digest()


# --- pruning --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("processors", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4: 5x the cost
@pytest.mark.parametrize("profile_name, top", [("tight", 1), ("a100_80g", 4), ("h100_80g_nvl8", 25)])
def test_pruning_never_changes_the_result(tight_profile, profile_name, top, processors):
    profile = tight_profile if profile_name == "tight" else load_profile(profile_name)
    pruned = run_search(small_problem(profile, processors, top=top), workers=1)
    full = run_search(small_problem(profile, processors, top=top, prune=False), workers=1)
    assert [c.to_json() for c in pruned.best] == [c.to_json() for c in full.best]
    assert [(c.group, c.position) for c in pruned.best] == [(c.group, c.position) for c in full.best]
    assert full.counts.pruned == 0 and pruned.counts.pruned > 0
    assert dataclass_without_pruned(pruned.counts) == dataclass_without_pruned(full.counts)


def dataclass_without_pruned(counts):
    return {k: v for k, v in vars(counts).items() if k != "pruned"}


# --- top K order and the Pareto frontier (brute force) --------------------------------------------------

def _candidate(rate, group, position, memory=0.0):
    return Candidate(rate=rate, group=group, position=position, execution={}, total_s=1 / rate, components_s={},
                     memory_bytes={"tier1_total": memory})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1.0, 2.0, 2.5, 3.0]), st.integers(0, 5), st.integers(0, 50)),
                unique_by=lambda t: (t[1], t[2]), max_size=40), st.integers(1, 6), st.randoms())
def test_top_k_is_the_first_k_in_search_order_for_any_split(items, k, rnd):
    candidates = [_candidate(*t) for t in items]
    expected = sorted(candidates, key=lambda c: (-c.rate, c.group, c.position))[:k]
    rnd.shuffle(candidates)
    parts = [candidates[i::3] for i in range(3)]
    merged = TopK(k)
    for part in rnd.sample(parts, len(parts)):
        local = TopK(k)
        for c in part:
            local.offer(c)
        for c in local.entries():
            merged.offer(c)
    assert merged.entries() == expected


def test_top_k_keeps_the_first_k_when_threads_offer_at_once():
    """A Dask worker runs tasks in threads that share one running top K: eight threads offer (as
    evaluate_group does: accepts, then offer) 2000 candidates each, at rising rates so nearly every offer
    changes the top K, with the interpreter switching threads every microsecond; the top K is exactly the
    first K of the sorted union. (Without TopK's lock this fails in most rounds.)"""
    threads, per, k = 8, 2000, 16
    for seed in range(5):
        rnd = random.Random(seed)
        parts = [[_candidate(1.0 + p + rnd.random(), t, p) for p in range(per)] for t in range(threads)]
        best = TopK(k)
        start = threading.Barrier(threads)

        def offer_all(part):
            start.wait()
            for c in part:
                if best.accepts(c.rate, c.group, c.position):
                    best.offer(c)

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            running = [threading.Thread(target=offer_all, args=(part,)) for part in parts]
            for thread in running:
                thread.start()
            for thread in running:
                thread.join()
        finally:
            sys.setswitchinterval(interval)
        assert best.entries() == sorted((c for part in parts for c in part), key=lambda c: c.order)[:k], seed


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1.0, 2.0, 3.0, 4.0]), st.sampled_from([1.0, 2.0, 3.0])),
                max_size=30))
def test_pareto_frontier_is_the_undominated_set(points):
    candidates = [_candidate(rate, 0, i, memory) for i, (rate, memory) in enumerate(points)]

    def dominated(c):
        return any((o.rate >= c.rate and o.memory_bytes["tier1_total"] <= c.memory_bytes["tier1_total"])
                   and ((o.rate, o.memory_bytes["tier1_total"]) != (c.rate, c.memory_bytes["tier1_total"])
                        or o.position < c.position) for o in candidates)

    expected = sorted((c for c in candidates if not dominated(c)), key=lambda c: c.memory_bytes["tier1_total"])
    assert pareto_frontier(candidates) == expected
    halves = pareto_frontier(candidates[::2]) + pareto_frontier(candidates[1::2])
    assert pareto_frontier(halves) == expected


# --- workers --------------------------------------------------------------------------------------------

def _same_search(run, reference, run_pruned, reference_pruned, rows, reference_rows):
    assert [c.to_json() for c in run.best] == [c.to_json() for c in reference.best]
    assert run.counts == reference.counts
    assert rows.equals(reference_rows)
    assert [c.position for c in run.frontier] == [c.position for c in reference.frontier]
    assert np.array_equal(np.sort(run.points[0]), np.sort(reference.points[0]))
    assert [c.to_json() for c in run_pruned.best] == [c.to_json() for c in reference_pruned.best]
    assert [(c.group, c.position) for c in run_pruned.best] == [(c.group, c.position) for c in reference_pruned.best]


def test_result_is_the_same_for_any_number_of_workers_and_threads():
    """A tiny space (2 processors; the larger one is the slow test below): in this process, a 2-process
    LocalCluster, and an existing cluster by address whose one worker runs 3 threads (tasks sharing its
    running top K): the same top K with pruning, and with --results and --pareto the same rows, frontier
    and points."""
    from distributed import LocalCluster

    profile = load_profile("a100_80g")
    pruned = small_problem(profile, 2, top=3)
    collected = small_problem(profile, 2, top=4, rows=True, points=True)
    local, local_rows = _rows(collected, workers=1)
    local_pruned = run_search(pruned, workers=1)
    assert local_pruned.counts.pruned > 0
    two, two_rows = _rows(collected, workers=2)
    assert two.where == "LocalCluster of 2 workers"
    _same_search(two, local, run_search(pruned, workers=2), local_pruned, two_rows, local_rows)
    # over TCP (not the in-process transport of a thread cluster), as a remote scheduler is reached: Dask's
    # message deadline must be one it accepts (harness.search.run.MESSAGE_TIMEOUT_S)
    with LocalCluster(n_workers=1, threads_per_worker=3, processes=False, protocol="tcp", dashboard_address=None
                      ) as cluster:
        tables = []
        threaded = run_search(collected, scheduler=cluster.scheduler_address, on_rows=tables.append)
        threaded_pruned = run_search(pruned, scheduler=cluster.scheduler_address)
    assert threaded.workers == 1
    _same_search(threaded, local, threaded_pruned, local_pruned, pa.concat_tables(tables), local_rows)


@pytest.mark.slow
def test_result_is_the_same_for_any_number_of_workers(tmp_path):
    """In this process, a 2-worker LocalCluster and an existing 3-worker cluster by address: the same top K
    (with pruning, whose bounds differ per worker), and with --results and --pareto the same rows, frontier
    and points."""
    from distributed import LocalCluster

    profile = load_profile("a100_80g")
    pruned = small_problem(profile, 4, top=3)
    collected = small_problem(profile, 2, top=4, rows=True, points=True, fused_activation=(False, True))
    local, local_rows = _rows(collected, workers=1)
    local_pruned = run_search(pruned, workers=1)
    runs = [(_rows(collected, workers=2), run_search(pruned, workers=2))]
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None,
                      worker_dashboard_address=None) as cluster:
        tables = []
        remote = run_search(collected, scheduler=cluster.scheduler_address, on_rows=tables.append)
        runs.append(((remote, pa.concat_tables(tables)),
                     run_search(pruned, scheduler=cluster.scheduler_address)))
    assert (runs[0][1].where, runs[1][1].workers) == ("LocalCluster of 2 workers", 3)
    assert local_pruned.counts.pruned > 0
    for (other, rows), other_pruned in runs:
        _same_search(other, local, other_pruned, local_pruned, rows, local_rows)


# --- the command ----------------------------------------------------------------------------------------

@pytest.fixture()
def small_model(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL_JSON))
    return path


def test_command_writes_top_k_results_frontier_and_plot(tmp_path, small_model, capsys):
    out, parquet, frontier, plot = (tmp_path / n for n in ("top.json", "all.parquet", "frontier.json", "p.png"))
    status = main(["search", "--model", str(small_model), "--system", "a100_80g", "--procs", "2", "--max-batch", "2",
                   "--datatype", "float16", "--top", "3", "--workers", "1", "--output", str(out), "--results",
                   str(parquet), "--pareto", str(frontier), "--plot", str(plot), "--no-progress"])
    assert status == 0
    revision = load_profile("a100_80g").revision()
    top = json.loads(out.read_text())
    assert len(top) == 3
    assert set(top[0]) == {"execution", "total_s", "sample_rate_per_s", "components_s", "memory_bytes", "evidence"}
    assert top[0]["evidence"] == {"profile": "a100_80g", "revision": revision}
    assert top[0]["execution"]["num_procs"] == 2 and top[0]["execution"]["attention_type"] == "multihead"
    assert [e["sample_rate_per_s"] for e in top] == sorted((e["sample_rate_per_s"] for e in top), reverse=True)
    _, best, _ = reference_search(SearchProblem(SMALL, 2, 2, "float16", load_profile("a100_80g"), SpaceOptions(), 3,
                                                prune=False))  # one ``estimate`` per execution
    assert [(e["total_s"], e["components_s"], e["execution"]) for e in top] == [
        (c.to_json()["total_s"], c.to_json()["components_s"], c.to_json()["execution"]) for c in best]
    table = pq.read_table(parquet)
    assert table.num_rows == 2_128
    assert table.schema.metadata[b"blueprinting.evidence.revision"] == revision.encode()
    ok = table.filter(pa.compute.equal(table["status"], "ok"))
    assert max(ok["sample_rate_per_s"].to_pylist()) == top[0]["sample_rate_per_s"]
    assert json.loads(frontier.read_text())[-1]["sample_rate_per_s"] == top[0]["sample_rate_per_s"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = capsys.readouterr().err
    assert revision in err and "2,128 executions" in err


def test_command_accepts_a_case_yaml_and_a_project_profile(tmp_path, tight_profile, capsys):
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump({"model": SMALL.model_dump()}))
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "tight.yaml").write_text(dump_profile(tight_profile))
    out = tmp_path / "top.json"
    assert main(["--project", str(tmp_path), "search", "--model", str(case), "--system", "tight", "--procs", "2",
                 "--max-batch", "2",
                 "--datatype", "float16", "--workers", "1", "--output", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())[0]["evidence"] == {"profile": "tight", "revision": tight_profile.revision()}


@pytest.mark.parametrize("args, message", [
    (["--model", "missing.json"], "missing.json: <file>: no such file"),
    (["--system", "no_such_profile"], "no evidence profile named 'no_such_profile'"),
    (["--procs", "7", "--max-batch", "4"], "--procs: no layout of small.json fits 7 processors"),
    (["--procs", "0"], "--procs: must be a positive integer, not 0"),
    (["--datatype", "int4"], "--datatype: 'int4' is not one of"),
    (["--workers", "0"], "--workers: must be a positive integer, not 0"),
])
def test_bad_arguments_are_one_line_errors(small_model, capsys, args, message, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    base = {"--model": str(small_model), "--system": "a100_80g", "--procs": "4", "--max-batch": "4",
            "--datatype": "float16"}
    given_args = dict(zip(args[::2], args[1::2]))
    argv = ["search", *itertools.chain.from_iterable({**base, **given_args}.items()), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_output_that_cannot_be_written_is_refused_before_the_search(small_model, tmp_path, capsys):
    argv = ["search", "--model", str(small_model), "--system", "a100_80g", "--procs", "4", "--max-batch", "4",
            "--datatype", "float16", "--output", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    assert "--output: is a directory" in capsys.readouterr().err


def test_no_feasible_execution_exits_1_with_an_empty_list(tmp_path, small_model, tight_profile, capsys):
    """Issue 23.5 in search: the exit status was 1 but the summary said so only on its third line, after the
    header and the counts; now its first line says it, and that no case was written for --emit-case."""
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "tiny.yaml").write_text(dump_profile(tight_profile.model_copy(update={
        "name": "tiny", "memory_tier1": tight_profile.memory_tier1.model_copy(update={"capacity_bytes": 1024})})))
    out = tmp_path / "top.json"
    assert main(["--project", str(tmp_path), "search", "--model", str(small_model), "--system", "tiny", "--procs", "2",
                 "--max-batch", "2",
                 "--datatype", "float16", "--workers", "1", "--output", str(out), "--no-progress",
                 "--emit-case", str(tmp_path / "best.yaml")]) == 1
    assert json.loads(out.read_text()) == [] and not (tmp_path / "best.yaml").exists()
    err = capsys.readouterr().err.splitlines()
    # 1 KiB of memory: no layout of the model fits, every execution is infeasible (none invalid)
    assert err[0].startswith(f"search: NO FEASIBLE EXECUTION of {small_model} on tiny with 2 processors, "
                             "batch <= 2: ")
    assert err[0].endswith(", no case written (--emit-case) (exit status 1)") and " 0 invalid " in err[0]
    assert "best: no feasible execution" in err



def test_unreachable_scheduler_is_a_one_line_error(small_model, capsys, monkeypatch):
    monkeypatch.setattr("harness.search.run.CONNECT_TIMEOUT_S", 1)
    argv = ["search", "--model", str(small_model), "--system", "a100_80g", "--procs", "2", "--max-batch", "2",
            "--datatype", "float16", "--scheduler", "tcp://127.0.0.1:1", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scheduler: cannot use the Dask scheduler at 'tcp://127.0.0.1:1'" in err


# --- the pruning bound and memory tier 2, one processor (no network: the bound is the total) ------------

def test_the_pruning_bound_is_below_every_total_and_is_the_total_without_network():
    """With one processor there is no message, so every plan's bound is at most the total of each of its
    executions, and the bound of a plan without offload or overlap is its total lowered by the relative
    margin BOUND_MARGIN = 1e-9 only (module rules of harness.search.evaluate; a larger space with network
    time is the pruning test above, which compares pruned and unpruned top K)."""
    from harness.search.evaluate import BOUND_MARGIN, Context, _Plan, option_of

    for processors in (1,):
        problem = small_problem(load_profile("a100_80g"), processors, prune=False)
        context, checked = Context(problem), 0
        for layout in space(problem):
            placements = np.array(layout.placements, dtype=np.int64).reshape(-1, len(PLACED_DIMENSIONS))
            options = [option_of(inner) for inner in layout.inner]
            for inner in layout.inner:
                for microbatch in layout.microbatches:
                    plan = _Plan.build(context, layout, inner, microbatch)
                    bound = None if plan.invalid else plan.bound()
                    if bound is None:
                        continue
                    fastest = float(plan.figures(option_of(inner), placements, options).total.min())
                    assert bound <= fastest, (processors, layout.group, inner, microbatch)
                    if processors == 1 and not any(option_of(inner)) and inner.tp_overlap == "none":
                        assert bound == pytest.approx(fastest * (1 - BOUND_MARGIN), rel=1e-12)
                        checked += 1
        assert checked > 0


def test_an_execution_that_overflows_memory_tier_2_is_infeasible():
    """With 1 MiB of memory tier 2, every offloading execution whose tier-2 total exceeds it is infeasible for
    that reason (Calculon's order: tier 1 first, then tier 2), and none is reported ok."""
    base = load_profile("a100_80g")
    small_tier2 = base.model_copy(update={"name": "small_tier2", "memory_tier2": base.memory_tier2.model_copy(
        update={"capacity_bytes": 2**20})})
    _, table = _rows(small_problem(small_tier2, 1, prune=False, rows=True))
    rows = table.to_pylist()
    over = [r for r in rows if r["tier2_total_bytes"] is not None and r["tier2_total_bytes"] > 2**20]
    assert over, "the space has offloading executions over 1 MiB of tier 2"
    for row in over:
        assert row["status"] == "infeasible"
        if row["tier1_total_bytes"] <= base.memory_tier1.capacity_bytes:
            assert row["reason"].startswith("memory tier 2 needs"), row["reason"]
