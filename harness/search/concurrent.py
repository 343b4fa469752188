"""TP/DP overlap and offload variants of one plan, all at once.

The estimate prices a layout with TP/DP overlap or offload by the
``calculon-0.1.0`` projection of its ConcretePlanIR
(:func:`harness.schedule.projection.calculon_projection`). Building a
ConcretePlanIR costs about 10 ms; the projection reads little of it. What
the search shares, per plan (one lowering key and TP overlap mode):

- the per-block sums (:func:`harness.schedule.projection.block_sums`), once
  per TP tier: they depend on the plan, the tiers of the groups its tasks'
  messages span (the tensor group), the tiles and pipe, not on DP overlap,
  offload or the PP and DP tiers; a :class:`TierPricer` prices the plan's
  task messages on their group's tier (the plan is lowered with tier 0);
- the offload transfer sizes and the memory tiers of each offload choice
  (:func:`harness.passes.concretize.offload_transfer_bytes`,
  :meth:`TransformerConcretize.buffers`, :func:`harness.ir.concrete.tier_total_bytes`);

and :func:`project` prices what the closed forms after the block sums read
(the pipeline p2p time, the offload transfer time and the DP sync time of
each variant's tiers and choices) and evaluates those forms,
:mod:`harness.schedule.calculon_forms` (the same functions the estimate's
projection calls), on numpy arrays: one element per (DP overlap, offload,
placement) variant. Every element is bit-identical to the estimate of that
execution (``tests/test_search.py`` checks every execution of small spaces,
and a stratified sample of larger ones, against
``harness.estimate.estimate``; ``test_search_follows_the_calculon_compatibility_rules``
with the overlap rules switched off).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from harness.cost.outside import iteration_tasks, outside_work
from harness import session
from harness.cost.views import MEMO_LIMIT, Pricer, TaskCost
from harness.ir import mesh
from harness.ir.concrete import tier_total_bytes
from harness.ir.distributed import OverlappedLinearShape
from harness.ir.model import ModelIR, Offload
from harness.ir.portable import Message, PlanTask, PortablePlanIR
from harness.passes.concretize import TransformerConcretize, offload_transfer_bytes
from harness.schedule import calculon_forms as forms
from harness.schedule.memory import BlockMemory, StageMemory
from harness.schedule.projection import BlockSums
from harness.search.placement import with_messages
from harness.search.space import PLACED_DIMENSIONS


class TierPricer:
    """A pricer whose task messages travel on the tiers ``tiers`` gives their group's dimensions (the
    highest of them: :func:`harness.ir.mesh.group_tier_of` with every dimension of the group sending, as
    the plan names groups). A task whose group has a dimension without a tier here is an error."""

    def __init__(self, pricer: Pricer, tiers: dict[str, int]) -> None:
        self._pricer = pricer
        self._tiers = tiers
        self.profile = pricer.profile
        self.view = pricer.view
        self.roofline = pricer.roofline
        self.compute_s = pricer.compute_s
        self.memory_s = pricer.memory_s
        self.tier2_s = pricer.tier2_s
        self.work = pricer.work
        # bounded as the Pricer's memos (a worker's context lives long)
        self._tasks: session.IdentityMemo[TaskCost] = session.IdentityMemo("tier task prices", MEMO_LIMIT)

    def message_s(self, message: Message | None) -> float:
        """A message of a tiled task (the projection's overlapped linears: their group is
        ``OverlappedLinearShape.GROUP``) on that group's tier."""
        if message is None:
            return 0.0
        spans = OverlappedLinearShape.GROUP
        return self._pricer.message_on_tier_s(message, mesh.group_tier_of(dict.fromkeys(spans, 2), self._tiers,
                                                                          spans))

    def task(self, task: PlanTask) -> TaskCost:
        cost = self._pricer.task(task)
        msgs = task.messages
        if msgs is None:
            return cost
        hit = self._tasks.get(task)
        if hit is not None:
            return hit
        spans = msgs.spans
        tier = mesh.group_tier_of(dict.fromkeys(spans, 2), self._tiers, spans)

        def price(message: Message | None) -> float:
            return 0.0 if message is None else self._pricer.message_on_tier_s(message, tier)

        return self._tasks.put(with_messages(cost, msgs, price), task)


