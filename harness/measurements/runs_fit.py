"""Fit a Hopper / Blackwell evidence revision to measured runs of the Megatron-Core + Transformer Engine stack.

``harness evidence fit --structure megatron-core``: the records of one GPU's runs corpus
(:mod:`harness.measurements.runs_corpus`, the cases ``estimate --runs`` prices) fit a target-wide
revision of that GPU's data-sheet profile (docs/modern-evidence.md says why each piece is there).

Fixed structure (:func:`template`):

- ``roofline`` processing (a kernel is bound by its compute or its memory traffic, not their sum);
- every vector engine flat at the base's largest efficiency and memory tier 1 flat at the base's largest
  efficiency (not fitted: memory-bound work is a few percent of these large models' steps, and fitted the
  memory efficiency runs to its bound, docs/modern-evidence.md);
- the matrix engines' saturating curves with no fixed cost per GEMM (``half_size`` 0: the rows' GEMMs are
  large; fitted, it runs to its lower bound);
- ring volume models on every tier (all-reduce ``2 (1 - 1/n)``, reduce-scatter and all-gather
  ``1 (1 - 1/n)`` of the message per processor) and hierarchical collectives (a group larger than its
  tier's island: inside one island, then across islands on the next tier);
- tier 1 (scale-out) at the base's documented bandwidth and efficiency;
- no host issue time (family ``launch``): the stack issues whole layers through Transformer Engine's fused
  modules (and Megatron-Bridge captures CUDA graphs), and fitted it runs to its bound.

Fitted parameters (:data:`PARAMETERS`, each bounded to a physical range; only those the training records
exercise, :func:`exercised`: a float8 GEMM efficiency needs an fp8 row, an NVLink efficiency a row with a
tier-0 group of more than one GPU, the grouped-GEMM half size a mixture-of-experts row, the all-to-all
efficiency a row whose expert group is on tier 0): the bf16 matrix engine's maximum efficiency (GEMMs and the
flash attention kernel), the float8 matrix engine's maximum efficiency (the fp8 recipes' linear GEMMs), tier
0's (NVLink's) efficiency, the local experts' grouped GEMM's half size (family ``grouped_gemm``: the
efficiency of each expert's GEMM of ``g`` operations times ``g / (g + half size)``), and the MoE all-to-all's
efficiency inside one NVLink domain (a flat ``all_to_all`` curve on tier 0). Nothing per model, per row or
per release.

Objective: as :func:`harness.measurements.fit.fit_design` (soft-L1 on ``log(predicted / measured)``, bounded
trust-region reflective, one-node and multi-node runs weighing the same in total, values rounded to 5
significant digits), evaluated on the real estimate path (:class:`RunsDesign`: each record lowered once,
priced by :func:`harness.estimate.cost_view` or the concrete projection per candidate profile), so the
fitted revision's estimates are the fit's predictions exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from harness.cost.views import COST_VIEWS, CostView, pricer_for
from harness.errors import HarnessError, InputError
from harness.estimate import (
    check_tiers,
    concrete_iteration,
    cost_view,
    estimate_lowering,
    estimate_mixed,
    mixed_concrete_iteration,
    mixed_lowerings,
)
from harness.ir import blocks
from harness.evidence.families import (
    CollectiveCurve,
    FitProvenance,
    GroupedGemm,
    HierarchicalCollectives,
    SaturatingCurve,
    SizePoint,
)
from harness.evidence.profile import Curve, EvidenceProfile
from harness.measurements.corpus import IterationRecord
from harness.measurements.design import Target
from harness.measurements.fit import (
    F_SCALE,
    RING_VOLUMES,
    FitRefused,
    FitResult,
    Parameter,
    claim_problems,
    corpus_digests,
    fit_design,
    parameter_provenance,
    residual_summary,
)
from harness.passes.precision import quantized_gemm_datatype
from harness.pipeline import lower

STRUCTURE = "megatron-core"
SYSTEM_EVIDENCE_VIEW = COST_VIEWS["system_evidence"]

PARAMETERS = (
    Parameter("matrix_max_efficiency", "matrix.bfloat16.operation_size_efficiency.saturating.max_efficiency",
              0.2, 0.95, 0.6, False, "fraction of peak",
              "Fraction of the dense bf16 matrix peak that the stack's bf16 GEMMs and fused attention kernels "
              "reach."),
    Parameter("matrix_float8_max_efficiency", "matrix.float8.operation_size_efficiency.saturating.max_efficiency",
              0.2, 0.95, 0.5, False, "fraction of peak",
              "Fraction of the dense fp8 matrix peak that the fp8 recipes' linear GEMMs reach."),
    Parameter("nvlink_efficiency", "networks.0.efficiency", 0.1, 0.95, 0.6, False, "fraction of bandwidth",
              "Fraction of the NVLink bandwidth per GPU that the collectives and p2p inside one NVLink domain "
              "reach (NCCL's algorithm bandwidth over its peak)."),
    Parameter("grouped_gemm_half_size", "grouped_gemm.half_size_operations", 1e7, 1e11, 1e9, True, "operations",
              "One expert's GEMM size at which the local experts' grouped GEMM runs at half the matrix engine's "
              "efficiency at that size (family grouped_gemm): the grouped kernel's fixed cost per expert."),
    Parameter("nvlink_all_to_all_efficiency", "networks.0.measured_collectives.all_to_all", 0.05, 0.95, 0.5, False,
              "fraction of bandwidth",
              "Fraction of the NVLink bandwidth per GPU that the MoE token dispatch and combine all-to-all reach "
              "inside one NVLink domain (a flat all_to_all curve on tier 0, family collective_curves)."),
)


def quantized_datatype(record: IterationRecord) -> str | None:
    """The datatype of the record's quantized GEMMs (``float8``, ``float4``), or None (everything in bf16)."""
    return quantized_gemm_datatype(record.execution.precision)


