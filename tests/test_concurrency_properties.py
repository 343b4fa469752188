"""Property tests over the five overlap/offload options (hypothesis, like tests/test_properties.py).

Configurations come from harness.oracles.configspace.draw_configuration with
``overlap=True`` (the drawing procedure of the vendored overlap corpus: at
least one of TP overlap, DP overlap and the three offloads on, each where
Calculon accepts it). Properties:

- every draw estimates (ok, or infeasible with its reason); figures finite
  and non-negative; an option where Calculon refuses it is a one-line input
  error naming the field (the total is not checked against the components
  here: the projection computes it as their sum; it is checked against
  Calculon's own recorded total_time, and every component against Calculon's,
  on 360 overlap/offload records in test_concrete_parity.py);
- TP overlap never makes the exposed TP time larger than the same layout
  without it, in the physical projection (overlapped tiles send at most the
  untiled messages, and waiting for them is part of their busy time); in the
  ``calculon-0.1.0`` projection it is asserted only where the edge block's
  messages are the base block's (not p2p_rs_ag: there Calculon's edge block
  exposes the base block's TP time, ``edge-block-equals-base-block``);
- DP overlap never makes the exposed DP time larger in the physical
  projection (waits are DP busy time, and a flop phase loses at most
  ``processor_usage`` of the sync time under it); Calculon's windows break
  this (``scripts/overlap_properties.py`` counts it on the corpus; a test
  below pins one record where they do), so it is not asserted for them;
- offload never loses bytes (tier 1 + tier 2 >= tier 1 without), keeps its
  staging buffers in tier 1, never makes an iteration shorter (transfers only
  add waits, in both projections), and never raises memory tier 1 above the
  layout without offload where offload is feasible (3 blocks per
  processor), except where Calculon's accounting stages activations
  inference never keeps (activation offload in inference);
- the physical projection's components partition the iteration.

The live comparison with a Calculon checkout (``oracle_live``) runs only when
one is named (``--harness-calculon-src=PATH`` or ``HARNESS_CALCULON_SRC``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.estimate import estimate
from harness.evidence.profile import load_profile
from harness.oracles.configspace import Configuration, draw_configuration, draw_shape
from harness.passes.concretize import TransformerConcretize
from harness.pipeline import lower
from harness.schedule.memory import OFFLOAD_MIN_BLOCKS, block_memory
from harness.schedule.physical import physical_schedule
from harness.schedule.projection import calculon_projection

from test_properties import HypothesisChooser  # the configspace chooser backed by hypothesis
from test_properties import assert_break_is_refused, assert_live_parity, calculon_runner  # noqa: F401 (a fixture)

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: The physical schedule runs every operation of every stage: fewer examples.
SCHEDULED = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def draw(data: st.DataObject) -> Configuration:
    chooser = HypothesisChooser(data)
    if chooser.choice(("example", "random")) == "random":
        return draw_configuration(chooser, shape=draw_shape(chooser), overlap=True)
    return draw_configuration(chooser, overlap=True)


def changed(data: EstimateInput, **changes: Any) -> EstimateInput:
    dumped = data.model_dump()
    dumped["execution"].update(changes)
    return EstimateInput.model_validate(dumped)


def projections(data: EstimateInput, view: str):
    """(calculon-0.1.0, physical schedule) of ``data``'s ConcretePlanIR under ``view``."""
    concrete = TransformerConcretize.for_layout(data.execution).run(lower(data).plan)[0]
    pricer = pricer_for(load_profile(data.system), COST_VIEWS[view], concrete.datatype)
    return concrete, calculon_projection(concrete, pricer), physical_schedule(concrete, pricer)


@FAST
@given(st.data())
def test_every_overlap_or_offload_configuration_estimates(data):
    config = draw(data)
    e = config.input.execution
    assert e.tp_overlap != "none" or e.dp_overlap or e.offload.weights or e.offload.activations or e.offload.optimizer
    est = estimate(config.input)
    assert est.status in ("ok", "infeasible") and (est.reason is None) == (est.status == "ok")
    offloading = e.offload.weights or e.offload.activations or e.offload.optimizer
    for view in est.views.values():
        parts = view.components_s.model_dump()
        figures = [view.total_s, *parts.values(), *view.memory_bytes.model_dump().values(),
                   *view.requirements.model_dump().values()]
        assert all(math.isfinite(x) and x >= 0 for x in figures)
        if not offloading:
            assert parts["forward_offload"] == parts["backward_offload"] == view.memory_bytes.tier2_total == 0


OPTION_BREAKS = {
    "TP overlap with one TP rank": (
        lambda m, e: e.update(tensor_par_overlap="ring", tensor_par=1, num_procs=e["pipeline_par"] * e["data_par"]),
        "execution.tensor_par_overlap"),
    "DP overlap with one replica": (
        lambda m, e: e.update(data_par_overlap=True, data_par=1, optimizer_sharding=False,
                              batch_size=e["batch_size"] // e["data_par"],
                              num_procs=e["tensor_par"] * e["pipeline_par"]), "execution.data_par_overlap"),
    "DP overlap in inference": (
        lambda m, e: e.update(data_par_overlap=True, training=False, activation_recompute="none",
                              optimizer_offload=False, seq_par_ag_redo=False), "execution.data_par_overlap"),
    "optimizer offload in inference": (
        lambda m, e: e.update(optimizer_offload=True, training=False, activation_recompute="none",
                              data_par_overlap=False, seq_par_ag_redo=False), "execution.optimizer_offload"),
}