@dataclasses.dataclass(frozen=True)
class Variants:
    """Variant arrays (one element per execution): tiers, DP overlap, offload switches."""

    tensor: np.ndarray
    pipeline: np.ndarray
    data: np.ndarray
    context: np.ndarray
    dp_overlap: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    optimizer: np.ndarray
    expert: np.ndarray | None = None  #: the expert dimensions' tiers (None: 0, a dense plan's)
    expert_tensor: np.ndarray | None = None

    @classmethod
    def product(cls, options: list[tuple[bool, bool, bool, bool]], placements: np.ndarray) -> "Variants":
        """Every (dp_overlap, weights, activations, optimizer) option with every placement (option-major)."""
        n = len(placements)
        opts = np.repeat(np.array(options, dtype=bool).reshape(-1, 4), n, axis=0)
        tiers = np.tile(placements, (len(options), 1))
        column = {d: tiers[:, i] for i, d in enumerate(PLACED_DIMENSIONS)}
        return cls(column["tensor"], column["pipeline"], column["data"], column["context"], opts[:, 0], opts[:, 1],
                   opts[:, 2], opts[:, 3], column["expert"], column["expert_tensor"])

    def tiers(self) -> dict[str, np.ndarray]:
        """The tier of each placed dimension, per variant."""
        zero = np.zeros_like(self.tensor)
        return {"tensor": self.tensor, "pipeline": self.pipeline, "data": self.data, "context": self.context,
                "expert": zero if self.expert is None else self.expert,
                "expert_tensor": zero if self.expert_tensor is None else self.expert_tensor}


#: The placed dimensions a block's task messages span (the tensor group's, and a MoE block's expert groups'):
#: the projection's block sums are computed once per combination of their tiers (:func:`block_tier_combinations`).
BLOCK_DIMENSIONS = ("tensor", "expert", "expert_tensor")


def block_tier_combinations(sizes: dict[str, int], networks: int) -> list[dict[str, int]]:
    """The tiers of :data:`BLOCK_DIMENSIONS` the block sums are computed for: every tier of the tensor group
    (as for a dense plan: one per tier, in order), times every tier of each expert dimension of degree above 1
    (tier 0 otherwise)."""
    ranges = [range(networks) if d == "tensor" or sizes.get(d, 1) > 1 else range(1) for d in BLOCK_DIMENSIONS]
    return [dict(zip(BLOCK_DIMENSIONS, combination)) for combination in itertools.product(*ranges)]


def block_tier_index(sizes: dict[str, int], networks: int, tiers: dict[str, np.ndarray]) -> np.ndarray:
    """Each variant's index in :func:`block_tier_combinations` (for a dense plan: its tensor tier)."""
    index = np.zeros_like(tiers["tensor"])
    for d in BLOCK_DIMENSIONS:  # row-major over the combinations' ranges
        width = networks if d == "tensor" or sizes.get(d, 1) > 1 else 1
        index = index * width + (tiers[d] if width > 1 else 0)
    return index


def offload_memory(plan: PortablePlanIR, block: BlockMemory, stage: StageMemory,
                   offload: tuple[bool, bool, bool]) -> tuple[float, float]:
    """(tier-1, tier-2) bytes of the plan's first stage with an offload choice (the ConcretePlanIR's buffers)."""
    o = Offload.trusted(weights=offload[0], activations=offload[1], optimizer=offload[2])
    buffers = TransformerConcretize.buffers(plan, o, block, stage)
    return tier_total_bytes(buffers, 1), tier_total_bytes(buffers, 2)


def on_variant_tiers(pricer: Pricer, networks: int, tiers):
    """A message pricer for :func:`harness.cost.outside.outside_work`: a message priced on the tier its group has
    in each variant (``tiers``: the group's tier index of every variant), an array over the variants (None: 0)."""
    def message_s(message):
        if message is None:
            return 0.0
        return np.array([pricer.message_on_tier_s(message, t) for t in range(networks)], dtype=float)[tiers]
    return message_s


#: numpy arrays: one element per variant (see :mod:`harness.schedule.calculon_forms`).
ARRAYS = forms.ARRAYS


