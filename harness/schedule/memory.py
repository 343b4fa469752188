"""Per-processor memory of the first pipeline stage, and feasibility.

Block figures (per microbatch where they are activations):

- weights, weight gradients (element datatype, sharded; and fp32 unsharded),
  activation gradients, optimizer state: sums over the block's tasks;
- working activations: inputs of tasks that do not reuse another's;
- stored activations: every task's input, minus (training) outputs not kept
  and inputs not kept; none under full recomputation, which keeps one
  checkpoint (the block input) per block instead (a stage whose chunks recompute
  only some blocks, ``execution.recompute_blocks``: the per-block average of both
  kinds, the stored activations of the ones kept, the checkpoints of the others).

Stage totals (training): 1F1B keeps ``m = min(microbatches, PP)`` microbatches
in flight, ``m x (1 + (PP-1)/(interleaving x PP))`` with interleaving; the
working block's activations once, next to ``blocks x m - 1`` stored ones;
activation gradients of one block; one fp32 unsharded gradient plus ``blocks -
1`` sharded ones; optimizer state for every block. Inference keeps the weights
and one block's working activations. The vocabulary matrices of a shape that
states ``tied_embeddings`` (the plan's ``vocabulary_weights``,
:mod:`harness.passes.output_layer`) add their weights, their gradients (in
the element datatype, after optimizer sharding: no Calculon rule applies to
them) and their optimizer state once. A quantizing precision recipe's weight
copies (``quantized_weight_bytes``, :mod:`harness.passes.precision`) join the
block's weights. Fully sharded (``execution.fsdp``): the weights are the stage's shard of every block
(``1 / (DP x CP)``) and :data:`FSDP_GATHERED_BLOCKS` blocks gathered whole (with their quantized copies); the
gradients and optimizer state as with optimizer sharding. Tier-1 total = weights + activations +
checkpoints + weight gradients + optimizer + activation gradients. The stored
activations and the gradients follow Calculon 0.1.0's accounting, named in
:mod:`harness.calculon_compat`. The figures are those of
``harness.vocabulary.MEMORY_FIGURES`` (checked at import).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from harness import calculon_compat as compat
from harness.evidence.profile import EvidenceProfile
from harness.ir.portable import NO_CAPACITY, PortablePlanIR
from harness.vocabulary import MEMORY_FIGURES, PARALLEL_DIMENSIONS


#: Blocks whose weights a fully sharded stage holds gathered at once (``execution.fsdp``): the running one and the
#: prefetched next one (Megatron-FSDP: "at least two FSDP units worth of un-sharded weight memory", with their
#: quantized copies; docs/user-guide/features/megatron_fsdp.md).
FSDP_GATHERED_BLOCKS = 2


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
    quantized_weight_bytes: float = 0.0  # a quantizing recipe's weight copies (harness.passes.precision)


@dataclasses.dataclass(frozen=True, slots=True)
class StageMemory:
    weight: float
    activation: float
    activation_checkpoint: float
    weight_grad: float
    activation_grad: float
    optimizer: float
    tier1_total: float
    tier2_total: float = 0.0  # a StageMemory is the portable plan's: nothing is offloaded


MEMORY_FIGURES.require((f.name for f in dataclasses.fields(StageMemory)), "harness.schedule.memory.StageMemory",
                       ordered=True)


def block_memory(plan: PortablePlanIR) -> BlockMemory:
    training = plan.schedule.training
    weight = working = storage = wgrad = wgrad32 = agrad = optim = quantized = 0.0
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
        if c.quantized_weight_bytes is not None:
            quantized += c.quantized_weight_bytes
    if plan.schedule.recompute == "full":
        storage = 0.0
    return BlockMemory(weight, working, storage, plan.schedule.activation_checkpoint_bytes, wgrad, wgrad32, agrad, optim,
                       quantized)


def stage_memory(plan: PortablePlanIR, block: BlockMemory) -> StageMemory:
    s = plan.schedule
    blocks = s.blocks_per_stage
    vocabulary = NO_CAPACITY if plan.vocabulary_weights is None else plan.vocabulary_weights.capacity
    weight = (block.weight_bytes * blocks + vocabulary.weight_bytes if not block.quantized_weight_bytes
              else (block.weight_bytes + block.quantized_weight_bytes) * blocks + vocabulary.weight_bytes)
    dp = plan.data_parallel
    if dp is not None and dp.fully_sharded:  # its shard of every block, and the gathered blocks whole
        gathered = min(FSDP_GATHERED_BLOCKS, blocks)
        weight = (block.weight_bytes * blocks / dp.messages[0].participants
                  + (block.weight_bytes + block.quantized_weight_bytes) * gathered + vocabulary.weight_bytes)
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
        act = compat.activation_bytes(block.activation_working_bytes, block.activation_storage_bytes, blocks, factor)
        # a stage of blocks partly recomputed (harness.ir.blocks.is_partially_recomputed) keeps the recomputed
        # blocks' checkpoints: ``block`` is the per-block average of the two kinds'; otherwise the int 0 as before
        # (a float 0.0 would change the figure's JSON text)
        checkpoint = blocks * block.activation_checkpoint_bytes * factor if block.activation_checkpoint_bytes else 0
    wgrad = (compat.weight_grad_bytes(block.weight_grad_unsharded_bytes, block.weight_grad_bytes, blocks)
             + vocabulary.weight_grad_bytes)
    optim = block.optimizer_bytes * blocks + vocabulary.optimizer_bytes
    agrad = block.activation_grad_bytes
    total = weight + act + checkpoint + (wgrad + optim) + agrad
    return StageMemory(weight, act, checkpoint, wgrad, agrad, optim, total)


def infeasibility(plan: PortablePlanIR, memory: StageMemory, profile: EvidenceProfile) -> str | None:
    """Why the configuration cannot run on the profile's system (networks first, then memory), or None."""
    return (network_infeasibility(plan, profile)
            or memory_problem(1, memory.tier1_total, profile.memory_tier1.capacity_bytes))


