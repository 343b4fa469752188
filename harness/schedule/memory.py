"""Per-processor memory of the first pipeline stage, and feasibility.

Block figures (per microbatch where they are activations):

- weights, weight gradients (element datatype, sharded; and fp32 unsharded),
  activation gradients, optimizer state: sums over the block's tasks;
- working activations: inputs of tasks that do not reuse another's;
- stored activations: every task's input, minus (training) outputs not kept
  and inputs not kept; none under full recomputation, which keeps one
  checkpoint (the block input) per block instead.

Stage totals (training): 1F1B keeps ``m = min(microbatches, PP)`` microbatches
in flight, ``m x (1 + (PP-1)/(interleaving x PP))`` with interleaving; the
working block's activations once; activation gradients of one block; one fp32
unsharded gradient plus ``blocks - 1`` sharded ones; optimizer state for every
block. Inference keeps the weights and one block's working activations.
Tier-1 total = weights + activations + checkpoints + weight gradients +
optimizer + activation gradients.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from harness.evidence.profile import EvidenceProfile
from harness.ir.portable import PortablePlanIR


@dataclasses.dataclass(frozen=True, slots=True)
class BlockMemory:
    weight_bytes: float
    activation_working_bytes: float
    activation_storage_bytes: float
    activation_checkpoint_bytes: float
    weight_grad_bytes: float
    weight_grad_unsharded_bytes: float
    activation_grad_bytes: float
    optimizer_bytes: float


@dataclasses.dataclass(frozen=True, slots=True)
class StageMemory:
    weight: float
    activation: float
    activation_checkpoint: float
    weight_grad: float
    activation_grad: float
    optimizer: float
    tier1_total: float


def block_memory(plan: PortablePlanIR) -> BlockMemory:
    training = plan.schedule.training
    weight = working = storage = wgrad = wgrad32 = agrad = optim = 0.0
    for task in plan.tasks:
        if task.phase != "forward":
            continue
        c, r = task.capacity, task.retention
        weight += c.weight_bytes
        if not r.activation_reused:
            working += c.activation_bytes
        storage += c.activation_bytes
        if training:
            if not r.output_stored:
                storage -= c.output_bytes
            if not r.activation_stored:
                storage -= c.activation_bytes
        wgrad += c.weight_grad_bytes
        wgrad32 += c.weight_grad_unsharded_bytes
        agrad += c.activation_grad_bytes
        optim += c.optimizer_bytes
    if plan.schedule.recompute == "full":
        storage = 0.0
    return BlockMemory(weight, working, storage, plan.schedule.activation_checkpoint_bytes, wgrad, wgrad32, agrad, optim)


def stage_memory(plan: PortablePlanIR, block: BlockMemory) -> StageMemory:
    s = plan.schedule
    blocks = s.blocks_per_stage
    weight = block.weight_bytes * blocks
    if not s.training:
        act = block.activation_working_bytes
        return StageMemory(weight, act, 0, 0, 0, 0, weight + act)
    in_flight = min(s.microbatches, s.pipeline_parallel)
    factor = in_flight
    if s.chunks_per_stage > 1:
        factor = in_flight * (1 + (s.pipeline_parallel - 1) / (s.chunks_per_stage * s.pipeline_parallel))
    if s.recompute == "full":
        act = block.activation_working_bytes
        checkpoint = blocks * block.activation_checkpoint_bytes * factor
    else:
        act = block.activation_working_bytes + block.activation_storage_bytes * (blocks * factor - 1)
        checkpoint = 0
    wgrad = block.weight_grad_unsharded_bytes + block.weight_grad_bytes * (blocks - 1)
    optim = block.optimizer_bytes * blocks
    agrad = block.activation_grad_bytes
    total = weight + act + checkpoint + (wgrad + optim) + agrad
    return StageMemory(weight, act, checkpoint, wgrad, agrad, optim, total)


def network_problem(groups: Iterable[tuple[int, int]], profile: EvidenceProfile) -> str | None:
    """Why parallel groups placed as ``(network tier, group size)`` do not fit the
    profile's networks, or None: the groups sharing a tier multiply; their
    product must not exceed the tier's size and, on a tier that must be filled,
    must divide it."""
    need: dict[int, int] = {}
    for tier, size in groups:
        need[tier] = need.get(tier, 1) * size
    for tier, size in sorted(need.items()):
        net = profile.networks[tier]
        if size > net.size_processors:
            return f"network tier {tier} is not big enough: its groups need {size} processors, it connects {net.size_processors}"
        if net.must_be_filled and net.size_processors % size:
            return f"network tier {tier} is not fully used: groups of {size} do not tile its {net.size_processors} processors"
    return None


def memory_problem(memory: StageMemory, profile: EvidenceProfile) -> str | None:
    """Why the stage's memory does not fit memory tier 1, or None."""
    capacity = profile.memory_tier1.capacity_bytes
    if memory.tier1_total > capacity:
        return f"memory tier 1 needs {memory.tier1_total:.0f} bytes but has {capacity} bytes"
    return None


def infeasibility(plan: PortablePlanIR, memory: StageMemory, profile: EvidenceProfile) -> str | None:
    """Why the configuration cannot run on the profile's system (networks first, then memory), or None."""
    return (network_problem(((u.network_tier, u.group_size) for u in plan.network_use), profile)
            or memory_problem(memory, profile))
