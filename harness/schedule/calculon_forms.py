"""The ``calculon-0.1.0`` projection's closed forms from the block sums to the iteration, written once.

Two callers evaluate them:

- :func:`harness.schedule.projection.calculon_projection` (the estimate), on
  Python floats, one execution at a time;
- :func:`harness.search.concurrent.project` (the search), on numpy arrays,
  one element per (DP overlap, offload, network placement) variant of a plan.

Rules (what makes the one definition serve both, bit for bit):

- the arithmetic is ``+ - * / //`` on the operands, in one written order;
  IEEE-754 double ``+ - * /`` round the same in Python and numpy (numpy's
  float ``//`` is Python's floor division, element by element), and nothing
  here can be fused (no ``fma``, no ``sum`` over an array, no reordering);
- each branch that depends on a variant goes through an :class:`Arith`
  passed in: ``maximum``, ``minimum``, ``where`` and ``any``.
  :data:`SCALAR` is Python's ``max``, ``min``, a conditional expression and
  ``bool``; the search's is ``np.maximum``, ``np.minimum``, ``np.where`` and
  ``np.any`` (:data:`harness.search.concurrent.ARRAYS`). Both sides of a
  ``where`` are evaluated (a few float operations); the two ``maximum``
  differ only on NaN, which no accepted input produces (the estimate's final
  guard refuses a non-finite figure);
- a branch that depends only on the plan (its schedule, training, optimizer
  sharding) or on a rule of :mod:`harness.calculon_compat` is a plain
  ``if``: it is the same for every variant;
- what differs between the callers stays with them: how the block sums, the
  pipeline p2p time, the offload transfer time and the DP sync time are
  priced (the estimate reads its ConcretePlanIR's commands, the search prices
  one plan on every tier), and the figures only the estimate reports (the
  bandwidth requirements, read from :class:`Blocks` and :class:`DataParallelWindows`).

The rule names of :mod:`harness.calculon_compat` are in comments where they
apply; every rule is read through that module, so switching one off changes
both callers alike. One term is not Calculon's: the expert overlap's hidden
all-to-all time (``BlockSums.expert_exchange_hidden_s``, per block and step),
taken off the exposed TP component only; it is an exact 0.0 for every plan
without the overlap (the search's included), and subtracting it changes no bit.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from harness import calculon_compat as compat
from harness.ir.portable import Message, PipelineTraffic
from harness.vocabulary import COMPONENTS

#: A float (the estimate) or a numpy array of floats, one per variant (the search).
Value = Any


class Arith(NamedTuple):
    """The branch primitives of the closed forms, for one kind of operand (see the module rules)."""

    name: str
    maximum: Callable[[Value, Value], Value]
    minimum: Callable[[Value, Value], Value]
    where: Callable[[Value, Value, Value], Value]  # where(condition, if_true, if_false); both evaluated
    any: Callable[[Value], bool]


def _choose(condition: bool, if_true: Value, if_false: Value) -> Value:
    return if_true if condition else if_false


#: Python floats: one execution.
SCALAR = Arith("python floats", max, min, _choose, bool)


def __getattr__(name: str) -> Any:
    """``ARRAYS``, numpy arrays' :class:`Arith`: one element per variant (the search's placements and options),
    built when asked for, so that the estimate (:data:`SCALAR`) does not import numpy."""
    if name == "ARRAYS":
        import numpy as np

        return Arith("numpy arrays", np.maximum, np.minimum, np.where, np.any)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bubble_extra_chunks(s) -> int:
    """Chunk times the interleaved bubble adds when PP does not divide the microbatches:
    ``(interleaving - 1) x (PP - microbatches mod PP)`` (the stages left without a microbatch of the last
    round wait that many chunks each), 0 when it does."""
    shortage = s.microbatches % s.pipeline_parallel
    return (s.chunks_per_stage - 1) * (s.pipeline_parallel - shortage) if shortage else 0


def bubble_reduction_s(s, base_forward_s, edge_forward_s, base_backward_s, edge_backward_s):
    """The work of the ``bubble_reduction_blocks`` blocks the uneven stages lack: half a base and half an
    edge block each, or an edge block when chunks have no base block (floats, or arrays of variants)."""
    if s.base_blocks_per_chunk > 0:
        return s.bubble_reduction_blocks * (base_forward_s + edge_forward_s + base_backward_s + edge_backward_s) / 2
    return s.bubble_reduction_blocks * (edge_forward_s + edge_backward_s)


def chunk_path_s(s, base_s, edge_s):
    """One chunk's critical path from a base and an edge block's time: ``base blocks x base + edge x edge``."""
    return s.base_blocks_per_chunk * base_s + s.edge_blocks_per_chunk * edge_s


def pipeline_p2p_s(pipeline: PipelineTraffic, training: bool, tier: int, message_s: Callable[[Message], float]
                   ) -> tuple[float, float]:
    """(forward, backward) seconds of one pipeline boundary p2p transfer on network ``tier``
    (``message_s`` prices a message on its tier); rule unsent-p2p-priced."""
    forward_bytes = pipeline.forward.message_bytes if pipeline.forward is not None else 0
    backward_bytes = pipeline.backward.message_bytes if pipeline.backward is not None and training else 0
    p2p = Message.trusted(collective="p2p", message_bytes=forward_bytes, participants=2, network_tier=tier)
    forward = compat.unsent_p2p_s(message_s(p2p), pipeline.forward is not None)
    backward = compat.unsent_p2p_s(message_s(p2p.trusted_replace(message_bytes=backward_bytes)),
                                   pipeline.backward is not None and training)
    return forward, backward


class DataParallelSync(NamedTuple):
    """The DP gradient sync as the closed forms read it (floats, or arrays of variants)."""

    block_s: Value  # one block's sync time on the DP tier
    processor_usage: Value  # of the DP tier
    sharding: bool  # optimizer sharding: reduce-scatter and all-gather (else one all-reduce)
    overlap: Value  # DP overlap (bool, or bool array)
    same_tier_as_tp: Value  # the DP tier is the TP tier
    same_tier_as_pp: Value  # the DP tier is the PP tier


class Blocks(NamedTuple):
    """Block times of one microbatch with the offload overheads (``*_no``: without them)."""

    base_fw_no: Value
    edge_fw_no: Value
    base_fw_ovh: Value
    edge_fw_ovh: Value
    base_fw: Value
    edge_fw: Value
    base_bw_no: Value
    edge_bw_no: Value
    base_bw_ovh: Value
    edge_bw_ovh: Value
    base_bw: Value
    edge_bw: Value


class DataParallelWindows(NamedTuple):
    """The DP overlap terms the bandwidth requirements read (the exposed time is in the components)."""

    window: Value
    overlap_compute: Value
    overlappable: int
    last_window: Value
    last_size: int
    collides_with_pp: Value  # the DP sync competes with the pipeline p2p for its tier
    pp_in_window_s: Value  # the backward p2p time the windows account for (0 without pipeline traffic)


class Iteration(NamedTuple):
    """The projected iteration: components (reporting order) and total, with the terms behind them."""

    components_s: dict[str, Value]
    total_s: Value
    blocks: Blocks
    dp_windows: DataParallelWindows | None  # None: no DP sync, or no variant overlaps it


def blocks(k, fw_pp: Value, bw_pp: Value, fw_off_s: Value, bw_off_s: Value, ops: Arith) -> Blocks:
    """Base and edge block times: the block sums, the exposed TP time, the edge block's p2p, and offload's
    ``max(0, T(size) + memory_s - block_s)`` (rule offload-recompute-memory)."""
    base_fw_no = k.forward_s + k.forward_tp_exposed_base_s
    edge_fw_no = k.forward_edge_s + k.forward_tp_exposed_edge_s + fw_pp
    base_fw_ovh = ops.maximum(0, fw_off_s + k.forward_memory_s - base_fw_no)
    edge_fw_ovh = ops.maximum(0, fw_off_s + k.forward_memory_s - edge_fw_no)
    base_bw_no = compat.block_backward_s(k.recompute_s, k.recommunication_exposed_base_s, k.activation_grad_s,
                                         k.weight_grad_s, k.activation_grad_tp_exposed_base_s)
    edge_bw_no = compat.block_backward_s(k.recompute_edge_s, k.recommunication_exposed_edge_s,
                                         k.activation_grad_edge_s, k.weight_grad_edge_s,
                                         k.activation_grad_tp_exposed_edge_s) + bw_pp
    re_mem = compat.offload_recompute_memory_s(k.recompute_memory_s)
    base_bw_ovh = ops.maximum(0, bw_off_s + k.activation_grad_memory_s + k.weight_grad_memory_s + re_mem - base_bw_no)
    edge_bw_ovh = ops.maximum(0, bw_off_s + k.activation_grad_memory_s + k.weight_grad_memory_s + re_mem - edge_bw_no)
    return Blocks(base_fw_no, edge_fw_no, base_fw_ovh, edge_fw_ovh, base_fw_no + base_fw_ovh,
                  edge_fw_no + edge_fw_ovh, base_bw_no, edge_bw_no, base_bw_ovh, edge_bw_ovh,
                  base_bw_no + base_bw_ovh, edge_bw_no + edge_bw_ovh)


def iteration(s, k, *, fw_pp: Value, bw_pp: Value, fw_off_s: Value, bw_off_s: Value,
              dp: DataParallelSync | None, ops: Arith, finish: Callable[[Value], Value]) -> Iteration:
    """The iteration of schedule ``s`` from the block sums ``k``
    (:class:`harness.schedule.projection.BlockSums`, floats or arrays of variants).

    ``dp``: None without a DP sync (no DP, or inference). ``finish`` turns each
    component into the caller's figure type (``float``; an array of every variant) before the total is summed.
    """
    training = s.training
    microbatches, chunks, bpp = s.microbatches, s.chunks_per_stage, s.blocks_per_stage
    nbase, nedge, pp = s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.pipeline_parallel
    mult = bpp * microbatches
    per_chunk = microbatches * chunks

    def chunk_sum(base: Value, edge: Value) -> Value:
        return per_chunk * (nbase * base + nedge * edge)

    tp_exposed = compat.tensor_parallel_s(per_chunk, nbase, nedge, k.forward_tp_exposed_base_s,
                                          k.forward_tp_exposed_edge_s, k.activation_grad_tp_exposed_base_s,
                                          k.activation_grad_tp_exposed_edge_s)
    # what the expert overlap's merged steps hide (0.0 without it: subtracting an exact zero changes no bit)
    tp_exposed = tp_exposed - chunk_sum(k.expert_exchange_hidden_s, k.expert_exchange_hidden_s)
    recomm_exposed = chunk_sum(k.recommunication_exposed_base_s, k.recommunication_exposed_edge_s) if training else 0
    if pp > 1:
        pp_exposed = compat.pipeline_parallel_s(microbatches, chunks, fw_pp, chunks if training else 0, bw_pp)
    else:
        pp_exposed = 0
    b = blocks(k, fw_pp, bw_pp, fw_off_s, bw_off_s, ops)
    chunk_fw = chunk_path_s(s, b.base_fw, b.edge_fw)
    chunk_bw = chunk_path_s(s, b.base_bw, b.edge_bw)
    chunk = chunk_fw + chunk_bw
    reduction = bubble_reduction_s(s, b.base_fw, b.edge_fw, b.base_bw, b.edge_bw)
    bubble = compat.pipeline_bubble_s(pp - 1, bubble_extra_chunks(s), chunk, reduction)

    windows = None
    if dp is None:
        dp_exposed = 0
    else:
        without = bpp * dp.block_s
        if ops.any(dp.overlap):
            exposed, windows = _data_parallel_overlap(s, k, b, chunk_bw, bw_pp, dp, ops)
            dp_exposed = ops.where(dp.overlap, exposed, without)
        else:
            dp_exposed = without

    if compat.applies(compat.edge_tile_message):  # the edge block runs the base block's tiles
        forward = mult * k.forward_s
        backward = compat.backward_s(mult, k.activation_grad_s, k.weight_grad_s)
        recompute = mult * k.recompute_s
    else:
        forward = chunk_sum(k.forward_s, k.forward_edge_s)
        backward = chunk_sum(k.activation_grad_s + k.weight_grad_s, k.activation_grad_edge_s + k.weight_grad_edge_s)
        recompute = chunk_sum(k.recompute_s, k.recompute_edge_s)
    components = {
        "forward": forward,
        "backward": backward,
        "optimizer": bpp * k.optimizer_s,
        "recompute": recompute,
        "tensor_parallel": tp_exposed,
        "pipeline_parallel": pp_exposed,
        "data_parallel": dp_exposed,
        "recommunication": recomm_exposed,
        "pipeline_bubble": bubble,
        "forward_offload": chunk_sum(b.base_fw_ovh, b.edge_fw_ovh),
        "backward_offload": chunk_sum(b.base_bw_ovh, b.edge_bw_ovh) if training else 0,
    }
    components = {name: finish(components[name]) for name in COMPONENTS}
    return Iteration(components, compat.iteration_total(components), b, windows)


class OutsideWork(NamedTuple):
    """The work an iteration gets outside the composed blocks, seconds (floats, or arrays of the search's
    variants); each pair None where there is none (then the composition is left exactly as it is)."""

    #: (forward, backward) once per microbatch (the section's output tasks and the host's microbatch time,
    #: :func:`harness.cost.outside.outside_work`).
    per_microbatch_s: tuple[Value, Value] | None = None
    #: (optimizer, data_parallel) once per iteration (the section's vocabulary matrices,
    #: :func:`harness.cost.outside.outside_work`).
    per_iteration_s: tuple[Value, Value] | None = None
    #: (backward, pipeline_bubble): the unfused gradient accumulation (:func:`harness.cost.outside.outside_work`).
    accumulation_s: tuple[Value, Value] | None = None


def with_outside_work(components_s: dict[str, Value], total_s: Value, microbatches: int, work: OutsideWork, *,
                      portable: bool) -> tuple[dict[str, Value], Value]:
    """(components, total) of a composed iteration with the work outside its blocks added: the one
    post-composition step of the estimate's closed form (``portable``: a portable plan's :func:`harness.schedule.
    compose.compose`), its projection of a ConcretePlanIR and the search.

    ``forward`` and ``backward`` grow by ``microbatches x`` the per-microbatch times, ``optimizer`` and
    ``data_parallel`` by the per-iteration times, then ``backward`` and ``pipeline_bubble`` by the accumulation;
    the total grows by each pair's sum (added, not summed again), except that a portable plan's total is summed
    again from its components after the per-microbatch and per-iteration work (rule
    ``portable-total-summed-again``, :func:`harness.calculon_compat.outside_work_total`).
    """
    if work.per_microbatch_s is None and work.per_iteration_s is None and work.accumulation_s is None:
        return components_s, total_s
    components = dict(components_s)
    added = total_s
    if work.per_microbatch_s is not None:
        forward_s, backward_s = work.per_microbatch_s
        mb = microbatches
        components["forward"] = components["forward"] + mb * forward_s
        components["backward"] = components["backward"] + mb * backward_s
        added = added + (mb * forward_s + mb * backward_s)
    if work.per_iteration_s is not None:
        optimizer_s, data_parallel_s = work.per_iteration_s
        components["optimizer"] = components["optimizer"] + optimizer_s
        components["data_parallel"] = components["data_parallel"] + data_parallel_s
        added = added + (optimizer_s + data_parallel_s)
    total = added
    if work.per_microbatch_s is not None or work.per_iteration_s is not None:
        total = compat.outside_work_total(added, components, portable)
    if work.accumulation_s is not None:
        backward_s, bubble_s = work.accumulation_s
        components["backward"] = components["backward"] + backward_s
        components["pipeline_bubble"] = components["pipeline_bubble"] + bubble_s
        total = total + (backward_s + bubble_s)
    return components, total


def _data_parallel_overlap(s, k, b: Blocks, chunk_bw: Value, bw_pp: Value, dp: DataParallelSync, ops: Arith
                           ) -> tuple[Value, DataParallelWindows]:
    """The DP exposed time with DP overlap: the windows and inflections of Calculon's ``_compute_batch_stats``."""
    nbase, nedge, bpc, pp, microbatches = (s.base_blocks_per_chunk, s.edge_blocks_per_chunk, s.blocks_per_chunk,
                                  s.pipeline_parallel, s.microbatches)
    block_sync_s, usage = dp.block_s, dp.processor_usage
    # prefix-counter-recompute-windows
    base_win = b.base_bw - (k.activation_grad_memory_s + k.weight_grad_memory_s + k.recompute_window_memory_s)
    edge_win = b.edge_bw - (k.activation_grad_memory_s + k.weight_grad_memory_s + k.recompute_window_memory_s)
    compute = k.activation_grad_compute_s + k.weight_grad_compute_s + k.recompute_window_compute_s
    if not dp.sharding:
        base_win += k.optimizer_s - k.optimizer_memory_s
        edge_win += k.optimizer_s - k.optimizer_memory_s
        compute += k.optimizer_compute_s
    # dp-same-tier-as-tp-link-time
    base_win = ops.where(dp.same_tier_as_tp,
                         base_win - (k.recommunication_link_base_s + k.activation_grad_tp_link_base_s), base_win)
    edge_win = ops.where(dp.same_tier_as_tp,
                         edge_win - (k.recommunication_link_edge_s + k.activation_grad_tp_link_edge_s), edge_win)
    chunk_win = nbase * base_win + nedge * edge_win
    chunk_compute = bpc * compute
    overlappable = s.chunks_per_stage - 1
    last_size = bpc - 1
    window_mb = compat.dp_window_microbatches(microbatches, pp)
    window = window_mb * chunk_win
    overlap_compute = window_mb * chunk_compute
    chunk_dp = bpc * block_sync_s
    collides_with_pp = ops.where(dp.same_tier_as_pp, compat.dp_collides_with_pp(True, pp),
                                 compat.dp_collides_with_pp(False, pp))
    if not compat.dp_collides_with_pp(True, pp):  # no pipeline traffic: no p2p in the windows
        bw_pp = 0
    collided = ops.where(collides_with_pp,
                         ops.minimum(chunk_dp // chunk_bw, microbatches % pp if microbatches % pp != 0 else pp), 0)
    inflection = chunk_dp - (window - collided * bw_pp) + overlap_compute * usage
    chunks_exposed = ops.where(inflection > 0, overlappable * inflection, overlappable * chunk_dp * usage)
    if nbase > 0:
        last_window = chunk_win - bw_pp - (b.base_bw + b.edge_bw) / 2
        if not dp.sharding and compat.last_window_optimizer_credit():
            last_window += k.optimizer_s - k.optimizer_memory_s
    else:
        last_window = 0
    last_inflection = (last_size * block_sync_s) + (compute * usage - last_window)
    last_exposed = ops.where(last_inflection > 0, last_inflection, last_size * block_sync_s * usage)
    exposed = chunks_exposed + last_exposed
    return (compat.dp_exposed_s(block_sync_s, exposed),
            DataParallelWindows(window, overlap_compute, overlappable, last_window, last_size,
                                collides_with_pp, bw_pp))
