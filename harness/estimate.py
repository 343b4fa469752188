"""The estimate: both cost views of one PortablePlanIR, composed end to end.

``estimate(input)`` lowers the anonymous input once and costs the same plan
under each view. It reads the evidence profile and nothing else: no case id,
no comparison data, no oracle.

Final guard (:func:`require_physical`): every figure of an estimate (totals,
components, memory, workload, efficiencies, sample rate) is finite and
non-negative, or the estimate is a :class:`NonPhysicalEstimateError` naming
the input and the figure, never an ``ok``. The input and evidence bounds
(:mod:`harness.ir.model`, :mod:`harness.evidence.profile`) are meant to make
it unreachable; it stays as the last line of defence.
"""


import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from pydantic import Field, create_model

from harness import calculon_compat as compat, session
from harness.cases import EstimateInput, validate_input
from harness.ir import blocks
from harness.cost.outside import accumulation_tasks, iteration_tasks, outside_work
from harness.cost.output_layer import output_tasks
from harness.cost.views import COST_VIEWS, CostView, PlanPricer, pricer_for
from harness.errors import InputError
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.ir.base import Frozen
from harness.ir.concrete import ConcretePlanIR
from harness.ir.model import ModelIR
from harness.ir.portable import Message, PlanTask, PortablePlanIR
from harness.passes import multi_token
from harness.passes.precision import quantized_gemm_datatype
from harness.pipeline import Lowering, lower
from harness.schedule import calculon_forms
from harness.schedule.block import BlockTimes, block_times
from harness.schedule.compose import Composition, compose
from harness.schedule.memory import (
    BlockMemory,
    StageMemory,
    block_memory,
    concrete_infeasibility,
    infeasibility,
    stage_memory,
)
from harness.schedule.projection import (
    BlockSums,
    calculon_projection,
    concrete_block_sums,
    data_parallel_sync,
    projection_of,
)
from harness.vocabulary import COMPONENTS, ESTIMATE_STATUSES, MEMORY_FIGURES, PARALLEL_DIMENSIONS
from harness.workload import MatrixFlopsPerBlock, WorkloadMetrics, matrix_flops_per_block, workload_metrics

#: Both named views, in vocabulary order.
DEFAULT_VIEWS = tuple(COST_VIEWS.values())


#: The timing components of one iteration, seconds: one field per ``harness.vocabulary.COMPONENTS`` entry.
Components = create_model("Components", __base__=Frozen, __module__=__name__,
                          __doc__="The timing components of one iteration, seconds (harness.vocabulary.COMPONENTS).",
                          **COMPONENTS.fields(float))
#: Memory of one processor of the first stage, bytes: one field per ``harness.vocabulary.MEMORY_FIGURES`` entry.
MemoryBytes = create_model("MemoryBytes", __base__=Frozen, __module__=__name__,
                           __doc__="Memory of one processor of the first stage, bytes "
                                   "(harness.vocabulary.MEMORY_FIGURES).",
                           **MEMORY_FIGURES.fields(float))


class Requirements(Frozen):
    """Bandwidths that keep the overlap and the offload hidden (reported, not applied), bytes/s."""

    tp_overlap_per_s: float = Field(description="TP network bandwidth for the tiled GEMM/collective overlap.")
    dp_overlap_chunk_per_s: float = Field(description="DP network bandwidth to hide the sync of all chunks but the last.")
    dp_overlap_tail_per_s: float = Field(description="DP network bandwidth to hide the last chunk's sync.")
    activation_offload_per_s: float = Field(description="Tier-2 bandwidth to offload a block's kept activations.")
    weight_offload_per_s: float = Field(description="Tier-2 bandwidth to offload a block's weights.")
    optimizer_offload_per_s: float = Field(description="Tier-2 bandwidth to offload weight gradients and optimizer state.")
    offload_per_s: float = Field(description="Tier-2 bandwidth for everything offloaded.")


