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
- DP overlap: the windows and inflections of Calculon's
  ``_compute_batch_stats`` (the dp-* rules and prefix-counter-recompute-windows).
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.cost.views import PassCost, Pricer
from harness.ir.concrete import ConcretePlanIR
from harness.ir.portable import Message
from harness.passes.rules import reduction_operations
from harness.schedule.memory import block_memory
from harness.vocabulary import COMPONENTS



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
class _Block:
    fw_flops_s: float = 0.0
    fw_mem_s: float = 0.0
    fw_s: float = 0.0
    fw_tp_base: float = 0.0
    fw_tp_edge: float = 0.0
    fw_exp_base: float = 0.0
    fw_exp_edge: float = 0.0
    re_flops_s: float = 0.0
    re_mem_s: float = 0.0
    re_mem_own_s: float = 0.0  # the recomputed layers' own memory time (no prefix counter)
    re_s: float = 0.0
    recomm_base: float = 0.0
    recomm_edge: float = 0.0
    recomm_exp_base: float = 0.0
    recomm_exp_edge: float = 0.0
    ag_flops_s: float = 0.0
    ag_mem_s: float = 0.0
    ag_s: float = 0.0
    ag_tp_base: float = 0.0
    ag_tp_edge: float = 0.0
    ag_exp_base: float = 0.0
    ag_exp_edge: float = 0.0
    wg_flops_s: float = 0.0
    wg_mem_s: float = 0.0
    wg_s: float = 0.0
    # the edge block's processing times (equal to the base block's under edge-block-equals-base-block)
    fw_s_edge: float = 0.0
    re_s_edge: float = 0.0
    ag_s_edge: float = 0.0
    wg_s_edge: float = 0.0
    opt_flops_s: float = 0.0
    opt_mem_s: float = 0.0
    opt_s: float = 0.0
    tp_req: float = 0.0


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


def _block(c: ConcretePlanIR, pricer: Pricer) -> _Block:
    """Per-block sums in plan order (Calculon's _compute_block_stats)."""
    return block_sums(c.tasks, c.schedule.training, c.bytes_per_element, tier_of(c.queue_of["tensor"]), c.tp_tiles,
                      c.options.tp_overlap == "pipe", pricer)


