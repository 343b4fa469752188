"""The physical projection: the list schedule of the block programs agrees with the closed forms.

With every Calculon-compatibility rule of TP/DP overlap and offload switched
off, the closed forms of harness.schedule.projection are the physical
schedule: the makespan of each base-block program (forward; backward in
training) computed by harness.schedule.physical.run_program equals the
projection's block time to 1e-9 (relative), on overlap-corpus layouts with
ring and pipe TP overlap (compute- and network-bound tiles both occur), and
on layouts without overlap (where every command waits for the previous one).
With the rules on (calculon-0.1.0) the two differ exactly where a rule
applies (doubled pipe tile: by one network tile per overlapped pass).
"""

from __future__ import annotations

import random

import pytest

from harness import calculon_compat as compat
from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.interop.calculon_batch import require_valid
from harness.oracles.records import vendor_dir
from harness.passes.concretize import TransformerConcretize
from harness.pipeline import lower
from harness.schedule.physical import physical_projection, run_program
from harness.schedule.projection import calculon_projection

OVERLAP = require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz")
DIFFERENTIAL = require_valid(vendor_dir() / "differential" / "inputs.jsonl.gz")


def _sample():
    tiled = [(i, d) for i, d in OVERLAP if d.execution.tp_overlap != "none" and not (
        d.execution.offload.weights or d.execution.offload.activations or d.execution.offload.optimizer)]
    plain = random.Random(3).sample(DIFFERENTIAL, 10)
    return random.Random(5).sample(tiled, 24) + plain


@pytest.mark.parametrize("record_id,data", _sample(), ids=lambda v: v if isinstance(v, str) else "")
def test_block_programs_run_as_the_closed_forms_without_compatibility_rules(record_id, data):
    lowering = lower(data)
    concrete = TransformerConcretize.for_layout(data.execution).run(lowering.plan)[0]
    profile = load_profile(data.system)
    for view in COST_VIEWS.values():
        pricer = pricer_for(profile, view, concrete.datatype)
        projection = physical_projection(concrete, pricer)
        pricer = pricer_for(profile, view, concrete.datatype)
        forward = run_program(concrete.program("forward", "base"), concrete, pricer)
        assert forward.makespan_s == pytest.approx(projection.block_s["base_forward"], rel=1e-9, abs=0)
        if concrete.schedule.training:
            backward = run_program(concrete.program("backward", "base"), concrete, pricer)
            assert backward.makespan_s == pytest.approx(projection.block_s["base_backward"], rel=1e-9, abs=0)


def test_the_pipe_tile_is_counted_once_physically_and_twice_by_calculon():
    record_id, data = next((i, d) for i, d in OVERLAP if d.execution.tp_overlap == "pipe" and not d.execution.training
                           and d.execution.tp_communication == "ar")
    concrete = lower(data).concretize()[0]
    pricer = pricer_for(load_profile(data.system), COST_VIEWS["peak_only"], concrete.datatype)
    run = run_program(concrete.program("forward", "base"), concrete, pricer)
    first_tiles = [end - start for name, queue, start, end in run.intervals if name.endswith("tile0.send")]
    assert len(first_tiles) == 2  # the two reduce-side GEMMs all-reduce forward (f is the identity with ar)
    calculon = calculon_projection(concrete, pricer)
    physical = physical_projection(concrete, pricer)
    assert calculon.block_s["base_forward"] - physical.block_s["base_forward"] == pytest.approx(sum(first_tiles),
                                                                                                rel=1e-9)
    assert compat.applies(compat.pipe_tile)  # switched back on