def exercised(parameter: Parameter, record: IterationRecord) -> bool:
    """Whether ``record``'s estimate depends on ``parameter`` (see the module rules)."""
    if parameter.name == "matrix_float8_max_efficiency":
        return quantized_datatype(record) == "float8"
    if parameter.name == "grouped_gemm_half_size":
        return record.model.moe is not None
    if parameter.name == "nvlink_all_to_all_efficiency":
        e = record.execution
        return (record.model.moe is not None and e.expert_degree > 1 and e.moe_dispatcher != "allgather"
                and getattr(e.network_tiers, "expert", None) == 0)
    if parameter.name == "nvlink_efficiency":
        e = record.execution
        degrees = {"tensor": e.tensor_parallel, "pipeline": e.pipeline_parallel, "data": e.data_parallel,
                   "context": e.context_degree}
        return any(degree > 1 and getattr(e.network_tiers, dim, None) == 0 for dim, degree in degrees.items())
    return True


def fitted_parameters(records: Sequence[IterationRecord]) -> tuple[Parameter, ...]:
    """The parameters some record exercises, in :data:`PARAMETERS` order."""
    return tuple(p for p in PARAMETERS if any(exercised(p, r) for r in records))


def _flat(max_efficiency: float) -> Curve:
    return Curve(saturating=SaturatingCurve(max_efficiency=max_efficiency, half_size=0.0))


def _largest(curve: Curve) -> float:
    return max(p.efficiency for p in curve.points) if curve.points else curve.saturating.max_efficiency