class ViewEstimate(Frozen):
    """One cost view's estimate of one iteration."""

    view: str = Field(description="Cost view name.")
    total_s: float = Field(description="Iteration time, seconds.")
    components_s: Components = Field(description="Timing components, seconds; they add up to total_s.")
    memory_bytes: MemoryBytes = Field(description="Per-processor memory.")
    workload: WorkloadMetrics = Field(description="Per-block workload facts (view-independent).")
    useful_flops: float = Field(description="Operations of one block for one microbatch (all passes).")
    compute_efficiency: float = Field(description="Peak-matrix time of the useful work / compute time.")
    system_efficiency: float = Field(description="Compute time / total time.")
    total_efficiency: float = Field(description="Peak-matrix time of the useful work / total time.")
    sample_rate_per_s: float = Field(description="Samples per second.")
    requirements: Requirements | None = Field(
        None, description="Overlap/offload bandwidth requirements (layouts with TP/DP overlap or offload).")
    matrix_flops_per_block: MatrixFlopsPerBlock | None = Field(
        None, description="Matrix operations of one block in the FLOP oracle's convention (view-independent); "
                          "``estimate --json`` reports it as workload.matrix_flops_per_block.")


VIEW_JSON_FIELDS = ("total_s", "components_s", "memory_bytes", "workload")


class Estimate(Frozen):
    """Both views of one input, with its lowering digests and feasibility."""

    status: ESTIMATE_STATUSES.literal() = Field(description="ok, or infeasible on the profile's system.")
    reason: str | None = Field(description="Why infeasible (figures are still given).")
    system: str = Field(description="Evidence profile name.")
    evidence_revision: str = Field(description="SHA-256 of the evidence profile's canonical content.")
    digests: dict[str, str] | None = Field(description="ModelIR, DistributedTaskIR and PortablePlanIR digests "
                                                       "(None: not asked for, as by the batch, whose entries do not "
                                                       "report them; computing them writes the IRs' canonical text).")
    views: dict[str, ViewEstimate] = Field(description="Estimate per cost view.")

    def views_json(self) -> dict[str, Any]:
        """Per view: total_s, components_s, memory_bytes, workload (the ``estimate --json`` view fields), the
        workload with ``matrix_flops_per_block`` (kept out of :class:`WorkloadMetrics`, whose 27 figures the
        workload goldens pin)."""
        out = {}
        for name, v in self.views.items():
            out[name] = view = v.model_dump(mode="json", include=set(VIEW_JSON_FIELDS))
            if v.matrix_flops_per_block is not None:
                view["workload"]["matrix_flops_per_block"] = v.matrix_flops_per_block.model_dump(mode="json")
        return out


class NonPhysicalEstimateError(InputError):
    """An estimate figure came out negative, NaN or infinite: an error naming the input, never an ``ok``."""


_INF = math.inf


def _check_figures(source: str, prefix: str, figures: dict[str, Any], profile: EvidenceProfile) -> None:
    for name, value in figures.items():
        if not 0.0 <= value < _INF:  # False for NaN, negatives and infinities
            raise NonPhysicalEstimateError(
                source, f"{prefix}{name}", f"{value!r} is not a finite, non-negative figure: this input and evidence "
                f"profile {profile.name} (revision {profile.revision()[:12]}) drive the arithmetic out of range")


def require_physical(est: "Estimate", profile: EvidenceProfile, source: str) -> "Estimate":
    """``est`` if every figure of every view is finite and non-negative (see the module rules).

    Fast path: ``min >= 0`` and a finite ``sum`` of a view's figures prove them all finite and non-negative
    (a NaN or an infinity makes the sum NaN or infinite); only otherwise is each figure checked by name.
    """
    for name, view in est.views.items():
        own = {k: v for k, v in view.__dict__.items() if type(v) is float or type(v) is int}
        components, memory, workload = view.components_s.__dict__, view.memory_bytes.__dict__, view.workload.__dict__
        figures = [*own.values(), *components.values(), *memory.values(), *workload.values()]
        if min(figures) >= 0.0 and sum(figures) < _INF:
            continue
        sections = (("components_s", components), ("memory_bytes", memory), ("workload", workload))
        _check_figures(source, f"{name}.", own, profile)
        for section_name, section in sections:
            _check_figures(source, f"{name}.{section_name}.", section, profile)
    return est


def clear_caches() -> None:
    """Forget every memo of the current session (:meth:`harness.session.Session.clear`: lowerings, interned
    IR values, canonical texts, prices, projections), e.g. to measure a cold estimate; results never depend
    on it."""
    session.current().clear()


