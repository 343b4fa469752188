"""Event-level simulation of the 1F1B / interleaved pipeline iteration.

An independent check of the closed-form bubble of :mod:`harness.schedule.compose`.

Work. Stage ``s`` holds chunks ``c = 0 .. chunks-1`` (virtual stage ``c x PP
+ s``). One operation is the forward or the backward of one chunk for one
microbatch; its duration is the closed form's chunk critical path
(:func:`~harness.schedule.compose.chunk_times`): base blocks, then the edge
block that carries the point-to-point transfer (the sender is busy while it
sends; the receiver needs nothing more).

Order (Megatron-LM): without interleaving, stage ``s`` runs ``min(PP - s - 1,
M)`` warm-up forwards, then one forward and one backward alternately, then the
remaining backwards. With interleaving, forwards follow Megatron's schedule
table (groups of N microbatches, every chunk of a group in turn, the last
group holding the remainder; N = PP when PP divides M, else the smallest
group size Megatron accepts, see :func:`group_size`); backwards follow the
same table with the chunk reversed; warm-up is ``2 (PP - s - 1) + (chunks -
1) N`` operations (at most all of them). Inference runs the forwards only.

Dependencies: forward ``(s, c, m)`` needs forward ``(s - 1, c, m)``, or on the
first stage forward ``(PP - 1, c - 1, m)``; backward ``(s, c, m)`` needs
backward ``(s + 1, c, m)``, or on the last stage backward ``(0, c + 1, m)``,
or, for the last chunk, forward ``(PP - 1, chunks - 1, m)``. An operation
starts when its stage is free and its dependency has ended.

Uneven blocks: the last ``bubble_reduction_blocks`` stages hold one block
fewer; it is taken from their last chunk (a base block; the edge block when a
chunk has no base block, which leaves an empty chunk of zero duration).

Result: the iteration is the pipeline makespan, then the first stage's
data-parallel sync and optimizer step (closed-form components, no overlap).
Invariant: the first stage's busy time is exactly the closed form's
per-microbatch work (forward + backward + recompute + TP + PP +
recommunication), so ``idle = makespan - busy`` is compared with the
closed-form ``pipeline_bubble``. Where the closed form approximates (remainder
microbatches under interleaving, uneven blocks, the inference backward p2p
slot), ``bubble_difference_s`` shows the difference and ``note`` says why.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Literal

from harness.errors import HarnessError
from harness.ir.portable import Schedule
from harness.schedule.block import BlockTimes
from harness.schedule.compose import ChunkTimes, Composition, chunk_times
from harness.vocabulary import COMPONENTS

Phase = Literal["forward", "backward"]
RELATIVE_TOLERANCE = 1e-6


@dataclasses.dataclass(frozen=True, slots=True)
class StageOp:
    """One simulated operation: a chunk's forward or backward for one microbatch.

    ``start_s`` / ``end_s`` are seconds from the iteration start; ``blocks``
    is the (base, edge) block count of the chunk on this stage.
    """

    stage: int
    chunk: int
    microbatch: int
    phase: Phase
    start_s: float
    end_s: float
    blocks: tuple[int, int]

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclasses.dataclass(frozen=True)
class Simulation:
    """A simulated iteration and its comparison with the closed form.

    Invariants: ``first_stage_busy_s + first_stage_idle_s == makespan_s``;
    ``total_s == makespan_s + data_parallel_s + optimizer_s``;
    ``bubble_difference_s == first_stage_idle_s - closed_form_bubble_s`` and
    ``total_s - closed_form_total_s`` equals it up to rounding.
    """

    pipeline_parallel: int  # stages
    chunks_per_stage: int  # model chunks per stage (interleaving)
    microbatches: int  # microbatches per iteration
    training: bool  # forward + backward, or forward only
    ops: tuple[tuple[StageOp, ...], ...]  # per stage, in execution order
    makespan_s: float  # end of the last operation of any stage
    first_stage_busy_s: float  # sum of the first stage's operation durations
    first_stage_idle_s: float  # makespan - first-stage busy: the simulated bubble
    data_parallel_s: float  # first stage's exposed DP sync after the pipeline (closed form)
    optimizer_s: float  # first stage's optimizer step after the pipeline (closed form)
    total_s: float  # simulated iteration: makespan + DP + optimizer
    closed_form_busy_s: float  # first stage: forward+backward+recompute+TP+PP+recommunication (PP > 1: without
    #                            the per-microbatch work of the last stage)
    closed_form_bubble_s: float  # first stage's closed-form idle: pipeline_bubble (PP > 1: + that work)
    closed_form_total_s: float  # closed-form total
    bubble_difference_s: float  # simulated idle - closed-form bubble
    exact: bool  # |difference| within 1e-6 of the closed-form total
    note: str  # why the two agree or differ


#: The components the first stage is busy with while the pipeline runs (kind "pipeline" in the vocabulary).
BUSY_COMPONENTS = COMPONENTS.of_kind("pipeline")


def group_size(microbatches: int, pipeline_parallel: int) -> int:
    """Megatron-LM's ``microbatch_group_size_per_vp_stage`` for an interleaved schedule.

    Megatron needs ``PP <= N <= M`` and a last group (``M mod N``) that is
    empty or holds at least PP microbatches (else the pipeline deadlocks);
    this is the smallest such N (PP when PP divides M). Megatron refuses
    ``M < PP``; the simulation then runs one group (N = M).
    """
    if microbatches < pipeline_parallel:
        return microbatches
    return next(n for n in range(pipeline_parallel, microbatches + 1)
                if microbatches % n == 0 or microbatches % n >= pipeline_parallel)


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """Megatron-LM's forward order: (microbatch, chunk) per virtual microbatch, in groups of ``group``."""
    table: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table.extend((m, c) for c in range(chunks) for m in range(first, last))
        if last == microbatches:
            break
    return table


