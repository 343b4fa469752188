"""The physical projection: the list schedule against the closed forms.

- Blocks: the list schedule of each block program (base and edge, forward
  and backward) takes the closed forms' block time once every compatibility
  rule is off (ring and pipe TP overlap, compute- and network-bound tiles,
  layouts without overlap): 1e-9 relative.
- Iteration: the schedule made to share the closed forms' three assumptions
  (harness.schedule.physical.Assumptions) gives the components of the
  ``calculon-0.1.0`` projection with every rule off, 1e-9 of the total,
  wherever the closed-form bubble is exact (no remainder microbatches under
  interleaving, no stage one block short); without concurrency the physical
  projection is the estimate's (same condition).
- Where no compatibility rule and no schedule difference applies
  (harness.schedule.differences), ``physical`` and ``calculon-0.1.0`` agree
  to 1e-9: the default suite checks a sample of the shared records, the slow
  one all of them.
- Invariants: the components partition the iteration (they add up to the
  total, summed here); a queue is never waited for longer than it was busy.
- Physical facts the closed forms miss, checked on hand-computable cases.
"""

from __future__ import annotations

import math
import random

import pytest

from harness import calculon_compat as compat
from harness.cases import load_cases
from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.interop.calculon_batch import require_valid
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.records import load_record_file, vendor_dir
from harness.passes.concretize import TransformerConcretize
from harness.pipeline import lower
from harness.schedule.differences import differences
from harness.schedule.physical import Assumptions, physical_schedule, run_program
from harness.schedule.projection import calculon_projection
from harness.estimate import estimate_lowering, switched_off

from conftest import CASES_DIR

OVERLAP = require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz")
DIFFERENTIAL = require_valid(vendor_dir() / "differential" / "inputs.jsonl.gz")


def _concrete(data):
    return TransformerConcretize.for_layout(data.execution).run(lower(data).plan)[0]


def _pricers(data, concrete):
    profile = load_profile(data.system)
    return [pricer_for(profile, view, concrete.datatype) for view in COST_VIEWS.values()]


def bubble_is_exact(s) -> bool:
    """The closed-form bubble is the simulated one (harness.schedule.simulate's note)."""
    return not s.bubble_reduction_blocks and not (s.chunks_per_stage > 1 and s.microbatches % s.pipeline_parallel)


def _close(a: dict, b: dict, total: float) -> None:
    for name in a:
        assert a[name] == pytest.approx(b[name], rel=0, abs=1e-9 * total), name


def _sample():
    o = lambda d: d.execution.offload  # noqa: E731  (block times with offload include its overhead)
    tiled = [(i, d) for i, d in OVERLAP if d.execution.tp_overlap != "none"
             and not (o(d).weights or o(d).activations or o(d).optimizer)]
    return random.Random(5).sample(tiled, 16) + random.Random(3).sample(DIFFERENTIAL, 6)


@pytest.mark.parametrize("record_id,data", _sample(), ids=lambda v: v if isinstance(v, str) else "")
def test_block_programs_run_as_the_closed_forms_without_compatibility_rules(record_id, data):
    concrete = _concrete(data)
    with switched_off(*compat.OVERLAP_RULES):
        for pricer in _pricers(data, concrete):
            projection = calculon_projection(concrete, pricer)
            phases = ("forward", "backward") if concrete.schedule.training else ("forward",)
            for kind in ("base", "edge"):
                for phase in phases:
                    run = run_program(concrete.program(phase, kind), concrete, pricer)
                    assert run.makespan_s == pytest.approx(projection.block_s[f"{kind}_{phase}"], rel=1e-9, abs=0)


def _overlap_sample(n: int, seed: int):
    return random.Random(seed).sample(OVERLAP, n)


@pytest.mark.parametrize("record_id,data", _overlap_sample(24, 11), ids=lambda v: v if isinstance(v, str) else "")
def test_the_schedule_sharing_the_closed_forms_assumptions_is_the_closed_forms(record_id, data):
    concrete = lower(data).concrete()
    with switched_off(*compat.OVERLAP_RULES):
        for pricer in _pricers(data, concrete):
            closed = calculon_projection(concrete, pricer)
            shared = physical_schedule(concrete, pricer, assume=Assumptions(
                True, True, closed.components_s["data_parallel"])).projection
            assert math.fsum(shared.components_s.values()) == pytest.approx(shared.total_s, rel=1e-12)
            if bubble_is_exact(concrete.schedule):
                _close(shared.components_s, closed.components_s, closed.total_s)
                assert shared.total_s == pytest.approx(closed.total_s, rel=1e-9)
            else:  # only the bubble differs
                rest = {k: v for k, v in shared.components_s.items() if k != "pipeline_bubble"}
                _close(rest, {k: closed.components_s[k] for k in rest}, closed.total_s)


