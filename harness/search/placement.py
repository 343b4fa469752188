"""Price one PortablePlanIR on many network-tier placements at once.

A plan's messages carry the tier of the layout it was lowered with; network
placement changes nothing else in the plan. A placement is one tier per
dimension the search places (:data:`harness.search.space.PLACED_DIMENSIONS`,
its columns). :class:`PlacementPricer` has the interface
:func:`harness.estimate.cost_view` needs (``task``, ``message_s``,
``boundary_s``, ``work``) and returns every network time as a numpy array over
the placements (a message priced on the tier its group has in each placement,
:func:`harness.ir.mesh.group_tier_of`, through the pricer's own ``message_s``
and ``boundary_s``);
compute and memory times stay scalars. ``block_times`` and ``compose`` then run unchanged:
their arithmetic is elementwise (IEEE double, no fused operations), so element
``i`` of every result is bit-identical to the scalar estimate of placement
``i``.

:class:`ZeroNetworkPricer` prices every message at 0 s. With all addends
non-negative the composed total is monotone in every message time (rounded
sums and products of non-negative numbers are monotone), so its total is an
exact lower bound on the total of every placement, provided the bubble
subtracts nothing (no bubble-reduction blocks): the search's pruning bound.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from harness.cost.views import PassCost, Pricer, TaskCost
from harness.ir import mesh
from harness.ir.portable import Message, PlanTask, PortablePlanIR, TaskMessages
from harness.search.space import PLACED_DIMENSIONS


def with_messages(cost: TaskCost, messages: TaskMessages, price: Callable[[Message | None], Any]) -> TaskCost:
    """``cost`` with the network times of its messages (forward and activation-gradient passes, base and
    edge block) priced by ``price`` instead: the task priced with its group on another tier, or on every
    placement."""
    fw, bw = cost.passes["forward"], cost.passes["activation_grad"]
    passes = dict(cost.passes)
    passes["forward"] = PassCost(fw.compute_s, fw.memory_s, fw.processing_s, price(messages.forward_base),
                                 price(messages.forward_edge))
    passes["activation_grad"] = PassCost(bw.compute_s, bw.memory_s, bw.processing_s, price(messages.backward_base),
                                         price(messages.backward_edge))
    return TaskCost(cost.name, cost.phase, cost.primitive, passes)


class PlacementPricer:
    """Prices ``plan`` on ``placements`` (one row per placement, one tier per placed dimension)."""

    def __init__(self, pricer: Pricer, plan: PortablePlanIR, placements: np.ndarray, networks: int) -> None:
        self._pricer = pricer
        self.profile, self.view, self.work = pricer.profile, pricer.view, pricer.work
        self.roofline, self.compute_s, self.memory_s, self.tier2_s = (pricer.roofline, pricer.compute_s,
                                                                       pricer.memory_s, pricer.tier2_s)
        self._networks = networks
        self._tiers = {d: placements[:, i] for i, d in enumerate(PLACED_DIMENSIONS)}
        self._sizes = {use.dimension: use.group_size for use in plan.network_use}
        self._tensor, self._pipeline = self._tiers["tensor"], self._tiers["pipeline"]
        p = plan.pipeline
        pipeline = self.group_tiers(p.spans)
        self._dimension = {id(m): pipeline for m in (p.forward, p.backward) if m is not None}
        if plan.data_parallel is not None:
            data = self.group_tiers(plan.data_parallel.spans)
            self._dimension.update({id(m): data for m in plan.data_parallel.messages})
            expert = plan.data_parallel.expert  # a MoE plan's expert weights' gradients, over expert-DP
            if expert is not None:
                spans = self.group_tiers(expert.spans)
                self._dimension.update({id(m): spans for m in expert.messages})
        weights = plan.vocabulary_weights  # harness.cost.outside.outside_work prices its messages
        if weights is not None:
            gradient = self.group_tiers(weights.spans)
            self._dimension.update({id(m): gradient for m in weights.gradient_messages})
            if weights.embedding_group is not None:
                self._dimension[id(weights.embedding_group)] = pipeline

    def group_tiers(self, spans: mesh.Group) -> np.ndarray:
        """The tier a message of the group travels on, per placement."""
        return mesh.group_tier_of(self._sizes, self._tiers, spans)

    def _on_tiers(self, message: Message | None, tiers: np.ndarray) -> np.ndarray | float:
        if message is None:
            return 0.0
        per_tier = np.array([self._pricer.message_on_tier_s(message, t) for t in range(self._networks)])
        return per_tier[tiers]

    def message_s(self, message: Message | None) -> np.ndarray | float:
        """Pipeline and data-parallel messages of the plan (and its vocabulary matrices'), per placement."""
        if message is None:
            return 0.0
        return self._on_tiers(message, self._dimension[id(message)])

    def boundary_s(self, message: Message | None, plan: PortablePlanIR) -> np.ndarray | float:
        """A pipeline boundary transfer per placement: the pricer's, with the placement's PP tier on the
        message and its TP tier on the plan's tensor group (family ``partitioned_p2p`` reads both)."""
        if message is None:
            return 0.0
        prices: dict[tuple[int, int], float] = {}
        out = np.empty(len(self._tensor))
        for i, (tensor, pipeline) in enumerate(zip(self._tensor.tolist(), self._pipeline.tolist())):
            price = prices.get((tensor, pipeline))
            if price is None:
                placed = plan.trusted_replace(network_use=tuple(
                    u.trusted_replace(network_tier=tensor) if u.dimension == "tensor" else u
                    for u in plan.network_use))
                price = prices[(tensor, pipeline)] = self._pricer.boundary_s(
                    message.trusted_replace(network_tier=pipeline), placed)
            out[i] = price
        return out

    def task(self, task: PlanTask) -> TaskCost:
        """The scalar task cost, with its message times per placement (on its group's tiers)."""
        cost = self._pricer.task(task)
        if task.messages is None:
            return cost
        tiers = self.group_tiers(task.messages.spans)
        return with_messages(cost, task.messages, lambda message: self._on_tiers(message, tiers))


class ZeroNetworkPricer:
    """Prices every message at 0 s (the lower-bound composition)."""

    def __init__(self, pricer: Pricer) -> None:
        self._pricer = pricer
        self.profile, self.view, self.work = pricer.profile, pricer.view, pricer.work
        self.roofline, self.compute_s, self.memory_s, self.tier2_s = (pricer.roofline, pricer.compute_s,
                                                                       pricer.memory_s, pricer.tier2_s)

    def message_s(self, message: Message | None) -> float:
        return 0.0

    def boundary_s(self, message: Message | None, plan: PortablePlanIR) -> float:
        return 0.0

    def task(self, task: PlanTask) -> TaskCost:
        cost = self._pricer.task(task)
        if task.messages is None:
            return cost
        passes = dict(cost.passes)
        for name in ("forward", "activation_grad"):
            c = passes[name]
            passes[name] = PassCost(c.compute_s, c.memory_s, c.processing_s)
        return TaskCost(cost.name, cost.phase, cost.primitive, passes)