def stage_order(stage: int, pipeline_parallel: int, chunks: int, microbatches: int,
                training: bool) -> list[tuple[Phase, int, int]]:
    """The ordered (phase, chunk, microbatch) operations of one stage."""
    group = group_size(microbatches, pipeline_parallel)
    table = schedule_table(microbatches, chunks, group)
    forwards: list[tuple[Phase, int, int]] = [("forward", c, m) for m, c in table]
    if not training:
        return forwards
    backwards: list[tuple[Phase, int, int]] = [("backward", chunks - 1 - c, m) for m, c in table]
    total = len(table)
    behind = pipeline_parallel - stage - 1
    warmup = min(behind if chunks == 1 else 2 * behind + (chunks - 1) * group, total)
    order = forwards[:warmup]
    for k in range(total - warmup):
        order += [forwards[warmup + k], backwards[k]]
    return order + backwards[total - warmup:]


def chunk_blocks(s: Schedule) -> list[list[tuple[int, int]]]:
    """(base, edge) blocks of every chunk of every stage (short stages lose one in their last chunk)."""
    full = (s.base_blocks_per_chunk, s.edge_blocks_per_chunk)
    short = (s.base_blocks_per_chunk - 1, s.edge_blocks_per_chunk) if s.base_blocks_per_chunk else (0, 0)
    first_short = s.pipeline_parallel - s.bubble_reduction_blocks
    return [[short if stage >= first_short and c == s.chunks_per_stage - 1 else full
             for c in range(s.chunks_per_stage)] for stage in range(s.pipeline_parallel)]


def _durations(blocks: tuple[int, int], full: tuple[int, int], c: ChunkTimes) -> tuple[float, float]:
    """Forward and backward time of a chunk; a full chunk takes the closed form's chunk critical path."""
    if blocks == full:
        return c.chunk_forward_s, c.chunk_backward_s
    base, edge = blocks
    return base * c.base_forward_s + edge * c.edge_forward_s, base * c.base_backward_s + edge * c.edge_backward_s