#: Apply the alternative form of the named Calculon compatibility rules inside a ``with`` block (a fresh
#: session with those rules off: :func:`harness.calculon_compat.switched_off`).
switched_off = compat.switched_off


def check_tiers(data: EstimateInput, profile: EvidenceProfile, source: str) -> None:
    count = len(profile.networks)
    for dim in PARALLEL_DIMENSIONS:
        tier = getattr(data.execution.network_tiers, dim, None)
        if tier is not None and tier >= count:
            raise InputError(source, f"execution.network_tiers.{dim}",
                             f"tier {tier} does not exist in evidence profile {profile.name} ({count} tiers)")
    datatype = data.execution.datatype
    for engines, family in ((profile.matrix, "matrix"), (profile.vector, "vector")):
        if datatype not in engines:
            raise InputError(source, "execution.datatype",
                             f"evidence profile {profile.name} has no {datatype} {family} engine (its datatypes: "
                             f"{', '.join(d for d in profile.matrix if d in profile.vector)}); to add one, give "
                             f"evidence/{profile.name}.yaml a `matrix: {datatype}:` and a `vector: {datatype}:` entry "
                             "(peak_flops_per_s, operation_size_efficiency: the hardware's figures), see docs/cases.md")
    precision = data.execution.precision
    gemm = quantized_gemm_datatype(precision)
    if gemm is not None and gemm not in profile.matrix:  # said here, naming the case, not by the pricer
        raise InputError(source, "execution.precision",
                         f"precision {precision} runs the linear GEMMs in {gemm}, and evidence profile {profile.name} "
                         f"has no {gemm} matrix engine (its matrix datatypes: {', '.join(profile.matrix)}); state "
                         f"another precision or price the case on a profile with a {gemm} engine")


@dataclasses.dataclass(frozen=True)
class MultiTokenHead:
    """Multi-token prediction (``model.mtp_layers``): the layers and the work of each outside its block, once per
    microbatch (:mod:`harness.passes.multi_token`)."""

    layers: int
    tasks: tuple[PlanTask, ...]
    forward_messages: tuple[Message, ...]
    backward_messages: tuple[Message, ...]


@dataclasses.dataclass(frozen=True)
class MixedBlocks:
    """A model priced stage by stage (harness.ir.blocks), whose blocks are of two kinds: the main kind's plan is
    the estimate's (MoE blocks, or the blocks not recomputed), ``other`` the other kind's (dense blocks, or the
    blocks recomputed whole: ``execution.recompute_blocks``, ``other_kind`` names it), the ``(main kind, other
    kind)`` blocks each pipeline stage holds, and the MTP layers' head (None: no MTP). ``per_stage`` is None when
    the slowest stage holds the plan's blocks per stage (no MTP, and ``PP x v`` dividing the blocks or the blocks
    two kinds by their recompute)."""

    other: PortablePlanIR
    stages: tuple[tuple[int, int], ...]
    #: the blocks the composition counts per stage (MTP adds blocks to the last; uneven virtual stages hold
    #: fewer on the last, harness.ir.blocks.virtual_stage_blocks)
    per_stage: int | None = None
    head: MultiTokenHead | None = None
    #: the other kind's ConcretePlanIR (TP/DP overlap: :func:`mixed_concrete_iteration`), else None
    other_concrete: ConcretePlanIR | None = None
    #: the other kind's name: the prefix of its plan's digests (``dense_distributed``, ``recomputed_portable``)
    other_kind: str = "dense"


#: The fields of BlockTimes and BlockMemory a stage has once, not once per block (the boundary transfers, the
#: working space): averaged over the stage's blocks, never spread over the blocks the composition counts.
_ONCE_PER_STAGE = frozenset({"pp_forward_s", "pp_backward_s", "activation_working_bytes"})
#: BlockMemory fields a stage holds once as a buffer of its own (:func:`~harness.schedule.memory.stage_memory`
#: adds them once, in no Calculon rule): the activation-gradient buffer of the block running. A stage of two kinds
#: of block holds the larger kind's, never an average (which undercut a dense block's buffer among MoE blocks by
#: 21 %) nor a sum over an MTP stage's extra blocks (which scaled it by 5/4). The working activations and the one
#: unsharded fp32 weight gradient enter Calculon's "one block less" rules (calculon_compat.activation_bytes,
#: weight_grad_bytes) with the per-block average, and stay as :func:`_mixed` gives them.
ONE_BLOCK_MEMORY = ("activation_grad_bytes",)


