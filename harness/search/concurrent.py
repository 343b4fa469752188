"""TP/DP overlap and offload variants of one plan, all at once.

The estimate prices a layout with TP/DP overlap or offload by the
``calculon-0.1.0`` projection of its ConcretePlanIR
(:func:`harness.schedule.projection.calculon_projection`). Building a
ConcretePlanIR costs about 10 ms; the projection reads little of it. What
the search shares, per plan (one lowering key and TP overlap mode):

- the per-block sums (:func:`harness.schedule.projection.block_sums`), once
  per TP tier: they depend on the plan, the TP tier, the tiles and pipe, not
  on DP overlap, offload or the PP and DP tiers; a :class:`TierPricer`
  prices the plan's TP messages on the tier (the plan is lowered with tier 0);
- the offload transfer sizes and the memory tiers of each offload choice
  (:func:`harness.passes.concretize.offload_transfer_bytes`,
  :meth:`TransformerConcretize.buffers`, :func:`harness.ir.concrete.tier_total_bytes`);

and :func:`project` evaluates the projection's closed forms after the block
sums (offload overheads, bubble, PP, DP with and without overlap, the
components and the total) for every (DP overlap, offload, placement)
variant at once, as numpy arrays. It is the projection's arithmetic, term for
term and in the same order, with each variant-dependent branch as an
elementwise choice; every element is bit-identical to the scalar projection
of that execution (``tests/test_search_concurrent.py`` checks every
execution of small spaces against ``harness.estimate.estimate``). Calculon
compatibility rules are read through :mod:`harness.calculon_compat`, so
switching one off changes both alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harness import calculon_compat as compat
from harness.cost.output_layer import per_microbatch_s
from harness.cost.views import PassCost, Pricer, TaskCost
from harness.ir.concrete import tier_total_bytes
from harness.ir.model import ModelIR, Offload
from harness.ir.portable import Message, PlanTask, PortablePlanIR
from harness.passes.concretize import TransformerConcretize, offload_transfer_bytes
from harness.schedule.memory import BlockMemory, StageMemory
from harness.vocabulary import COMPONENTS


class TierPricer:
    """A pricer whose messages travel on one network tier (every message the block sums price is a TP one)."""

    def __init__(self, pricer: Pricer, tier: int) -> None:
        self._pricer = pricer
        self._tier = tier
        self.profile = pricer.profile
        self.view = pricer.view
        self.roofline = pricer.roofline
        self.compute_s = pricer.compute_s
        self.memory_s = pricer.memory_s
        self.tier2_s = pricer.tier2_s
        self._tasks: dict[int, tuple[PlanTask, TaskCost]] = {}

    def message_s(self, message: Message | None) -> float:
        if message is None:
            return 0.0
        return self._pricer.message_on_tier_s(message, self._tier)

    def task(self, task: PlanTask) -> TaskCost:
        cost = self._pricer.task(task)
        msgs = task.messages
        if msgs is None:
            return cost
        hit = self._tasks.get(id(task))
        if hit is not None and hit[0] is task:
            return hit[1]
        fw, bw = cost.passes["forward"], cost.passes["activation_grad"]
        on = self.message_s
        passes = dict(cost.passes)
        passes["forward"] = PassCost(fw.compute_s, fw.memory_s, fw.processing_s, on(msgs.forward_base),
                                     on(msgs.forward_edge))
        passes["activation_grad"] = PassCost(bw.compute_s, bw.memory_s, bw.processing_s, on(msgs.backward_base),
                                             on(msgs.backward_edge))
        out = TaskCost(cost.name, cost.phase, cost.primitive, passes)
        self._tasks[id(task)] = (task, out)
        return out


@dataclasses.dataclass(frozen=True)
class Variants:
    """Variant arrays (one element per execution): tiers, DP overlap, offload switches."""

    tensor: np.ndarray
    pipeline: np.ndarray
    data: np.ndarray
    dp_overlap: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    optimizer: np.ndarray

    @classmethod
    def product(cls, options: list[tuple[bool, bool, bool, bool]], placements: np.ndarray) -> "Variants":
        """Every (dp_overlap, weights, activations, optimizer) option with every placement (option-major)."""
        n = len(placements)
        opts = np.repeat(np.array(options, dtype=bool).reshape(-1, 4), n, axis=0)
        tiers = np.tile(placements, (len(options), 1))
        return cls(tiers[:, 0], tiers[:, 1], tiers[:, 2], opts[:, 0], opts[:, 1], opts[:, 2], opts[:, 3])


def offload_memory(plan: PortablePlanIR, block: BlockMemory, stage: StageMemory,
                   offload: tuple[bool, bool, bool]) -> tuple[float, float]:
    """(tier-1, tier-2) bytes of the plan's first stage with an offload choice (the ConcretePlanIR's buffers)."""
    o = Offload.trusted(weights=offload[0], activations=offload[1], optimizer=offload[2])
    buffers = TransformerConcretize.buffers(plan, o, block, stage)
    return tier_total_bytes(buffers, 1), tier_total_bytes(buffers, 2)


def project(plan: PortablePlanIR, block: BlockMemory, pricer: Pricer, sums: list, variants: Variants,
            networks: int, model: ModelIR) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(total_s, components_s) of every variant: the ``calculon-0.1.0`` projection (training), vectorized,
    with the output layer added as the estimate adds it to a projection (family ``output_layer``).

    ``sums``: the plan's :func:`~harness.schedule.projection.block_sums` on each network tier (priced with a
    :class:`TierPricer` of that tier, with the plan's TP overlap tiles and mode).
    """
    s = plan.schedule
    tn, pn, dn = variants.tensor, variants.pipeline, variants.data

    class K:  # the block sums of each variant's TP tier
        pass

    k = K()
    for field in dataclasses.fields(sums[0]):
        setattr(k, field.name, np.array([getattr(x, field.name) for x in sums], dtype=float)[tn])

    def by_tier(values: list[float], tiers: np.ndarray) -> np.ndarray:
        return np.array(values, dtype=float)[tiers]

    nmb, chunks, bpp, bpc = s.microbatches, s.chunks_per_stage, s.blocks_per_stage, s.blocks_per_chunk
    nbase, nedge, pp = s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.pipeline_parallel
    mult = bpp * nmb
    per_chunk = nmb * chunks

    def chunk_sum(base, edge):
        return per_chunk * (nbase * base + nedge * edge)

    tp_exposed = chunk_sum(k.fw_exp_base, k.fw_exp_edge) + chunk_sum(k.ag_exp_base, k.ag_exp_edge)
    recomm_exposed = chunk_sum(k.recomm_exp_base, k.recomm_exp_edge)
    pp_bytes = plan.pipeline.forward.message_bytes if plan.pipeline.forward is not None else 0
    pp_bw_bytes = plan.pipeline.backward.message_bytes if plan.pipeline.backward is not None else 0
    p2p = Message.trusted(collective="p2p", message_bytes=pp_bytes, participants=2, network_tier=0)
    p2p_back = p2p.trusted_replace(message_bytes=pp_bw_bytes)
    fw_pp = by_tier([compat.unsent_p2p_s(pricer.message_on_tier_s(p2p, t), plan.pipeline.forward is not None)
                     for t in range(networks)], pn)
    bw_pp = by_tier([compat.unsent_p2p_s(pricer.message_on_tier_s(p2p_back, t), plan.pipeline.backward is not None)
                     for t in range(networks)], pn)
    pp_exposed = nmb * chunks * fw_pp + nmb * chunks * bw_pp if pp > 1 else 0

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

    base_fw_no = k.fw_s + k.fw_exp_base
    edge_fw_no = k.fw_s_edge + k.fw_exp_edge + fw_pp
    base_fw_ovh = np.maximum(0, fw_off_s + k.fw_mem_s - base_fw_no)
    edge_fw_ovh = np.maximum(0, fw_off_s + k.fw_mem_s - edge_fw_no)
    base_fw = base_fw_no + base_fw_ovh
    edge_fw = edge_fw_no + edge_fw_ovh
    base_bw_no = k.re_s + k.recomm_exp_base + k.ag_s + k.wg_s + k.ag_exp_base
    edge_bw_no = k.re_s_edge + k.recomm_exp_edge + k.ag_s_edge + k.wg_s_edge + k.ag_exp_edge + bw_pp
    re_mem = compat.offload_recompute_memory_s(k.re_mem_own_s)
    base_bw_ovh = np.maximum(0, bw_off_s + k.ag_mem_s + k.wg_mem_s + re_mem - base_bw_no)
    edge_bw_ovh = np.maximum(0, bw_off_s + k.ag_mem_s + k.wg_mem_s + re_mem - edge_bw_no)
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

    dp_exposed = _data_parallel(plan, pricer, k, variants, base_bw, edge_bw, chunk_bw, bw_pp, networks)

    n = len(tn)
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
        "backward_offload": chunk_sum(base_bw_ovh, edge_bw_ovh),
    }
    components = {name: np.broadcast_to(np.asarray(components[name], dtype=float), (n,)) for name in COMPONENTS}
    total = compat.iteration_total(components)
    extra = per_microbatch_s(pricer, model, s.training)
    if extra is not None:
        forward, backward = extra  # once per microbatch, outside the projected blocks
        mb = s.microbatches
        components = {**components, "forward": components["forward"] + mb * forward,
                      "backward": components["backward"] + mb * backward}
        total = total + (mb * forward + mb * backward)
    return total, components


