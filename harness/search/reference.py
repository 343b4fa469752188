"""The search by definition: one estimate per execution, nothing shared, nothing pruned.

Each execution is estimated as ``harness.estimate.estimate`` does (lower the
input, check its tiers, estimate the lowering on the profile), with the
problem's profile object (so that a profile outside ``evidence/`` works too).
It walks the same space in the same order as the search and ranks with the
same :class:`TopK`; it is the independent check of the shared, vectorized,
pruned and distributed search (tests compare the two) and is far too slow for
real spaces (milliseconds per execution).

A row is ``(group, position, status, total_s, sample rate, tier-1 bytes,
tier-2 bytes, *components)``, the figures None when the execution is invalid.
"""

from __future__ import annotations

from harness.cases import EstimateInput
from harness.errors import HarnessError
from harness.estimate import Estimate, check_tiers, estimate_lowering
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout
from harness.pipeline import lower
from harness.search.evaluate import VIEW, SearchProblem, beyond_calculon, calculon_execution
from harness.search.results import COMPONENTS, MEMORY, Candidate, Counts, TopK
from harness.search.run import space
from harness.search.space import GroupLayout, network_tiers


def estimate_execution(problem: SearchProblem, layout: GroupLayout, inner: int, microbatch: int,
                       placement: int) -> Estimate | None:
    """The estimate of one execution of the space (None: the estimate refuses the layout)."""
    g, choice = layout.group, layout.inner[inner]
    execution = ExecutionLayout(
        tensor_parallel=g.tp, pipeline_parallel=g.pp, data_parallel=g.dp, global_batch=g.batch,
        microbatch=layout.microbatches[microbatch], pipeline_interleaving=g.interleaving, datatype=problem.datatype,
        recompute=g.recompute, tp_communication=g.tp_comm, seq_par_ag_redo=choice.seq_par_ag_redo,
        optimizer_sharding=g.optimizer_sharding, fused_activation=choice.fused_activation,
        network_tiers=network_tiers(g, layout.placements[placement]),
        **beyond_calculon(g), training=True, tp_overlap=choice.tp_overlap,
        dp_overlap=choice.dp_overlap, offload={"weights": choice.weight_offload,
                                               "activations": choice.activations_offload,
                                               "optimizer": choice.optimizer_offload})
    if layout_problems(problem.shape, execution):
        return None
    try:
        data = EstimateInput(model=problem.shape, execution=execution, system=problem.profile.name)
        check_tiers(data, problem.profile, "<search>")
        return estimate_lowering(lower(data), problem.profile, (VIEW,))
    except HarnessError:
        return None


def reference_row(problem: SearchProblem, layout: GroupLayout, inner: int, microbatch: int,
                  placement: int, est: Estimate | None = None) -> tuple:
    """One execution's row (see the module docstring); ``est``: its estimate, if already made."""
    position = layout.position(inner, microbatch, placement)
    if est is None:
        est = estimate_execution(problem, layout, inner, microbatch, placement)
    if est is None:
        return (layout.group.index, position, "invalid", *([None] * (4 + len(COMPONENTS))))
    view = est.views[VIEW.name]
    return (layout.group.index, position, est.status, view.total_s, view.sample_rate_per_s,
            view.memory_bytes.tier1_total, view.memory_bytes.tier2_total,
            *(float(getattr(view.components_s, c)) for c in COMPONENTS))


def reference_search(problem: SearchProblem, groups: set[int] | None = None
                     ) -> tuple[Counts, list[Candidate], list[tuple]]:
    """(counts, top K, every row) over every group, or only ``groups`` (group indices)."""
    counts, best, rows = Counts(), TopK(problem.top), []
    for layout in space(problem):
        g = layout.group
        if groups is not None and g.index not in groups:
            continue
        for i, inner in enumerate(layout.inner):
            for m, microbatch in enumerate(layout.microbatches):
                good = 0
                for p, tiers in enumerate(layout.placements):
                    counts.executions += 1
                    est = estimate_execution(problem, layout, i, m, p)
                    rows.append(reference_row(problem, layout, i, m, p, est))
                    if est is None:
                        counts.invalid += 1
                        continue
                    if est.status != "ok":
                        counts.infeasible += 1
                        continue
                    counts.feasible += 1
                    good += 1
                    view = est.views[VIEW.name]
                    best.offer(Candidate(
                        rate=view.sample_rate_per_s, group=g.index, position=layout.position(i, m, p),
                        execution=calculon_execution(problem, layout, inner, microbatch, tiers),
                        total_s=view.total_s,
                        components_s={c: float(getattr(view.components_s, c)) for c in COMPONENTS},
                        memory_bytes={name: float(getattr(view.memory_bytes, f)) for name, f in MEMORY.items()}))
                if problem.options.mbs_break and not good:
                    break
    return counts, best.entries(), rows
