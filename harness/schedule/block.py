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

The expert overlap's rule (:func:`expert_nodes`, :func:`merged_layers_s`,
:func:`merged_steps`, :func:`expert_overlap_hidden_s`: Megatron-Core's
two-stream schedule of a MoE layer's nodes) is here beside the other exposure
rules, but only the ConcretePlanIR projection applies it
(:func:`harness.schedule.projection.hide_expert_exchanges`): it is
concurrency, which the portable plan does not have.
"""

from __future__ import annotations

import dataclasses

from harness.arrays import is_array
from harness.cost.views import Pricer, TaskCost
from harness.ir.distributed import EXPERT_ALL_TO_ALL, exchange
from harness.ir.portable import PortablePlanIR, TaskMessages


@dataclasses.dataclass(frozen=True, slots=True)
class BlockTimes:
    """One block's times for one microbatch on the first stage, seconds (floats; numpy arrays over the
    search's placements for the network times). ``base`` / ``edge``: a base block / the chunk's edge block,
    whose TP collectives may differ (p2p_rs_ag) and which sends the pipeline boundary."""

    forward_s: float  # forward processing time of the compute tasks
    recompute_s: float  # processing time of the recomputed tasks
    activation_grad_s: float  # activation-gradient processing time of the compute tasks
    weight_grad_s: float  # weight-gradient processing time of the compute tasks
    optimizer_s: float  # optimizer-step processing time
    tp_forward_base_s: float  # TP collectives of the forward pass (network and local work), base block
    tp_forward_edge_s: float  # the same, edge block
    tp_backward_base_s: float  # TP collectives of the activation-gradient pass, base block
    tp_backward_edge_s: float  # the same, edge block
    recomm_base_s: float  # TP messages re-sent for recomputation (recommunication), base block
    recomm_edge_s: float  # the same, edge block
    pp_forward_s: float  # the forward pipeline boundary transfer
    pp_backward_s: float  # the backward pipeline boundary transfer
    dp_s: float  # one block's data-parallel gradient synchronisation


def _positive(x):
    """``np.maximum(0.0, x)``: elementwise for the search's arrays; for a number (or a 0-d array) a plain float (so that block
    times and what is derived from them, a trace's JSON, hold no numpy scalars), by numpy's rule written out
    (``x`` unless ``0.0 > x``: -0.0 and NaN stay themselves), so an estimate needs no numpy."""
    if is_array(x) and x.ndim:
        import numpy as np

        return np.maximum(0.0, x)
    return float(0.0 if 0.0 > x else x)


def ring_exposed_s(step_s, hidden_s, steps: int):
    """Exposed time of a ring of ``steps`` message steps of ``step_s`` each, hidden behind ``steps + 1`` equal
    chunks of ``hidden_s`` (the first chunk runs on local data)."""
    return steps * _positive(step_s - hidden_s / (steps + 1))


def ring_exposure(messages: TaskMessages, ring: dict, hidden: list[dict]) -> tuple[float, float]:
    """(forward, activation-gradient) exposed time of one ring exchange with messages ``messages`` and pass costs
    ``ring``, hidden behind the tasks whose pass costs are ``hidden`` (:func:`ring_exposed_s` of each pass: the
    one rule of the portable block sums, :func:`block_times`, and of the ConcretePlanIR's,
    :func:`harness.schedule.projection.block_sums`)."""
    return (ring_exposed_s(ring["forward"].network_base_s, sum(h["forward"].processing_s for h in hidden),
                           messages.ring_steps),
            ring_exposed_s(ring["activation_grad"].network_base_s,
                           sum(h["activation_grad"].processing_s for h in hidden), messages.ring_steps))


def hidden_tasks(messages: TaskMessages, names) -> tuple[str, ...]:
    """The tasks a ring step hides behind that the plan holds (``names``: the plan's task names; a kernel's
    optional task, such as the materialized kernel's dropout without attention dropout, may be absent)."""
    return tuple(n for n in messages.hides_behind if n in names)


def fsdp_exposure(gather_s, regather_s, scatter_s, forward_s, backward_s):
    """(forward, backward) exposed time of one fully sharded block in one microbatch (``execution.fsdp``): its
    weights' all-gather (``gather_s``) is prefetched under the previous block's forward, so ``max(0, gather -
    forward)`` of it shows; in the backward pass the next block's gather (``regather_s``) and this block's
    gradient reduce-scatter (``scatter_s``) share the data-parallel link under a block's backward
    (``backward_s``: recompute, activation and weight gradients): ``max(0, regather + scatter - backward)``
    (Megatron-FSDP prefetches one unit ahead in both passes and reduce-scatters a unit's gradients right after
    its weight gradient, docs/user-guide/features/megatron_fsdp.md). Steady state: a stage's first gather and
    last reduce-scatter of a microbatch, which nothing precedes or follows, are not counted apart."""
    return _positive(gather_s - forward_s), _positive(regather_s + scatter_s - backward_s)


#: The task-name prefix of the MoE block's shared experts (:class:`harness.passes.patterns.MixtureOfExpertsMLP`).
SHARED_EXPERTS = "mlp.shared_"
#: The task-name prefix of the MLP sub-block (``CorePattern.prefix``), whose recomputed tasks the experts node
#: recomputes.
MLP_SUB_BLOCK = "mlp."


@dataclasses.dataclass(frozen=True, slots=True)
class ExpertNodes:
    """One MoE block's four nodes in Megatron-Core's expert-overlap schedule (``TransformerLayerSchedulePlan``:
    attn, moe_dispatch, mlp, moe_combine), seconds per microbatch (:func:`expert_nodes` says which task is where).
    A node's time is its tasks' pass times summed as the block sums count them (a TP collective's link time
    whole)."""

    attention_forward_s: float
    attention_backward_s: float  # activation gradient, with the recomputation the node does
    attention_weight_grad_s: float
    dispatch_forward_s: float
    dispatch_backward_s: float
    experts_forward_s: float
    experts_backward_s: float  # activation gradient, with the recomputation the node does
    experts_weight_grad_s: float
    combine_forward_s: float  # the combine and the tasks after it
    combine_backward_s: float  # their activation and weight gradients
    exchange_forward_s: float  # the two all-to-alls' own forward time (exposed TP collective time)
    exchange_backward_s: float  # the same, activation-gradient pass

    @property
    def serial_s(self) -> float:
        """A forward and a backward of the block, one after another."""
        return (self.attention_forward_s + self.attention_backward_s + self.attention_weight_grad_s
                + self.dispatch_forward_s + self.dispatch_backward_s
                + self.experts_forward_s + self.experts_backward_s + self.experts_weight_grad_s
                + self.combine_forward_s + self.combine_backward_s)


def expert_nodes(forward_tasks, pass_s, recompute_s=lambda task: 0.0) -> ExpertNodes | None:
    """The nodes of a block whose forward tasks (in plan order) hold exactly two expert all-to-alls; None for
    any other block (a dense block). ``pass_s(task)``: the task's (forward, activation-gradient, weight-gradient)
    times as its block sums count them; ``recompute_s(task)``: its recomputation's time (0 if not recomputed).

    Rules (Megatron-Core's ``build_transformer_layer_callables`` with the shared experts not overlapped, which
    the overlap requires): the tasks before the dispatch are the attention node (attention, the pre-MLP norm,
    the router, the permutation), and so are the shared experts (:data:`SHARED_EXPERTS`: computed before the
    dispatch, their weight gradient in that node's delayed pass) wherever the plan puts them; the tasks between
    the all-to-alls are the experts node; the combine and the tasks after it (unpermutation, dropout, residual)
    are the combine's node, on the communication stream. A recomputed task of the MLP sub-block
    (:data:`MLP_SUB_BLOCK`, e.g. the pre-MLP norm and the experts' activation) is redone at the start of the
    experts node's backward (its recomputation hooked on the MoE output), one of the attention sub-block in the
    attention node's."""
    split = [i for i, t in enumerate(forward_tasks) if t.primitive == EXPERT_ALL_TO_ALL]
    if len(split) != 2:
        return None
    dispatch, combine = split
    times = [pass_s(task) for task in forward_tasks]
    sums = [[0.0, 0.0, 0.0] for _ in range(4)]  # attention, dispatch, experts, combine: forward, backward, dW
    for i, (task, passes) in enumerate(zip(forward_tasks, times)):
        node = 0 if i < dispatch or task.name.startswith(SHARED_EXPERTS) else (
            1 if i == dispatch else 2 if i < combine else 3)
        for k, value in enumerate(passes):
            sums[node][k] += value
        redo = recompute_s(task)
        if redo:
            sums[2 if task.name.startswith(MLP_SUB_BLOCK) else 0][1] += redo
    (af, ab, aw), (df, db, dw), (ef, eb, ew), (cf, cb, cw) = sums
    return ExpertNodes(af, ab, aw, df, db + dw, ef, eb, ew, cf, cb + cw,
                       times[dispatch][0] + times[combine][0], times[dispatch][1] + times[combine][1])


def merged_layers_s(n: ExpertNodes, layers: int) -> float:
    """Time of ``layers`` merged layer pairs (one microbatch's forward of a block with another's backward of a
    block), per pair: Megatron-Core's ``TransformerLayerSchedulePlan.run`` order on two in-order streams,
    compute (attention forward, experts backward, experts weight gradient, experts forward, attention backward,
    attention weight gradient) and communication (combine backward, dispatch forward, dispatch backward, combine
    forward), each node starting when its stream is free and its inputs are ready: the experts' backward after
    the combine's backward, the dispatch after the attention forward, the dispatch's backward after the experts'
    backward, the experts' forward after the dispatch, the combine after the experts' forward, the attention's
    backward after the dispatch's backward; the next pair's forward after this combine, its backward after
    this attention backward."""
    compute = comm = forward_ready = backward_ready = 0.0
    for _ in range(layers):
        combine_backward = max(comm, backward_ready) + n.combine_backward_s
        attention = max(compute, forward_ready) + n.attention_forward_s
        experts_backward = max(attention, combine_backward) + n.experts_backward_s
        dispatch = max(combine_backward, attention) + n.dispatch_forward_s
        experts_weight_grad = experts_backward + n.experts_weight_grad_s
        dispatch_backward = max(dispatch, experts_backward) + n.dispatch_backward_s
        experts = max(experts_weight_grad, dispatch) + n.experts_forward_s
        comm = max(dispatch_backward, experts) + n.combine_forward_s
        attention_backward = max(experts, dispatch_backward) + n.attention_backward_s
        compute = attention_backward + n.attention_weight_grad_s
        forward_ready, backward_ready = comm, attention_backward
    return max(compute, comm) / layers


def merged_steps(microbatches: int, chunks: int, stages: int) -> tuple[int, int]:
    """(merged, all) steps of the first pipeline stage under the expert overlap: a step is one chunk's forward or
    backward of one microbatch, ``microbatches x chunks`` of each; Megatron-Core's interleaved schedule runs
    ``2 (PP - 1) + (chunks - 1) PP`` warm-up forwards on the first stage (its microbatch groups of PP), one more
    with the overlap, the same number of cool-down backwards alone, and merges every other forward with a
    backward; without pipelining (PP 1, one chunk) that is the first forward alone, then ``microbatches - 1``
    merged steps, then the last backward alone."""
    steps = microbatches * chunks
    warmup = min(steps, 2 * (stages - 1) + (chunks - 1) * stages + 1)
    return steps - warmup, steps


def expert_overlap_hidden_s(n: ExpertNodes, layers: int, merged: int, steps: int) -> float:
    """All-to-all time per block and step that the expert overlap hides, ``layers`` MoE blocks to a chunk:
    ``merged`` of the ``steps`` (:func:`merged_steps`) hide ``serial - merged`` per block
    (:func:`merged_layers_s`), at most the all-to-alls' own time (what the block sums expose of them)."""
    exchange = n.exchange_forward_s + n.exchange_backward_s
    if merged <= 0 or exchange <= 0:
        return 0.0
    return max(0.0, min(n.serial_s - merged_layers_s(n, layers), exchange)) * merged / steps


def block_times(plan: PortablePlanIR, costs: tuple[TaskCost, ...], pricer: Pricer) -> BlockTimes:
    forward_s = recompute_s = activation_grad_s = weight_grad_s = optimizer_s = 0.0
    tp_forward_base_s = tp_forward_edge_s = tp_backward_base_s = tp_backward_edge_s = 0.0
    recomm_base_s = recomm_edge_s = 0.0
    rings = []
    for cost in costs:
        passes = cost.passes
        kind = exchange(cost.primitive)
        if kind == "ring":
            if cost.phase == "forward":
                rings.append((cost.name, passes))
            continue
        if cost.phase == "forward" and kind != "collective":
            forward_s += passes["forward"].processing_s
            activation_grad_s += passes["activation_grad"].processing_s
            weight_grad_s += passes["weight_grad"].processing_s
            optimizer_s += passes["optimizer"].processing_s
        elif cost.phase == "forward":
            forward, backward = passes["forward"], passes["activation_grad"]
            tp_forward_base_s += forward.network_base_s + forward.processing_s
            tp_forward_edge_s += forward.network_edge_s + forward.processing_s
            tp_backward_base_s += backward.network_base_s + backward.processing_s
            tp_backward_edge_s += backward.network_edge_s + backward.processing_s
        elif cost.phase == "recompute":
            recompute_s += passes["forward"].processing_s
        else:
            resent = passes["forward"]  # a recommunication task: its re-sent TP messages
            recomm_base_s += resent.network_base_s
            recomm_edge_s += resent.network_edge_s
    if rings:  # the hidden tasks priced by the same pricer (explain prices one task at a time)
        tasks = {t.name: t for t in plan.tasks}
        by_name = {n: pricer.task(t).passes for n, t in tasks.items()}
        recomputed = {t.clone_of for t in plan.tasks if t.phase == "recompute"}
        for name, passes in rings:
            messages = tasks[name].messages
            hidden = hidden_tasks(messages, tasks)
            exposed, exposed_backward = ring_exposure(messages, passes, [by_name[n] for n in hidden])
            forward_s += exposed
            if recomputed & set(hidden):
                recompute_s += exposed
            activation_grad_s += exposed_backward
    dp = plan.data_parallel
    dp_s = sum(pricer.message_s(m) for m in dp.all_messages) if dp else 0.0
    if dp is not None and dp.fully_sharded:  # gathered and scattered every microbatch, under the blocks' compute
        gather, regather, scatter = (pricer.message_s(m) for m in dp.messages)
        exposed_forward, exposed_backward = fsdp_exposure(gather, regather, scatter, forward_s,
                                                          recompute_s + activation_grad_s + weight_grad_s)
        forward_s += exposed_forward
        activation_grad_s += exposed_backward
        dp_s = 0.0  # no gradient sync at the end of the iteration
    return BlockTimes(forward_s, recompute_s, activation_grad_s, weight_grad_s, optimizer_s, tp_forward_base_s,
                      tp_forward_edge_s, tp_backward_base_s, tp_backward_edge_s, recomm_base_s, recomm_edge_s,
                      pricer.boundary_s(plan.pipeline.forward, plan), pricer.boundary_s(plan.pipeline.backward, plan),
                      dp_s)