def _data_parallel(plan: PortablePlanIR, pricer: Pricer, k, variants: Variants, base_bw, edge_bw, chunk_bw, bw_pp,
                   networks: int):
    """The DP exposed time of every variant, with and without DP overlap (the projection's ``_data_parallel``)."""
    s = plan.schedule
    if plan.data_parallel is None:
        return 0
    profile = pricer.profile
    tn, pn, dn = variants.tensor, variants.pipeline, variants.data
    per_tier = []
    for t in range(networks):
        sync = 0
        for message in plan.data_parallel.messages:
            sync += pricer.message_on_tier_s(message, t)
        per_tier.append(sync)
    bdt = np.array(per_tier, dtype=float)[dn]
    without = s.blocks_per_stage * bdt
    if not variants.dp_overlap.any():
        return without
    pu = np.array([profile.networks[t].processor_usage for t in range(networks)])[dn]
    sharding = len(plan.data_parallel.messages) == 2
    nbase, nedge, bpc, pp, nmb = (s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.blocks_per_chunk,
                                  s.pipeline_parallel, s.microbatches)
    base_win = base_bw - (k.ag_mem_s + k.wg_mem_s + k.re_mem_s)
    edge_win = edge_bw - (k.ag_mem_s + k.wg_mem_s + k.re_mem_s)
    compute = k.ag_flops_s + k.wg_flops_s + k.re_flops_s
    if not sharding:
        base_win += k.opt_s - k.opt_mem_s
        edge_win += k.opt_s - k.opt_mem_s
        compute += k.opt_flops_s
    same_tp = dn == tn
    base_win = np.where(same_tp, base_win - (k.recomm_base + k.ag_tp_base), base_win)
    edge_win = np.where(same_tp, edge_win - (k.recomm_edge + k.ag_tp_edge), edge_win)
    chunk_win = nbase * base_win + nedge * edge_win
    chunk_compute = bpc * compute
    overlappable = s.chunks_per_stage - 1
    last_size = bpc - 1
    window_mb = compat.dp_window_microbatches(nmb, pp)
    window = window_mb * chunk_win
    overlap_compute = window_mb * chunk_compute
    chunk_dp = bpc * bdt
    same_pp = np.where(dn == pn, compat.dp_collides_with_pp(True, pp), compat.dp_collides_with_pp(False, pp))
    if not compat.dp_collides_with_pp(True, pp):
        bw_pp = 0
    collided = np.where(same_pp, np.minimum(np.floor_divide(chunk_dp, chunk_bw), nmb % pp if nmb % pp != 0 else pp),
                        0)
    inflection = chunk_dp - (window - collided * bw_pp) + overlap_compute * pu
    chunks_exposed = np.where(inflection > 0, overlappable * inflection, overlappable * chunk_dp * pu)
    if nbase > 0:
        last_window = chunk_win - bw_pp - (base_bw + edge_bw) / 2
        if not sharding and compat.last_window_optimizer_credit():
            last_window += k.opt_s - k.opt_mem_s
    else:
        last_window = 0
    last_inflection = (last_size * bdt) + (compute * pu - last_window)
    last_exposed = np.where(last_inflection > 0, last_inflection, last_size * bdt * pu)
    exposed = chunks_exposed + last_exposed
    return np.where(variants.dp_overlap, compat.dp_exposed_s(bdt, exposed), without)