def dependency(phase: Phase, stage: int, chunk: int, pp: int, chunks: int) -> tuple[Phase, int, int] | None:
    """(phase, stage, chunk) of the operation (same microbatch) this one waits for; None if it waits for nothing."""
    if phase == "forward":
        if stage > 0:
            return "forward", stage - 1, chunk
        return ("forward", pp - 1, chunk - 1) if chunk > 0 else None
    if stage < pp - 1:
        return "backward", stage + 1, chunk
    if chunk < chunks - 1:
        return "backward", 0, chunk + 1
    return "forward", pp - 1, chunk


def _run(s: Schedule, orders: list[list[tuple[Phase, int, int]]], fw: list[list[float]], bw: list[list[float]],
         blocks: list[list[tuple[int, int]]], bw_later: list[list[float]] | None = None
         ) -> tuple[tuple[StageOp, ...], ...]:
    """``bw_later``: the backward durations of the microbatches after the first (default: ``bw``)."""
    pp, chunks, mb = s.pipeline_parallel, s.chunks_per_stage, s.microbatches
    size = pp * chunks * mb

    def key(phase: Phase, stage: int, chunk: int) -> int:
        """Index of (phase, stage, chunk, microbatch 0) in ``end``; add the microbatch."""
        return (size if phase == "backward" else 0) + (stage * chunks + chunk) * mb

    later = bw if bw_later is None else bw_later
    # per stage and chunk: (own key, awaited key or -1, first microbatch's duration, later ones') for each phase
    plan = {(ph, st, c): (key(ph, st, c), key(*dep) if (dep := dependency(ph, st, c, pp, chunks)) else -1,
                          *((fw[st][c], fw[st][c]) if ph == "forward" else (bw[st][c], later[st][c])))
            for ph in ("forward", "backward") for st in range(pp) for c in range(chunks)}
    end = [-1.0] * (2 * size)
    waiting: dict[int, int] = {}  # awaited operation key -> stage waiting for it
    done: list[list[StageOp]] = [[] for _ in range(pp)]
    pointer, free = [0] * pp, [0.0] * pp
    ready = deque(range(pp))
    while ready:
        stage = ready.popleft()
        order, ops, i, now = orders[stage], done[stage], pointer[stage], free[stage]
        while i < len(order):
            phase, chunk, m = order[i]
            own, awaited, first, after = plan[phase, stage, chunk]
            duration = after if m else first
            if awaited >= 0:
                dep_end = end[awaited + m]
                if dep_end < 0:
                    waiting[awaited + m] = stage
                    break
                if dep_end > now:
                    now = dep_end
            finish = now + duration
            end[own + m] = finish
            ops.append(StageOp(stage, chunk, m, phase, now, finish, blocks[stage][chunk]))
            now = finish
            i += 1
            woken = waiting.pop(own + m, None)
            if woken is not None:
                ready.append(woken)
        pointer[stage], free[stage] = i, now
    stuck = [st for st in range(pp) if pointer[st] < len(orders[st])]
    if stuck:
        raise HarnessError(f"pipeline simulation deadlocked: stage {stuck[0]} waits forever at operation "
                           f"{orders[stuck[0]][pointer[stuck[0]]]}")
    return tuple(tuple(ops) for ops in done)