def _mixed(a, b, n_a: int, n_b: int, cls, per_stage: int | None = None):
    """Field-wise ``(n_a x a + n_b x b) / n`` with ``n = per_stage`` (None: ``n_a + n_b``): the per-block average
    of a stage holding ``n_a`` blocks like ``a`` and ``n_b`` like ``b``, over the blocks the composition
    multiplies it by again (a last stage with MTP blocks holds more than those; the boundary transfers it has once
    per stage, :data:`_ONCE_PER_STAGE`, over ``n_a + n_b``; memory held once per stage: :func:`mixed_block_memory`).
    ``cls``: a dataclass, or a pydantic model (its fields)."""
    held = n_a + n_b
    n = held if per_stage is None else per_stage
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(cls.model_fields)
    return cls(**{name: (n_a * getattr(a, name) + n_b * getattr(b, name)) / (held if name in _ONCE_PER_STAGE else n)
                  for name in names})


def mixed_block_memory(a: BlockMemory, b: BlockMemory, n_a: int, n_b: int, per_stage: int | None) -> BlockMemory:
    """The block memory of a stage holding ``n_a`` blocks like ``a`` and ``n_b`` like ``b``: the per-block average
    (:func:`_mixed`) of the fields held per block, the larger present kind's of :data:`ONE_BLOCK_MEMORY`."""
    present = [kind for kind, count in ((a, n_a), (b, n_b)) if count]
    return dataclasses.replace(_mixed(a, b, n_a, n_b, BlockMemory, per_stage),
                               **{name: max(getattr(kind, name) for kind in present) for name in ONE_BLOCK_MEMORY})


def head_s(pricer, head: MultiTokenHead, model: ModelIR | None, planned: tuple[PlanTask, ...] | None
           ) -> tuple[float, float]:
    """(forward, backward) seconds of the MTP layers per microbatch outside their blocks: each layer's head
    (tasks and TP messages) and its own output layer and loss (the main one's tasks again), ``layers`` times."""
    forward = sum(pricer.work(t.forward).processing_s for t in head.tasks)
    forward += sum(pricer.message_s(m) for m in head.forward_messages)
    backward = sum(pricer.work(t.activation_grad).processing_s + pricer.work(t.weight_grad).processing_s
                   for t in head.tasks)
    backward += sum(pricer.message_s(m) for m in head.backward_messages)
    for task in output_tasks(pricer, model, True, planned):
        forward += pricer.work(task.forward).processing_s
        backward += pricer.work(task.activation_grad).processing_s + pricer.work(task.weight_grad).processing_s
    return head.layers * forward, head.layers * backward


#: The BlockTimes fields of a block's own work (the stage's time): the boundary transfers are the stage's, once.
_STAGE_WORK = ("forward_s", "recompute_s", "activation_grad_s", "weight_grad_s", "tp_forward_base_s",
               "tp_backward_base_s", "recomm_base_s", "dp_s")