def project(plan: PortablePlanIR, block: BlockMemory, pricer: Pricer, sums: list[BlockSums], variants: Variants,
            networks: int, model: ModelIR) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(total_s, components_s) of every variant: the ``calculon-0.1.0`` projection (training), vectorized,
    with the output layer added as the estimate adds it to a projection (family ``output_layer``).

    ``sums``: the plan's :func:`~harness.schedule.projection.block_sums` on each network tier (priced with a
    :class:`TierPricer` of that tier, with the plan's TP overlap tiles and mode).
    """
    s = plan.schedule
    sizes = {use.dimension: use.group_size for use in plan.network_use}
    tiers = variants.tiers()
    tn = variants.tensor
    pn = mesh.group_tier_of(sizes, tiers, plan.pipeline.spans)
    dn = mesh.group_tier_of(sizes, tiers, plan.data_parallel.spans) if plan.data_parallel is not None else None
    expert = plan.data_parallel.expert if plan.data_parallel is not None else None  # a MoE plan's expert gradients
    en = mesh.group_tier_of(sizes, tiers, expert.spans) if expert is not None else None

    # the block sums are per tier of the groups their messages span (the tensor group; a MoE block's expert groups)
    combination = block_tier_index(sizes, networks, tiers)
    k = BlockSums(**{field.name: np.array([getattr(x, field.name) for x in sums], dtype=float)[combination]
                     for field in dataclasses.fields(BlockSums)})

    def by_tier(values: list[float], tiers: np.ndarray) -> np.ndarray:
        return np.array(values, dtype=float)[tiers]

    p2p = [forms.pipeline_p2p_s(plan.pipeline, True, t, pricer.message_s) for t in range(networks)]
    fw_pp, bw_pp = by_tier([f for f, _ in p2p], pn), by_tier([b for _, b in p2p], pn)

    sizes = {}
    for w, a, o in {(bool(w), bool(a), bool(o)) for w, a, o in
                    zip(variants.weights, variants.activations, variants.optimizer)}:
        forward_bytes, backward_bytes = offload_transfer_bytes(s.recompute, Offload.trusted(
            weights=w, activations=a, optimizer=o), block) if (w or a or o) else (0, 0)
        sizes[(w, a, o)] = (pricer.tier2_s(forward_bytes), pricer.tier2_s(backward_bytes))
    code = variants.weights * 4 + variants.activations * 2 + variants.optimizer
    table = np.zeros((8, 2))
    for (w, a, o), times in sizes.items():
        table[w * 4 + a * 2 + o] = times
    fw_off_s, bw_off_s = table[code, 0], table[code, 1]

    dp = None
    if plan.data_parallel is not None:
        sync = []
        for t in range(networks):
            block_sync_s = 0
            for message in plan.data_parallel.messages:
                block_sync_s += pricer.message_on_tier_s(message, t)
            sync.append(block_sync_s)
        block_s = by_tier(sync, dn)
        if expert is not None:  # the expert gradients after the dense ones, as in the estimate's program
            for message in expert.messages:
                block_s = block_s + by_tier([pricer.message_on_tier_s(message, t) for t in range(networks)], en)
        dp = forms.DataParallelSync(
            block_s=block_s, processor_usage=by_tier([n.processor_usage for n in pricer.profile.networks],
                                                               dn),
            sharding=len(plan.data_parallel.messages) == 2, overlap=variants.dp_overlap, same_tier_as_tp=dn == tn,
            same_tier_as_pp=dn == pn)

    n = len(tn)
    it = forms.iteration(s, k, fw_pp=fw_pp, bw_pp=bw_pp, fw_off_s=fw_off_s, bw_off_s=bw_off_s, dp=dp, ops=ARRAYS,
                         finish=lambda v: np.broadcast_to(np.asarray(v, dtype=float), (n,)))
    section = iteration_tasks(pricer, model, s, plan.tasks, plan.bytes_per_element,
                              vocabulary_weights=plan.vocabulary_weights)
    work = outside_work(pricer, section, sync_message_s=on_variant_tiers(pricer, networks, dn),
                        embedding_message_s=on_variant_tiers(pricer, networks, pn))
    components, total = forms.with_outside_work(it.components_s, it.total_s, s.microbatches, work, portable=False)
    return total, components
