"""Fit a target-wide evidence revision to measured runs.

The fitted revision keeps the base profile's peaks, capacities, tiers and
volume models and replaces what the measurements show (see
``docs/measured-evidence.md`` for why each piece is there):

- fixed structure: ``roofline`` processing (a kernel is bound by its compute
  or its memory traffic, not their sum); saturating curves for the matrix
  engine and memory tier 1; the vector engine flat at the base's largest
  efficiency (every vector operation is memory-bound under roofline, so the
  corpus cannot see a vector curve); the tier-0 collectives measured by
  nccl-tests (family ``collective_curves``, from the corpus's
  ``collective_sweep`` records) and the reduce-scatter and all-gather
  curves derived from them (half the all-reduce's time:
  :data:`~harness.measurements.nccl_tests.HALVES_OF_ALL_REDUCE`); ring all-reduce on tier 1 (``2 (n - 1) / n``
  of the message per processor); hierarchical collectives; the output layer
  with the GPT-2 vocabulary padded as Megatron pads it;
- fitted parameters (:data:`PARAMETERS`, each bounded to a physically
  plausible range): the matrix engine's maximum efficiency and half size,
  memory tier 1's maximum efficiency and half size, the host issue time per
  pointwise operation and per GEMM, the host time per microbatch. The loss's
  memory traffic per logit is not fitted: it is counted from the training
  software's source (:data:`~harness.passes.rules.LOSS_BYTES_PER_LOGIT`). Tier 1's per-processor bandwidth is
  set from the corpus's documented interconnect, not fitted.

Objective: robust least squares (``scipy.optimize.least_squares``, soft-L1
loss with scale :data:`F_SCALE` on ``log(predicted / measured)``, bounded
trust-region reflective), iteration records only by default. Records are
weighted so that one-node runs and multi-node runs (a configuration
property: TP x PP x DP <= the tier-0 island) weigh the same in total, and
``layer_pass`` records with ``layer_weight`` relative to that. Nothing else
reaches the fit: no id, no model name, no per-record factor.

Determinism: the same corpora and base give the same revision: the start
points (:data:`STARTS`; the lowest cost wins, the first on a tie), bounds
and method are fixed, and the fitted values are rounded to 5
significant digits (standard errors to 2) before they are written, so that
the digest does not depend on the last bits of the optimizer's arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

from harness.errors import HarnessError
from harness.evidence.families import (
    CorpusDigest,
    FitProvenance,
    FittedParameter,
    GradientAccumulation,
    HierarchicalCollectives,
    LaunchOverhead,
    OutputLayer,
    PartitionedP2P,
    SaturatingCurve,
)
from harness.evidence.profile import Curve, EvidenceProfile
from harness.measurements.corpus import Corpus
from harness.measurements.design import Design
from harness.measurements.nccl_tests import derived_sweeps, with_sweeps
from harness.passes.output_layer import VOCABULARY_MULTIPLE

F_SCALE = 0.05  # soft-L1 scale on log(pred / measured): errors beyond ~5 % count linearly, not squared
#: Start points of the fit, as overrides of the parameters' starts; the fit keeps the lowest cost (the first on a
#: tie). The second start begins with GEMMs and pointwise operations at the same host issue time: fitted to one
#: hidden size only (a cross-validation fold), the cost has a second basin there, and a single start can stop in
#: the worse one (docs/measured-evidence.md).
STARTS: tuple[dict[str, float], ...] = ({}, {"issue_s_per_matrix_operation": 2e-5})
MAX_EVALUATIONS = 2000
#: The fit is a claim that its structure reproduces its training data: every weighting class (one-node runs,
#: multi-node runs, layer passes, microbenchmarks) must be reproduced to within this mean absolute error, percent.
#: It is three times the cross-validation budget of one-node runs (8 %): a fit beyond it has not understood its
#: data (a wrong structure, a wrong base, impossible measurements), whatever its optimizer says.
FIT_TOLERANCE_MAPE_PCT = 25.0
VOCABULARY = 50257  # GPT-2 BPE, the tokenizer of Megatron's GPT models
#: Tier-1 bandwidth per processor of the measured cluster: 800 Gb/s between nodes (the corpus's environment),
#: shared by the 8 processors of a node. Set from the documentation, not fitted (see docs/measured-evidence.md:
#: fitted, it is identified by one multi-node shape's layouts at a time and does not generalize).
TIER1_BANDWIDTH_BYTES_PER_S = 800e9 / 8 / 8
#: Ring volume models, ``multiplier x (1 - 1/n)`` of the message per processor: an all-reduce moves twice what a
#: reduce-scatter or an all-gather moves (it is one followed by the other). Set on every tier of the fitted revision.
RING_VOLUMES = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One fitted parameter: where it goes, its physical range and its start."""

    name: str
    path: str
    lower: float
    upper: float
    start: float
    log: bool
    unit: str
    meaning: str


