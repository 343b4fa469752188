"""Evaluate one group of the search space, sharing everything that can be shared.

Structure (what is computed once, and for what):

- per group: the network verdict of every tier placement (it depends on the
  degrees and the placement only);
- per plan (all-gather redo, fused activation, microbatch, TP overlap): one
  PortablePlanIR, lowered with tier 0 everywhere, its stage memory, its
  prices and the lower bound of its total; executions that differ only in
  network placement, DP overlap and offload reuse it:

  - without TP/DP overlap and offload, the estimate's portable composition
    of every tier placement at once (:mod:`harness.search.placement`);
  - with any of them, the ``calculon-0.1.0`` projection of every (DP
    overlap, offload, placement) variant at once, from block sums computed
    once per TP tier (:mod:`harness.search.concurrent`), and the memory tiers
    of each offload choice;

- per execution: nothing but reading the arrays.

Rules:

- the figures of every execution are bit-identical to
  ``harness.estimate.estimate`` of that execution (system-evidence view);
- status: ``ok``; ``infeasible`` (as the estimate reports it: network tiers,
  then offload with fewer than 3 blocks per processor, then memory tier 1,
  then memory tier 2); ``invalid`` (a layout the estimate refuses, with its
  message; and context parallelism with TP/DP overlap or offload, which the estimate prices but these
  shared block sums do not: :meth:`_Plan.option_problem`);
- pruning (``prune``): once the worker's running top K is full (or the driver
  passed the K-th best rate found by other workers, its floor), a plan whose
  bound cannot reach that rate is not composed; its feasible executions count
  as ``pruned``. The bound is the total of the plan's
  portable composition with every message at 0 s, lowered by a relative
  margin of :data:`BOUND_MARGIN`: in exact arithmetic every component of
  every variant (any placement, overlap, offload) is at least that
  composition's (more network time, tiled GEMMs at least as slow as plain
  ones, non-negative offload and DP terms, no bubble-reduction blocks in
  this space); the margin covers the rounding of two differently ordered
  float sums (far below 1e-12 relative). Pruning therefore never changes the
  top K; feasibility is still decided for every execution, so the counts and
  Calculon's ``-m`` break are unchanged;
- ``mbs_break``: a microbatch size whose executions (all placements) are all
  infeasible ends that microbatch loop.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.errors import HarnessError
from harness.estimate import cost_view
from harness.evidence.profile import EvidenceProfile
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.passes.plan_work import TransformerPlanWork
from harness.pipeline import lower_distributed, plan_work
from harness.schedule.memory import (
    BlockMemory,
    StageMemory,
    block_memory,
    memory_problem,
    network_problem,
    offload_problem,
    stage_memory,
)
from harness.schedule.projection import block_sums
from harness.search.concurrent import TierPricer, Variants, block_tier_combinations, offload_memory, project
from harness.search.pareto import pareto_frontier
from harness.search.placement import PlacementPricer, ZeroNetworkPricer
from harness.search.results import (COMPONENTS, MEMORY, Candidate, Counts, GroupOutcome, RowBuffer, TopK,
                                    calculon_execution)
from harness.search.space import PLACED_DIMENSIONS, GroupLayout, Inner, SpaceOptions, degrees, network_tiers
from harness.vocabulary import PARALLEL_DIMENSIONS, SYSTEM_EVIDENCE

#: The view the search ranks by: the evidence profile as is.
VIEW = COST_VIEWS[SYSTEM_EVIDENCE]
#: Relative margin of the pruning bound (see the module rules).
BOUND_MARGIN = 1e-9


@dataclasses.dataclass(frozen=True)
class SearchProblem:
    """Everything a worker needs (picklable): the model, the request, the profile."""

    shape: TransformerShape
    processors: int
    max_batch: int
    datatype: str
    profile: EvidenceProfile
    options: SpaceOptions
    top: int
    prune: bool = True
    collect_rows: bool = False
    collect_points: bool = False

    @property
    def networks(self) -> int:
        return len(self.profile.networks)

    @property
    def has_tier2(self) -> bool:
        return self.profile.memory_tier2.capacity_bytes > 0


Option = tuple[bool, bool, bool, bool]  # (dp_overlap, weight, activation, optimizer offload)


def beyond_calculon(g) -> dict[str, Any]:
    """The layout fields of a group outside Calculon's space (absent when Calculon's)."""
    return {**({"context_parallel": g.cp} if g.cp > 1 else {}),
            **({"precision": g.precision} if g.precision is not None else {}),
            **({"expert_parallel": g.ep} if g.ep > 1 else {}),
            **({"expert_tensor_parallel": g.etp} if g.etp > 1 else {}),
            **({"moe_dispatcher": g.dispatcher} if g.dispatcher is not None else {})}


def option_of(inner: Inner) -> Option:
    return (inner.dp_overlap, inner.weight_offload, inner.activations_offload, inner.optimizer_offload)


@dataclasses.dataclass
class Figures:
    """Figures of one (plan, option) over the group's placements."""

    total: np.ndarray
    components: dict[str, np.ndarray]


