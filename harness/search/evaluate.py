"""Evaluate one group of the search space, sharing everything that can be shared.

Structure (what is computed once, and for what):

- per group: the network verdict of every tier placement (it depends on the
  degrees and the placement only);
- per lowering key (all-gather redo, fused activation, microbatch): one
  PortablePlanIR, lowered with tier 0 everywhere, its stage memory and memory
  verdict, its prices, the lower bound of its total (every message at 0 s) and
  the composition of all its tier placements at once
  (:mod:`harness.search.placement`); executions that differ only in network
  placement (and, once they are estimated, overlap and offload) reuse it;
- per execution: nothing but reading the arrays.

Rules:

- the figures of every execution are bit-identical to
  ``harness.estimate.estimate`` of that execution (system-evidence view);
- status: ``ok``; ``infeasible`` (network tiers or memory, as the estimate
  reports it); ``unsupported`` (TP/DP overlap or offload: not estimated yet);
  ``invalid`` (a layout the estimate refuses, with its message);
- pruning (``prune``): once the worker's running top K is full, a lowering key
  whose lower-bound sample rate is below the K-th best rate is not composed;
  its feasible executions count as ``pruned``. The bound is exact, so pruning
  never changes the top K; feasibility is still decided for every execution,
  so the counts and Calculon's ``-m`` break are unchanged;
- ``mbs_break``: a microbatch size whose executions (all placements) are all
  infeasible ends that microbatch loop (unsupported executions never do).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from harness.cases import EstimateInput
from harness.cost.views import COST_VIEWS, pricer_for
from harness.vocabulary import SYSTEM_EVIDENCE
from harness.errors import HarnessError
from harness.estimate import cost_view
from harness.evidence.profile import EvidenceProfile
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout, TransformerShape
from harness.pipeline import lower
from harness.schedule.memory import StageMemory, block_memory, memory_problem, network_problem, stage_memory
from harness.search.pareto import pareto_frontier
from harness.search.placement import PlacementPricer, ZeroNetworkPricer
from harness.search.results import COMPONENTS, MEMORY, Candidate, Counts, GroupOutcome, RowBuffer, TopK
from harness.search.space import GroupLayout, Inner, SpaceOptions

#: The view the search ranks by: the evidence profile as is.
VIEW = COST_VIEWS[SYSTEM_EVIDENCE]


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


def unsupported_reason(inner: Inner) -> str | None:
    """Why the estimate cannot price an execution yet (TP/DP overlap, offload), or None."""
    fields = [name for name, on in (("tensor_par_overlap", inner.tp_overlap != "none"),
                                    ("data_par_overlap", inner.dp_overlap),
                                    ("weight_offload", inner.weight_offload),
                                    ("activations_offload", inner.activations_offload),
                                    ("optimizer_offload", inner.optimizer_offload)) if on]
    return f"{', '.join(fields)}: not estimated yet (needs the ConcretePlanIR)" if fields else None


@dataclasses.dataclass
class _Key:
    """One lowering and everything derived from it (see the module rules)."""

    problem: SearchProblem
    layout: ExecutionLayout
    stage: StageMemory | None = None
    memory_reason: str | None = None
    invalid: str | None = None
    bound_total_s: float | None = None
    _plan: Any = None
    _composed: Any = None

    @classmethod
    def build(cls, problem: SearchProblem, layout: ExecutionLayout) -> "_Key":
        key = cls(problem, layout)
        problems = layout_problems(problem.shape, layout)
        if problems:
            key.invalid = f"{problems[0][0]}: {problems[0][1]}"
            return key
        try:
            plan = lower(EstimateInput(model=problem.shape, execution=layout, system=problem.profile.name)).plan
        except HarnessError as error:
            key.invalid = str(error)
            return key
        key._plan = plan
        key.stage = stage_memory(plan, block_memory(plan))
        key.memory_reason = memory_problem(1, key.stage.tier1_total, problem.profile.memory_tier1.capacity_bytes)
        return key

    @property
    def pricer(self):
        return pricer_for(self.problem.profile, VIEW, self._plan.datatype)

    def bound(self) -> float | None:
        """Lower bound of the total over every placement (None: no exact bound here)."""
        if self.bound_total_s is None and self._plan.schedule.bubble_reduction_blocks == 0:
            _, comp = cost_view(self._plan, self.problem.profile, VIEW, ZeroNetworkPricer(self.pricer))
            self.bound_total_s = comp.total_s
        return self.bound_total_s

    def composed(self, placements: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(total_s, components_s) over ``placements``, each an array."""
        if self._composed is None:
            pricer = PlacementPricer(self.pricer, self._plan, placements, self.problem.networks)
            _, comp = cost_view(self._plan, self.problem.profile, VIEW, pricer)
            n = len(placements)
            self._composed = (np.broadcast_to(np.asarray(comp.total_s, dtype=float), (n,)),
                              {k: np.broadcast_to(np.asarray(v, dtype=float), (n,))
                               for k, v in comp.components_s.items()})
        return self._composed


def _layout(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int) -> ExecutionLayout:
    g = layout.group
    return ExecutionLayout(
        tensor_parallel=g.tp, pipeline_parallel=g.pp, data_parallel=g.dp, global_batch=g.batch,
        microbatch=microbatch, pipeline_interleaving=g.interleaving, datatype=problem.datatype,
        recompute=g.recompute, tp_communication=g.tp_comm, seq_par_ag_redo=inner.seq_par_ag_redo,
        optimizer_sharding=g.optimizer_sharding, fused_activation=inner.fused_activation, attention="multihead",
        network_tiers={"tensor": 0, "pipeline": 0, "data": 0}, training=True)