def template(base: EvidenceProfile, name: str) -> EvidenceProfile:
    """The fitted revision's fixed structure on ``base`` (module rules); the fitted parameters are set by
    :func:`with_values` (a matrix engine no parameter sets keeps the base's curve)."""
    networks = []
    for tier in base.networks:
        collectives = dict(tier.collectives)
        for collective, multiplier in RING_VOLUMES.items():
            if collective in collectives:
                collectives[collective] = collectives[collective].model_copy(
                    update={"volume_multiplier": multiplier, "participant_offset": -1.0})
        networks.append(tier.model_copy(update={"collectives": collectives}))
    vector = {dt: engine.model_copy(update={"operation_size_efficiency": _flat(_largest(
        engine.operation_size_efficiency))}) for dt, engine in base.vector.items()}
    memory = base.memory_tier1.model_copy(update={"transfer_size_efficiency": _flat(_largest(
        base.memory_tier1.transfer_size_efficiency))})
    profile = base.model_copy(update={
        "name": name, "processing_mode": "roofline", "networks": tuple(networks), "vector": vector,
        "memory_tier1": memory, "hierarchical_collectives": HierarchicalCollectives(kind="island_then_next_tier"),
        "fit": None})
    return profile


def with_values(profile: EvidenceProfile, values: dict[str, float]) -> EvidenceProfile:
    """``profile`` with the parameters in ``values`` set (the others as they are)."""
    matrix = dict(profile.matrix)
    for datatype, name in (("bfloat16", "matrix_max_efficiency"), ("float8", "matrix_float8_max_efficiency")):
        if name in values and datatype in matrix:
            matrix[datatype] = matrix[datatype].model_copy(update={"operation_size_efficiency": _flat(values[name])})
    networks = list(profile.networks)
    if "nvlink_efficiency" in values:
        networks[0] = networks[0].model_copy(update={"efficiency": values["nvlink_efficiency"]})
    if "nvlink_all_to_all_efficiency" in values:
        networks[0] = networks[0].model_copy(update={"measured_collectives": {
            **(networks[0].measured_collectives or {}), "all_to_all": all_to_all_curve(
                values["nvlink_all_to_all_efficiency"])}})
    update = {"matrix": matrix, "networks": tuple(networks)}
    if "grouped_gemm_half_size" in values:
        update["grouped_gemm"] = GroupedGemm(half_size_operations=values["grouped_gemm_half_size"])
    return profile.model_copy(update=update)


def all_to_all_curve(efficiency: float) -> tuple[CollectiveCurve, ...]:
    """A flat ``all_to_all`` curve: ``efficiency`` for every message of one byte or more, every group of two or
    more (family collective_curves; the MoE dispatch and combine messages are megabytes)."""
    return (CollectiveCurve(participants=2, points=(SizePoint(size_bytes=1.0, efficiency=efficiency),),
                            source=f"{STRUCTURE} fit: the MoE all-to-all's efficiency inside one NVLink domain"),)


