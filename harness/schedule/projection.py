"""Projections of a ConcretePlanIR onto one iteration's timing components.

Two projections read the same ConcretePlanIR, priced under one cost view:

- ``calculon-0.1.0`` (:func:`calculon_projection`): Calculon 0.1.0's closed
  forms over the plan's tasks and tiling, every departure from the physical
  schedule a named rule of :mod:`harness.calculon_compat` (the rule names are
  in the comments where they apply). Its figures are Calculon's to the bit.
- ``physical`` (:func:`harness.schedule.physical.physical_projection`): the
  list schedule of the block programs on their queues.

Closed forms of the ``calculon-0.1.0`` projection (per block, one microbatch,
summed over the forward tasks in plan order, as Calculon sums its layers):

- a compute task's pass takes ``proc(flops_s, memory_s)``; a TP collective
  takes no processing time and its link time (message plus local work) is
  exposed whole;
- an overlapped GEMM pass with network time ``net`` (message plus local
  reduction, base block: edge-block-equals-base-block) over ``N`` tiles and
  processor usage ``pu`` of the TP tier: ``fs = f / (1 - pu)``; when ``net/N
  > fs/N`` the pass takes ``proc(f,m)/N + (N-1) proc(fs,m)/N`` and exposes
  ``(N-1)(net/N - fs/N)``, else it takes ``N proc(f,m)/N + (N-1)(net/N) pu``
  and exposes nothing; pipe adds ``net/N`` to both (doubled-pipe-tile); its
  weight gradient is tiled against the re-sent forward message
  (weight-grad-tiled-against-recommunication, recommunication-without-reduction);
  its recommunication exposes the forward exposed time (stateful-exposed-time);
- offload: per block ``max(0, T(size) + memory_s - block_s)`` forward and
  backward (``T`` the tier-2 transfer time), added to the block times that
  feed the bubble and the DP windows;
- a ring exchange (context parallelism): the portable block sums' rule,
  :func:`harness.schedule.block.ring_exposure`, added to the forward (and,
  when its hidden tasks are recomputed, recompute) and activation-gradient
  processing times of base and edge blocks;
- the DP sync spans the gradient group (data, or data x context) on its tier;
- DP overlap: the windows and inflections of Calculon's
  ``_compute_batch_stats`` (the dp-* rules and prefix-counter-recompute-windows).

The per-block sums (:func:`block_sums`) are computed here; the forms after
them (offload, bubble, pipeline and DP terms, the components and the total)
are :mod:`harness.schedule.calculon_forms`, one definition that the search
evaluates on arrays of variants (:mod:`harness.search.concurrent`).
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.cost.views import PassCost, Pricer
from harness.ir.concrete import ConcretePlanIR
from harness.ir.portable import Message
from harness.passes.rules import reduction_operations
from harness.schedule import calculon_forms as forms
from harness.schedule.block import expert_nodes, expert_overlap_hidden_s, hidden_tasks, merged_steps, ring_exposure
from harness.schedule.memory import BlockMemory, block_memory


@dataclasses.dataclass(frozen=True, slots=True)
class Requirements:
    """Bandwidths the overlap and offload need to stay hidden (bytes/s; reported, not applied)."""

    tp_overlap_per_s: float
    dp_overlap_chunk_per_s: float
    dp_overlap_tail_per_s: float
    activation_offload_per_s: float
    weight_offload_per_s: float
    optimizer_offload_per_s: float
    offload_per_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class Projection:
    """One projection's components (seconds), total and reported requirements."""

    name: str
    components_s: dict[str, float]
    total_s: float
    requirements: Requirements
    block_s: dict[str, float]


def tier_of(queue: str) -> int:
    return int(queue.rsplit("tier", 1)[1])


