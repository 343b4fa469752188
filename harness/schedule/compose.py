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

One composition: :func:`compose` is the closed forms of
:mod:`harness.schedule.calculon_forms` (:func:`~harness.schedule.calculon_forms.iteration`),
the same function the ConcretePlanIR projection and the search evaluate, on
the block sums of a portable plan (:func:`portable_sums`: no overlap, no
offload, the edge block's compute equal to the base block's). The arithmetic
forms (order of summation, grouping of products) are Calculon 0.1.0's, named
in :mod:`harness.calculon_compat`, so switching a rule off changes every
caller alike.
"""

from __future__ import annotations

import dataclasses

from harness.arrays import holds_array, is_array
from harness.ir.portable import Schedule
from harness.schedule import calculon_forms as forms
from harness.schedule.block import BlockTimes
from harness.schedule.projection import BlockSums


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


def portable_sums(b: BlockTimes) -> BlockSums:
    """The block sums of a portable plan's block times: every TP collective exposed (no tiling), no offload
    (no memory terms: a block's offload overhead is 0), the edge block's compute equal to the base block's."""
    return BlockSums(
        forward_s=b.forward_s, forward_edge_s=b.forward_s,
        forward_tp_exposed_base_s=b.tp_forward_base_s, forward_tp_exposed_edge_s=b.tp_forward_edge_s,
        recompute_s=b.recompute_s, recompute_edge_s=b.recompute_s,
        recommunication_exposed_base_s=b.recomm_base_s, recommunication_exposed_edge_s=b.recomm_edge_s,
        activation_grad_s=b.activation_grad_s, activation_grad_edge_s=b.activation_grad_s,
        activation_grad_tp_exposed_base_s=b.tp_backward_base_s, activation_grad_tp_exposed_edge_s=b.tp_backward_edge_s,
        weight_grad_s=b.weight_grad_s, weight_grad_edge_s=b.weight_grad_s, optimizer_s=b.optimizer_s)


#: The fields of :class:`BlockTimes`, in order.
_BLOCK_TIMES = tuple(f.name for f in dataclasses.fields(BlockTimes))


def _ops(b: BlockTimes) -> forms.Arith:
    """Python floats, or numpy arrays where a block time is one (the search's placements; none is looked at
    while numpy is not imported, :func:`harness.arrays.holds_array`)."""
    return forms.ARRAYS if holds_array(map(b.__getattribute__, _BLOCK_TIMES)) else forms.SCALAR


def _figure(value):
    """A component as a float (an int 0 of a closed form too), or the array of placements it is."""
    return value if is_array(value) else float(value)


def _chunk_times(s: Schedule, blocks: forms.Blocks) -> ChunkTimes:
    chunk_forward = forms.chunk_path_s(s, blocks.base_fw, blocks.edge_fw)
    chunk_backward = forms.chunk_path_s(s, blocks.base_bw, blocks.edge_bw)
    return ChunkTimes(blocks.base_fw, blocks.edge_fw, blocks.base_bw, blocks.edge_bw, chunk_forward, chunk_backward,
                      s.pipeline_parallel - 1, forms.bubble_extra_chunks(s),
                      forms.bubble_reduction_s(s, blocks.base_fw, blocks.edge_fw, blocks.base_bw, blocks.edge_bw))


def chunk_times(s: Schedule, b: BlockTimes) -> ChunkTimes:
    """Block and chunk critical paths of a portable plan (the blocks of :func:`compose`)."""
    return _chunk_times(s, forms.blocks(portable_sums(b), b.pp_forward_s, b.pp_backward_s, 0.0, 0.0, _ops(b)))


def compose(s: Schedule, b: BlockTimes) -> Composition:
    """The iteration of a portable plan: the closed forms of :func:`harness.schedule.calculon_forms.iteration`
    on its block sums, the DP sync exposed once per block (no overlap), nothing offloaded."""
    ops = _ops(b)
    dp = forms.DataParallelSync(block_s=b.dp_s, processor_usage=0.0, sharding=False, overlap=False,
                                same_tier_as_tp=False, same_tier_as_pp=False)
    it = forms.iteration(s, portable_sums(b), fw_pp=b.pp_forward_s, bw_pp=b.pp_backward_s, fw_off_s=0.0,
                         bw_off_s=0.0, dp=dp, ops=ops, finish=_figure)
    return Composition(it.components_s, it.total_s, _chunk_times(s, it.blocks))