@dataclasses.dataclass
class _Plan:
    """One lowering and everything derived from it (see the module rules)."""

    problem: SearchProblem
    layout: GroupLayout
    tp_overlap: str
    context: "Context"
    invalid: str | None = None
    family: tuple | None = None
    model: Any = None
    plan: Any = None
    block: BlockMemory | None = None
    stage: StageMemory | None = None
    _bound: float | None = None
    _memory: dict = dataclasses.field(default_factory=dict)
    _figures: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, context: "Context", layout: GroupLayout, inner: Inner, microbatch: int) -> "_Plan":
        problem = context.problem
        key = cls(problem, layout, inner.tp_overlap, context)
        g = layout.group
        execution = ExecutionLayout(
            tensor_parallel=g.tp, pipeline_parallel=g.pp, data_parallel=g.dp, global_batch=g.batch,
            microbatch=microbatch, pipeline_interleaving=g.interleaving, datatype=problem.datatype,
            recompute=g.recompute, tp_communication=g.tp_comm, seq_par_ag_redo=inner.seq_par_ag_redo,
            optimizer_sharding=g.optimizer_sharding, fused_activation=inner.fused_activation, attention="multihead",
            network_tiers=network_tiers(g, (0,) * len(PLACED_DIMENSIONS)),
            training=True, tp_overlap=inner.tp_overlap, **beyond_calculon(g))
        problems = layout_problems(problem.shape, execution)
        if problems:
            key.invalid = f"{problems[0][0]}: {problems[0][1]}"
            return key
        key.family = TransformerPlanWork.lowering_key(execution)
        shared = context.lowerings.get(key.family)
        try:
            if shared is None:
                key.model, distributed = lower_distributed(EstimateInput(model=problem.shape, execution=execution,
                                                                         system=problem.profile.name))
                key.plan = plan_work(distributed)
                context.lowerings[key.family] = (distributed, key.plan, key.model)
            else:
                key.plan = TransformerPlanWork.relayout(shared[1], shared[0].trusted_replace(execution=execution))
                key.model = shared[2]  # the output layer reads the shape, microbatch, TP and datatype: shared
        except HarnessError as error:
            key.invalid = str(error)
            return key
        key.block = block_memory(key.plan)
        key.stage = stage_memory(key.plan, key.block)
        return key

    def option_problem(self, option: Option) -> str | None:
        """Why the search does not price ``option`` of this plan (None: it does): context parallelism with TP or
        DP overlap or offload, which the estimate prices through the ConcretePlanIR but the search's shared block
        sums do not (their pricer places the tensor group only, not the context ring's group)."""
        if self.layout.group.cp > 1 and (self.tp_overlap != "none" or any(option)):
            return ("execution.context_parallel: the search does not price context_parallel > 1 with TP/DP "
                    "overlap or offload yet (estimate that case on its own)")
        return None

    @property
    def pricer(self):
        return pricer_for(self.problem.profile, VIEW, self.plan.datatype)

    def memory(self, option: Option) -> dict[str, float]:
        """The memory figures of an option: the stage's, with the ConcretePlanIR's tier totals when concurrent."""
        concurrent = self.tp_overlap != "none" or any(option)
        offload = option[1:]
        hit = self._memory.get((concurrent, offload))
        if hit is None:
            figures = {name: float(getattr(self.stage, field)) for name, field in MEMORY.items()}
            if concurrent:
                figures["tier1_total"], figures["tier2_total"] = offload_memory(self.plan, self.block, self.stage,
                                                                                offload)
            hit = self._memory[(concurrent, offload)] = figures
        return hit

    def memory_reason(self, option: Option) -> str | None:
        """Why an option does not fit the memory tiers (or offload cannot run), None if it does."""
        profile = self.problem.profile
        figures = self.memory(option)
        return (offload_problem(any(option[1:]), self.plan.schedule.blocks_per_stage)
                or memory_problem(1, figures["tier1_total"], profile.memory_tier1.capacity_bytes)
                or memory_problem(2, figures["tier2_total"], profile.memory_tier2.capacity_bytes))

    def block_sums(self) -> list:
        """The projection's block sums on every TP tier (and, for a MoE plan, every tier of its expert groups:
        :func:`harness.search.concurrent.block_tier_combinations`), shared by the plan's interleavings."""
        key = (self.family, self.tp_overlap)
        sums = self.context.block_sums.get(key)
        if sums is None:
            tiles = self.layout.group.tp if self.tp_overlap != "none" else 1
            sizes = {use.dimension: use.group_size for use in self.plan.network_use}
            sums = self.context.block_sums[key] = [
                block_sums(self.plan.tasks, True, self.plan.bytes_per_element, tiers["tensor"], tiles,
                           self.tp_overlap == "pipe", self.context.tier_pricer(tiers))
                for tiers in block_tier_combinations(sizes, self.problem.networks)]
        return sums

    def bound(self) -> float | None:
        """Lower bound of every variant's total (None: no exact bound for this plan)."""
        if self._bound is None and self.plan.schedule.bubble_reduction_blocks == 0:
            _, comp = cost_view(self.plan, self.problem.profile, VIEW, model=self.model,
                                pricer=ZeroNetworkPricer(self.pricer))
            self._bound = comp.total_s * (1 - BOUND_MARGIN)
        return self._bound

    def figures(self, option: Option, placements: np.ndarray, options: list[Option]) -> Figures:
        """The figures of ``option`` over the placements; the concurrent options of the plan
        (``options``) are projected together on first use."""
        hit = self._figures.get(option)
        if hit is not None:
            return hit
        n = len(placements)
        if self.tp_overlap == "none" and not any(option):
            pricer = PlacementPricer(self.pricer, self.plan, placements, self.problem.networks)
            _, comp = cost_view(self.plan, self.problem.profile, VIEW, model=self.model, pricer=pricer)
            hit = self._figures[option] = Figures(
                np.broadcast_to(np.asarray(comp.total_s, dtype=float), (n,)),
                {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in comp.components_s.items()})
            return hit
        todo = [o for o in dict.fromkeys(options) if (self.tp_overlap != "none" or any(o)) and o not in self._figures]
        total, components = project(self.plan, self.block, self.pricer, self.block_sums(),
                                    Variants.product(todo, placements), self.problem.networks, self.model)
        for i, o in enumerate(todo):
            part = slice(i * n, (i + 1) * n)
            self._figures[o] = Figures(total[part], {name: v[part] for name, v in components.items()})
        return self._figures[option]