def _plain_inputs():
    # the smaller Table 5 and inference cases (the 1T and 530B ones run 10^4 - 10^5 operations)
    small = ("megatron-22B/full", "megatron-22B/seqsel", "gpt3-175B/seqsel", "inference/megatron-22B/ar",
             "inference/gpt3-175B/seqpar")
    cases = [(c.id, c.estimate_input()) for c in load_cases(CASES_DIR) if c.id in small]
    return cases + random.Random(13).sample(DIFFERENTIAL, 8)


@pytest.mark.parametrize("record_id,data", _plain_inputs(), ids=lambda v: v if isinstance(v, str) else "")
def test_without_concurrency_the_physical_projection_is_the_estimate(record_id, data):
    lowering = lower(data)
    concrete = _concrete(data)
    est = estimate_lowering(lowering, load_profile(data.system))
    for pricer in _pricers(data, concrete):
        physical = physical_schedule(concrete, pricer).projection
        ours = est.views[pricer.view.name]
        if bubble_is_exact(concrete.schedule) and (concrete.schedule.training or
                                                  concrete.schedule.pipeline_parallel == 1):
            _close(physical.components_s, ours.components_s.model_dump(), ours.total_s)
        else:  # the closed-form bubble approximates (or counts inference's backward p2p slots)
            rest = [k for k in physical.components_s if k != "pipeline_bubble"]
            _close({k: physical.components_s[k] for k in rest}, {k: getattr(ours.components_s, k) for k in rest},
                   ours.total_s)


def _public(n: int | None, seed: int = 17):
    """The shared overlap records Calculon estimated (vendored as records/public-overlap.json.gz)."""
    records = [r for r in load_record_file("records/public-overlap.json.gz").records
               if all(v.error is None for v in r.views.values())]
    return records if n is None else random.Random(seed).sample(records, n)


def _agree_where_nothing_applies(record):
    data = input_from_calculon(record.calculon_model, record.calculon_execution, record.system, record.id)
    concrete = lower(data).concrete()
    profile = load_profile(data.system)
    for view in record.views:
        d = differences(concrete, pricer_for(profile, COST_VIEWS[view], concrete.datatype))
        if d.rules or d.schedule:
            continue
        _close(d.physical.components_s, d.calculon.components_s, d.calculon.total_s)
        assert d.physical.total_s == pytest.approx(d.calculon.total_s, rel=1e-9)


@pytest.mark.parametrize("record", _public(8), ids=lambda r: r.id)
def test_where_no_difference_applies_the_projections_agree(record):
    _agree_where_nothing_applies(record)


@pytest.mark.slow
@pytest.mark.parametrize("record", _public(None), ids=lambda r: r.id)
def test_where_no_difference_applies_the_projections_agree_on_every_shared_record(record):
    _agree_where_nothing_applies(record)


@pytest.mark.parametrize("record_id,data", _overlap_sample(16, 23), ids=lambda v: v if isinstance(v, str) else "")
def test_components_partition_the_iteration_and_waits_never_exceed_busy_time(record_id, data):
    concrete = lower(data).concrete()
    for pricer in _pricers(data, concrete):
        schedule = physical_schedule(concrete, pricer)
        p = schedule.projection
        assert all(v >= 0 and math.isfinite(v) for v in p.components_s.values())
        assert math.fsum(p.components_s.values()) == pytest.approx(p.total_s, rel=1e-12)
        for key, waited in schedule.exposed_s.items():
            if key[0] == "compute":  # waiting for another stage (the bubble)
                continue
            assert waited <= schedule.busy_s.get(key, 0.0) * (1 + 1e-12) + 1e-15, key
        assert p.total_s == max(schedule.stage_end_s)


def test_the_pipe_tile_is_counted_once_physically_and_twice_by_calculon():
    record_id, data = next((i, d) for i, d in OVERLAP if d.execution.tp_overlap == "pipe" and not d.execution.training
                           and d.execution.tp_communication == "ar")
    concrete = lower(data).concretize()[0]
    pricer = pricer_for(load_profile(data.system), COST_VIEWS["peak_only"], concrete.datatype)
    run = run_program(concrete.program("forward", "base"), concrete, pricer)
    jobs = {v.job: v for v in run.intervals}
    from harness.schedule.queues import program_jobs

    names = [j.name for j in program_jobs(concrete.program("forward", "base"), pricer)]
    first_tiles = [v.end_s - v.start_s for i, v in jobs.items() if names[i].endswith("tile0.send")]
    assert len(first_tiles) == 2  # the two reduce-side GEMMs all-reduce forward (f is the identity with ar)
    with switched_off("doubled-pipe-tile"):
        physical = calculon_projection(concrete, pricer)
    calculon = calculon_projection(concrete, pricer)
    assert calculon.block_s["base_forward"] - physical.block_s["base_forward"] == pytest.approx(sum(first_tiles),
                                                                                                rel=1e-9)
    assert run.makespan_s == pytest.approx(physical.block_s["base_forward"], rel=1e-9)
    assert compat.applies(compat.pipe_tile)  # switched back on
