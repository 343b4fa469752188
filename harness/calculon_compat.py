"""Calculon 0.1.0 bit-compatibility rules (quirks), apart from the physics.

Each rule names something Calculon 0.1.0 computes that a physical schedule
of the same ConcretePlanIR would not, with the reason we keep it: the
``calculon-0.1.0`` projection (:mod:`harness.schedule.projection`) applies
every rule below so that its figures are Calculon's to the bit; the
``physical`` projection applies none. ``scripts/quirk_effects.py`` measures
each rule's effect (records touched, largest difference) on a corpus.

A rule is data (name, reason, where Calculon does it); the projection refers
to the rules by name, so that a reader can find every departure from the
physical schedule here.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Quirk:
    """One compatibility rule."""

    name: str
    reason: str
    calculon: str


QUIRKS: dict[str, Quirk] = {q.name: q for q in (
    Quirk("stateful-exposed-time",
          "Calculon reads a layer's exposed TP time from the state its last processing-time call left: the "
          "recommunication exposed time of an overlapped GEMM is its forward exposed time, not the exposed "
          "part of the re-sent message.",
          "layers.py LinearOverlapped.get_exposed_net_time; llm.py _compute_block_stats order fw, re, recomm"),
    Quirk("edge-block-equals-base-block",
          "An overlapped GEMM's tiles are priced against the base block's message even in the chunk's edge "
          "block (p2p_rs_ag sends a different collective there): processing and exposed time of the edge "
          "block are the base block's; only the TP link time differs.",
          "layers.py LinearOverlapped.compute_processing_time calls compute_net_time(stage) with baseblock=True"),
    Quirk("doubled-pipe-tile",
          "With pipe overlap the first network tile is exposed; Calculon adds it both to the GEMM's "
          "processing time (forward/backward/recompute) and to the TP exposed time.",
          "layers.py LinearOverlapped.compute_processing_time: time += net_tile and net_exposed_time += net_tile"),
    Quirk("weight-grad-tiled-against-recommunication",
          "The weight gradient of an overlapped GEMM is tiled against the re-sent forward message whenever "
          "the layer recommunicates, although the recommunication exposed time is counted separately as well "
          "(and a recomputed GEMM is tiled against the same message again).",
          "layers.py LinearOverlapped.compute_net_time('wgrad'); llm.py block loop"),
    Quirk("recommunication-without-reduction",
          "A re-sent reduce-scatter or all-reduce is priced without its local reduction work.",
          "layers.py LinearOverlapped.compute_net_time('wgrad') returns net time only"),
    Quirk("prefix-counter-recompute-windows",
          "The DP overlap windows subtract the recompute memory time and add the recompute flop time as "
          "Calculon's running forward prefix counters (block_re_mem_time, block_re_flops_time) instead of the "
          "recomputed layers' own times.",
          "llm.py _compute_block_stats block_re_* += block_fw_*; _compute_batch_stats DP windows"),
    Quirk("dp-window-microbatches-equal-pp",
          "The DP overlap window of a chunk is PP microbatches of backward time (1F1B with nmb = PP), whatever "
          "the number of microbatches.",
          "llm.py _compute_batch_stats overlap_window = pipeline_par * chunk_dp_overlap_time"),
    Quirk("dp-one-block-always-exposed",
          "One block's DP traffic is always exposed (the last block's sync cannot overlap anything), on top of "
          "the last chunk's exposed time.",
          "llm.py _compute_batch_stats dp_comm_time_exposed = block_dp_time + exposed_time"),
    Quirk("dp-optimizer-credit-twice",
          "Without optimizer sharding the optimizer step's compute time enters the last chunk's window twice "
          "(once per block in the chunk window and once more for the tail).",
          "llm.py _compute_batch_stats last_chunk_window += optim time - optim mem time"),
    Quirk("dp-same-tier-as-pp-when-pp-1",
          "DP and PP traffic are taken to collide whenever DP's network tier is PP's, even with PP = 1 "
          "(no pipeline traffic exists; the p2p latency still enters the window).",
          "llm.py _compute_batch_stats if self._dp_net == self._pp_net"),
    Quirk("dp-same-tier-as-tp-link-time",
          "When DP and TP share a tier the DP window loses the TP link time of recommunication and backward "
          "collectives, even where TP overlap hides it.",
          "llm.py _compute_batch_stats if self._dp_net == self._tp_net"),
    Quirk("dp-collision-floor-division",
          "The number of pipeline transfers colliding with DP traffic is a float floor division of chunk DP "
          "time by chunk backward time, capped by the microbatch shortage (or PP).",
          "llm.py _compute_batch_stats num_overlapped_pp"),
)}


def quirk(name: str) -> Quirk:
    """The rule ``name`` (KeyError names the unknown rule)."""
    return QUIRKS[name]