class Context:
    """What a worker shares between the groups it evaluates: the pricer, one TierPricer per tier, and the
    lowerings and block sums of a layout's pipeline interleavings (see the module rules)."""

    def __init__(self, problem: SearchProblem) -> None:
        self.problem = problem
        self.pricer = pricer_for(problem.profile, VIEW, problem.datatype)
        self._tier_pricers: dict[tuple[int, ...], TierPricer] = {}
        self.lowerings: dict[tuple, tuple] = {}
        self.block_sums: dict[tuple, list] = {}

    def tier_pricer(self, tiers: dict[str, int]) -> TierPricer:
        """The pricer of a plan's task messages with the tensor (and expert) groups on ``tiers`` (the block
        sums')."""
        key = tuple(tiers.values())
        pricer = self._tier_pricers.get(key)
        if pricer is None:
            pricer = self._tier_pricers[key] = TierPricer(self.pricer, tiers)
        return pricer

    def forget(self) -> None:
        """Drop the lowerings and block sums (between families of groups)."""
        self.lowerings.clear()
        self.block_sums.clear()


def evaluate_group(problem: SearchProblem, layout: GroupLayout, best: TopK,
                   context: Context | None = None) -> GroupOutcome:
    """Evaluate one group; ``best`` is the worker's running top K (updated in place, used for pruning);
    ``context`` carries what the worker shares between groups."""
    context = Context(problem) if context is None else context
    g = layout.group
    placements = np.array(layout.placements, dtype=np.int64).reshape(-1, len(PLACED_DIMENSIONS))
    n = len(placements)
    sizes = degrees(g)
    net_reasons = [placement_problem(pl, sizes, problem.profile) for pl in layout.placements]
    net_ok = np.array([r is None for r in net_reasons])
    counts = Counts()
    rows = RowBuffer(problem, layout) if problem.collect_rows else None
    local = TopK(problem.top)
    points: list[tuple[np.ndarray, np.ndarray]] = []
    frontier: list[Candidate] = []
    plans: dict[tuple[bool, bool, int, str], _Plan] = {}
    options_of: dict[str, list[Option]] = {}
    for inner in layout.inner:
        options_of.setdefault(inner.tp_overlap, []).append(option_of(inner))
    need_times = rows is not None or problem.collect_points
    for i, inner in enumerate(layout.inner):
        option = option_of(inner)
        for m, microbatch in enumerate(layout.microbatches):
            first = layout.position(i, m, 0)
            counts.executions += n
            lookup = (inner.seq_par_ag_redo, inner.fused_activation, microbatch, inner.tp_overlap)
            plan = plans.get(lookup)
            if plan is None:
                plan = plans[lookup] = _Plan.build(context, layout, inner, microbatch)
            invalid = plan.invalid or plan.option_problem(option)
            if invalid:
                counts.invalid += n
                if rows is not None:
                    rows.add_unestimated(inner, microbatch, first, "invalid", [invalid] * n)
                continue
            memory_reason = plan.memory_reason(option)
            feasible = net_ok if memory_reason is None else np.zeros(n, dtype=bool)
            good = int(feasible.sum())
            counts.feasible += good
            counts.infeasible += n - good
            reasons = [r or memory_reason for r in net_reasons]
            if good and not need_times and problem.prune and best.threshold > -math.inf:
                bound = plan.bound()
                if bound is not None and g.batch / bound < best.threshold:
                    counts.pruned += good
                    good = 0
            if good or need_times:
                figures = plan.figures(option, placements, options_of[inner.tp_overlap])
                rates = g.batch / figures.total
                memory = plan.memory(option)
                if good:
                    _offer(problem, layout, inner, microbatch, first, memory, feasible, figures, rates, best, local)
                if problem.collect_points and good:
                    points.append((rates[feasible], np.full(good, memory["tier1_total"])))
                    fastest = int(np.flatnonzero(feasible)[np.argmax(rates[feasible])])  # first of equal rates
                    frontier.append(_candidate(problem, layout, inner, microbatch, first, fastest, memory, figures,
                                               rates))
                if rows is not None:
                    rows.add_estimated(inner, microbatch, first, feasible, reasons, figures.total, rates,
                                       figures.components, memory)
            elif rows is not None:
                rows.add_unestimated(inner, microbatch, first, "infeasible", reasons)
            if problem.options.mbs_break and not feasible.any():
                break
    return GroupOutcome(g.index, counts, local.entries(), rows.finish() if rows is not None else None,
                        (np.concatenate([r for r, _ in points]), np.concatenate([m for _, m in points]))
                        if points else None, pareto_frontier(frontier))


