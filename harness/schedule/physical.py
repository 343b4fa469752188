"""The ``physical`` projection of a ConcretePlanIR: the iteration as its commands would run.

Every stage of the pipeline runs its operations (a chunk's forward or
backward for one microbatch, in the 1F1B / interleaved order of
:mod:`harness.schedule.simulate`, with the same dependencies between stages)
block by block, each block's commands list-scheduled on the processor's
queues by the rules of :mod:`harness.schedule.queues`:

- S1 (blocks): an operation runs the chunk's base blocks, then its edge block
  (its own TP messages, and the pipeline boundary send, whose end is the
  operation's end: the next stage's operation waits for it); a stage holding
  one block fewer (PP does not divide the blocks) loses a base block of its
  last chunk. A block starts when the previous block's last command has
  ended and its gates (S2, S3) are open.
- S2 (offload): block ``k`` of a stage needs its tier-2 transfer (the bytes of
  the ``forward_offload`` or ``backward_offload`` command, by the direction of
  its operation) to have arrived. Tier 1 stages two blocks, so transfer ``k``
  is issued when block ``k - 2`` ends (double buffering). Steady state: block
  0 is resident when the iteration starts (it was prefetched during the
  previous iteration's last block: that transfer, of the next iteration's
  block 0, is issued here too, and the stage does not end before it
  arrives); transfer 1 is issued at time 0. The link moves one transfer at a
  time in issue order, and only while the compute queue is not in a memory
  phase (rule Q2). Waiting for a transfer exposes ``forward_offload`` or
  ``backward_offload``.
- S3 (DP, training with DP > 1): with ``dp_overlap``, a block's sync (the
  all-reduce; with optimizer sharding the reduce-scatter) is issued as a
  background job when the block's last weight-gradient command of the chunk's
  last microbatch is done, and runs under the remaining compute (rules Q2,
  Q3), carried from block to block; with optimizer sharding the all-gather of
  the updated weights overlaps the next iteration's forward (Megatron's param
  gather): steady state, every block's all-gather is issued when the
  iteration starts, in block order, and a block's first forward waits for
  its own. Without ``dp_overlap`` the syncs run after the stage's last
  backward operation. The optimizer step (each block's ``optimizer``
  program) starts when every sync is done (Megatron steps after the last
  reduction); without ``dp_overlap``, sharded all-gathers follow it.
- S4 (iteration): a stage ends with its optimizer step and its last
  transfer; the iteration ends when the last stage ends.

Components are the first stage's: its compute queue's busy time per
component (TP slowdown inside a tile belongs to the GEMM's pass, the time
lost to a DP sync to ``data_parallel``), and its idle time per component
waited for (the rule of :mod:`harness.schedule.queues`; waiting for another
stage, and the first stage's idle time until the iteration ends, is
``pipeline_bubble``). They partition ``[0, total]``, so they add up to it.
The bandwidth requirements are the ``calculon-0.1.0`` projection's.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from harness import session
from harness.cost.views import Pricer
from harness.errors import UnsupportedFeatureError
from harness.ir.concrete import ConcretePlanIR
from harness.schedule.projection import Projection, calculon_projection
from harness.schedule.queues import COMPUTE, Job, JobRun, program_jobs, run_jobs, sync_jobs
from harness.schedule.simulate import dependency, chunk_blocks, stage_order
from harness.schedule.timeline import Phases, Stretch
from harness.vocabulary import COMPONENTS

TIER2 = "memory.tier2"
BUBBLE = "pipeline_bubble"
PHASES_LIMIT = 64  # memory phases remembered per projection context (one per standalone run)
OFFLOAD = {"forward": "forward_offload", "backward": "backward_offload"}


def processor_usage(c: ConcretePlanIR, pricer: Pricer) -> dict[str, float]:
    """Processor usage of every network queue (its tier's)."""
    return {q.name: pricer.profile.networks[q.network_tier].processor_usage for q in c.queues if q.kind == "network"}


def run_program(program, c: ConcretePlanIR, pricer: Pricer) -> JobRun:
    """One block program list-scheduled alone (no background), rules of :mod:`harness.schedule.queues`."""
    return run_jobs(program_jobs(program, pricer), processor_usage(c, pricer))


@dataclasses.dataclass(frozen=True)
class Assumptions:
    """Closed-form assumptions the schedule can be made to share (all off: the physical schedule).

    With all three on, the schedule reproduces the ``calculon-0.1.0`` projection
    with its compatibility rules off wherever the closed-form bubble is exact
    (``tests/test_physical.py``); each one alone measures one difference
    (``scripts/quirk_effects.py``).
    """

    #: the transfer under a block carries that block's direction (the closed forms charge a block T of its own
    #: direction), instead of the direction of the block it is for
    transfer_of_running_block: bool = False
    #: a block ends only when the transfer under it has arrived, and the link moves only under a block (the closed
    #: forms add ``max(0, T + memory - block)`` to every block, its boundary send and all, also after idle time),
    #: instead of the next block waiting for it while the link also moves in the stage's idle time
    overhead_per_block: bool = False
    #: the DP sync is not scheduled: this exposed time (the closed form's) follows the optimizer step
    data_parallel_s: float | None = None


PHYSICAL = Assumptions()


@dataclasses.dataclass(frozen=True)
class Event:
    """One interval of the first stage's schedule (for the trace)."""

    queue: str  # a queue name, or "exposed" for compute-idle time
    name: str
    start_s: float
    end_s: float
    component: str
    op: str  # e.g. "F mb0 c1 block2 (edge)", "tail"


@dataclasses.dataclass(frozen=True)
class OpSpan:
    stage: int
    phase: str
    chunk: int
    microbatch: int
    start_s: float
    end_s: float


@dataclasses.dataclass(frozen=True)
class PhysicalSchedule:
    """The physical projection with the first stage's queue accounting."""

    projection: Projection
    busy_s: dict[tuple[str, str], float]  # first stage: (queue, component) -> time its work ran
    exposed_s: dict[tuple[str, str], float]  # first stage: compute-idle time per (queue, component) waited for
    slowdown_s: dict[str, float]  # first stage: compute time lost to background work, per component
    ops: tuple[OpSpan, ...]  # every stage's operations (when recording, see physical_schedule)
    stage_end_s: tuple[float, ...]
    events: tuple[Event, ...]  # the first stage's recorded intervals (see physical_schedule)


class _Context:
    """What every stage shares: block jobs and their standalone runs, transfer times, DP shape."""

    def __init__(self, c: ConcretePlanIR, pricer: Pricer, assume: Assumptions) -> None:
        self.c, self.pricer, self.s, self.assume = c, pricer, c.schedule, assume
        self.pu = processor_usage(c, pricer)
        self.training = self.s.training
        self.jobs: dict[tuple[str, str], list[Job]] = {}
        self.alone: dict[tuple[str, str], JobRun] = {}
        self.last_wgrad: dict[tuple[str, str], int] = {}
        for kind in ("base", "edge"):
            for phase in ("forward", "backward") if self.training else ("forward",):
                jobs = program_jobs(c.program(phase, kind), pricer)
                self.jobs[kind, phase] = jobs
                self.alone[kind, phase] = run_jobs(jobs, self.pu)
                wgrad = [i for i, j in enumerate(jobs) if j.queue == COMPUTE and j.pass_name == "weight_grad"]
                self.last_wgrad[kind, phase] = wgrad[-1] if wgrad else len(jobs) - 1
        fw, bw = c.program("forward_offload"), c.program("backward_offload")
        self.offload = fw is not None
        self.transfer_s = {"forward": pricer.tier2_s(fw.commands[0].transfer_bytes) if fw else 0.0,
                           "backward": pricer.tier2_s(bw.commands[0].transfer_bytes) if bw else 0.0}
        self.dp = self.training and c.data_parallel is not None
        self.dp_overlap = c.options.dp_overlap
        self.dp_scheduled = self.dp and assume.data_parallel_s is None
        self.sharded = self.dp and len(c.data_parallel.messages) == 2
        optimizer = c.program("optimizer")
        self.optimizer_jobs = program_jobs(optimizer, pricer) if optimizer else []
        self._phases: session.IdentityMemo[Phases] = session.IdentityMemo("phases", PHASES_LIMIT)
        self.plain_ops: dict[tuple[str, int, int], tuple[float, tuple[dict, dict, dict]]] = {}

    def phases(self, run: JobRun) -> Phases:
        """The memory phases of a run (built once per standalone run)."""
        cached = self._phases.get(run)
        return self._phases.put(Phases(run.memory_phases), run) if cached is None else cached

    def syncs(self, block: str, deps: tuple[int, ...], background: bool, collectives: tuple[str, ...]) -> list[Job]:
        return sync_jobs(self.c, self.pricer, block, deps, background=background, messages=collectives)


class _Transfer:
    __slots__ = ("block", "component", "duration_s", "issue_s", "remaining_s")

    def __init__(self, block: int, component: str, duration_s: float, issue_s: float) -> None:
        self.block, self.component, self.duration_s, self.issue_s = block, component, duration_s, issue_s
        self.remaining_s = duration_s


class _Stage:
    """One stage's queues while it runs its operations (see the module rules)."""

    def __init__(self, index: int, x: _Context, record_microbatches: int) -> None:
        self.index, self.x = index, x
        self.assume = x.assume
        s = x.s
        self.blocks = chunk_blocks(s)[index]  # (base, edge) per chunk
        self.order = stage_order(index, s.pipeline_parallel, s.chunks_per_stage, s.microbatches, s.training)
        self.directions = [phase for phase, chunk, _ in self.order for _ in range(sum(self.blocks[chunk]))]
        self.now = 0.0
        self.k = 0  # blocks run so far
        self.link: deque[_Transfer] = deque()
        self.arrived: dict[int, float] = {0: 0.0}
        self.dp: list[tuple[Job, float]] = []  # background DP work: (job, remaining), queue order
        self.dp_done: set[str] = set()
        self.first_forward: set[int] = set()
        self.busy: dict[tuple[str, str], float] = {}
        self.exposed: dict[tuple[str, str], float] = {}
        self.slowdown: dict[str, float] = {}
        self.compute: dict[str, float] = {}
        self.record = record_microbatches if index == 0 and record_microbatches > 0 else -1
        self.accounts = index == 0  # only the first stage's time is split into components
        self.events: list[Event] = []
        self.label = ""
        if x.offload:
            self._issue(1, 0.0)
        if x.dp_scheduled and x.dp_overlap and x.sharded:
            blocks = sum(sum(b) for b in self.blocks)
            for k in range(blocks):
                for job in x.syncs(f"block{k}", (), True, ("all_gather",)):
                    self.dp.append((job, job.duration_s))

    # -- accounting ---------------------------------------------------------------------------------------
    def _add(self, table: dict, key, value: float) -> None:
        if value and self.accounts:
            table[key] = table.get(key, 0.0) + value

    def _event(self, queue: str, name: str, start: float, end: float, component: str) -> None:
        if self.record >= 0 and end > start and self.label:
            self.events.append(Event(queue, name, start, end, component, self.label))

    # -- background work over a stretch of time -----------------------------------------------------------
    def _issue(self, block: int, at: float) -> None:
        n = len(self.directions)
        if block > n or not self.x.offload:
            return
        if self.assume.transfer_of_running_block:
            direction = self.directions[block - 1]
        else:
            direction = self.directions[block] if block < n else "forward"  # block n: the next iteration's block 0
        self.link.append(_Transfer(block, OFFLOAD[direction], self.x.transfer_s[direction], at))

    def _link(self, stretch: Stretch) -> None:
        t = stretch.start
        while self.link:
            tr = self.link[0]
            start = max(t, tr.issue_s)
            if start >= stretch.end:
                return
            finish = stretch.finish(start, tr.remaining_s)
            end = stretch.end if finish is None else finish
            moved = stretch.free_s(start, end)
            self._add(self.busy, (TIER2, tr.component), moved)
            if self.record >= 0 and self.label:
                for a, b in stretch.free_pieces(start, end):
                    self._event(TIER2, f"transfer block{tr.block}", a, b, tr.component)
            if finish is None:
                tr.remaining_s -= moved
                return
            self.arrived[tr.block] = finish
            self.link.popleft()
            t = finish

    def _idle(self, end: float, queue: str, component: str) -> None:
        """The compute queue idles until ``end`` (waiting for ``component`` on ``queue``); background work runs."""
        start = self.now
        if end <= start:
            return
        self._add(self.exposed, (queue, component), end - start)
        self._event("exposed", component, start, end, component)
        if queue == TIER2 or not self.assume.overhead_per_block:
            self._link(Stretch(start, end))
        t = start
        while self.dp and t < end:
            job, left = self.dp[0]
            step = min(left, end - t)
            self._add(self.busy, (job.queue, job.component), step)
            self._event(job.queue, job.name, t, t + step, job.component)
            t += step
            if step == left:
                self.dp.pop(0)
                self.dp_done.add(job.name)
            else:
                self.dp[0] = (job, left - step)
        self.now = end

    def _arrival(self, block: int) -> float:
        """When transfer ``block`` arrives if the compute queue idles from now (the link runs at full rate)."""
        if block in self.arrived:
            return self.arrived[block]
        t = self.now
        for tr in self.link:
            t = max(t, tr.issue_s) + tr.remaining_s
            if tr.block == block:
                return t
        raise RuntimeError(f"stage {self.index}: transfer {block} was never issued")

    def _transfer_component(self, block: int) -> str:
        """The component of transfer ``block`` (its direction; :class:`Assumptions`)."""
        for tr in self.link:
            if tr.block == block:
                return tr.component
        return OFFLOAD[self.directions[block] if block < len(self.directions) else "forward"]

    def _dp_done_at(self, name: str) -> float:
        t = self.now
        for job, left in self.dp:
            t += left
            if job.name == name:
                return t
        return self.now

    # -- one block ----------------------------------------------------------------------------------------
    def _block(self, kind: str, phase: str, chunk: int, position: int, microbatch: int) -> None:
        x = self.x
        stage_block = chunk * x.s.blocks_per_chunk + position
        if x.offload:
            self._idle(self._arrival(self.k), TIER2, self._transfer_component(self.k))
        if phase == "forward" and x.dp_scheduled and x.dp_overlap and x.sharded and \
                stage_block not in self.first_forward:
            self.first_forward.add(stage_block)
            name = f"block{stage_block}/data_parallel/all_gather"
            if name not in self.dp_done:
                dp_queue = x.c.queue_of["data"]
                self._idle(self._dp_done_at(name), dp_queue, "data_parallel")
        issue = x.dp_scheduled and x.dp_overlap and phase == "backward" and microbatch == x.s.microbatches - 1
        start = self.now
        if not self.dp and not issue:
            run, jobs = x.alone[kind, phase], x.jobs[kind, phase]
        else:
            jobs = list(x.jobs[kind, phase])
            jobs += [dataclasses.replace(job, duration_s=left, deps=()) for job, left in self.dp]
            if issue:
                collective = ("reduce_scatter",) if x.sharded else ("all_reduce",)
                jobs += x.syncs(f"block{stage_block}", (x.last_wgrad[kind, phase],), True, collective)
            run = run_jobs(jobs, x.pu)
            self.dp = [(jobs[i], left) for i, left in run.background_left]
            carried = {j.name for j, _ in self.dp}
            for i, end in enumerate(run.done_s):
                if end is not None and jobs[i].background and jobs[i].name not in carried:
                    self.dp_done.add(jobs[i].name)
        self._account(run, jobs, start)
        self.now = start + run.makespan_s
        if x.offload:
            self._link(Stretch(start, self.now, x.phases(run), start))
            if self.assume.overhead_per_block and self.k + 1 <= len(self.directions):
                self._idle(self._arrival(self.k + 1), TIER2, self._transfer_component(self.k + 1))
        self.k += 1
        self._issue(self.k + 1, self.now)

    def _account(self, run: JobRun, jobs: list[Job], start: float) -> None:
        for key, value in run.busy_s.items():
            self._add(self.busy, key, value)
        for key, value in run.gap_s.items():
            self._add(self.exposed, key, value)
        for key, value in run.component_busy_s.items():
            self._add(self.compute, key, value)
        for key, value in run.slowdown_s.items():
            self._add(self.slowdown, key, value)
        if self.record >= 0 and self.label:
            for v in run.intervals:
                job = jobs[v.job]
                self._event(job.queue, job.name, start + v.start_s, start + v.end_s, job.component)
            for a, b, queue, component in run.gaps:
                self._event("exposed", component, start + a, start + b, component)

    # -- operations and the end of the iteration ----------------------------------------------------------
    def run_op(self, phase: str, chunk: int, microbatch: int, ready_s: float) -> float:
        self.label = ""
        if 0 <= microbatch < self.record:
            self.label = f"{phase[0].upper()} mb{microbatch} c{chunk}"
        self._idle(ready_s, COMPUTE, BUBBLE)
        base, edge = self.blocks[chunk]
        x = self.x
        if not (x.offload or self.dp or x.dp_scheduled and x.dp_overlap or self.label):  # nothing crosses blocks
            self._plain_op(phase, base, edge)
            return self.now
        label = self.label
        for position in range(base + edge):
            kind = "base" if position < base else "edge"
            if label:
                self.label = f"{label} block{position} ({kind})"
            self._block(kind, phase, chunk, position, microbatch)
        self.label = ""
        return self.now

    def _plain_op(self, phase: str, base: int, edge: int) -> None:
        """An operation whose blocks run back to back with nothing in the background: its standalone block runs,
        summed once per (phase, blocks) (the same accounting as block by block)."""
        key = (phase, base, edge)
        op = self.x.plain_ops.get(key)
        if op is None:
            makespan = 0.0
            tables: tuple[dict, dict, dict] = ({}, {}, {})
            for kind, count in (("base", base), ("edge", edge)):
                run = self.x.alone[kind, phase]
                for _ in range(count):
                    makespan += run.makespan_s
                    for table, source in zip(tables, (run.busy_s, run.gap_s, run.component_busy_s)):
                        for k, v in source.items():
                            table[k] = table.get(k, 0.0) + v
            op = self.x.plain_ops[key] = (makespan, tables)
        makespan, (busy, gaps, compute) = op
        if self.accounts:
            for table, source in ((self.busy, busy), (self.exposed, gaps), (self.compute, compute)):
                for k, v in source.items():
                    self._add(table, k, v)
        self.now += makespan
        self.k += base + edge

    def finish(self) -> float:
        """The step after the last operation (S3, S4); returns the stage's end."""
        x = self.x
        self.label = "tail" if self.record >= 0 else ""
        if x.training:
            jobs = [dataclasses.replace(job, duration_s=left, deps=()) for job, left in self.dp]
            waits = tuple(range(len(jobs)))
            blocks = sum(sum(b) for b in self.blocks)
            if x.dp_scheduled and not x.dp_overlap:
                collective = ("reduce_scatter",) if x.sharded else ("all_reduce",)
                for k in range(blocks):
                    jobs += x.syncs(f"block{k}", (len(jobs) - 1,) if jobs else (), False, collective)
                waits = (len(jobs) - 1,) if jobs else ()
            last = None
            for k in range(blocks):
                offset = len(jobs)
                for job in x.optimizer_jobs:
                    deps = tuple(d + offset for d in job.deps) or (waits if last is None else (last,))
                    jobs.append(dataclasses.replace(job, name=f"block{k}/{job.name}", deps=deps))
                    last = len(jobs) - 1
            if x.dp_scheduled and x.sharded and not x.dp_overlap:
                for k in range(blocks):
                    jobs += x.syncs(f"block{k}", (len(jobs) - 1,) if jobs else (), False, ("all_gather",))
            if any(not j.background for j in jobs):
                start = self.now
                run = run_jobs(jobs, x.pu)
                self._account(run, jobs, start)
                self.now = start + run.makespan_s
                if x.offload and not self.assume.overhead_per_block:
                    self._link(Stretch(start, self.now, x.phases(run), start))
                self.dp = []
            if x.dp and not x.dp_scheduled:
                self._add(self.exposed, (x.c.queue_of["data"], "data_parallel"), self.assume.data_parallel_s)
                self.now += self.assume.data_parallel_s
        if x.offload:
            self._idle(self._arrival(len(self.directions)), TIER2, self._transfer_component(len(self.directions)))
        self.label = ""
        return self.now


def physical_schedule(c: ConcretePlanIR, pricer: Pricer, *, record_microbatches: int = 0,
                      assume: Assumptions = PHYSICAL, source: str = "<plan>") -> PhysicalSchedule:
    """The physical projection of ``c`` (see the module rules); the first stage's intervals are recorded for the
    operations of its first ``record_microbatches`` microbatches and its step. ``assume``: closed-form
    assumptions to share (:class:`Assumptions`; default none). A plan with the expert overlap is refused
    (``source`` names the input): its block programs run every node on one stream."""
    if c.options.expert_overlap:
        raise UnsupportedFeatureError(source, "execution.expert_overlap", (
            "the physical projection (trace, explain) does not schedule the expert all-to-all overlap yet; "
            "estimate prices it"))
    x = _Context(c, pricer, assume)
    s = x.s
    pp, chunks = s.pipeline_parallel, s.chunks_per_stage
    stages = [_Stage(i, x, record_microbatches) for i in range(pp)]
    ends: dict[tuple[str, int, int, int], float] = {}
    ops: list[tuple] = []
    pointer = [0] * pp
    waiting: dict[tuple[str, int, int, int], int] = {}
    ready = deque(range(pp))
    while ready:
        index = ready.popleft()
        stage = stages[index]
        while pointer[index] < len(stage.order):
            phase, chunk, m = stage.order[pointer[index]]
            dep = dependency(phase, index, chunk, pp, chunks)
            ready_s = 0.0
            if dep is not None:
                key = (*dep, m)
                if key not in ends:
                    waiting[key] = index
                    break
                ready_s = ends[key]
            start = max(stage.now, ready_s)
            end = stage.run_op(phase, chunk, m, ready_s)
            ops.append((index, phase, chunk, m, start, end))
            own = (phase, index, chunk, m)
            ends[own] = end
            pointer[index] += 1
            woken = waiting.pop(own, None)
            if woken is not None:
                ready.append(woken)
    stuck = [i for i in range(pp) if pointer[i] < len(stages[i].order)]
    if stuck:
        raise RuntimeError(f"the pipeline deadlocks at stage {stuck[0]}")
    stage_ends = tuple(stage.finish() for stage in stages)
    total = max(stage_ends)
    first = stages[0]
    first.label = "tail" if first.record >= 0 else ""
    first._idle(total, COMPUTE, BUBBLE)
    components = {name: 0.0 for name in COMPONENTS}
    for name, value in first.compute.items():
        components[name] += value
    for (_, name), value in first.exposed.items():
        components[name] += value
    for name, value in first.slowdown.items():
        components[name] += value
    reference = calculon_projection(c, pricer)
    block_s = {f"{kind}_{phase}": x.alone[kind, phase].makespan_s for kind, phase in x.alone}
    projection = Projection("physical", components, total, reference.requirements, block_s)
    spans = tuple(OpSpan(*op) for op in ops) if record_microbatches > 0 else ()
    return PhysicalSchedule(projection, first.busy, first.exposed, first.slowdown, spans, stage_ends,
                            tuple(first.events))


def physical_projection(c: ConcretePlanIR, pricer: Pricer, assume: Assumptions = PHYSICAL) -> Projection:
    """The ``physical`` projection (:func:`physical_schedule` without recording)."""
    return physical_schedule(c, pricer, assume=assume).projection
