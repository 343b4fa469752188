"""Compare our estimates with Calculon 0.1.0's stats, metric by metric.

The Calculon-field mapping lives here and nowhere else. Metric names are
dotted paths into :class:`harness.estimate.ViewEstimate` (``total_s``,
``components_s.forward``, ``memory_bytes.tier1_total``,
``workload.forward_flops``, ``compute_efficiency``).

Rules:
- error is the signed relative error ``100 x (x - r) / r`` in percent, with
  ``x`` our estimate and ``r`` Calculon's value; zero against zero is 0;
  anything non-zero against zero is infinite (and fails);
- budgets: every metric within ``RELATIVE_BUDGET_PCT`` (1e-9 %) of Calculon,
  except the per-processor memory figures (``memory_bytes.*``), which must be
  within ``MEMORY_BUDGET_BYTES`` (1 byte);
- the explicit recompute workload (``workload.recompute_flops`` /
  ``recompute_bytes``) is compared with the sum of ``fw_flops`` /
  ``fw_mem_accessed`` over the layers flagged ``needs_recompute``, in
  training only (0 in inference), never with Calculon's ``block_re_*``
  prefix counters; stats without layers must carry that sum as
  ``explicit_recompute: {"flops", "bytes"}``;
- verdicts: a Calculon ``Llm.Error`` must be our ``infeasible`` status with
  the same kind (network tier too small, network tier not filled, memory tier
  capacity) on the same tier, and vice versa.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable, Mapping, NamedTuple

from harness.errors import OracleRecordError
from harness.estimate import Estimate, ViewEstimate, estimate
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.records import OracleRecord
from harness.vocabulary import COMPONENTS, MEMORY_FIGURES

RELATIVE_BUDGET_PCT = 1e-9
MEMORY_BUDGET_BYTES = 1.0

TIMING_FIELDS = {
    "total_s": "total_time",
    "components_s.forward": "fw_time",
    "components_s.backward": "bw_time",
    "components_s.optimizer": "optim_step_time",
    "components_s.recompute": "recompute_time",
    "components_s.tensor_parallel": "tp_comm_exposed_time",
    "components_s.pipeline_parallel": "pp_comm_exposed_time",
    "components_s.data_parallel": "dp_comm_exposed_time",
    "components_s.recommunication": "recomm_exposed_time",
    "components_s.pipeline_bubble": "bubble_time",
    "components_s.forward_offload": "fw_offload_exposed_time",
    "components_s.backward_offload": "bw_offload_exposed_time",
}
COMPONENTS.require((m.split(".", 1)[1] for m in TIMING_FIELDS if m.startswith("components_s.")),
                   "harness.oracles.calculon.TIMING_FIELDS", ordered=True)
MEMORY_FIELDS = {
    "memory_bytes.weight": "weight_space",
    "memory_bytes.activation": "act_space",
    "memory_bytes.activation_checkpoint": "act_checkpoint_size",
    "memory_bytes.weight_grad": "weight_grad_space",
    "memory_bytes.activation_grad": "act_grad_space",
    "memory_bytes.optimizer": "optimizer_space",
    "memory_bytes.tier1_total": "proc_mem_tier1_cap_req",
    "memory_bytes.tier2_total": "proc_mem_tier2_cap_req",
}
MEMORY_FIGURES.require((m.split(".", 1)[1] for m in MEMORY_FIELDS), "harness.oracles.calculon.MEMORY_FIELDS",
                       ordered=True)
# The 19 workload metrics; the two recompute ones come from explicit_recompute (None here).
WORKLOAD_FIELDS: dict[str, str | None] = {
    "workload.forward_flops": "block_fw_flops",
    "workload.activation_grad_flops": "block_agrad_flops",
    "workload.weight_grad_flops": "block_wgrad_flops",
    "workload.recompute_flops": None,
    "workload.optimizer_flops": "block_optim_flops",
    "workload.forward_bytes": "block_fw_mem_accessed",
    "workload.activation_grad_bytes": "block_agrad_mem_accessed",
    "workload.weight_grad_bytes": "block_wgrad_mem_accessed",
    "workload.recompute_bytes": None,
    "workload.optimizer_bytes": "block_optim_mem_accessed",
    "workload.tp_forward_base_bytes": "baseblock_fw_tp_size",
    "workload.tp_forward_edge_bytes": "edgeblock_fw_tp_size",
    "workload.tp_backward_base_bytes": "baseblock_bw_tp_size",
    "workload.tp_backward_edge_bytes": "edgeblock_bw_tp_size",
    "workload.recomm_base_bytes": "baseblock_recomm_size",
    "workload.recomm_edge_bytes": "edgeblock_recomm_size",
    "workload.pp_forward_bytes": "block_fw_pp_size",
    "workload.pp_backward_bytes": "block_bw_pp_size",
    "workload.dp_bytes": "block_dp_size",
}
CAPACITY_FIELDS = {
    "workload.block_weight_bytes": "block_weight_space",
    "workload.block_activation_working_bytes": "block_act_working_space",
    "workload.block_activation_storage_bytes": "block_act_storage_space",
    "workload.block_activation_checkpoint_bytes": "block_act_checkpoint_size",
    "workload.block_weight_grad_bytes": "block_weight_grad_space",
    "workload.block_weight_grad_unsharded_bytes": "block_weight_grad_space_no_sharding",
    "workload.block_activation_grad_bytes": "block_act_grad_space",
    "workload.block_optimizer_bytes": "block_optimizer_space",
}
EFFICIENCY_FIELDS = {
    "useful_flops": "useful_flops",
    "compute_efficiency": "compute_efficiency",
    "system_efficiency": "system_efficiency",
    "total_efficiency": "total_efficiency",
    "sample_rate_per_s": "sample_rate",
}
METRIC_GROUPS: dict[str, dict[str, str | None]] = {
    "timing": TIMING_FIELDS, "memory": MEMORY_FIELDS, "workload": WORKLOAD_FIELDS,
    "capacity": CAPACITY_FIELDS, "efficiency": EFFICIENCY_FIELDS,
}
METRICS: tuple[str, ...] = tuple(m for group in METRIC_GROUPS.values() for m in group)


def signed_error_pct(estimate: float, oracle: float) -> float:
    """``100 x (estimate - oracle) / oracle``; 0 when equal; +-inf against a zero oracle."""
    if estimate == oracle:
        return 0.0
    if oracle == 0:
        return math.copysign(math.inf, estimate)
    return 100.0 * (estimate - oracle) / oracle


class MetricComparison(NamedTuple):
    """One metric: (metric, estimate, oracle, error) with error in percent (signed)."""

    metric: str
    estimate: float
    oracle: float
    error_pct: float

    @property
    def within_budget(self) -> bool:
        """Memory: within 1 byte; everything else: within 1e-9 % (NaN and inf fail)."""
        if self.metric in MEMORY_FIELDS:
            return abs(self.estimate - self.oracle) <= MEMORY_BUDGET_BYTES
        return abs(self.error_pct) <= RELATIVE_BUDGET_PCT

    def describe(self) -> str:
        return f"{self.metric}: estimate {self.estimate!r} vs Calculon {self.oracle!r} ({self.error_pct:+.3g} %)"


@dataclasses.dataclass(frozen=True)
class ExplicitRecompute:
    """Forward work of the recomputed layers of one block, one microbatch."""

    flops: float
    bytes: float


def explicit_recompute(stats: Mapping[str, Any], training: bool | None = None) -> ExplicitRecompute:
    """The explicit recompute sums: ``stats["explicit_recompute"]``, else from flagged layers.

    Deriving from layers needs ``training`` (the sums are 0 in inference even
    where Calculon flags a layer).
    """
    given = stats.get("explicit_recompute")
    try:
        if given is not None:
            return ExplicitRecompute(figure(given["flops"], "explicit_recompute.flops"),
                                     figure(given["bytes"], "explicit_recompute.bytes"))
        layers = stats.get("layers")
        if layers is None or training is None:
            raise OracleRecordError("Calculon stats carry neither explicit_recompute nor layers with a training flag; "
                                    "cannot derive the explicit recompute workload")
        if not training:
            return ExplicitRecompute(0.0, 0.0)
        flagged = [layer for layer in layers if layer["flags"]["needs_recompute"]]
        return ExplicitRecompute(float(sum(_raw(layer["fw_flops"], "layers.fw_flops") for layer in flagged)),
                                 float(sum(_raw(layer["fw_mem_accessed"], "layers.fw_mem_accessed")
                                           for layer in flagged)))
    except (KeyError, TypeError, AttributeError) as error:
        raise OracleRecordError(f"Calculon stats: malformed explicit recompute data ({type(error).__name__}: "
                                f"{error})") from None


def _raw(value: Any, field: str) -> int | float:
    """``value`` unchanged if it is a finite JSON number (sums keep Calculon's integer arithmetic)."""
    figure(value, field)
    return value


def figure(value: Any, field: str) -> float:
    """A recorded Calculon figure as a float: a finite JSON number (not a boolean, a string or a list), else an
    OracleRecordError naming the field (a record edited consistently with its manifest digest)."""
    try:
        number = float(value) if type(value) in (int, float) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise OracleRecordError(f"Calculon stats: {field}: {str(value)[:40]!r} is not a finite number")
    return number


def oracle_values(stats: Mapping[str, Any], training: bool | None = None,
                  metrics: Iterable[str] = METRICS) -> dict[str, float]:
    """Calculon's value of each of ``metrics`` (default: all of :data:`METRICS`), by our metric name."""
    fields = {m: f for group in METRIC_GROUPS.values() for m, f in group.items()}
    values = {}
    for metric in metrics:
        if metric not in fields:
            raise ValueError(f"unknown metric {metric!r} (see harness.oracles.calculon.METRICS)")
        field = fields[metric]
        if field is None:
            recompute = explicit_recompute(stats, training)
            values[metric] = recompute.flops if metric.endswith("_flops") else recompute.bytes
        elif field not in stats:
            raise OracleRecordError(f"Calculon stats have no {field!r} (for {metric})")
        else:
            values[metric] = figure(stats[field], field)
    return values


def estimate_values(view: ViewEstimate) -> dict[str, float]:
    """Our value of every metric in :data:`METRICS` for one view estimate."""
    data = view.model_dump()
    out = {}
    for metric in METRICS:
        value: Any = data
        for part in metric.split("."):
            value = value[part]
        out[metric] = float(value)
    return out


def compare(estimate_view: ViewEstimate, calculon_stats: Mapping[str, Any], *, training: bool | None = None,
            metrics: Iterable[str] = METRICS) -> list[MetricComparison]:
    """Each of ``metrics`` (default: all, in :data:`METRICS` order) of one view against Calculon's stats.

    ``training`` is needed only for the recompute metrics when the stats
    carry layers but no ``explicit_recompute`` (``records/cases.json``).
    Stats with neither (``memory_figs.json``) can still be compared on a
    subset, e.g. ``metrics=MEMORY_FIELDS``.
    """
    metrics = tuple(metrics)
    ours = estimate_values(estimate_view)
    theirs = oracle_values(calculon_stats, training, metrics)
    return [MetricComparison(m, ours[m], theirs[m], signed_error_pct(ours[m], theirs[m])) for m in metrics]


def outside_budget(comparisons: Iterable[MetricComparison]) -> list[MetricComparison]:
    """The comparisons that miss their budget."""
    return [c for c in comparisons if not c.within_budget]


_CALCULON_KINDS = ((re.compile(r"Network tier(\d+) isn't big enough"), "network tier too small"),
                   (re.compile(r"Network tier(\d+) isn't fully used"), "network tier not filled"),
                   (re.compile(r"Mem tier(\d+) needs"), "memory tier capacity"),
                   (re.compile(r"Offloading requires each processor to handle at least 3 blocks"),
                    "offload needs 3 blocks per processor"))
_OUR_KINDS = ((re.compile(r"network tier (\d+) is not big enough"), "network tier too small"),
              (re.compile(r"network tier (\d+) is not fully used"), "network tier not filled"),
              (re.compile(r"memory tier (\d+) needs"), "memory tier capacity"),
              (re.compile(r"offloading needs at least 3 blocks per processor"), "offload needs 3 blocks per processor"))


def _kind(message: str | None, patterns) -> str | None:
    if message is None:
        return None
    for pattern, kind in patterns:
        match = pattern.match(message)
        if match:
            return f"{kind} (tier {match.group(1)})" if match.groups() else kind
    return f"unrecognised: {message}"


def calculon_verdict(error: str | None) -> str | None:
    """The infeasibility kind of a Calculon Llm.Error message (None: it ran)."""
    return _kind(error, _CALCULON_KINDS)


def estimate_verdict(est: Estimate) -> str | None:
    """The infeasibility kind of our estimate (None: ok)."""
    return _kind(est.reason, _OUR_KINDS) if est.status == "infeasible" else None


@dataclasses.dataclass(frozen=True)
class ViewParity:
    """One recorded view of one record against our estimate."""

    record_id: str
    view: str
    oracle_verdict: str | None
    estimate_verdict: str | None
    comparisons: tuple[MetricComparison, ...]

    @property
    def verdict_match(self) -> bool:
        return self.oracle_verdict == self.estimate_verdict

    @property
    def failures(self) -> list[MetricComparison]:
        return outside_budget(self.comparisons)

    @property
    def ok(self) -> bool:
        return self.verdict_match and not self.failures

    @property
    def max_abs_error_pct(self) -> float:
        """Largest |error| over the relative-budget metrics (memory excluded), 0 when none."""
        return max((abs(c.error_pct) for c in self.comparisons if c.metric not in MEMORY_FIELDS), default=0.0)

    def describe(self) -> str:
        """One line: what differs, or ``ok``."""
        head = f"{self.record_id} [{self.view}]"
        if not self.verdict_match:
            return f"{head}: Calculon {self.oracle_verdict or 'ran'}, estimate {self.estimate_verdict or 'ok'}"
        if self.failures:
            return f"{head}: " + "; ".join(c.describe() for c in self.failures)
        return f"{head}: ok"


def check_view(record_id: str, view: str, est: Estimate, oracle_stats: Mapping[str, Any] | None,
               oracle_error: str | None, training: bool | None = None) -> ViewParity:
    """Compare one view: verdicts first, then (both ran) every metric."""
    oracle = calculon_verdict(oracle_error)
    ours = estimate_verdict(est)
    comparisons: tuple[MetricComparison, ...] = ()
    if oracle is None and ours is None:
        if oracle_stats is None:
            raise OracleRecordError(f"record {record_id} [{view}]: neither stats nor error")
        if view not in est.views:
            raise OracleRecordError(f"record {record_id} [{view}]: the estimate has no {view} view")
        comparisons = tuple(compare(est.views[view], oracle_stats, training=training))
    return ViewParity(record_id, view, oracle, ours, comparisons)


def estimate_record(record: OracleRecord) -> Estimate:
    """Our estimate (both views) of a record's Calculon inputs."""
    data = input_from_calculon(record.calculon_model, record.calculon_execution, record.system, record.id)
    return estimate(data, source=record.id)


def check_record(record: OracleRecord, est: Estimate | None = None) -> list[ViewParity]:
    """Every recorded view of ``record`` against ``est`` (default: :func:`estimate_record`)."""
    est = estimate_record(record) if est is None else est
    training = bool(record.calculon_execution.get("training", True))
    return [check_view(record.id, name, est, view.stats, view.error, training)
            for name, view in sorted(record.views.items())]