class RunsDesign:
    """The records of one GPU, lowered once and priced on the real estimate path for any candidate profile
    (the interface :func:`~harness.measurements.fit.fit_design` reads: ``records``, ``targets``,
    ``per_target``, ``predict``)."""

    def __init__(self, records: Sequence[IterationRecord], template_profile: EvidenceProfile) -> None:
        self.records = tuple(records)
        self.template = template_profile
        self.datatype = "bfloat16"
        self.targets = tuple(Target(i, "iteration", 0) for i in range(len(self.records)))
        self.lowerings, self.inputs, mixed = [], [], []
        for record in self.records:
            data = record.estimate_input(template_profile.name)
            check_tiers(data, template_profile, record.id)
            self.inputs.append(data)
            # two kinds of block (dense and MoE, MTP, some recomputed): each lowered on its own (estimate_mixed)
            if blocks.priced_by_stages(data.model, data.execution):
                lowering, _, dense = mixed_lowerings(data, record.id)
                mixed.append(dense)
            else:
                lowering = lower(data, record.id)
                mixed.append(None)
            self.lowerings.append(lowering)
        self.mixed = tuple(mixed)
        self.concretes = tuple(lo.concrete() if lo.concurrent else None for lo in self.lowerings)

    def per_target(self, values: dict[int, tuple[float, ...]]) -> np.ndarray:
        return np.array([values[t.record][t.value] if t.record in values else np.nan for t in self.targets])

    def predict(self, profile: EvidenceProfile, view: CostView = SYSTEM_EVIDENCE_VIEW) -> np.ndarray:
        """Every record's iteration seconds under ``profile`` and ``view`` (the estimate's figures)."""
        out = np.empty(len(self.records))
        for i, (lowering, concrete, mixed) in enumerate(zip(self.lowerings, self.concretes, self.mixed)):
            if concrete is None:
                out[i] = cost_view(lowering.plan, profile, view, model=lowering.model, mixed=mixed)[1].total_s
            elif mixed is None:
                pricer = pricer_for(profile, view, lowering.plan.datatype)
                out[i] = concrete_iteration(concrete, pricer, lowering.model).total_s
            else:
                pricer = pricer_for(profile, view, lowering.plan.datatype)
                out[i] = mixed_concrete_iteration(concrete, lowering.plan, pricer, lowering.model, mixed).total_s
        return out

    def check(self, profile: EvidenceProfile) -> float:
        """The largest relative difference between :meth:`predict` and :func:`~harness.estimate.estimate_lowering`."""
        predicted = self.predict(profile)
        worst = 0.0
        for value, lowering, data, mixed in zip(predicted, self.lowerings, self.inputs, self.mixed):
            estimated = (estimate_lowering(lowering, profile, (SYSTEM_EVIDENCE_VIEW,)) if mixed is None
                         else estimate_mixed(data, profile, (SYSTEM_EVIDENCE_VIEW,)))
            real = estimated.views["system_evidence"].total_s
            worst = max(worst, abs(value - real) / real)
        return worst


def island_of(profile: EvidenceProfile) -> int:
    """The NVLink domain of the profile (tier 0's processors): the one-node / multi-node split of the weights."""
    return profile.networks[0].size_processors


def fit_records(design: RunsDesign, measured: np.ndarray, parameters: Sequence[Parameter], island: int,
                progress: Callable[[int], None] | None = None) -> FitResult:
    """The structure's fit of ``parameters`` to ``measured`` (per record; NaN: not a training record)."""
    return fit_design(design, design.template, measured, island=island, datatype=design.datatype,
                      parameters=parameters, progress=progress, apply=with_values)


FIXED = (
    "processing_mode roofline (a kernel is bound by compute or memory traffic, not their sum)",
    "vector engines and memory tier 1 flat at the base profile's largest efficiency (not fitted: the rows do not "
    "identify them)",
    "matrix engines' saturating curves without a fixed cost per GEMM (half_size 0); a datatype no training row "
    "uses keeps the base profile's curve",
    "ring volume models on every tier: all_reduce 2 x (1 - 1/n), reduce_scatter and all_gather 1 x (1 - 1/n) of "
    "the message per processor",
    "hierarchical collectives for groups larger than a tier's island",
    "tier 1 (scale-out) at the base profile's documented bandwidth and efficiency",
    "no host issue time per operation (family launch absent): fused Transformer Engine modules and CUDA graphs",
)


@dataclasses.dataclass(frozen=True)
class RunsRevision:
    profile: EvidenceProfile
    result: FitResult
    design: RunsDesign
    parameters: tuple[Parameter, ...]
    evaluator_rel: float


def parameters_named(names: Sequence[str], source: str = "--parameters") -> tuple[Parameter, ...]:
    """The :data:`PARAMETERS` named, in their order; an unknown name is an InputError naming ``source``."""
    known = {p.name: p for p in PARAMETERS}
    for name in names:
        if name not in known:
            raise InputError("<command line>", source, f"unknown parameter {name!r} (known: {', '.join(known)})")
    return tuple(p for p in PARAMETERS if p.name in names)


def fixed_values(profile: EvidenceProfile, names: Sequence[str]) -> dict[str, float]:
    """The fitted values of ``names`` in another revision (``profile.fit``): parameters a revision takes from a
    sibling fitted on more rows (e.g. GB200 from B200: the same Blackwell GPU and NVLink generation)."""
    fitted = {p.name: p.value for p in (profile.fit.parameters if profile.fit else ())}
    for name in names:
        if name not in fitted:
            raise InputError("<command line>", "--fixed-from", f"{profile.name} has no fitted {name!r} (its "
                                                                f"parameters: {', '.join(fitted) or 'none'})")
    return {name: fitted[name] for name in names}


