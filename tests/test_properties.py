"""Property tests over the supported configuration space (hypothesis).

Configurations come from harness.oracles.configspace.draw_configuration, the
same drawing procedure as the vendored differential corpus, over the 13
example shapes and small random shapes. The default-suite properties are
kept to a few seconds; the live comparison with a Calculon checkout
(``oracle_live``) runs only when one is named (``--harness-calculon-src`` or
``HARNESS_CALCULON_SRC``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.cases import EstimateInput
from harness.errors import InputError
from harness.estimate import cost_view, estimate, estimate_lowering
from harness.cost.views import COST_VIEWS
from harness.evidence.calculon_export import calculon_system
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.calculon import check_view
from harness.oracles.configspace import Configuration, draw_configuration, draw_shape
from harness.pipeline import lower
from harness.schedule.simulate import BUSY_COMPONENTS, simulate

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class HypothesisChooser:
    """A configspace Chooser backed by hypothesis's ``data.draw`` (so examples shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def choice(self, options):
        return self.data.draw(st.sampled_from(list(options)))

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))


def draw(data: st.DataObject) -> Configuration:
    chooser = HypothesisChooser(data)
    if chooser.choice(("example", "random")) == "random":
        return draw_configuration(chooser, shape=draw_shape(chooser))
    return draw_configuration(chooser)


def with_execution(data: EstimateInput, **changes: Any) -> EstimateInput:
    """A validated copy of ``data`` with execution fields changed."""
    dumped = data.model_dump()
    dumped["execution"].update(changes)
    return EstimateInput.model_validate(dumped)


@FAST
@given(st.data())
def test_every_valid_configuration_estimates(data):
    config = draw(data)
    est = estimate(config.input)
    assert est.status in ("ok", "infeasible") and (est.reason is None) == (est.status == "ok")
    for view in est.views.values():
        figures = [view.total_s, *view.components_s.model_dump().values(), *view.memory_bytes.model_dump().values(),
                   *view.workload.model_dump().values()]
        assert all(math.isfinite(x) and x >= 0 for x in figures)
        assert view.total_s > 0


@FAST
@given(st.data())
def test_the_event_simulation_reproduces_the_closed_form(data):
    """An independent computation of the schedule: the event-level simulation runs every chunk operation of
    every stage in Megatron's order. The first stage's busy time is the closed form's pipeline work, and
    where the closed form is exact (training or one stage, no remainder microbatches under interleaving, no
    uneven stages) the simulated iteration is the closed-form total."""
    config = draw(data)
    e = config.input.execution
    assume(e.tp_overlap == "none" and not e.dp_overlap and e.offload == e.offload.__class__())
    plan = lower(config.input).plan
    s = plan.schedule
    assume(2 * s.pipeline_parallel * s.chunks_per_stage * s.microbatches <= 20_000)
    profile = load_profile(config.input.system)
    exact = ((s.training or s.pipeline_parallel == 1) and not s.bubble_reduction_blocks
             and not (s.chunks_per_stage > 1 and s.microbatches % s.pipeline_parallel))
    for view in COST_VIEWS.values():
        block, comp = cost_view(plan, profile, view)
        sim = simulate(s, block, comp)
        busy = math.fsum(comp.components_s[name] for name in BUSY_COMPONENTS)
        assert sim.first_stage_busy_s == pytest.approx(busy, rel=1e-9)
        if exact:
            assert sim.total_s == pytest.approx(comp.total_s, rel=1e-9) and sim.exact, sim.note


@FAST
@given(st.data())
def test_one_stage_has_no_bubble_and_no_pipeline_traffic(data):
    one_stage = with_execution(draw(data).input, pipeline_parallel=1, pipeline_interleaving=1)
    for view in estimate(one_stage).views.values():
        assert view.components_s.pipeline_bubble == 0 and view.components_s.pipeline_parallel == 0
        assert view.workload.pp_forward_bytes == 0 and view.workload.pp_backward_bytes == 0


@FAST
@given(st.data())
def test_inference_has_no_backward_recompute_or_optimizer(data):
    inference = with_execution(draw(data).input, training=False, recompute="none")
    for view in estimate(inference).views.values():
        c = view.components_s
        assert (c.backward, c.recompute, c.optimizer) == (0, 0, 0)
        assert view.workload.recompute_flops == 0 and view.memory_bytes.optimizer == 0
        assert view.memory_bytes.weight_grad == 0 and view.memory_bytes.activation_grad == 0


def faster(profile: EvidenceProfile, resource: str, factor: float) -> EvidenceProfile:
    """The profile with one resource (or all) ``factor`` times faster."""
    update: dict[str, Any] = {}
    if resource in ("network", "all"):
        update["networks"] = tuple(n.model_copy(update={"bandwidth_bytes_per_s": n.bandwidth_bytes_per_s * factor})
                                   for n in profile.networks)
    if resource in ("memory", "all"):
        tier = profile.memory_tier1
        update["memory_tier1"] = tier.model_copy(update={"bandwidth_bytes_per_s": tier.bandwidth_bytes_per_s * factor})
    for family in ("matrix", "vector"):
        if resource in (family, "all"):
            update[family] = {dt: e.model_copy(update={"peak_flops_per_s": e.peak_flops_per_s * factor})
                              for dt, e in getattr(profile, family).items()}
    return profile.model_copy(update=update)