#: The placed dimensions that re-partition the same processors (the expert layout): checked as a layout of their
#: own, as the estimate does (harness.schedule.memory.network_infeasibility).
FOLDED = frozenset(PARALLEL_DIMENSIONS.of_kind("folded"))


def placement_problem(placement: tuple[int, ...], sizes: dict[str, int], profile: EvidenceProfile) -> str | None:
    """Why one tier placement does not fit the profile's networks, or None: the unfolded groups, then the folded
    ones (a dense group's placement has no folded group: Calculon's check)."""
    groups = [(tier, d) for tier, d in zip(placement, PLACED_DIMENSIONS) if sizes[d] > 1]
    return (network_problem([(tier, sizes[d]) for tier, d in groups if d not in FOLDED], profile)
            or network_problem([(tier, sizes[d]) for tier, d in groups if d in FOLDED], profile))


def _offer(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int, first: int,
           memory: dict[str, float], feasible: np.ndarray, figures: Figures, rates: np.ndarray, best: TopK,
           local: TopK) -> None:
    """Offer the feasible placements that can enter the running top K."""
    threshold = best.threshold
    candidates = np.flatnonzero(feasible if threshold == -math.inf else feasible & (rates >= threshold))
    g = layout.group
    for index in candidates:
        if not best.accepts(float(rates[index]), g.index, first + int(index)):
            continue
        entry = _candidate(problem, layout, inner, microbatch, first, int(index), memory, figures, rates)
        best.offer(entry)
        local.offer(entry)


def _candidate(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int, first: int, index: int,
               memory: dict[str, float], figures: Figures, rates: np.ndarray) -> Candidate:
    return Candidate(
        rate=float(rates[index]), group=layout.group.index, position=first + index,
        execution=calculon_execution(problem, layout, inner, microbatch, layout.placements[index]),
        total_s=float(figures.total[index]),
        components_s={name: float(figures.components[name][index]) for name in COMPONENTS},
        memory_bytes=dict(memory))