def block_sums(tasks: tuple, training: bool, b: int, tp_tier: int, tp_tiles: int, pipe: bool,
               pricer: Pricer) -> _Block:
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
    k = _Block()
    for task in tasks:
        if task.phase != "forward":
            continue
        cost = pricer.task(task).passes
        fw, ag, wg, opt = cost["forward"], cost["activation_grad"], cost["weight_grad"], cost["optimizer"]
        kind = task.primitive
        again = resent.get(task.name)
        if kind == "overlapped_linear":
            msgs = task.messages
            fw_s, fw_exp = tiles.time(fw, tiles.net(msgs.forward_base, b, True))
            fw_base, fw_edge = tiles.net(msgs.forward_base, b, True), tiles.net(msgs.forward_edge, b, True)
            fw_exp_base = fw_exp
            fw_s_edge, fw_exp_edge = tiles.time(fw, tiles.net(compat.edge_tile_message(msgs.forward_base,
                                                                                        msgs.forward_edge), b, True))
            k.tp_req = max(k.tp_req, tiles.required(msgs.forward_base, fw.compute_s))
            k.tp_req = max(k.tp_req, tiles.required(msgs.forward_edge, fw.compute_s))
        elif kind == "tp_collective":
            fw_s = fw_s_edge = 0
            fw_base = fw.network_base_s + fw.processing_s
            fw_edge = fw.network_edge_s + fw.processing_s
            fw_exp_base, fw_exp_edge = fw_base, fw_edge
        else:
            fw_s = fw_s_edge = fw.processing_s
            fw_base = fw_edge = fw_exp_base = fw_exp_edge = 0
        k.fw_flops_s += fw.compute_s
        k.fw_mem_s += fw.memory_s
        k.fw_s += fw_s
        k.fw_s_edge += fw_s_edge
        k.fw_tp_base += fw_base
        k.fw_tp_edge += fw_edge
        k.fw_exp_base += fw_exp_base
        k.fw_exp_edge += fw_exp_edge
        if not training:
            continue
        if task.name in recomputed:  # the DP windows read the running forward totals (or the layers' own)
            k.re_flops_s += compat.recompute_window_s(k.fw_flops_s, fw.compute_s)
            k.re_mem_s += compat.recompute_window_s(k.fw_mem_s, fw.memory_s)
            k.re_mem_own_s += fw.memory_s
            k.re_s += fw_s
            k.re_s_edge += fw_s_edge
        reduces = compat.resent_reduces()
        if kind == "overlapped_linear" and again is not None:
            tiled = compat.weight_grad_tiled(task.name in recomputed)
            redo_base = tiles.net(again.messages.forward_base, b, reduces)
            redo_edge = tiles.net(compat.edge_tile_message(again.messages.forward_base, again.messages.forward_edge),
                                  b, reduces)
            # the pass the re-sent message is tiled with: the recomputed GEMM, else the weight gradient
            redo_pass = fw if task.name in recomputed else wg
            tiled_exp_base = tiles.time(redo_pass, redo_base)[1]
            tiled_exp_edge = tiles.time(redo_pass, redo_edge)[1]
        if again is not None:
            if kind == "overlapped_linear":
                r_base = tiles.net(again.messages.forward_base, b, reduces)
                r_edge = tiles.net(again.messages.forward_edge, b, reduces)
                r_exp_base = compat.recommunication_exposed(fw_exp, tiled_exp_base)
                r_exp_edge = compat.recommunication_exposed(fw_exp, tiled_exp_edge)
            else:
                rc = pricer.task(again).passes["forward"]
                r_base, r_edge = rc.network_base_s, rc.network_edge_s
                r_exp_base, r_exp_edge = r_base, r_edge
            k.recomm_base += r_base
            k.recomm_edge += r_edge
            k.recomm_exp_base += r_exp_base
            k.recomm_exp_edge += r_exp_edge
        if kind == "overlapped_linear":
            msgs = task.messages
            ag_s, ag_exp = tiles.time(ag, tiles.net(msgs.backward_base, b, True))
            ag_base, ag_edge = tiles.net(msgs.backward_base, b, True), tiles.net(msgs.backward_edge, b, True)
            ag_exp_base = ag_exp
            ag_s_edge, ag_exp_edge = tiles.time(ag, tiles.net(compat.edge_tile_message(msgs.backward_base,
                                                                                        msgs.backward_edge), b, True))
            k.tp_req = max(k.tp_req, tiles.required(msgs.backward_base, ag.compute_s))
            k.tp_req = max(k.tp_req, tiles.required(msgs.backward_edge, ag.compute_s))
            redo = redo_base if again is not None and tiled else 0
            wg_s, _ = tiles.time(wg, redo)
            wg_s_edge = tiles.time(wg, redo_edge if again is not None and tiled else 0)[0]
        elif kind == "tp_collective":
            ag_s = wg_s = ag_s_edge = wg_s_edge = 0
            ag_base = ag.network_base_s + ag.processing_s
            ag_edge = ag.network_edge_s + ag.processing_s
            ag_exp_base, ag_exp_edge = ag_base, ag_edge
        else:
            ag_s, wg_s = ag.processing_s, wg.processing_s
            ag_s_edge, wg_s_edge = ag_s, wg_s
            ag_base = ag_edge = ag_exp_base = ag_exp_edge = 0
        k.ag_flops_s += ag.compute_s
        k.ag_mem_s += ag.memory_s
        k.ag_s += ag_s
        k.ag_s_edge += ag_s_edge
        k.ag_tp_base += ag_base
        k.ag_tp_edge += ag_edge
        k.ag_exp_base += ag_exp_base
        k.ag_exp_edge += ag_exp_edge
        k.wg_flops_s += wg.compute_s
        k.wg_mem_s += wg.memory_s
        k.wg_s += wg_s
        k.wg_s_edge += wg_s_edge
        k.opt_flops_s += opt.compute_s
        k.opt_mem_s += opt.memory_s
        k.opt_s += opt.processing_s
    return k


def _div(a: float, b: float) -> float:
    """``a / b``; 0 when ``b`` is 0 (Calculon would divide by zero: never on a valid layout)."""
    return a / b if b else 0.0