@FAST
@given(st.data(), st.sampled_from(sorted(OPTION_BREAKS)))
def test_an_option_calculon_refuses_is_a_one_line_input_error_naming_the_field(data, name):
    assert_break_is_refused(draw(data), *OPTION_BREAKS[name])


@SCHEDULED
@given(st.data(), st.sampled_from(tuple(COST_VIEWS)))
def test_tp_overlap_never_exposes_more_tp_time(data, view):
    config = draw(data)
    if config.input.execution.tp_overlap == "none":
        config = Configuration(config.shape_name, changed(config.input, tp_overlap=data.draw(
            st.sampled_from(("ring", "pipe")))), config.calculon_model, config.calculon_execution) \
            if config.input.execution.tensor_parallel > 1 else config
    e = config.input.execution
    if e.tp_overlap == "none":
        return  # TP = 1: nothing to overlap
    _, calculon_on, physical_on = projections(config.input, view)
    _, calculon_off, physical_off = projections(changed(config.input, tp_overlap="none"), view)
    on, off = physical_on.projection.components_s, physical_off.projection.components_s
    assert on["tensor_parallel"] <= off["tensor_parallel"] * (1 + 1e-12)
    if e.tp_communication != "p2p_rs_ag":
        assert calculon_on.components_s["tensor_parallel"] <= calculon_off.components_s["tensor_parallel"] * (1 + 1e-12)


@SCHEDULED
@given(st.data(), st.sampled_from(tuple(COST_VIEWS)))
def test_dp_overlap_never_exposes_more_dp_time_physically(data, view):
    config = draw(data)
    e = config.input.execution
    if not (e.training and e.data_parallel > 1):
        return
    _, _, on = projections(changed(config.input, dp_overlap=True), view)
    _, _, off = projections(changed(config.input, dp_overlap=False), view)
    assert on.projection.components_s["data_parallel"] <= off.projection.components_s["data_parallel"] * (1 + 1e-12)


def test_calculons_dp_windows_can_expose_more_than_no_overlap():
    """PIN: the largest break scripts/overlap_properties.py reports on the vendored corpus (Calculon's DP
    windows go negative there: 136x the exposed DP time without overlap, peak_only; 100x system_evidence),
    where the physical schedule exposes less than without overlap."""
    from harness.interop.calculon_batch import require_valid
    from harness.oracles.records import vendor_dir

    data = dict(require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz"))["overlap/0208/anthropic-52B"]
    assert data.execution.dp_overlap
    for view, at_least in (("peak_only", 136), ("system_evidence", 99)):
        _, calculon_on, physical_on = projections(data, view)
        _, calculon_off, physical_off = projections(changed(data, dp_overlap=False), view)
        assert calculon_on.components_s["data_parallel"] > at_least * calculon_off.components_s["data_parallel"]
        assert physical_on.projection.components_s["data_parallel"] <= physical_off.projection.components_s[
            "data_parallel"]


@SCHEDULED
@given(st.data(), st.sampled_from(tuple(COST_VIEWS)))
def test_offload_keeps_its_bytes_lowers_tier1_and_never_shortens_the_iteration(data, view):
    config = draw(data)
    o = config.input.execution.offload
    if not (o.weights or o.activations or o.optimizer):
        return
    plain = changed(config.input, offload={"weights": False, "activations": False, "optimizer": False})
    concrete, calculon_on, physical_on = projections(config.input, view)
    bare, calculon_off, physical_off = projections(plain, view)
    feasible = concrete.schedule.blocks_per_stage >= OFFLOAD_MIN_BLOCKS  # else refused: staging needs 3 blocks
    if feasible and (concrete.schedule.training or not o.activations):
        # inference keeps no activations, yet Calculon stages a block's stored activations in tier 1 when they
        # are offloaded (and moves them): there offload raises tier 1 (see docs/concurrency.md)
        assert concrete.tier1_total_bytes <= bare.tier1_total_bytes * (1 + 1e-12)
    assert concrete.tier1_total_bytes + concrete.tier2_total_bytes >= bare.tier1_total_bytes * (1 - 1e-12)
    block = block_memory(concrete)
    tier1 = {b.name: b.tier1_bytes for b in concrete.buffers}
    if o.weights:
        assert tier1["weight"] >= 2 * block.weight_bytes * (1 - 1e-12)
    if o.optimizer and concrete.schedule.training:
        assert tier1["optimizer"] >= 2 * block.optimizer_bytes * (1 - 1e-12)
    assert calculon_on.total_s >= calculon_off.total_s * (1 - 1e-12)
    assert physical_on.projection.total_s >= physical_off.projection.total_s * (1 - 1e-12)


@SCHEDULED
@given(st.data(), st.sampled_from(tuple(COST_VIEWS)))
def test_the_physical_components_partition_the_iteration(data, view):
    concrete, _, schedule = projections(draw(data).input, view)
    p = schedule.projection
    assert all(math.isfinite(v) and v >= 0 for v in p.components_s.values())
    assert math.isclose(math.fsum(p.components_s.values()), p.total_s, rel_tol=1e-12)
    for key, waited in schedule.exposed_s.items():
        if key[0] != "compute":
            assert waited <= schedule.busy_s.get(key, 0.0) * (1 + 1e-12) + 1e-15, key


@pytest.mark.oracle_live
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.data())
def test_live_parity_with_calculon_on_overlap_and_offload(calculon_runner, data):
    assert_live_parity(calculon_runner, draw(data))
