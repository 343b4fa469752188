"""The search by definition: one estimate per execution, nothing shared, nothing pruned.

Each execution is estimated as ``harness.estimate.estimate`` does (lower the
input, check its tiers, estimate the lowering on the profile), with the
problem's profile object (so that a profile outside ``evidence/`` works too).

It walks the same space in the same order as the search and ranks with the
same :class:`TopK`; it is the independent check of the shared, vectorized,
pruned and distributed search (tests compare the two on small spaces) and is
far too slow for real spaces.
"""

from __future__ import annotations

from harness.cases import EstimateInput
from harness.errors import HarnessError
from harness.estimate import check_tiers, estimate_lowering
from harness.ir.checks import layout_problems
from harness.ir.model import ExecutionLayout
from harness.pipeline import lower
from harness.search.evaluate import VIEW, SearchProblem, calculon_execution
from harness.search.results import COMPONENTS, MEMORY, Candidate, Counts, TopK
from harness.search.run import space


def reference_search(problem: SearchProblem) -> tuple[Counts, list[Candidate], list[tuple]]:
    """(counts, top K, every row as (group, position, status, total_s, sample rate, tier-1 bytes, tier-2 bytes,
    components...), figures None when invalid)."""
    counts, best, rows = Counts(), TopK(problem.top), []
    for layout in space(problem):
        g = layout.group
        for i, inner in enumerate(layout.inner):
            for m, microbatch in enumerate(layout.microbatches):
                good = 0
                for p, (tn, pn, dn) in enumerate(layout.placements):
                    position = layout.position(i, m, p)
                    counts.executions += 1
                    execution = ExecutionLayout(
                        tensor_parallel=g.tp, pipeline_parallel=g.pp, data_parallel=g.dp, global_batch=g.batch,
                        microbatch=microbatch, pipeline_interleaving=g.interleaving, datatype=problem.datatype,
                        recompute=g.recompute, tp_communication=g.tp_comm, seq_par_ag_redo=inner.seq_par_ag_redo,
                        optimizer_sharding=g.optimizer_sharding, fused_activation=inner.fused_activation,
                        network_tiers={"tensor": tn, "pipeline": pn, "data": dn}, training=True,
                        tp_overlap=inner.tp_overlap, dp_overlap=inner.dp_overlap,
                        offload={"weights": inner.weight_offload, "activations": inner.activations_offload,
                                 "optimizer": inner.optimizer_offload})
                    if layout_problems(problem.shape, execution):
                        counts.invalid += 1
                        rows.append((g.index, position, "invalid", *([None] * (4 + len(COMPONENTS)))))
                        continue
                    try:
                        data = EstimateInput(model=problem.shape, execution=execution, system=problem.profile.name)
                        check_tiers(data, problem.profile, "<search>")
                        est = estimate_lowering(lower(data), problem.profile, (VIEW,))
                    except HarnessError:
                        counts.invalid += 1
                        rows.append((g.index, position, "invalid", *([None] * (4 + len(COMPONENTS)))))
                        continue
                    view = est.views[VIEW.name]
                    rows.append((g.index, position, est.status, view.total_s, view.sample_rate_per_s,
                                 view.memory_bytes.tier1_total, view.memory_bytes.tier2_total,
                                 *(float(getattr(view.components_s, c)) for c in COMPONENTS)))
                    if est.status != "ok":
                        counts.infeasible += 1
                        continue
                    counts.feasible += 1
                    good += 1
                    best.offer(Candidate(
                        rate=view.sample_rate_per_s, group=g.index, position=position,
                        execution=calculon_execution(problem, layout, inner, microbatch, (tn, pn, dn)),
                        total_s=view.total_s,
                        components_s={c: float(getattr(view.components_s, c)) for c in COMPONENTS},
                        memory_bytes={name: float(getattr(view.memory_bytes, f)) for name, f in MEMORY.items()}))
                if problem.options.mbs_break and not good:
                    break
    return counts, best.entries(), rows