#: Offload streams block i+1 while block i runs and block i-1 drains: it needs three blocks per processor.
OFFLOAD_MIN_BLOCKS = 3


def offload_problem(offloading: bool, blocks_per_stage: int) -> str | None:
    """Why offloading cannot run with ``blocks_per_stage`` blocks per processor, or None."""
    if offloading and blocks_per_stage < OFFLOAD_MIN_BLOCKS:
        return (f"offloading needs at least {OFFLOAD_MIN_BLOCKS} blocks per processor, "
                f"the first stage has {blocks_per_stage}")
    return None


def concrete_infeasibility(plan: PortablePlanIR, concrete, profile: EvidenceProfile) -> str | None:
    """Why a ConcretePlanIR cannot run, or None: network tiers, then offload with fewer than
    :data:`OFFLOAD_MIN_BLOCKS` blocks per processor, then memory tier 1, then memory tier 2 (Calculon's order)."""
    o = concrete.options.offload
    return (network_infeasibility(plan, profile)
            or offload_problem(o.weights or o.activations or o.optimizer, plan.schedule.blocks_per_stage)
            or memory_problem(1, concrete.tier1_total_bytes, profile.memory_tier1.capacity_bytes)
            or memory_problem(2, concrete.tier2_total_bytes, profile.memory_tier2.capacity_bytes))


def network_infeasibility(plan: PortablePlanIR, profile: EvidenceProfile) -> str | None:
    """Why the parallel groups do not fit the profile's network tiers, or None. The folded dimensions (the expert
    layout: harness.vocabulary.PARALLEL_DIMENSIONS kind ``folded``) re-partition the same processors, so they are
    checked as a layout of their own, not multiplied with the others."""
    folded = set(PARALLEL_DIMENSIONS.of_kind("folded"))
    return (network_problem(((u.network_tier, u.group_size) for u in plan.network_use
                             if u.dimension not in folded), profile)
            or network_problem(((u.network_tier, u.group_size) for u in plan.network_use
                                if u.dimension in folded), profile))


def network_problem(groups: Iterable[tuple[int, int]], profile: EvidenceProfile) -> str | None:
    """Why parallel groups placed as ``(network tier, group size)`` do not fit the
    profile's networks, or None: the groups sharing a tier multiply; their
    product must not exceed the tier's size and, on a tier that must be filled,
    must divide it (the search checks every tier placement with it)."""
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


def memory_problem(tier: int, need: float, capacity: float) -> str | None:
    """Why ``need`` bytes do not fit memory ``tier`` of ``capacity`` bytes, or None."""
    if need > capacity:
        return f"memory tier {tier} needs {need:.0f} bytes but has {capacity} bytes"
    return None
