"""End-to-end 1F1B / interleaved composition of one iteration.

Rules (per first pipeline stage, which is the fullest and the slowest):

- ``mult = blocks_per_stage x microbatches``; forward, backward (dgrad +
  wgrad) and recompute are ``mult`` x the block's time; the optimizer step
  runs once per block;
- a chunk is ``base_blocks_per_chunk`` base blocks then one edge block; the
  edge block differs in its TP collectives (p2p_rs_ag) and carries the
  pipeline boundary transfer; TP and recommunication are exposed per block;
- pipeline p2p: ``chunks_per_stage`` transfers per microbatch each way;
- bubble: ``(PP - 1)`` chunk times (forward + backward chunk critical path),
  plus ``(interleaving - 1) x (PP - microbatches mod PP)`` chunk times when
  PP does not divide the microbatches, minus the work of the
  ``bubble_reduction_blocks`` missing blocks when PP does not divide the
  blocks (half a base and half an edge block each; an edge block when chunks
  have no base block);
- data parallel (no overlap): one sync per block on the stage;
- the total is the sum of the components (``harness.vocabulary.COMPONENTS``).

The arithmetic forms (order of summation, grouping of products) are
Calculon 0.1.0's, named in :mod:`harness.calculon_compat`. The projection's
closed forms (:mod:`harness.schedule.calculon_forms`) compose the same way
through the same rules and share the bubble's terms defined here
(:func:`bubble_extra_chunks`, :func:`bubble_reduction_s`, :func:`chunk_path_s`).
"""

from __future__ import annotations

import dataclasses

from harness import calculon_compat as compat
from harness.ir.portable import Schedule
from harness.schedule.block import BlockTimes


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkTimes:
    """Block and chunk critical paths that feed the bubble."""

    base_forward_s: float
    edge_forward_s: float
    base_backward_s: float
    edge_backward_s: float
    chunk_forward_s: float
    chunk_backward_s: float
    bubble_full_chunks: int
    bubble_extra_chunks: int
    bubble_reduction_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class Composition:
    components_s: dict[str, float]
    total_s: float
    chunks: ChunkTimes


def bubble_extra_chunks(s: Schedule) -> int:
    """Chunk times the interleaved bubble adds when PP does not divide the microbatches:
    ``(interleaving - 1) x (PP - microbatches mod PP)`` (the stages left without a microbatch of the last
    round wait that many chunks each), 0 when it does."""
    shortage = s.microbatches % s.pipeline_parallel
    return (s.chunks_per_stage - 1) * (s.pipeline_parallel - shortage) if shortage else 0


def bubble_reduction_s(s: Schedule, base_forward_s, edge_forward_s, base_backward_s, edge_backward_s):
    """The work of the ``bubble_reduction_blocks`` blocks the uneven stages lack: half a base and half an
    edge block each, or an edge block when chunks have no base block (floats, or arrays of variants)."""
    if s.base_blocks_per_chunk > 0:
        return s.bubble_reduction_blocks * (base_forward_s + edge_forward_s + base_backward_s + edge_backward_s) / 2
    return s.bubble_reduction_blocks * (edge_forward_s + edge_backward_s)


def chunk_path_s(s: Schedule, base_s, edge_s):
    """One chunk's critical path from a base and an edge block's time: ``base blocks x base + edge x edge``."""
    return s.base_blocks_per_chunk * base_s + s.edge_blocks_per_chunk * edge_s


def chunk_times(s: Schedule, b: BlockTimes) -> ChunkTimes:
    base_fw = b.forward_s + b.tp_forward_base_s
    edge_fw = b.forward_s + b.tp_forward_edge_s + b.pp_forward_s
    base_bw = compat.block_backward_s(b.recompute_s, b.recomm_base_s, b.activation_grad_s, b.weight_grad_s,
                                      b.tp_backward_base_s)
    edge_bw = compat.block_backward_s(b.recompute_s, b.recomm_edge_s, b.activation_grad_s, b.weight_grad_s,
                                      b.tp_backward_edge_s) + b.pp_backward_s
    return ChunkTimes(
        base_fw, edge_fw, base_bw, edge_bw, chunk_path_s(s, base_fw, edge_fw), chunk_path_s(s, base_bw, edge_bw),
        s.pipeline_parallel - 1, bubble_extra_chunks(s), bubble_reduction_s(s, base_fw, edge_fw, base_bw, edge_bw),
    )


def compose(s: Schedule, b: BlockTimes, pp_forward_transfers: int, pp_backward_transfers: int) -> Composition:
    mb, chunks = s.microbatches, s.chunks_per_stage
    mult = s.blocks_per_stage * mb
    per_chunk = mb * chunks

    def chunk_sum(base: float, edge: float) -> float:
        return per_chunk * (s.base_blocks_per_chunk * base + s.edge_blocks_per_chunk * edge)

    c = chunk_times(s, b)
    chunk = c.chunk_forward_s + c.chunk_backward_s
    components = {
        "forward": mult * b.forward_s,
        "backward": compat.backward_s(mult, b.activation_grad_s, b.weight_grad_s),
        "optimizer": s.blocks_per_stage * b.optimizer_s,
        "recompute": mult * b.recompute_s,
        "tensor_parallel": compat.tensor_parallel_s(per_chunk, s.base_blocks_per_chunk, s.edge_blocks_per_chunk,
                                                    b.tp_forward_base_s, b.tp_forward_edge_s,
                                                    b.tp_backward_base_s, b.tp_backward_edge_s),
        "pipeline_parallel": compat.pipeline_parallel_s(mb, pp_forward_transfers, b.pp_forward_s,
                                                        pp_backward_transfers, b.pp_backward_s),
        "data_parallel": s.blocks_per_stage * b.dp_s,
        "recommunication": chunk_sum(b.recomm_base_s, b.recomm_edge_s),
        "pipeline_bubble": compat.pipeline_bubble_s(c.bubble_full_chunks, c.bubble_extra_chunks, chunk,
                                                    c.bubble_reduction_s),
        # The portable plan offloads nothing (offload is a ConcretePlanIR concern: harness.schedule.projection).
        "forward_offload": 0.0,
        "backward_offload": 0.0,
    }
    return Composition(components, compat.iteration_total(components), c)


def with_output_layer(c: Composition, microbatches: int, forward_s: float, backward_s: float) -> Composition:
    """``c`` with the output layer's work (family ``output_layer``, :mod:`harness.cost.output_layer`) added.

    It runs once per microbatch on the last stage, outside the block chunks
    (not part of the bubble): ``microbatches x forward_s`` joins ``forward``
    and ``microbatches x backward_s`` joins ``backward``; the total is summed
    again by the same rule.
    """
    components = dict(c.components_s)
    components["forward"] += microbatches * forward_s
    components["backward"] += microbatches * backward_s
    return Composition(components, compat.iteration_total(components), c.chunks)


def with_per_iteration(c: Composition, optimizer_s: float, data_parallel_s: float) -> Composition:
    """``c`` with the vocabulary matrices' once-per-iteration work (:func:`harness.cost.output_layer.
    per_iteration_s`): ``optimizer_s`` joins ``optimizer`` and ``data_parallel_s`` joins ``data_parallel``; the
    total is summed again by the same rule."""
    components = dict(c.components_s)
    components["optimizer"] += optimizer_s
    components["data_parallel"] += data_parallel_s
    return Composition(components, compat.iteration_total(components), c.chunks)