PARAMETERS = (
    Parameter("matrix_max_efficiency", "matrix.<datatype>.operation_size_efficiency.max_efficiency", 0.3, 0.95, 0.8,
              False, "fraction of peak", "Fraction of the matrix peak that large GEMMs reach."),
    Parameter("matrix_half_size", "matrix.<datatype>.operation_size_efficiency.half_size", 1e8, 1e11, 1e9, True,
              "operations", "GEMM size at half the maximum efficiency: the device's fixed cost per kernel "
                            "(tail, wave quantization) in operations at full speed."),
    Parameter("memory_max_efficiency", "memory_tier1.transfer_size_efficiency.max_efficiency", 0.3, 0.95, 0.75,
              False, "fraction of bandwidth", "Fraction of the HBM bandwidth that large streaming kernels reach."),
    Parameter("memory_half_size", "memory_tier1.transfer_size_efficiency.half_size", 1e5, 1e8, 1e6, True, "bytes",
              "Transfer size at half the maximum efficiency: a memory-bound kernel's fixed cost in bytes."),
    Parameter("issue_s_per_operation", "launch.issue_s_per_operation", 1e-6, 1e-4, 2e-5, True, "s",
              "Host time to issue one pointwise (vector-engine) operation: framework, autograd and kernel launch."),
    Parameter("issue_s_per_matrix_operation", "launch.issue_s_per_matrix_operation", 1e-6, 1e-4, 6e-5, True, "s",
              "Host time to issue one GEMM: the framework's linear layer (a Python autograd function), "
              "autograd and the cuBLAS launch."),
    Parameter("issue_s_per_microbatch", "launch.issue_s_per_microbatch", 1e-5, 2e-2, 1e-3, True, "s",
              "Host time per training microbatch outside its operations: loading and broadcasting the batch "
              "(a host-device synchronization) and the training engine's bookkeeping."),
)


def template(base: EvidenceProfile, sweeps: Sequence, name: str, datatype: str = "float16",
             tier1_bandwidth: float = TIER1_BANDWIDTH_BYTES_PER_S, source: str = "collective sweeps") -> EvidenceProfile:
    """The fitted revision's fixed structure on ``base`` (parameters at their start values); a sweep the
    structure cannot reproduce is an InputError naming ``source`` (the corpora) and the sweep."""
    vector = base.vector[datatype]
    curve = vector.operation_size_efficiency
    flat = max(p.efficiency for p in curve.points) if curve.points else curve.saturating.max_efficiency
    networks = []
    for index, tier in enumerate(base.networks):
        # ring volume models (set before the curves are derived: a curve is relative to its volume model)
        collectives = dict(tier.collectives)
        for collective, multiplier in RING_VOLUMES.items():
            if collective in collectives:
                collectives[collective] = collectives[collective].model_copy(
                    update={"volume_multiplier": multiplier, "participant_offset": -1.0})
        update = {"collectives": collectives}
        if index == 1:
            update["bandwidth_bytes_per_s"] = tier1_bandwidth
        networks.append(tier.model_copy(update=update))
    profile = with_sweeps(base.model_copy(update={"networks": tuple(networks)}), (*sweeps, *derived_sweeps(sweeps)),
                          source)
    profile = profile.model_copy(update={
        "name": name, "processing_mode": "roofline",
        "vector": {**profile.vector, datatype: vector.model_copy(update={
            "operation_size_efficiency": _saturating(flat, 0.0)})},
        "launch": LaunchOverhead(issue_s_per_operation=2e-5, issue_s_per_matrix_operation=6e-5),
        "output_layer": OutputLayer(vocabulary=VOCABULARY),
        "hierarchical_collectives": HierarchicalCollectives(kind="island_then_next_tier"),
        "partitioned_p2p": PartitionedP2P(kind="slice_then_all_gather"),
        "gradient_accumulation": GradientAccumulation(kind="unfused_in_place_add"),
        "fit": None,
    })
    return with_values(profile, {p.name: p.start for p in PARAMETERS}, datatype)


def _saturating(max_efficiency: float, half_size: float) -> Curve:
    return Curve(saturating=SaturatingCurve(max_efficiency=max_efficiency, half_size=half_size))