@dataclasses.dataclass(slots=True)
class BlockSums:
    """The per-block sums of one microbatch on the first stage (Calculon's ``_compute_block_stats``), in
    seconds unless named otherwise; summed over the block's forward-phase tasks in plan order.

    ``*_compute_s`` and ``*_memory_s`` are a pass's compute and memory-traffic times; ``<pass>_s`` its
    processing time (an overlapped GEMM's from the tile model); ``*_tp_link_*_s`` the time its TP messages
    occupy the link (message plus local reduction); ``*_tp_exposed_*_s`` the part of it the compute does not
    hide; ``base`` / ``edge``: in a base block / in the chunk's edge block (whose collectives may differ).
    Floats for one execution; the search fills every field with a numpy array of its variants
    (:func:`harness.search.concurrent.project`).
    """

    forward_compute_s: float = 0.0  # forward compute time
    forward_memory_s: float = 0.0  # forward memory-traffic time
    forward_s: float = 0.0  # forward processing time, base block
    forward_tp_link_base_s: float = 0.0  # forward TP link time, base block
    forward_tp_link_edge_s: float = 0.0  # forward TP link time, edge block
    forward_tp_exposed_base_s: float = 0.0  # forward TP time not hidden, base block
    forward_tp_exposed_edge_s: float = 0.0  # forward TP time not hidden, edge block
    # the recompute window: the running forward totals at each recomputed task (rule
    # prefix-counter-recompute-windows), read by the DP overlap windows
    recompute_window_compute_s: float = 0.0
    recompute_window_memory_s: float = 0.0
    recompute_memory_s: float = 0.0  # the recomputed tasks' own memory time (no prefix counter)
    recompute_s: float = 0.0  # recompute processing time, base block
    recommunication_link_base_s: float = 0.0  # re-sent TP messages' link time, base block
    recommunication_link_edge_s: float = 0.0  # re-sent TP messages' link time, edge block
    recommunication_exposed_base_s: float = 0.0  # re-sent TP time not hidden, base block
    recommunication_exposed_edge_s: float = 0.0  # re-sent TP time not hidden, edge block
    activation_grad_compute_s: float = 0.0  # activation-gradient compute time
    activation_grad_memory_s: float = 0.0  # activation-gradient memory-traffic time
    activation_grad_s: float = 0.0  # activation-gradient processing time, base block
    activation_grad_tp_link_base_s: float = 0.0  # backward TP link time, base block
    activation_grad_tp_link_edge_s: float = 0.0  # backward TP link time, edge block
    activation_grad_tp_exposed_base_s: float = 0.0  # backward TP time not hidden, base block
    activation_grad_tp_exposed_edge_s: float = 0.0  # backward TP time not hidden, edge block
    weight_grad_compute_s: float = 0.0  # weight-gradient compute time
    weight_grad_memory_s: float = 0.0  # weight-gradient memory-traffic time
    weight_grad_s: float = 0.0  # weight-gradient processing time, base block
    # the edge block's processing times (equal to the base block's under edge-block-equals-base-block)
    forward_edge_s: float = 0.0
    recompute_edge_s: float = 0.0
    activation_grad_edge_s: float = 0.0
    weight_grad_edge_s: float = 0.0
    optimizer_compute_s: float = 0.0  # optimizer-step compute time
    optimizer_memory_s: float = 0.0  # optimizer-step memory-traffic time
    optimizer_s: float = 0.0  # optimizer-step processing time
    tp_required_bytes_per_s: float = 0.0  # the TP link bandwidth the overlapped GEMMs need to hide their messages
    # the expert all-to-all time a block hides per step under the expert overlap (averaged over the stage's steps,
    # forward and backward together; hide_expert_exchanges): taken off the exposed TP component only
    expert_exchange_hidden_s: float = 0.0