def calculon_projection(c: ConcretePlanIR, pricer: Pricer) -> Projection:
    """Calculon 0.1.0's iteration of ``c`` under ``pricer``'s view (see the module rules)."""
    profile = pricer.profile
    s = c.schedule
    training = s.training
    k = _block(c, pricer)
    nmb, chunks, bpp, bpc = s.microbatches, s.chunks_per_stage, s.blocks_per_stage, s.blocks_per_chunk
    nbase, nedge, pp = s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.pipeline_parallel
    mult = bpp * nmb
    per_chunk = nmb * chunks

    def chunk_sum(base: float, edge: float) -> float:
        return per_chunk * (nbase * base + nedge * edge)

    tp_exposed = chunk_sum(k.fw_exp_base, k.fw_exp_edge) + chunk_sum(k.ag_exp_base, k.ag_exp_edge)
    recomm_exposed = chunk_sum(k.recomm_exp_base, k.recomm_exp_edge) if training else 0
    pp_tier = tier_of(c.queue_of["pipeline"])
    pp_bytes = c.pipeline.forward.message_bytes if c.pipeline.forward is not None else 0
    pp_bw_bytes = c.pipeline.backward.message_bytes if c.pipeline.backward is not None and training else 0
    p2p = Message.trusted(collective="p2p", message_bytes=pp_bytes, participants=2, network_tier=pp_tier)
    fw_pp = compat.unsent_p2p_s(pricer.message_s(p2p), c.pipeline.forward is not None)
    bw_pp = compat.unsent_p2p_s(pricer.message_s(p2p.trusted_replace(message_bytes=pp_bw_bytes)),
                                c.pipeline.backward is not None and training)
    if pp > 1:
        pp_exposed = nmb * chunks * fw_pp + nmb * (chunks if training else 0) * bw_pp
    else:
        pp_exposed = 0

    # Offload (the transfer commands of the offload programs).
    fw_off = c.program("forward_offload")
    bw_off = c.program("backward_offload")
    fw_size = fw_off.commands[0].transfer_bytes if fw_off else 0
    bw_size = bw_off.commands[0].transfer_bytes if bw_off else 0
    fw_off_s = pricer.tier2_s(fw_size)
    bw_off_s = pricer.tier2_s(bw_size) if training else 0
    base_fw_no = k.fw_s + k.fw_exp_base
    edge_fw_no = k.fw_s_edge + k.fw_exp_edge + fw_pp
    base_fw_ovh = max(0, fw_off_s + k.fw_mem_s - base_fw_no)
    edge_fw_ovh = max(0, fw_off_s + k.fw_mem_s - edge_fw_no)
    base_fw = base_fw_no + base_fw_ovh
    edge_fw = edge_fw_no + edge_fw_ovh
    base_bw_no = k.re_s + k.recomm_exp_base + k.ag_s + k.wg_s + k.ag_exp_base
    edge_bw_no = k.re_s_edge + k.recomm_exp_edge + k.ag_s_edge + k.wg_s_edge + k.ag_exp_edge + bw_pp
    re_mem = compat.offload_recompute_memory_s(k.re_mem_own_s)
    base_bw_ovh = max(0, bw_off_s + k.ag_mem_s + k.wg_mem_s + re_mem - base_bw_no)
    edge_bw_ovh = max(0, bw_off_s + k.ag_mem_s + k.wg_mem_s + re_mem - edge_bw_no)
    base_bw = base_bw_no + base_bw_ovh
    edge_bw = edge_bw_no + edge_bw_ovh
    chunk_fw = nbase * base_fw + nedge * edge_fw
    chunk_bw = nbase * base_bw + nedge * edge_bw
    chunk = chunk_fw + chunk_bw
    if nbase > 0:
        reduction = s.bubble_reduction_blocks * (base_fw + edge_fw + base_bw + edge_bw) / 2
    else:
        reduction = s.bubble_reduction_blocks * (edge_fw + edge_bw)
    shortage = nmb % pp
    extra = (chunks - 1) * (pp - shortage) if shortage else 0
    bubble = (pp - 1) * chunk + (extra * chunk - reduction)

    dp_exposed, dp_req_chunk, dp_req_tail = _data_parallel(c, pricer, k, base_bw, edge_bw, chunk_bw, bw_pp)

    # Offload bandwidth requirements (reported figures).
    fw_window = min(base_fw_no - k.fw_mem_s, edge_fw_no - k.fw_mem_s)
    bw_window = min(base_bw_no - (k.ag_mem_s + k.wg_mem_s), edge_bw_no - (k.ag_mem_s + k.wg_mem_s))
    memory = block_memory(c)  # reads the tasks and the schedule, which the ConcretePlanIR keeps
    kept = memory.activation_checkpoint_bytes if s.recompute == "full" else memory.activation_storage_bytes
    act_req = _div(kept, fw_window)
    weight_req = _div(memory.weight_bytes, fw_window)
    optim_req = _div(memory.weight_grad_bytes + memory.optimizer_bytes, bw_window) if training else 0
    if training:
        offload_req = max(_div(fw_size, fw_window), _div(bw_size, bw_window))
    else:
        offload_req = _div(fw_size, fw_window)

    if compat.applies(compat.edge_tile_message):  # the edge block runs the base block's tiles
        forward, backward, recompute = mult * k.fw_s, mult * k.ag_s + mult * k.wg_s, mult * k.re_s
    else:
        forward = chunk_sum(k.fw_s, k.fw_s_edge)
        backward = chunk_sum(k.ag_s + k.wg_s, k.ag_s_edge + k.wg_s_edge)
        recompute = chunk_sum(k.re_s, k.re_s_edge)
    components = {
        "forward": forward,
        "backward": backward,
        "optimizer": bpp * k.opt_s,
        "recompute": recompute,
        "tensor_parallel": tp_exposed,
        "pipeline_parallel": pp_exposed,
        "data_parallel": dp_exposed,
        "recommunication": recomm_exposed,
        "pipeline_bubble": bubble,
        "forward_offload": chunk_sum(base_fw_ovh, edge_fw_ovh),
        "backward_offload": chunk_sum(base_bw_ovh, edge_bw_ovh) if training else 0,
    }
    components = {name: float(components[name]) for name in COMPONENTS}
    total = compat.iteration_total(components)
    return Projection(
        "calculon-0.1.0", components, total,
        Requirements(k.tp_req, dp_req_chunk, dp_req_tail, act_req, weight_req, optim_req, offload_req),
        {"base_forward": base_fw, "edge_forward": edge_fw, "base_backward": base_bw, "edge_backward": edge_bw})