def with_values(profile: EvidenceProfile, values: dict[str, float], datatype: str = "float16") -> EvidenceProfile:
    """``profile`` with the fitted parameters set to ``values`` (without ``issue_s_per_matrix_operation``, every
    operation takes ``issue_s_per_operation``; without ``issue_s_per_microbatch``, a microbatch costs the host
    nothing beyond its operations: the structures compared in docs/measured-evidence.md)."""
    v = values
    matrix = profile.matrix[datatype].model_copy(update={"operation_size_efficiency": _saturating(
        v["matrix_max_efficiency"], v["matrix_half_size"])})
    memory = profile.memory_tier1.model_copy(update={"transfer_size_efficiency": _saturating(
        v["memory_max_efficiency"], v["memory_half_size"])})
    return profile.model_copy(update={
        "matrix": {**profile.matrix, datatype: matrix}, "memory_tier1": memory,
        "launch": LaunchOverhead(issue_s_per_operation=v["issue_s_per_operation"],
                                 issue_s_per_matrix_operation=v.get("issue_s_per_matrix_operation"),
                                 issue_s_per_microbatch=v.get("issue_s_per_microbatch")),
    })


def node_class(record, island: int) -> str:
    """``one_node`` or ``multi_node`` (all processors inside one tier-0 island or not)."""
    return "one_node" if record.execution.processors <= island else "multi_node"


def target_class(record, island: int) -> str:
    """The weighting class of a record: its node class (iterations), ``layer_pass`` or ``benchmark``."""
    if record.kind == "iteration":
        return node_class(record, island)
    return "layer_pass" if record.kind == "layer_pass" else "benchmark"


def weights(design: Design, selected: np.ndarray, island: int, layer_weight: float,
            benchmark_weight: float) -> np.ndarray:
    """Per-target residual weights over the ``selected`` targets: the iteration classes (one node, several
    nodes) weigh the same in total; layer passes ``layer_weight`` and microbenchmarks ``benchmark_weight``
    times one such class's total."""
    classes = [target_class(design.records[t.record], island) for t in design.targets]
    counts: dict[str, int] = {}
    for c, chosen in zip(classes, selected):
        if chosen:
            counts[c] = counts.get(c, 0) + 1
    iteration = [c for c in counts if c in ("one_node", "multi_node")]
    unit = sum(counts[c] for c in iteration) / max(len(iteration), 1)
    scale = {"layer_pass": layer_weight, "benchmark": benchmark_weight}
    return np.sqrt(np.array([scale.get(c, 1.0) * unit / counts[c] if chosen else 0.0
                             for c, chosen in zip(classes, selected)]))


def _round(value: float, digits: int) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits - 1}e}")


@dataclasses.dataclass(frozen=True)
class FitResult:
    """A fitted revision and how it was found."""

    profile: EvidenceProfile
    values: dict[str, float]
    standard_errors: dict[str, float | None]
    cost: float
    evaluations: int
    status: str
    targets: np.ndarray  # indices of the design's targets the fit was weighted on
    errors_pct: np.ndarray  # per such target: 100 (predicted - measured) / measured under the fitted values
    on_bounds: tuple[str, ...]  # parameters at (or rounded onto) a bound of their range