def fit_runs_revision(corpora: Sequence, records: Sequence[IterationRecord], base: EvidenceProfile, name: str, *,
                      parameters: Sequence[str] | None = None, fixed_from: EvidenceProfile | None = None,
                      fixed: Sequence[str] = (), progress: Callable[[int], None] | None = None) -> RunsRevision:
    """Fit the revision ``name`` on ``base`` to the iteration ``records`` of ``corpora`` (module rules): the
    ``parameters`` named (default: every one a record exercises) less those ``fixed`` at ``fixed_from``'s fitted
    values; a fit that is not a claim its data supports is :class:`~harness.measurements.fit.FitRefused`."""
    sources = ", ".join(c.path for c in corpora)
    for record in records:
        if record.execution.datatype != "bfloat16":
            raise InputError(sources, f"{record.id}: execution.datatype",
                             f"{record.execution.datatype}: the {STRUCTURE} structure fits runs of bf16 layouts "
                             "(Megatron-Core + Transformer Engine, their fp8 recipes included)")
    if "bfloat16" not in base.matrix:
        raise InputError("<command line>", "--base", f"{base.name} has no bfloat16 matrix engine to fit")
    taken = fixed_values(fixed_from, fixed) if fixed_from is not None else {}
    skeleton = with_values(template(base, name), taken)
    design = RunsDesign(records, skeleton)
    chosen = fitted_parameters(design.records) if parameters is None else parameters_named(parameters)
    parameters = tuple(p for p in chosen if p.name not in taken)
    island = island_of(base)
    measured = np.array([r.measured_iteration_s for r in design.records])
    result = fit_records(design, measured, parameters, island, progress)
    problems = claim_problems(design, result, parameters, island)
    if problems:
        raise FitRefused(problems, residual_summary(design, result, parameters, island))
    used = {c.path: sum(1 for r in c.records if r.kind == "iteration") for c in corpora}
    fit = FitProvenance(
        base_profile=base.name, base_revision=base.revision(),
        corpora=corpus_digests(corpora, used),
        objective=(f"scipy.optimize.least_squares (trf, soft_l1, f_scale {F_SCALE}) on log(predicted / measured) of "
                   f"the system_evidence iteration time on the estimate path (structure {STRUCTURE}); runs inside "
                   f"one NVLink domain of {island} and runs across domains weigh the same in total; values rounded "
                   "to 5 significant digits"),
        parameters=parameter_provenance(result, parameters),
        fixed=FIXED + tuple(f"{n} = {v:g} from {fixed_from.name} (revision {fixed_from.revision()[:12]})"
                            for n, v in taken.items())
        + tuple(f"{p.name} not fitted: the base profile's value" for p in PARAMETERS
                if p not in parameters and p.name not in taken and any(exercised(p, r) for r in design.records)))
    profile = result.profile.model_copy(update={
        "fit": fit,
        "description": f"{name}: {base.name} refitted to measured runs ({', '.join(c.header.name for c in corpora)})",
        "provenance": (f"Fitted by 'harness evidence fit --structure {STRUCTURE}' on {base.name} (revision "
                       f"{base.revision()[:12]}) to the measurement corpora listed under fit.corpora (measured "
                       "runs of the Megatron-Core + Transformer Engine stack); parameters, bounds and uncertainties "
                       "under fit.parameters; fixed structure under fit.fixed; see docs/modern-evidence.md"),
    })
    worst = design.check(profile)
    if not worst <= 1e-12:
        raise HarnessError(f"the fit's evaluator and the estimate path differ by {worst:.3g} (relative): a bug")
    return RunsRevision(profile, result, design, parameters, worst)