class _Tiles:
    """Calculon's tile model of an overlapped GEMM (see the module rules)."""

    def __init__(self, pricer: Pricer, pu: float, tiles: int, pipe: bool) -> None:
        self.pricer, self.pu, self.n, self.pipe = pricer, pu, tiles, pipe
        self.roofline = pricer.roofline
        # memos for one projection (the messages and costs are held by the plan and the pricer meanwhile)
        self._nets: dict[tuple[int, bool], float] = {}
        self._times: dict[tuple[int, float], tuple[PassCost, tuple[float, float]]] = {}

    def proc(self, f: float, m: float) -> float:
        return max(f, m) if self.roofline else f + m

    def net(self, message: Message | None, b: int, reducing: bool) -> float:
        if message is None:
            return 0
        key = (id(message), reducing)
        known = self._nets.get(key)
        if known is not None:
            return known
        self._nets[key] = t = self._net(message, b, reducing)
        return t

    def _net(self, message: Message, b: int, reducing: bool) -> float:
        t = self.pricer.message_s(message)
        if reducing:
            t = t + self.pricer.compute_s(
                reduction_operations(message.collective, message.message_bytes, b, message.participants), "vector")
        return t

    def time(self, cost: PassCost, net: float) -> tuple[float, float]:
        """(processing, exposed) of one pass against ``net`` seconds of network."""
        key = (id(cost), net)
        known = self._times.get(key)
        if known is None or known[0] is not cost:  # the entry holds its cost, so its id stays its own
            known = self._times[key] = (cost, self._time(cost, net))
        return known[1]

    def _time(self, cost: PassCost, net: float) -> tuple[float, float]:
        f, m = cost.compute_s, cost.memory_s
        compute = self.proc(f, m)
        if net == 0:
            return compute, 0
        n, pu = self.n, self.pu
        fs = f / (1 - pu)
        slowed = self.proc(fs, m)
        fs_tile = fs / n
        net_tile = net / n
        tile = compute / n
        slowed_tile = slowed / n
        inflection = net_tile - fs_tile
        if inflection > 0:
            time = tile + (n - 1) * slowed_tile
            exposed = (n - 1) * inflection
        else:
            time = tile + (n - 1) * tile + (n - 1) * net_tile * pu
            exposed = 0
        if self.pipe:
            time, exposed = compat.pipe_tile(time, exposed, net_tile)
        return time, exposed

    def required(self, message: Message | None, f: float) -> float:
        size = message.message_bytes if message is not None else 0
        return size / self.n / (f / (1 - self.pu) / self.n)

    def gemm_pass(self, cost: PassCost, base: Message | None, edge: Message | None, b: int, required: float
                  ) -> tuple[float, float, float, float, float, float, float]:
        """An overlapped GEMM's pass against its TP messages: (time, edge-block time, link time base and edge,
        exposed base and edge, ``required`` raised to the bandwidth the pass needs to hide them)."""
        time, exposed = self.time(cost, self.net(base, b, True))
        time_edge, exposed_edge = self.time(cost, self.net(compat.edge_tile_message(base, edge), b, True))
        required = max(required, self.required(base, cost.compute_s))
        required = max(required, self.required(edge, cost.compute_s))
        return (time, time_edge, self.net(base, b, True), self.net(edge, b, True), exposed, exposed_edge,
                required)


def _collective_pass(cost: PassCost) -> tuple[float, float, float, float, float, float]:
    """A TP collective's pass: no processing time; its link time (message plus local work) is exposed whole
    (time, edge-block time, link time base and edge, exposed base and edge)."""
    base = cost.network_base_s + cost.processing_s
    edge = cost.network_edge_s + cost.processing_s
    return 0, 0, base, edge, base, edge


def concrete_block_sums(c: ConcretePlanIR, pricer: Pricer) -> BlockSums:
    """Per-block sums in plan order (Calculon's _compute_block_stats), with what the expert overlap hides
    (:func:`hide_expert_exchanges`)."""
    k = block_sums(c.tasks, c.schedule.training, c.bytes_per_element, tier_of(c.queue_of["tensor"]), c.tp_tiles,
                   c.options.tp_overlap == "pipe", pricer)
    if c.options.expert_overlap:
        hide_expert_exchanges(k, c, pricer)
    return k