def fit_design(design: Design, template_profile: EvidenceProfile, measured: np.ndarray, *, island: int = 8,
               layer_weight: float = 0.0, benchmark_weight: float = 1.0, datatype: str = "float16",
               loss: str = "soft_l1", f_scale: float = F_SCALE, parameters: Sequence[Parameter] = PARAMETERS,
               progress: Callable[[int], None] | None = None,
               apply: Callable[[EvidenceProfile, dict[str, float]], EvidenceProfile] | None = None) -> FitResult:
    """Fit ``parameters`` (the shipped structure: :data:`PARAMETERS`; a subset compares structures) to
    ``measured`` (per target seconds; NaN: not a training target). ``apply`` sets the values on the template
    (default :func:`with_values` at ``datatype``: another structure's parameters, e.g.
    :mod:`harness.measurements.runs_fit`'s)."""
    if apply is None:
        def apply(profile: EvidenceProfile, values: dict[str, float]) -> EvidenceProfile:
            return with_values(profile, values, datatype)
    selected = np.isfinite(measured)
    w = weights(design, selected, island, layer_weight, benchmark_weight)
    keep = selected & (w > 0)
    measured = measured[keep]
    w = w[keep]

    def unpack(x: np.ndarray) -> dict[str, float]:
        return {p.name: float(np.exp(v) if p.log else v) for p, v in zip(parameters, x)}

    calls = 0

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        if progress is not None:
            progress(calls)
        predicted = design.predict(apply(template_profile, unpack(x)))[keep]
        return w * np.log(predicted / measured)

    lower = [math.log(p.lower) if p.log else p.lower for p in parameters]
    upper = [math.log(p.upper) if p.log else p.upper for p in parameters]
    result = None
    names = {p.name for p in parameters}
    for overrides in [o for o in STARTS if set(o) <= names]:
        values0 = [overrides.get(p.name, p.start) for p in parameters]
        start = [math.log(v) if p.log else v for p, v in zip(parameters, values0)]
        found = least_squares(residuals, start, bounds=(lower, upper), method="trf", loss=loss, f_scale=f_scale,
                              x_scale="jac", max_nfev=MAX_EVALUATIONS)
        if result is None or found.cost < result.cost:
            result = found
    values = {name: _round(v, 5) for name, v in unpack(result.x).items()}
    errors: dict[str, float | None] = dict.fromkeys(values)
    dof = max(len(measured) - len(parameters), 1)
    try:
        covariance = np.linalg.inv(result.jac.T @ result.jac) * (2 * result.cost / dof)
    except np.linalg.LinAlgError:
        covariance = None
    for i, p in enumerate(parameters):
        if covariance is None or result.active_mask[i] != 0 or not covariance[i, i] >= 0:
            continue
        spread = math.sqrt(covariance[i, i])  # in the fitted coordinate (log for log parameters)
        errors[p.name] = _round(values[p.name] * spread if p.log else spread, 2)
    profile = apply(template_profile, values)
    on_bounds = tuple(p.name for i, p in enumerate(parameters)
                      if result.active_mask[i] != 0 or not p.lower < values[p.name] < p.upper)
    predicted = design.predict(profile)[keep]
    return FitResult(profile, values, errors, float(result.cost), calls, result.message,
                     np.flatnonzero(keep), 100.0 * (predicted - measured) / measured, on_bounds)


class FitRefused(HarnessError):
    """A fit that does not hold as a claim (:func:`claim_problems`): nothing is written; ``summary`` is the
    residual report to show."""

    def __init__(self, problems: Sequence[str], summary: Sequence[str]) -> None:
        self.problems = tuple(problems)
        self.summary = tuple(summary)
        super().__init__(f"the fit does not reproduce its data, nothing written: {'; '.join(problems)}")


def class_errors(design: Design, result: FitResult, island: int = 8) -> dict[str, np.ndarray]:
    """The fit's errors (percent) per weighting class (:func:`target_class`), over its training targets."""
    classes = [target_class(design.records[design.targets[t].record], island) for t in result.targets]
    return {c: result.errors_pct[[k == c for k in classes]] for c in dict.fromkeys(classes)}


def residual_summary(design: Design, result: FitResult, parameters: Sequence[Parameter] = PARAMETERS,
                     island: int = 8) -> list[str]:
    """The fit's residuals per class and its parameters on their bounds, as lines to print."""
    lines = [f"  {c:10s} {len(e):5d} targets: mean |error| {np.mean(np.abs(e)):.3g} %, worst {np.max(np.abs(e)):.3g} %"
             f" (tolerance {FIT_TOLERANCE_MAPE_PCT:g} %)" for c, e in class_errors(design, result, island).items()]
    bounds = {p.name: p for p in parameters}
    for name in result.on_bounds:
        lines.append(f"  {name} = {result.values[name]:g} is on a bound of [{bounds[name].lower:g}, "
                     f"{bounds[name].upper:g}]")
    return lines


def claim_problems(design: Design, result: FitResult, parameters: Sequence[Parameter] = PARAMETERS,
                   island: int = 8) -> list[str]:
    """Why the fit is not a claim its data supports (empty: it is): fewer training targets than parameters, a
    class reproduced worse than :data:`FIT_TOLERANCE_MAPE_PCT`, or a parameter on a bound of its range (the
    data asks for a value the structure says is not physical)."""
    problems = []
    if len(result.targets) < len(parameters):
        problems.append(f"{len(result.targets)} training targets for {len(parameters)} parameters")
    for c, e in class_errors(design, result, island).items():
        if not np.mean(np.abs(e)) <= FIT_TOLERANCE_MAPE_PCT:
            problems.append(f"{c} runs reproduced to {np.mean(np.abs(e)):.3g} % on average (tolerance "
                            f"{FIT_TOLERANCE_MAPE_PCT:g} %)")
    if result.on_bounds:
        problems.append(f"{', '.join(result.on_bounds)} on a bound of {'its' if len(result.on_bounds) == 1 else 'their'}"
                        f" range")
    return problems