def slowest_stage(main: BlockTimes, other: BlockTimes, stages: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The ``(main kind, other kind)`` blocks of the stage whose blocks take longest per microbatch (and sync)."""
    def work(counts: tuple[int, int]) -> float:
        return sum(counts[0] * getattr(main, f) + counts[1] * getattr(other, f) for f in _STAGE_WORK)
    return max(stages, key=work)


def mixed_memory(plan: PortablePlanIR, mixed: MixedBlocks) -> StageMemory:
    """The memory of the stage with the largest tier-1 total, each stage from the blocks it holds (with the first
    stage's in-flight microbatches: an upper bound for the later stages of 1F1B; ``plan``: the main kind's)."""
    main, other = block_memory(plan), block_memory(mixed.other)
    return max((stage_memory(plan, mixed_block_memory(main, other, n, d, mixed.per_stage))
                for n, d in mixed.stages), key=lambda m: m.tier1_total)


def _mixed_outside_work(work, pricer, plan: PortablePlanIR, mixed: MixedBlocks, counts: tuple[int, int],
                        model: ModelIR | None, planned: tuple[PlanTask, ...] | None):
    """The outside work of a model priced stage by stage (``plan``: the main kind's): the unfused gradient
    accumulation per block as the slowest stage's ``counts`` average it, and the MTP head once per microbatch."""
    n_main, n_other = counts
    if work.accumulation_s is not None:  # per block: the slowest stage's average
        other = accumulation_tasks(pricer, plan.schedule, mixed.other.tasks, plan.bytes_per_element)
        other_accumulation = outside_work(pricer, other).accumulation_s or (0.0, 0.0)
        per_stage = n_main + n_other if mixed.per_stage is None else mixed.per_stage
        work = work._replace(accumulation_s=tuple((n_main * a + n_other * d) / per_stage
                                                  for a, d in zip(work.accumulation_s, other_accumulation)))
    if mixed.head is not None and plan.schedule.training:  # MTP: once per microbatch
        head = head_s(pricer, mixed.head, model, planned)
        own = work.per_microbatch_s or (0.0, 0.0)
        work = work._replace(per_microbatch_s=(own[0] + head[0], own[1] + head[1]))
    return work


def mixed_concrete_iteration(concrete: ConcretePlanIR, plan: PortablePlanIR, pricer, model: ModelIR | None,
                             mixed: MixedBlocks):
    """A model priced stage by stage under TP/DP overlap (``concrete`` and ``plan``: the MoE blocks'; the dense
    blocks' in ``mixed``): the ``calculon-0.1.0`` projection of the MoE blocks' schedule, pipeline and DP
    placement with the slowest stage's per-block averages (its blocks chosen as :func:`cost_view` chooses them)
    of the two ConcretePlanIRs' block sums, DP sync times and block memory, then the outside work as
    :func:`concrete_iteration` and :func:`cost_view` add it: the portable path's per-block average, on the
    concrete block sums (tests/test_moe.py checks the forward and backward against the two uniform models')."""
    other_concrete = mixed.other_concrete
    assert other_concrete is not None
    n_main, n_other = slowest_stage(block_times(plan, tuple(map(pricer.task, plan.tasks)), pricer),
                                    block_times(mixed.other, tuple(map(pricer.task, mixed.other.tasks)), pricer),
                                    mixed.stages)
    main_sums, other_sums = concrete_block_sums(concrete, pricer), concrete_block_sums(other_concrete, pricer)
    k = _mixed(main_sums, other_sums, n_main, n_other, BlockSums, mixed.per_stage)
    # a bandwidth the overlapped GEMMs need is the larger kind's, not an average
    k.tp_required_bytes_per_s = max(main_sums.tp_required_bytes_per_s, other_sums.tp_required_bytes_per_s)
    memory = mixed_block_memory(block_memory(concrete), block_memory(other_concrete), n_main, n_other,
                                mixed.per_stage)
    dp, other_dp = data_parallel_sync(concrete, pricer), data_parallel_sync(other_concrete, pricer)
    if dp is not None:
        per_stage = n_main + n_other if mixed.per_stage is None else mixed.per_stage
        other_s = 0.0 if other_dp is None else other_dp.block_s
        dp = dp._replace(block_s=(n_main * dp.block_s + n_other * other_s) / per_stage)
    projection = projection_of(concrete, pricer, k, dp, memory)
    s = concrete.schedule
    work = outside_work(pricer, iteration_tasks(pricer, model, s, concrete.tasks, concrete.bytes_per_element))
    work = _mixed_outside_work(work, pricer, plan, mixed, (n_main, n_other), model, None)
    c, total = calculon_forms.with_outside_work(projection.components_s, projection.total_s, s.microbatches, work,
                                                portable=False)
    return dataclasses.replace(projection, components_s=c, total_s=total)


def cost_view(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, *,
              model: ModelIR | None = None, pricer: PlanPricer | None = None,
              mixed: MixedBlocks | None = None) -> tuple[BlockTimes, Composition]:
    """Block critical paths and the composed iteration under one view.

    The plan's output tasks (a model that states its vocabulary), or those of
    the profile's default vocabulary (family ``output_layer``; then ``model``,
    the plan's ModelIR, is needed), and the host's microbatch time of family
    ``launch`` are added to the forward and backward components, once per
    microbatch (:mod:`harness.cost.output_layer`), and the vocabulary matrices' optimizer step and gradient
    synchronisation once (:mod:`harness.cost.outside`); the unfused gradient
    accumulation (family ``gradient_accumulation``) to backward and the
    bubble (:mod:`harness.cost.accumulation`).
    ``pricer`` replaces the view's shared pricer: any
    :class:`~harness.cost.views.PlanPricer` (the search passes one that prices
    every tier placement at once, as arrays; the arithmetic here is
    elementwise, so each element is bit-identical to the scalar estimate of
    that placement).
    """
    pricer = pricer_for(profile, view, plan.datatype) if pricer is None else pricer
    costs = tuple(map(pricer.task, plan.tasks))
    block = block_times(plan, costs, pricer)
    if mixed is not None:  # ``plan`` is the MoE blocks': the slowest stage's blocks, on average per block
        other = block_times(mixed.other, tuple(map(pricer.task, mixed.other.tasks)), pricer)
        n_main, n_other = slowest_stage(block, other, mixed.stages)
        block = _mixed(block, other, n_main, n_other, BlockTimes, mixed.per_stage)
    comp = compose(plan.schedule, block)
    section = iteration_tasks(pricer, model, plan.schedule, plan.tasks, plan.bytes_per_element,
                              output_tasks_planned=plan.output_tasks, vocabulary_weights=plan.vocabulary_weights)
    work = outside_work(pricer, section)
    if mixed is not None:
        work = _mixed_outside_work(work, pricer, plan, mixed, (n_main, n_other), model, plan.output_tasks)
    components, total = calculon_forms.with_outside_work(comp.components_s, comp.total_s, plan.schedule.microbatches,
                                                         work, portable=True)
    if components is not comp.components_s:
        comp = Composition(components, total, comp.chunks)
    return block, comp


def projected(concrete: ConcretePlanIR, pricer):
    """:func:`calculon_projection` memoized per (ConcretePlanIR, pricer) instance in the session's
    ``projections`` (a pure function of two immutable values; the instances are held by the memo; bounded)."""
    memo = session.current().projections
    hit = memo.get(concrete, pricer)
    return memo.put(calculon_projection(concrete, pricer), concrete, pricer) if hit is None else hit


def concrete_iteration(concrete: ConcretePlanIR, pricer, model: ModelIR | None = None):
    """The estimate's iteration of a ConcretePlanIR under ``pricer``'s view: its ``calculon-0.1.0`` projection
    (memoized, :func:`projected`) with the per-microbatch work of the measured families added where the profile
    defines them and the view applies them (:func:`~harness.cost.outside.outside_work`: once per
    microbatch, outside the projected blocks, as in :func:`cost_view`), and the unfused gradient accumulation
    (:func:`~harness.cost.outside.outside_work`)."""
    projection = projected(concrete, pricer)
    s = concrete.schedule
    work = outside_work(pricer, iteration_tasks(pricer, model, s, concrete.tasks, concrete.bytes_per_element))
    c, total = calculon_forms.with_outside_work(projection.components_s, projection.total_s, s.microbatches, work,
                                                portable=False)
    if c is projection.components_s:
        return projection
    return dataclasses.replace(projection, components_s=c, total_s=total)


def view_estimate(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, workload: WorkloadMetrics,
                  stage: StageMemory, concrete: ConcretePlanIR | None = None,
                  model: ModelIR | None = None, matrix_flops: MatrixFlopsPerBlock | None = None,
                  mixed: MixedBlocks | None = None) -> ViewEstimate:
    """One view; a ConcretePlanIR (TP/DP overlap, offload) is projected with the ``calculon-0.1.0`` projection."""
    requirements = None
    memory = {name: getattr(stage, name) for name in MEMORY_FIGURES}
    if concrete is None:
        _, comp = cost_view(plan, profile, view, model=model, mixed=mixed)
        c, total = comp.components_s, comp.total_s
    elif mixed is not None:  # the stage's memory stays the stage-by-stage figure (mixed_memory)
        projection = mixed_concrete_iteration(concrete, plan, pricer_for(profile, view, plan.datatype), model, mixed)
        c, total = projection.components_s, projection.total_s
        requirements = Requirements(**dataclasses.asdict(projection.requirements))
    else:
        projection = concrete_iteration(concrete, pricer_for(profile, view, plan.datatype), model)
        c, total = projection.components_s, projection.total_s
        requirements = Requirements(**dataclasses.asdict(projection.requirements))
        memory.update(tier1_total=concrete.tier1_total_bytes, tier2_total=concrete.tier2_total_bytes)
    s = plan.schedule
    useful = workload.forward_flops
    if s.training:
        useful += workload.activation_grad_flops + workload.weight_grad_flops + workload.optimizer_flops
    compute_time = c["forward"] + c["backward"] + c["optimizer"]
    perfect = s.blocks_per_stage * s.microbatches * useful / profile.matrix[plan.datatype].peak_flops_per_s
    return ViewEstimate(
        view=view.name, total_s=total, components_s=Components(**c),
        memory_bytes=MemoryBytes(**memory),
        workload=workload, useful_flops=useful,
        compute_efficiency=perfect / compute_time if compute_time else 0.0,
        system_efficiency=compute_time / total if total else 0.0,
        total_efficiency=perfect / total if total else 0.0,
        sample_rate_per_s=s.global_batch / total if total else 0.0,
        requirements=requirements, matrix_flops_per_block=matrix_flops,
    )


def estimate_lowering(lowering: Lowering, profile: EvidenceProfile,
                      views: tuple[CostView, ...] = DEFAULT_VIEWS, source: str = "<input>", *,
                      digests: bool = True) -> Estimate:
    """Both views of a lowering; every figure checked by :func:`require_physical`; the IR digests unless not
    ``digests``."""
    plan = lowering.plan
    block: BlockMemory = block_memory(plan)
    stage = stage_memory(plan, block)
    workload = workload_metrics(plan, block)
    matrix_flops = matrix_flops_per_block(lowering.distributed)
    concrete = lowering.concrete() if lowering.concurrent else None
    if concrete is None:
        reason = infeasibility(plan, stage, profile)
    else:
        reason = concrete_infeasibility(plan, concrete, profile)
    return require_physical(Estimate(
        status="infeasible" if reason else "ok", reason=reason, system=profile.name,
        evidence_revision=profile.revision(), digests=lowering.digests() if digests else None,
        views={v.name: view_estimate(plan, profile, v, workload, stage, concrete, lowering.model, matrix_flops)
               for v in views},
    ), profile, source)


def estimate(data: EstimateInput, views: tuple[CostView, ...] = DEFAULT_VIEWS, *, source: str = "<input>",
             evidence_dir: Path | None = None, digests: bool = True) -> Estimate:
    """Lower ``data`` and cost it under ``views`` with its evidence profile (``digests``: with the IR digests;
    a caller that does not report them saves writing the IRs' canonical text). ``views``: a tuple (or list) of
    :class:`CostView` or of the named views' names (``harness.vocabulary.VIEWS``: ``peak_only``,
    ``system_evidence``). Arguments of another type are an InputError naming the argument (the public API,
    ``harness.estimate_input``, raises the project's errors only)."""
    source = source if isinstance(source, str) else "<input>"
    data, views = _checked_arguments(data, views, evidence_dir, source)
    profile = load_profile(data.system, evidence_dir, referrer=source)
    check_tiers(data, profile, source)
    if blocks.priced_by_stages(data.model, data.execution):
        return estimate_mixed(data, profile, views, source, digests=digests)
    return estimate_lowering(lower(data, source), profile, views, source, digests=digests)


def _checked_arguments(data, views, evidence_dir, source: str) -> tuple[EstimateInput, tuple[CostView, ...]]:
    """:func:`estimate`'s arguments as it needs them, or an InputError naming the argument."""
    if not isinstance(data, EstimateInput):
        raise InputError(source, "data", f"must be an EstimateInput (harness.EstimateInput(...), or "
                                         f"harness.load_case(path).estimate_input()), got {type(data).__name__}")
    if isinstance(views, str) or not isinstance(views, (tuple, list)):
        hint = f" (a tuple of one: views=({views!r},))" if isinstance(views, str) else ""
        raise InputError(source, "views", f"must be a tuple of cost views or view names ({', '.join(COST_VIEWS)}), "
                                          f"got {type(views).__name__}{hint}")
    resolved = []
    for index, view in enumerate(views):
        if isinstance(view, str) and view in COST_VIEWS:
            view = COST_VIEWS[view]
        if not isinstance(view, CostView):
            raise InputError(source, f"views[{index}]", f"{view!r} is not a cost view (a CostView, or one of "
                                                        f"{', '.join(COST_VIEWS)})")
        resolved.append(view)
    if evidence_dir is not None and not isinstance(evidence_dir, (str, os.PathLike)):
        raise InputError(source, "evidence_dir", f"must be a directory path (str or os.PathLike) or None, got "
                                                 f"{type(evidence_dir).__name__}")
    return data, tuple(resolved)


def mixed_lowerings(data: EstimateInput, source: str = "<input>") -> tuple[Lowering, Lowering, MixedBlocks]:
    """A model priced stage by stage (:func:`harness.ir.blocks.priced_by_stages`): the main kind's lowering (MoE
    blocks, or the blocks not recomputed), the other kind's (dense blocks, or the blocks recomputed whole) and the
    :class:`MixedBlocks` (the other kind's plan, the blocks per stage) the iteration is composed with
    (:func:`estimate_mixed`, the megatron-core fit's evaluator)."""
    validate_input(source, data)
    partial = blocks.is_partially_recomputed(data.model, data.execution)
    kinds = (blocks.recompute_variants if partial else blocks.variants)(data.model, data.execution)
    (main_shape, main_layout), (other_shape, other_layout) = kinds
    main = lower(EstimateInput(model=main_shape, execution=main_layout, system=data.system), source)
    other = lower(EstimateInput(model=other_shape, execution=other_layout, system=data.system), source)
    mtp = data.model.mtp_layers
    head = None if mtp is None else MultiTokenHead(
        mtp, multi_token.head_tasks(data.model, data.execution), *multi_token.head_messages(data.model, data.execution))
    stages = blocks.recompute_stage_blocks if partial else blocks.stage_blocks
    per_stage = (None if mtp is None and (partial or not blocks.is_uneven(data.model, data.execution))
                 else main.plan.schedule.blocks_per_stage)
    return main, other, MixedBlocks(other.plan, tuple(stages(data.model, data.execution)), per_stage, head,
                                    # the MoE kind's concurrency may be its own (expert_overlap): then the
                                    # dense kind's block sums come from its ConcretePlanIR too
                                    other.concrete() if other.concurrent or main.concurrent else None,
                                    "recomputed" if partial else "dense")


def estimate_mixed(data: EstimateInput, profile: EvidenceProfile, views: tuple[CostView, ...] = DEFAULT_VIEWS,
                   source: str = "<input>", *, digests: bool = True) -> Estimate:
    """A model priced stage by stage (:mod:`harness.ir.blocks`: dense and MoE blocks, MTP layers, or some blocks
    of each chunk recomputed): each kind lowered as a uniform model, the iteration composed from the slowest
    stage's blocks (:func:`cost_view` with :class:`MixedBlocks`), the memory of the fullest stage
    (:func:`mixed_memory`); the workload figures and digests are the main kind's plan's (the other plan's digests
    under ``dense_*`` or ``recomputed_*``, :attr:`MixedBlocks.other_kind`; with some blocks recomputed the
    workload is the first stage's per-block average of the two kinds). Under TP/DP overlap the main kind's
    ConcretePlanIR is projected with the stage's averages (:func:`mixed_concrete_iteration`); offload is refused
    (harness.ir.blocks.stage_problems)."""
    main, other, mixed = mixed_lowerings(data, source)
    plan = main.plan
    stage = mixed_memory(plan, mixed)
    workload = workload_metrics(plan, block_memory(plan))
    if mixed.other_kind == "recomputed":  # the same blocks but their recompute: the first stage's average block
        workload = _mixed(workload, workload_metrics(mixed.other, block_memory(mixed.other)), *mixed.stages[0],
                          WorkloadMetrics)
    matrix_flops = matrix_flops_per_block(main.distributed)
    reason = infeasibility(plan, stage, profile)
    both = ({**main.digests(), **{f"{mixed.other_kind}_{k}": v for k, v in other.digests().items()}} if digests
            else None)
    return require_physical(Estimate(
        status="infeasible" if reason else "ok", reason=reason, system=profile.name,
        evidence_revision=profile.revision(), digests=both,
        views={v.name: view_estimate(plan, profile, v, workload, stage, main.concrete() if main.concurrent else None,
                                     main.model, matrix_flops, mixed)
               for v in views},
    ), profile, source)