def _expert_pass_s(pricer: Pricer):
    """A task's (forward, activation-gradient, weight-gradient) times as :func:`block_sums` counts them without
    TP overlap: a compute task's processing times, a collective's link time (message plus local work, base
    block) whole."""
    def pass_s(task) -> tuple[float, float, float]:
        passes = pricer.task(task).passes
        fw, act_grad, wg = passes["forward"], passes["activation_grad"], passes["weight_grad"]
        if task.exchange == "collective":  # the link time _collective_pass exposes, base block
            return _collective_pass(fw)[4], _collective_pass(act_grad)[4], 0.0
        return fw.processing_s, act_grad.processing_s, wg.processing_s
    return pass_s


def _recompute_s(pricer: Pricer, tasks: tuple):
    """A forward task's recomputation time: its recompute clone's forward processing time (0 if none)."""
    clones = {t.clone_of: t for t in tasks if t.phase == "recompute"}

    def redo_s(task) -> float:
        clone = clones.get(task.name)
        return 0.0 if clone is None else pricer.task(clone).passes["forward"].processing_s
    return redo_s


def hide_expert_exchanges(k: BlockSums, c: ConcretePlanIR, pricer: Pricer) -> None:
    """The expert overlap (``options.expert_overlap``): the all-to-all time a MoE block hides behind another
    microbatch's compute in a merged step (:func:`harness.schedule.block.expert_overlap_hidden_s`, averaged over
    the first stage's steps, :func:`~harness.schedule.block.merged_steps`), as ``expert_exchange_hidden_s``: the
    closed forms take it off the exposed TP component only. The block sums themselves stay those of an unmerged
    step, which the pipeline bubble (the warm-up and cool-down steps) and the DP overlap windows (the last
    backward, alone) read. A block without the two all-to-alls (a dense one) hides nothing."""
    forward = [t for t in c.tasks if t.phase == "forward"]
    nodes = expert_nodes(forward, _expert_pass_s(pricer), _recompute_s(pricer, c.tasks))
    if nodes is None:
        return
    s = c.schedule
    k.expert_exchange_hidden_s = expert_overlap_hidden_s(
        nodes, s.blocks_per_chunk, *merged_steps(s.microbatches, s.chunks_per_stage, s.pipeline_parallel))


