"""The search against Calculon 0.1.0's own optimal-execution search (vendored records).

Each record (``vendor/calculon-0.1.0/search/*.json``, written by ``harness
oracle record --search``) holds Calculon's request, its counts and its top 5.
The harness searches the same request and must report the same counts
(Calculon's executions, good and bad), the same executions in the same order
and the same sample rates (budget 1e-9 relative; they are in fact equal).
A tie that Calculon breaks differently would be a documented exception here;
there is none: the search breaks ties in Calculon's enumeration order.
"""

from __future__ import annotations

import pytest

from harness.interop.calculon_format import MODEL_FIELDS
from harness.ir.model import TransformerShape
from harness.oracles.search_record import load_search_record
from harness.search.evaluate import SearchProblem
from harness.search.request import resolve_profile
from harness.search.run import run_search
from harness.search.space import SpaceOptions

RELATIVE_BUDGET = 1e-9
RECORDS = ("search/megatron-22B_p4_b4.json", "search/megatron-22B_p4_b4_no-overlap.json",
           "search/megatron-22B_p8_b8_m.json", "search/megatron-22B_p8_b8_m_no-overlap.json")


def problem_of(record) -> SearchProblem:
    q = record.request
    shape = TransformerShape(**{ours: q.calculon_model[theirs] for theirs, ours in MODEL_FIELDS.items()})
    options = SpaceOptions(fused_activation=q.fused_activation, tp_overlap=q.tp_overlap, dp_overlap=q.dp_overlap,
                           mbs_break=q.mbs_break)
    return SearchProblem(shape, q.num_procs, q.max_batch_size, q.datatype, resolve_profile(q.system), options,
                         q.top_n)


#: The default suite checks the smallest record (4 processors, with overlap and offload); the others, 2-10 times
#: its cost each, run under ``slow`` (``tox -e slow``).
@pytest.mark.parametrize("name", [RECORDS[0], *(pytest.param(r, marks=pytest.mark.slow) for r in RECORDS[1:])])
def test_same_counts_and_top_5_as_calculon(name):
    record = load_search_record(name)
    problem = problem_of(record)
    assert record.evidence_revisions == {problem.profile.name: problem.profile.revision()}
    result = run_search(problem, workers=1)
    assert (result.counts.executions, result.counts.feasible, result.counts.infeasible) == (
        record.counts.executions, record.counts.good, record.counts.bad)
    assert len(result.best) == len(record.top) == record.request.top_n
    for rank, (ours, theirs) in enumerate(zip(result.best, record.top)):
        rate = theirs["stats"]["sample_rate"]
        assert abs(ours.rate - rate) <= RELATIVE_BUDGET * rate, (rank, ours.rate, rate)
        assert ours.execution == theirs["execution"], rank
        assert abs(ours.total_s - theirs["stats"]["total_time"]) <= RELATIVE_BUDGET * theirs["stats"]["total_time"]


def test_calculons_best_on_4_processors_uses_overlap_and_offload():
    """The 22B/4 optimum is outside the portable plan (why the search needs the ConcretePlanIR)."""
    best = load_search_record(RECORDS[0]).top[0]["execution"]
    assert best["tensor_par_overlap"] == "ring" and best["weight_offload"] and best["activations_offload"]
