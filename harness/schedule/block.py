"""Block critical paths: per-microbatch block times from task costs.

A processor executes a block's tasks one after another (one stream, no
compute/communication overlap in the portable plan), so a block's critical
path is the sum of its tasks along the DAG. Compute tasks and collectives
(tasks whose primitive's exchange is ``collective``,
:data:`harness.ir.distributed.Exchange`: a property of the shape, so that a new
communicating primitive keeps its network time) are kept apart so that every
schedule component traces back to its tasks:

- ``forward_s``: forward-phase compute tasks, forward pass;
- ``recompute_s``: recompute clones (their repeated forward pass);
- ``activation_grad_s`` / ``weight_grad_s`` / ``optimizer_s``: forward-phase
  compute tasks, those passes;
- ``tp_*``: forward-phase collectives, network time plus the local
  reduction/copy work of the pass, in a base and in an edge block;
- ``recomm_*``: recommunication tasks, network time;
- ``pp_*``: one pipeline boundary transfer; ``dp_s``: one block's DP sync.

A ring exchange (exchange ``ring``: context parallelism's K/V ring) sends its
message in ``steps`` steps, each while one chunk of the tasks it hides behind
runs (``hides_behind``: the attention scores, ``steps + 1`` chunks, one per CP
rank's K/V), as Megatron-Core's ring attention launches step ``i + 1``'s
send/receive before computing step ``i``. What a step does not hide is exposed
(:func:`ring_exposed_s`: ``steps x max(0, step - hidden / (steps + 1))``) and
counted in the pass it stalls: ``forward_s`` (and ``recompute_s`` when the
hidden tasks are recomputed, which redoes the ring) and ``activation_grad_s``
(the backward ring: K/V with their gradients). Context parallelism has no
timing component of its own yet.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.cost.views import Pricer, TaskCost
from harness.ir.distributed import exchange
from harness.ir.portable import PortablePlanIR


@dataclasses.dataclass(frozen=True, slots=True)
class BlockTimes:
    forward_s: float
    recompute_s: float
    activation_grad_s: float
    weight_grad_s: float
    optimizer_s: float
    tp_forward_base_s: float
    tp_forward_edge_s: float
    tp_backward_base_s: float
    tp_backward_edge_s: float
    recomm_base_s: float
    recomm_edge_s: float
    pp_forward_s: float
    pp_backward_s: float
    dp_s: float


def ring_exposed_s(step_s, hidden_s, steps: int):
    """Exposed time of a ring of ``steps`` message steps of ``step_s`` each, hidden behind ``steps + 1`` equal
    chunks of ``hidden_s`` (the first chunk runs on local data)."""
    return steps * np.maximum(0.0, step_s - hidden_s / (steps + 1))


def block_times(plan: PortablePlanIR, costs: tuple[TaskCost, ...], pricer: Pricer) -> BlockTimes:
    fw = re = ag = wg = opt = 0.0
    tfb = tfe = tbb = tbe = rb = reb = 0.0
    rings = []
    for cost in costs:
        passes = cost.passes
        kind = exchange(cost.primitive)
        if kind == "ring":
            if cost.phase == "forward":
                rings.append((cost.name, passes))
            continue
        if cost.phase == "forward" and kind != "collective":
            fw += passes["forward"].processing_s
            ag += passes["activation_grad"].processing_s
            wg += passes["weight_grad"].processing_s
            opt += passes["optimizer"].processing_s
        elif cost.phase == "forward":
            f, b = passes["forward"], passes["activation_grad"]
            tfb += f.network_base_s + f.processing_s
            tfe += f.network_edge_s + f.processing_s
            tbb += b.network_base_s + b.processing_s
            tbe += b.network_edge_s + b.processing_s
        elif cost.phase == "recompute":
            re += passes["forward"].processing_s
        else:
            f = passes["forward"]
            rb += f.network_base_s
            reb += f.network_edge_s
    if rings:  # the hidden tasks priced by the same pricer (explain prices one task at a time)
        tasks = {t.name: t for t in plan.tasks}
        by_name = {n: pricer.task(t).passes for n, t in tasks.items()}
        recomputed = {t.clone_of for t in plan.tasks if t.phase == "recompute"}
        for name, passes in rings:
            messages = tasks[name].messages
            hidden = messages.hides_behind
            exposed = ring_exposed_s(passes["forward"].network_base_s,
                                     sum(by_name[n]["forward"].processing_s for n in hidden), messages.ring_steps)
            fw += exposed
            if recomputed & set(hidden):
                re += exposed
            ag += ring_exposed_s(passes["activation_grad"].network_base_s,
                                 sum(by_name[n]["activation_grad"].processing_s for n in hidden),
                                 messages.ring_steps)
    dp = sum(pricer.message_s(m) for m in plan.data_parallel.messages) if plan.data_parallel else 0.0
    return BlockTimes(fw, re, ag, wg, opt, tfb, tfe, tbb, tbe, rb, reb,
                      pricer.boundary_s(plan.pipeline.forward, plan), pricer.boundary_s(plan.pipeline.backward, plan),
                      dp)