def block_sums(tasks: tuple, training: bool, b: int, tp_tier: int, tp_tiles: int, pipe: bool,
               pricer: Pricer) -> BlockSums:
    """:func:`_block` from the plan's tasks and the few options it reads (TP tier, tiles, pipe): what the
    search shares between executions that differ only in DP overlap, offload and the PP and DP tiers."""
    profile = pricer.profile
    tp_net = profile.networks[tp_tier]
    tiles = _Tiles(pricer, tp_net.processor_usage, tp_tiles, pipe)
    recomputed = set()
    resent = {}
    for t in tasks:
        if t.phase == "recompute":
            recomputed.add(t.clone_of)
        elif t.phase == "recommunication":
            resent[t.clone_of] = t
    k = BlockSums()
    rings = []
    for task in tasks:
        if task.phase != "forward":
            continue
        if task.exchange == "ring":  # context parallelism's K/V ring: exposed after the loop (ring_exposure)
            rings.append(task)
            continue
        cost = pricer.task(task).passes
        fw, act_grad, wg, opt = cost["forward"], cost["activation_grad"], cost["weight_grad"], cost["optimizer"]
        kind = task.exchange  # what the task's shape is: compute, a collective, or a GEMM tiled against one
        again = resent.get(task.name)
        if kind == "tiled":
            msgs = task.messages
            fw_s, fw_s_edge, fw_base, fw_edge, fw_exp_base, fw_exp_edge, k.tp_required_bytes_per_s = tiles.gemm_pass(
                fw, msgs.forward_base, msgs.forward_edge, b, k.tp_required_bytes_per_s)
        elif kind == "collective":
            fw_s, fw_s_edge, fw_base, fw_edge, fw_exp_base, fw_exp_edge = _collective_pass(fw)
        else:
            fw_s = fw_s_edge = fw.processing_s
            fw_base = fw_edge = fw_exp_base = fw_exp_edge = 0
        k.forward_compute_s += fw.compute_s
        k.forward_memory_s += fw.memory_s
        k.forward_s += fw_s
        k.forward_edge_s += fw_s_edge
        k.forward_tp_link_base_s += fw_base
        k.forward_tp_link_edge_s += fw_edge
        k.forward_tp_exposed_base_s += fw_exp_base
        k.forward_tp_exposed_edge_s += fw_exp_edge
        if not training:
            continue
        if task.name in recomputed:  # the DP windows read the running forward totals (or the layers' own)
            k.recompute_window_compute_s += compat.recompute_window_s(k.forward_compute_s, fw.compute_s)
            k.recompute_window_memory_s += compat.recompute_window_s(k.forward_memory_s, fw.memory_s)
            k.recompute_memory_s += fw.memory_s
            k.recompute_s += fw_s
            k.recompute_edge_s += fw_s_edge
        reduces = compat.resent_reduces()
        if kind == "tiled" and again is not None:
            tiled = compat.weight_grad_tiled(task.name in recomputed)
            redo_base = tiles.net(again.messages.forward_base, b, reduces)
            redo_edge = tiles.net(compat.edge_tile_message(again.messages.forward_base, again.messages.forward_edge),
                                  b, reduces)
            # the pass the re-sent message is tiled with: the recomputed GEMM, else the weight gradient
            redo_pass = fw if task.name in recomputed else wg
            tiled_exp_base = tiles.time(redo_pass, redo_base)[1]
            tiled_exp_edge = tiles.time(redo_pass, redo_edge)[1]
        if again is not None:
            if kind == "tiled":
                r_base = tiles.net(again.messages.forward_base, b, reduces)
                r_edge = tiles.net(again.messages.forward_edge, b, reduces)
                r_exp_base = compat.recommunication_exposed(fw_exp_base, tiled_exp_base)
                r_exp_edge = compat.recommunication_exposed(fw_exp_base, tiled_exp_edge)
            else:
                rc = pricer.task(again).passes["forward"]
                r_base, r_edge = rc.network_base_s, rc.network_edge_s
                r_exp_base, r_exp_edge = r_base, r_edge
            k.recommunication_link_base_s += r_base
            k.recommunication_link_edge_s += r_edge
            k.recommunication_exposed_base_s += r_exp_base
            k.recommunication_exposed_edge_s += r_exp_edge
        if kind == "tiled":
            msgs = task.messages
            (act_grad_s, act_grad_s_edge, act_grad_base, act_grad_edge, act_grad_exp_base, act_grad_exp_edge,
             k.tp_required_bytes_per_s) = tiles.gemm_pass(
                act_grad, msgs.backward_base, msgs.backward_edge, b, k.tp_required_bytes_per_s)
            redo = redo_base if again is not None and tiled else 0
            wg_s, _ = tiles.time(wg, redo)
            wg_s_edge = tiles.time(wg, redo_edge if again is not None and tiled else 0)[0]
        elif kind == "collective":
            (act_grad_s, act_grad_s_edge, act_grad_base, act_grad_edge, act_grad_exp_base,
             act_grad_exp_edge) = _collective_pass(act_grad)
            wg_s = wg_s_edge = 0
        else:
            act_grad_s, wg_s = act_grad.processing_s, wg.processing_s
            act_grad_s_edge, wg_s_edge = act_grad_s, wg_s
            act_grad_base = act_grad_edge = act_grad_exp_base = act_grad_exp_edge = 0
        k.activation_grad_compute_s += act_grad.compute_s
        k.activation_grad_memory_s += act_grad.memory_s
        k.activation_grad_s += act_grad_s
        k.activation_grad_edge_s += act_grad_s_edge
        k.activation_grad_tp_link_base_s += act_grad_base
        k.activation_grad_tp_link_edge_s += act_grad_edge
        k.activation_grad_tp_exposed_base_s += act_grad_exp_base
        k.activation_grad_tp_exposed_edge_s += act_grad_exp_edge
        k.weight_grad_compute_s += wg.compute_s
        k.weight_grad_memory_s += wg.memory_s
        k.weight_grad_s += wg_s
        k.weight_grad_edge_s += wg_s_edge
        k.optimizer_compute_s += opt.compute_s
        k.optimizer_memory_s += opt.memory_s
        k.optimizer_s += opt.processing_s
    if rings:
        _add_rings(k, tasks, rings, recomputed, training, pricer)
    return k


