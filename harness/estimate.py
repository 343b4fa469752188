"""The estimate: both cost views of one PortablePlanIR, composed end to end.

``estimate(input)`` lowers the anonymous input once and costs the same plan
under each view. It reads the evidence profile and nothing else: no case id,
no comparison data, no oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from harness.cases import EstimateInput
from harness.cost.views import PEAK_ONLY, SYSTEM_EVIDENCE, CostView, Pricer, clear_pricers, pricer_for
from harness.errors import InputError
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.ir.base import Frozen
from harness.ir.portable import PortablePlanIR
from harness.pipeline import Lowering, lower
from harness.pipeline import clear_caches as clear_lowering_caches
from harness.schedule.block import BlockTimes, block_times
from harness.schedule.compose import Composition, compose
from harness.schedule.memory import BlockMemory, StageMemory, block_memory, infeasibility, stage_memory
from harness.workload import WorkloadMetrics, workload_metrics

DEFAULT_VIEWS = (PEAK_ONLY, SYSTEM_EVIDENCE)


class Components(Frozen):
    """The nine timing components of one iteration, seconds."""

    forward: float = Field(description="Forward compute.")
    backward: float = Field(description="Activation- and weight-gradient compute.")
    optimizer: float = Field(description="Optimizer step.")
    recompute: float = Field(description="Recompute clones.")
    tensor_parallel: float = Field(description="Exposed TP collectives (with their local work).")
    pipeline_parallel: float = Field(description="Exposed pipeline p2p transfers.")
    data_parallel: float = Field(description="Exposed data-parallel gradient sync.")
    recommunication: float = Field(description="Exposed recommunication (all-gather redo, repeated collectives).")
    pipeline_bubble: float = Field(description="1F1B / interleaved pipeline bubble.")


class MemoryBytes(Frozen):
    """Memory of one processor of the first stage, bytes."""

    weight: float = Field(description="Weights.")
    activation: float = Field(description="Activations (working and stored).")
    activation_checkpoint: float = Field(description="Activation checkpoints (full recompute).")
    weight_grad: float = Field(description="Weight gradients.")
    activation_grad: float = Field(description="Activation gradients.")
    optimizer: float = Field(description="Optimizer state.")
    tier1_total: float = Field(description="Total required in memory tier 1.")


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


VIEW_JSON_FIELDS = ("total_s", "components_s", "memory_bytes", "workload")


class Estimate(Frozen):
    """Both views of one input, with its lowering digests and feasibility."""

    status: Literal["ok", "infeasible"] = Field(description="ok, or infeasible on the profile's system.")
    reason: str | None = Field(description="Why infeasible (figures are still given).")
    system: str = Field(description="Evidence profile name.")
    evidence_revision: str = Field(description="SHA-256 of the evidence profile's canonical content.")
    digests: dict[str, str] = Field(description="ModelIR, DistributedTaskIR and PortablePlanIR digests.")
    views: dict[str, ViewEstimate] = Field(description="Estimate per cost view.")

    def views_json(self) -> dict[str, Any]:
        """Per view: total_s, components_s, memory_bytes, workload (the ``estimate --json`` view fields)."""
        return {name: v.model_dump(mode="json", include=set(VIEW_JSON_FIELDS)) for name, v in self.views.items()}


def clear_caches() -> None:
    """Forget everything the estimate path memoizes (lowerings, interned IR
    values, canonical texts, prices), e.g. to measure a cold estimate; results
    never depend on it."""
    clear_lowering_caches()
    clear_pricers()


def check_tiers(data: EstimateInput, profile: EvidenceProfile, source: str) -> None:
    count = len(profile.networks)
    for dim in ("tensor", "pipeline", "data"):
        tier = getattr(data.execution.network_tiers, dim)
        if tier >= count:
            raise InputError(source, f"execution.network_tiers.{dim}",
                             f"tier {tier} does not exist in evidence profile {profile.name} ({count} tiers)")
    for engines, family in ((profile.matrix, "matrix"), (profile.vector, "vector")):
        if data.execution.datatype not in engines:
            raise InputError(source, "execution.datatype",
                             f"evidence profile {profile.name} has no {data.execution.datatype} {family} engine")


def cost_view(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView,
              pricer: Pricer | None = None) -> tuple[BlockTimes, Composition]:
    """Block critical paths and the composed iteration under one view.

    ``pricer`` replaces the view's shared pricer: anything with ``task`` and
    ``message_s`` (the search passes one that prices every tier placement at
    once, as arrays; the arithmetic here is elementwise, so each element is
    bit-identical to the scalar estimate of that placement).
    """
    pricer = pricer_for(profile, view, plan.datatype) if pricer is None else pricer
    costs = tuple(map(pricer.task, plan.tasks))
    block = block_times(plan, costs, pricer)
    p = plan.pipeline
    return block, compose(plan.schedule, block, p.forward_transfers_per_microbatch, p.backward_transfers_per_microbatch)


def view_estimate(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, workload: WorkloadMetrics,
                  stage: StageMemory) -> ViewEstimate:
    _, comp = cost_view(plan, profile, view)
    c = comp.components_s
    s = plan.schedule
    useful = workload.forward_flops
    if s.training:
        useful += workload.activation_grad_flops + workload.weight_grad_flops + workload.optimizer_flops
    compute_time = c["forward"] + c["backward"] + c["optimizer"]
    perfect = s.blocks_per_stage * s.microbatches * useful / profile.matrix[plan.datatype].peak_flops_per_s
    return ViewEstimate(
        view=view.name, total_s=comp.total_s, components_s=Components(**c),
        memory_bytes=MemoryBytes(weight=stage.weight, activation=stage.activation,
                                 activation_checkpoint=stage.activation_checkpoint, weight_grad=stage.weight_grad,
                                 activation_grad=stage.activation_grad, optimizer=stage.optimizer,
                                 tier1_total=stage.tier1_total),
        workload=workload, useful_flops=useful,
        compute_efficiency=perfect / compute_time if compute_time else 0.0,
        system_efficiency=compute_time / comp.total_s if comp.total_s else 0.0,
        total_efficiency=perfect / comp.total_s if comp.total_s else 0.0,
        sample_rate_per_s=s.global_batch / comp.total_s if comp.total_s else 0.0,
    )


def estimate_lowering(lowering: Lowering, profile: EvidenceProfile,
                      views: tuple[CostView, ...] = DEFAULT_VIEWS) -> Estimate:
    plan = lowering.plan
    block: BlockMemory = block_memory(plan)
    stage = stage_memory(plan, block)
    workload = workload_metrics(plan, block)
    reason = infeasibility(plan, stage, profile)
    return Estimate(
        status="infeasible" if reason else "ok", reason=reason, system=profile.name,
        evidence_revision=profile.revision(), digests=lowering.digests(),
        views={v.name: view_estimate(plan, profile, v, workload, stage) for v in views},
    )


def estimate(data: EstimateInput, views: tuple[CostView, ...] = DEFAULT_VIEWS, *, source: str = "<input>",
             evidence_dir: Path | None = None) -> Estimate:
    """Lower ``data`` and cost it under ``views`` with its evidence profile."""
    profile = load_profile(data.system, evidence_dir)
    check_tiers(data, profile, source)
    return estimate_lowering(lower(data, source), profile, views)