def evaluate_group(problem: SearchProblem, layout: GroupLayout, best: TopK) -> GroupOutcome:
    """Evaluate one group; ``best`` is the worker's running top K (updated in place, used for pruning)."""
    g = layout.group
    placements = np.array(layout.placements, dtype=np.int64).reshape(-1, 3)
    n = len(placements)
    net_reasons = [network_problem([(tier, size) for tier, size in zip(pl, (g.tp, g.pp, g.dp)) if size > 1],
                                   problem.profile) for pl in layout.placements]
    net_ok = np.array([r is None for r in net_reasons])
    counts = Counts()
    rows = RowBuffer(problem, layout) if problem.collect_rows else None
    local = TopK(problem.top)
    points: list[tuple[np.ndarray, np.ndarray]] = []
    frontier: list[Candidate] = []
    keys: dict[tuple[bool, bool, int], _Key] = {}
    for i, inner in enumerate(layout.inner):
        unsupported = unsupported_reason(inner)
        for m, microbatch in enumerate(layout.microbatches):
            first = layout.position(i, m, 0)
            counts.executions += n
            if unsupported:
                counts.unsupported += n
                if rows is not None:
                    rows.add_unestimated(inner, microbatch, first, "unsupported", [unsupported] * n)
                continue
            lookup = (inner.seq_par_ag_redo, inner.fused_activation, microbatch)
            key = keys.get(lookup)
            if key is None:
                key = keys[lookup] = _Key.build(problem, _layout(problem, layout, inner, microbatch))
            if key.invalid:
                counts.invalid += n
                if rows is not None:
                    rows.add_unestimated(inner, microbatch, first, "invalid", [key.invalid] * n)
                continue
            feasible = net_ok if key.memory_reason is None else np.zeros(n, dtype=bool)
            good = int(feasible.sum())
            counts.feasible += good
            counts.infeasible += n - good
            reasons = [r or key.memory_reason for r in net_reasons]
            need_times = rows is not None or problem.collect_points
            if good and not need_times and problem.prune and best.full:
                bound = key.bound()
                if bound is not None and g.batch / bound < best.worst_rate:
                    counts.pruned += good
                    good = 0
            if good or need_times:
                total, components = key.composed(placements)
                rates = g.batch / total
                if good:
                    _offer(problem, layout, inner, microbatch, first, key, feasible, total, rates, components,
                           best, local)
                if problem.collect_points and good:
                    points.append((rates[feasible], np.full(good, key.stage.tier1_total)))
                    fastest = int(np.flatnonzero(feasible)[np.argmax(rates[feasible])])  # first of equal rates
                    frontier.append(_candidate(problem, layout, inner, microbatch, first, fastest, key, total,
                                               rates, components))
                if rows is not None:
                    rows.add_estimated(inner, microbatch, first, feasible, reasons, total, rates,
                                       components, key.stage)
            elif rows is not None:
                rows.add_unestimated(inner, microbatch, first, "infeasible", reasons)
            if problem.options.mbs_break and not feasible.any():
                break
    return GroupOutcome(g.index, counts, local.entries(), rows.finish() if rows is not None else None,
                        (np.concatenate([r for r, _ in points]), np.concatenate([m for _, m in points]))
                        if points else None, pareto_frontier(frontier))


def _offer(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int, first: int, key: _Key,
           feasible: np.ndarray, total: np.ndarray, rates: np.ndarray, components: dict[str, np.ndarray],
           best: TopK, local: TopK) -> None:
    """Offer the feasible placements that can enter the running top K."""
    candidates = np.flatnonzero(feasible if not best.full else feasible & (rates >= best.worst_rate))
    g = layout.group
    for index in candidates:
        if not best.accepts(float(rates[index]), g.index, first + int(index)):
            continue
        entry = _candidate(problem, layout, inner, microbatch, first, int(index), key, total, rates, components)
        best.offer(entry)
        local.offer(entry)


def _candidate(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int, first: int, index: int,
               key: _Key, total: np.ndarray, rates: np.ndarray, components: dict[str, np.ndarray]) -> Candidate:
    return Candidate(
        rate=float(rates[index]), group=layout.group.index, position=first + index,
        execution=calculon_execution(problem, layout, inner, microbatch, layout.placements[index]),
        total_s=float(total[index]),
        components_s={name: float(components[name][index]) for name in COMPONENTS},
        memory_bytes={name: float(getattr(key.stage, field)) for name, field in MEMORY.items()})


def calculon_execution(problem: SearchProblem, layout: GroupLayout, inner: Inner, microbatch: int,
                       tiers: tuple[int, int, int]) -> dict[str, Any]:
    """One execution in Calculon's execution JSON (its field names, its order)."""
    g = layout.group
    return {
        "num_procs": problem.processors, "tensor_par": g.tp, "pipeline_par": g.pp, "data_par": g.dp,
        "tensor_par_net": tiers[0], "pipeline_par_net": tiers[1], "data_par_net": tiers[2],
        "batch_size": g.batch, "microbatch_size": microbatch, "datatype": problem.datatype,
        "fused_activation": inner.fused_activation, "attention_type": "multihead",
        "activation_recompute": g.recompute, "pipeline_interleaving": g.interleaving,
        "optimizer_sharding": g.optimizer_sharding, "tensor_par_comm_type": g.tp_comm,
        "tensor_par_overlap": inner.tp_overlap, "seq_par_ag_redo": inner.seq_par_ag_redo,
        "data_par_overlap": inner.dp_overlap, "weight_offload": inner.weight_offload,
        "activations_offload": inner.activations_offload, "optimizer_offload": inner.optimizer_offload,
        "training": True,
    }