def _add_rings(k: BlockSums, tasks: tuple, rings: list, recomputed: set, training: bool, pricer: Pricer) -> None:
    """The ring exchanges' exposed time (:func:`harness.schedule.block.ring_exposure`, the portable block sums'
    rule): in the forward processing time, the recompute time when the hidden tasks are recomputed (the ring is
    redone with them) and the activation-gradient time, base and edge block alike (the ring's messages are the
    same in both)."""
    names = {t.name: t for t in tasks}
    for ring in rings:
        hidden = hidden_tasks(ring.messages, names)
        forward, backward = ring_exposure(ring.messages, pricer.task(ring).passes,
                                          [pricer.task(names[n]).passes for n in hidden])
        k.forward_s += forward
        k.forward_edge_s += forward
        if not training:
            continue
        if recomputed & set(hidden):
            k.recompute_s += forward
            k.recompute_edge_s += forward
        k.activation_grad_s += backward
        k.activation_grad_edge_s += backward


def _div(a: float, b: float) -> float:
    """``a / b``; 0 when ``b`` is 0 (Calculon would divide by zero: never on a valid layout)."""
    return a / b if b else 0.0


def calculon_projection(c: ConcretePlanIR, pricer: Pricer) -> Projection:
    """Calculon 0.1.0's iteration of ``c`` under ``pricer``'s view (see the module rules; the closed forms after
    the block sums are :mod:`harness.schedule.calculon_forms`, shared with the search)."""
    return projection_of(c, pricer, concrete_block_sums(c, pricer), data_parallel_sync(c, pricer), block_memory(c))