def _data_parallel(c: ConcretePlanIR, pricer: Pricer, k: _Block, base_bw: float, edge_bw: float, chunk_bw: float,
                   bw_pp: float) -> tuple[float, float, float]:
    """(exposed, chunk requirement, tail requirement) of the DP gradient sync."""
    s = c.schedule
    if c.data_parallel is None or not s.training:
        return 0, 0, 0
    dp_program = c.program("data_parallel")
    bdt = 0
    for command in dp_program.commands:
        bdt += pricer.message_s(command.message)
    if not c.options.dp_overlap:
        return s.blocks_per_stage * bdt, 0, 0
    profile = pricer.profile
    dp_tier, tp_tier, pp_tier = (tier_of(c.queue_of[d]) for d in ("data", "tensor", "pipeline"))
    dp_net = profile.networks[dp_tier]
    pu = dp_net.processor_usage
    sharding = len(c.data_parallel.messages) == 2
    nbase, nedge, bpc, pp, nmb = (s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.blocks_per_chunk,
                                  s.pipeline_parallel, s.microbatches)
    # prefix-counter-recompute-windows
    base_win = base_bw - (k.ag_mem_s + k.wg_mem_s + k.re_mem_s)
    edge_win = edge_bw - (k.ag_mem_s + k.wg_mem_s + k.re_mem_s)
    compute = k.ag_flops_s + k.wg_flops_s + k.re_flops_s
    if not sharding:
        base_win += k.opt_s - k.opt_mem_s
        edge_win += k.opt_s - k.opt_mem_s
        compute += k.opt_flops_s
    if dp_tier == tp_tier:  # dp-same-tier-as-tp-link-time
        base_win -= k.recomm_base + k.ag_tp_base
        edge_win -= k.recomm_edge + k.ag_tp_edge
    chunk_win = nbase * base_win + nedge * edge_win
    chunk_compute = bpc * compute
    overlappable = s.chunks_per_stage - 1
    last_size = bpc - 1
    window_mb = compat.dp_window_microbatches(nmb, pp)
    window = window_mb * chunk_win
    overlap_compute = window_mb * chunk_compute
    chunk_dp = bpc * bdt
    same_pp = compat.dp_collides_with_pp(dp_tier == pp_tier, pp)
    if not compat.dp_collides_with_pp(True, pp):  # no pipeline traffic: no p2p in the windows
        bw_pp = 0
    if same_pp:
        collided = min(chunk_dp // chunk_bw, nmb % pp if nmb % pp != 0 else pp)
    else:
        collided = 0
    inflection = chunk_dp - (window - collided * bw_pp) + overlap_compute * pu
    if inflection > 0:
        chunks_exposed = overlappable * inflection
    else:
        chunks_exposed = overlappable * chunk_dp * pu
    scalars = ((dp_net.collectives["reduce_scatter"].volume_multiplier
                + dp_net.collectives["all_gather"].volume_multiplier) if sharding
               else dp_net.collectives["all_reduce"].volume_multiplier)
    chunk_time = window + overlap_compute * pu
    if same_pp:
        chunk_time -= bw_pp
    chunk_time *= overlappable
    dp_size = c.data_parallel.gradient_bytes
    req_chunk = bpc * dp_size / chunk_time * scalars if chunk_time > 0 else 0
    if nbase > 0:
        last_window = chunk_win - bw_pp - (base_bw + edge_bw) / 2
        if not sharding and compat.last_window_optimizer_credit():
            last_window += k.opt_s - k.opt_mem_s
    else:
        last_window = 0
    last_inflection = (last_size * bdt) + (compute * pu - last_window)
    if last_inflection > 0:
        last_exposed = last_inflection
    else:
        last_exposed = last_size * bdt * pu
    exposed = chunks_exposed + last_exposed
    tail_time = last_window + last_size * bdt * pu
    req_tail = bpc * dp_size / tail_time * scalars if tail_time > 0 else 0
    return compat.dp_exposed_s(bdt, exposed), req_chunk, req_tail