@FAST
@given(st.data(), st.sampled_from(("network", "memory", "matrix", "vector", "all")),
       st.sampled_from((1.0001, 1.5, 2.0, 10.0)))
def test_more_bandwidth_or_flops_never_slows_an_iteration(data, resource, factor):
    config = draw(data)
    profile = load_profile(config.input.system)
    lowering = lower(config.input)
    quicker = faster(profile, resource, factor)
    for view in COST_VIEWS.values():
        _, base = cost_view(lowering.plan, profile, view)
        _, fast = cost_view(lowering.plan, quicker, view)
        assert fast.total_s <= base.total_s * (1 + 1e-12)
        for name, value in fast.components_s.items():
            assert value <= base.components_s[name] * (1 + 1e-12) + 1e-18, name
    est = estimate_lowering(lowering, quicker)
    assert est.status == estimate_lowering(lowering, profile).status  # feasibility is not a speed question


def _set(**changes):
    def edit(model, execution):
        execution.update(changes)
    return edit


def _breaks_tp(model, execution):
    tp = next(t for t in range(2, 1000) if model["hidden"] % t)
    execution.update(tensor_par=tp, num_procs=tp * execution["pipeline_par"] * execution["data_par"])


def _one_replica_sharding(model, execution):
    execution.update(data_par=1, optimizer_sharding=True, batch_size=execution["microbatch_size"],
                     num_procs=execution["tensor_par"] * execution["pipeline_par"])


def _one_stage_interleaving(model, execution):
    execution.update(pipeline_par=1, pipeline_interleaving=2,
                     num_procs=execution["tensor_par"] * execution["data_par"])


BREAKS = {
    "unknown field": (_set(bogus=1), "execution.bogus"),
    "missing field": (lambda m, e: m.pop("hidden"), "model.hidden"),
    "zero degree": (_set(tensor_par=0), "execution.tensor_par"),
    "wrong type": (_set(microbatch_size="four"), "execution.microbatch_size"),
    "unknown mode": (_set(activation_recompute="some"), "execution.activation_recompute"),
    "TP does not divide hidden": (_breaks_tp, "execution.tensor_par"),
    "processor count": (lambda m, e: e.update(num_procs=e["num_procs"] + 1), "execution.num_procs"),
    "redo without rs_ag": (_set(seq_par_ag_redo=True, tensor_par_comm_type="ar"), "execution.seq_par_ag_redo"),
    "recompute in inference": (_set(training=False, activation_recompute="attn_only", seq_par_ag_redo=False),
                               "execution.activation_recompute"),
    "sharding with one replica": (_one_replica_sharding, "execution.optimizer_sharding"),
    "interleaving with one stage": (_one_stage_interleaving, "execution.pipeline_interleaving"),
    "overlap with one TP rank": (lambda m, e: e.update(tensor_par_overlap="pipe", tensor_par=1,
                                                       num_procs=e["pipeline_par"] * e["data_par"]),
                                 "execution.tensor_par_overlap"),
}


@FAST
@given(st.data(), st.sampled_from(sorted(BREAKS)))
def test_an_invalid_configuration_is_a_one_line_input_error_naming_the_field(data, name):
    config = draw(data)
    model, execution = dict(config.calculon_model), dict(config.calculon_execution)
    edit, field = BREAKS[name]
    edit(model, execution)
    with pytest.raises(InputError) as info:
        input_from_calculon(model, execution, config.input.system, "batch.jsonl:7")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"batch.jsonl:7: {field}: "), message
    assert info.value.field == field


@FAST
@given(st.data(), st.sampled_from(("tensor", "pipeline", "data", "datatype")))
def test_a_profile_mismatch_is_a_one_line_input_error_naming_the_field(data, what):
    config = draw(data)
    if what == "datatype":
        broken, field = with_execution(config.input, datatype="bfloat16"), "execution.datatype"
    else:
        tiers = dict(config.input.execution.network_tiers.model_dump(), **{what: 2})
        broken, field = with_execution(config.input, network_tiers=tiers), f"execution.network_tiers.{what}"
    with pytest.raises(InputError) as info:
        estimate(broken, source="case.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith(f"case.yaml: {field}: ")


@pytest.fixture(scope="module")
def calculon_runner(calculon_src):
    from harness.oracles.runner import CalculonRunner

    return CalculonRunner(calculon_src)


@pytest.mark.oracle_live
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.data())
def test_live_parity_with_calculon(calculon_runner, data):
    assert_live_parity(calculon_runner, draw(data))


def assert_live_parity(calculon_runner, config: Configuration) -> None:
    """Both views of ``config`` estimated and run by Calculon agree (figures, or the same refusal)."""
    est = estimate(config.input)
    profile = load_profile(config.input.system)
    for view in ("system_evidence", "peak_only"):
        result = calculon_runner.run(config.calculon_model, config.calculon_execution,
                                     calculon_system(profile, peak_only=view == "peak_only"))
        stats = None if "error" in result else result
        parity = check_view(config.shape_name, view, est, stats, result.get("error"), config.input.execution.training)
        assert parity.ok, f"{parity.describe()}\nmodel={config.calculon_model}\nexecution={config.calculon_execution}"