def projection_of(c: ConcretePlanIR, pricer: Pricer, k: BlockSums, dp: forms.DataParallelSync | None,
                  memory: BlockMemory) -> Projection:
    """:func:`calculon_projection` of ``c``'s schedule, pipeline, offload and DP placement with the block sums
    ``k``, the DP sync ``dp`` and the block memory ``memory`` given: ``c``'s own, or the per-block averages of a
    stage of dense and MoE blocks (:func:`harness.estimate.mixed_concrete_iteration`; its DP bandwidth
    requirements are then those of ``c``'s gradient bytes)."""
    s = c.schedule
    training = s.training
    fw_pp, bw_pp = forms.pipeline_p2p_s(c.pipeline, training, tier_of(c.queue_of["pipeline"]), pricer.message_s)
    # Offload (the transfer commands of the offload programs).
    fw_off = c.program("forward_offload")
    bw_off = c.program("backward_offload")
    fw_size = fw_off.commands[0].transfer_bytes if fw_off else 0
    bw_size = bw_off.commands[0].transfer_bytes if bw_off else 0
    fw_off_s = pricer.tier2_s(fw_size)
    bw_off_s = pricer.tier2_s(bw_size) if training else 0
    it = forms.iteration(s, k, fw_pp=fw_pp, bw_pp=bw_pp, fw_off_s=fw_off_s, bw_off_s=bw_off_s, dp=dp,
                         ops=forms.SCALAR, finish=float)
    b = it.blocks
    dp_req_chunk, dp_req_tail = _dp_requirements(c, pricer, dp, it.dp_windows)

    # Offload bandwidth requirements (reported figures).
    fw_window = min(b.base_fw_no - k.forward_memory_s, b.edge_fw_no - k.forward_memory_s)
    bw_window = min(b.base_bw_no - (k.activation_grad_memory_s + k.weight_grad_memory_s),
                    b.edge_bw_no - (k.activation_grad_memory_s + k.weight_grad_memory_s))
    kept = memory.activation_checkpoint_bytes if s.recompute == "full" else memory.activation_storage_bytes
    act_req = _div(kept, fw_window)
    weight_req = _div(memory.weight_bytes, fw_window)
    optim_req = _div(memory.weight_grad_bytes + memory.optimizer_bytes, bw_window) if training else 0
    if training:
        offload_req = max(_div(fw_size, fw_window), _div(bw_size, bw_window))
    else:
        offload_req = _div(fw_size, fw_window)
    return Projection(
        "calculon-0.1.0", it.components_s, it.total_s,
        Requirements(k.tp_required_bytes_per_s, dp_req_chunk, dp_req_tail, act_req, weight_req, optim_req, offload_req),
        {"base_forward": b.base_fw, "edge_forward": b.edge_fw, "base_backward": b.base_bw,
         "edge_backward": b.edge_bw})


def data_parallel_sync(c: ConcretePlanIR, pricer: Pricer) -> forms.DataParallelSync | None:
    """The DP gradient sync of ``c`` (its ``data_parallel`` program's commands), None without one."""
    s = c.schedule
    if c.data_parallel is None or not s.training:
        return None
    block_sync_s = 0
    program = c.program("data_parallel")
    for command in program.commands:
        block_sync_s += pricer.message_s(command.message)
    # the gradient group's tier (data, or data x context: its commands' queue), the TP and PP tiers
    dp_tier, tp_tier, pp_tier = tier_of(program.commands[0].queue), *(tier_of(c.queue_of[d]) for d in ("tensor",
                                                                                                     "pipeline"))
    return forms.DataParallelSync(
        block_s=block_sync_s, processor_usage=pricer.profile.networks[dp_tier].processor_usage,
        sharding=len(c.data_parallel.messages) == 2, overlap=c.options.dp_overlap,
        same_tier_as_tp=dp_tier == tp_tier, same_tier_as_pp=dp_tier == pp_tier)


def _dp_requirements(c: ConcretePlanIR, pricer: Pricer, dp: forms.DataParallelSync | None,
                     windows: forms.DataParallelWindows | None) -> tuple[float, float]:
    """(chunk, tail) bandwidth the DP overlap needs to stay hidden (0 without DP overlap)."""
    if dp is None or windows is None:
        return 0, 0
    s = c.schedule
    dp_net = pricer.profile.networks[tier_of(c.program("data_parallel").commands[0].queue)]  # the gradient group's
    pu, block_sync_s, bpc = dp.processor_usage, dp.block_s, s.blocks_per_chunk
    scalars = ((dp_net.collectives["reduce_scatter"].volume_multiplier
                + dp_net.collectives["all_gather"].volume_multiplier) if dp.sharding
               else dp_net.collectives["all_reduce"].volume_multiplier)
    chunk_time = windows.window + windows.overlap_compute * pu
    if windows.collides_with_pp:
        chunk_time -= windows.pp_in_window_s
    chunk_time *= windows.overlappable
    dp_size = c.data_parallel.gradient_bytes
    req_chunk = bpc * dp_size / chunk_time * scalars if chunk_time > 0 else 0
    tail_time = windows.last_window + windows.last_size * block_sync_s * pu
    req_tail = bpc * dp_size / tail_time * scalars if tail_time > 0 else 0
    return req_chunk, req_tail