def _sweep_claims(sweeps: Sequence, combine: str | None) -> tuple[str, ...]:
    """What the fitted structure did with the corpus's collective sweeps, in the provenance's words (nothing
    when there were none)."""
    tiers = "/".join(str(t) for t in sorted({s.network_tier for s in sweeps}))
    out = []
    if sweeps:
        out.append(f"tier-{tiers} collective curves from the corpus's nccl-tests sweeps"
                   + (f" (repeated sweeps combined: {combine})" if combine else ""))
    derived = derived_sweeps(sweeps)
    if derived:
        tiers = "/".join(str(t) for t in sorted({s.network_tier for s in derived}))
        out.append(f"tier-{tiers} reduce_scatter and all_gather curves derived from the all_reduce sweeps (a ring "
                   "all-reduce is a reduce-scatter then an all-gather: half its time each at the same message size)")
    return tuple(out)


def corpus_digests(corpora: Sequence[Corpus], used: dict[str, int]) -> tuple[CorpusDigest, ...]:
    """Each corpus a fit read, by name, file, sha256 and the number of its records the fit used."""
    return tuple(CorpusDigest(name=c.header.name, file=Path(c.path).name, sha256=c.sha256, records=used.get(c.path, 0))
                 for c in corpora)


def parameter_provenance(result: FitResult, parameters: Sequence[Parameter],
                         datatype: str | None = None) -> tuple[FittedParameter, ...]:
    """The fitted parameters with their bounds and uncertainty, in the given order; ``datatype`` fills a path's
    ``<datatype>`` placeholder."""
    return tuple(FittedParameter(name=p.name, path=p.path.replace("<datatype>", datatype) if datatype else p.path,
                                 value=result.values[p.name], lower=p.lower, upper=p.upper,
                                 standard_error=result.standard_errors[p.name], unit=p.unit, meaning=p.meaning)
                 for p in parameters)


def provenance(result: FitResult, base: EvidenceProfile, corpora: Sequence[Corpus], used: dict[str, int],
               datatype: str, layer_weight: float, benchmark_weight: float, sweeps: Sequence = (),
               combine: str | None = None) -> FitProvenance:
    """The fitted revision's provenance (base, corpora, objective, parameters with uncertainty; what was fixed,
    as it happened: ``sweeps`` are the collective sweeps the structure used)."""
    return FitProvenance(
        base_profile=base.name, base_revision=base.revision(),
        corpora=corpus_digests(corpora, used),
        objective=(f"scipy.optimize.least_squares (trf, soft_l1, f_scale {F_SCALE}; the lowest cost of {len(STARTS)} "
                   f"fixed start points) on log(predicted / measured) "
                   f"of the system_evidence iteration time; one-node and multi-node runs weigh the same in total"
                   + (f", layer passes {layer_weight:g} x one class" if layer_weight else "; layer passes not fitted")
                   + (f", microbenchmarks {benchmark_weight:g} x one class" if benchmark_weight
                      else "; microbenchmarks not fitted")
                   + f"; datatype {datatype}; values rounded to 5 significant digits"),
        parameters=parameter_provenance(result, [p for p in PARAMETERS if p.name in result.values], datatype),
        fixed=("processing_mode roofline (a kernel is bound by compute or memory traffic, not their sum)",
               "vector engine flat at the base profile's largest efficiency (memory-bound under roofline)",
               *_sweep_claims(sweeps, combine),
               "ring volume models on every tier: all_reduce 2 x (1 - 1/n), reduce_scatter and all_gather "
               "1 x (1 - 1/n) of the message per processor",
               f"tier-1 bandwidth {TIER1_BANDWIDTH_BYTES_PER_S:g} B/s per processor (800 Gb/s per node of 8), "
               "at the base profile's efficiency",
               "pipeline boundary transfers partitioned over the TP group (DeepSpeed's pipeline engine)",
               "hierarchical collectives for groups larger than a tier's island",
               "weight gradients accumulated by an unfused in-place add per microbatch after the first "
               "(Megatron-DeepSpeed comments out the fused accumulation; harness.cost.accumulation)",
               f"default vocabulary {VOCABULARY} (GPT-2 BPE) for models that state none (the workload pads it to "
               f"a multiple of {VOCABULARY_MULTIPLE} x TP as Megatron does)",
               "loss traffic per logit counted from Megatron's vocabulary-parallel cross-entropy: 38 bytes forward, "
               "14 backward (harness.passes.rules.LOSS_BYTES_PER_LOGIT)"),
    )