def _note(s: Schedule, exact: bool) -> str:
    reasons = []
    shortage = s.microbatches % s.pipeline_parallel
    if s.chunks_per_stage > 1 and shortage:
        group = group_size(s.microbatches, s.pipeline_parallel)
        reasons.append(f"microbatches {s.microbatches} are not a multiple of PP={s.pipeline_parallel} under "
                       f"interleaving: the closed form adds (chunks-1) x (PP - microbatches mod PP) = "
                       f"{(s.chunks_per_stage - 1) * (s.pipeline_parallel - shortage)} chunk times; the simulation "
                       f"runs Megatron's schedule with groups of {group} microbatches"
                       + (" (Megatron refuses fewer microbatches than PP)" if s.microbatches < s.pipeline_parallel
                          else ""))
    if s.bubble_reduction_blocks:
        reasons.append(f"{s.bubble_reduction_blocks} stages hold one block fewer: the closed form subtracts half a "
                       "base and half an edge block each, the simulation runs them one block short")
    if not s.training and s.pipeline_parallel > 1:
        reasons.append("inference: the closed-form bubble counts PP-1 zero-byte backward p2p slots (latency) "
                       "that the forward-only simulation does not run")
    if reasons:
        return "closed form approximates: " + "; ".join(reasons)
    if exact:
        return "closed form is exact: the simulated first-stage idle time equals the closed-form bubble"
    return "closed form and simulation disagree although the closed form should be exact here"


def simulate(s: Schedule, block: BlockTimes, composition: Composition,
             per_microbatch: tuple[float, float] = (0.0, 0.0), accumulate_block_s: float = 0.0) -> Simulation:
    """Simulate one iteration from the block critical paths of one cost view.

    ``composition`` is the closed form of the same ``block`` (``cost_view``
    returns both); the simulation reads its chunk times and components.
    ``per_microbatch``: the (forward, backward) seconds the closed form adds
    once per microbatch outside the blocks (the output tasks, the host's
    microbatch time: :func:`harness.cost.outside.outside_work`); they
    run on the last stage, after its last chunk's forward and before its
    backward. With PP > 1 the first stage does not run them: its closed-form
    busy time leaves them out and its closed-form idle time is the bubble
    plus them (the last stage's work it waits for).
    ``accumulate_block_s``: one block's unfused gradient accumulation
    (:mod:`harness.cost.accumulation`), added to every chunk's backward, per
    block, for every microbatch after the first.
    """
    c = chunk_times(s, block)
    blocks = chunk_blocks(s)
    full = (s.base_blocks_per_chunk, s.edge_blocks_per_chunk)
    fw = [[_durations(b, full, c)[0] for b in row] for row in blocks]
    bw = [[_durations(b, full, c)[1] for b in row] for row in blocks]
    extra_fw, extra_bw = per_microbatch
    fw[-1][-1] += extra_fw
    if s.training:
        bw[-1][-1] += extra_bw
    bw_later = [[d + (sum(b) * accumulate_block_s if s.training else 0.0) for d, b in zip(row, brow)]
                for row, brow in zip(bw, blocks)] if accumulate_block_s else None
    orders = [stage_order(st, s.pipeline_parallel, s.chunks_per_stage, s.microbatches, s.training)
              for st in range(s.pipeline_parallel)]
    ops = _run(s, orders, fw, bw, blocks, bw_later)
    makespan = max(op.end_s for stage in ops for op in stage)
    busy = 0.0
    for op in ops[0]:
        busy += op.duration_s
    comps = composition.components_s
    idle = makespan - busy
    total = makespan + comps["data_parallel"] + comps["optimizer"]
    elsewhere = 0.0 if s.pipeline_parallel == 1 else s.microbatches * (extra_fw + (extra_bw if s.training else 0.0))
    closed_bubble = comps["pipeline_bubble"] + elsewhere
    difference = idle - closed_bubble
    exact = abs(difference) <= RELATIVE_TOLERANCE * composition.total_s
    return Simulation(
        pipeline_parallel=s.pipeline_parallel, chunks_per_stage=s.chunks_per_stage, microbatches=s.microbatches,
        training=s.training, ops=ops, makespan_s=makespan, first_stage_busy_s=busy, first_stage_idle_s=idle,
        data_parallel_s=comps["data_parallel"], optimizer_s=comps["optimizer"], total_s=total,
        closed_form_busy_s=sum(comps[n] for n in BUSY_COMPONENTS) - elsewhere, closed_form_bubble_s=closed_bubble,
        closed_form_total_s=composition.total_s, bubble_difference_s=difference, exact=exact, note=_note(s, exact),
    )
