"""List schedule of ConcretePlanIR commands on one processor's queues (the physical rules).

Jobs. A command runs as jobs (:func:`program_jobs`):

- a compute command as one job per phase: a GEMM tile's flop or memory phase
  (``1/tiles`` of the pass), a whole pass as its flop phase then its memory
  phase (processing = flops + memory, the ``no_overlap`` mode of every
  shipped profile; under ``roofline`` a whole pass is one job of ``max(f, m)``
  whose kind is its larger phase);
- a network command as one job on its tier's queue: ``(message + local
  reduction) / tiles`` (a reducing collective's vector reduction); a TP
  collective's local copy/reduction work follows its message on the same
  queue as a flop and a memory job (the processor does it while the compute
  queue waits: it is TP time, as in the closed forms);
- a DP gradient sync message as one *background* job on the DP tier's queue
  (:func:`sync_jobs`).

Rules of :func:`run_jobs`:

- Q1 (FIFO): every queue runs its foreground jobs one at a time in issue
  order; a job starts when its queue is free and every job it waits for is done.
- Q2 (background): a background job runs on its queue only while no
  foreground job of that queue runs or is ready (block traffic, TP and PP,
  has priority on a shared tier; the background job is preempted and resumed),
  and only while no memory job runs (a DP sync, like a tier-2 transfer, moves
  bytes through memory tier 1, whose bandwidth a memory phase takes:
  Calculon's windows and offload overheads subtract the memory time too).
- Q3 (processor usage): a flop phase progresses at ``prod(1 - pu_q)`` over
  the network queues ``q`` running a job, ``pu_q`` the processor usage of the
  queue's tier; memory phases and network jobs at rate 1.
- Accounting: the compute queue's busy time per component; the time a flop
  phase loses to a background job on queue ``q`` (``dt x pu_q``: without it
  the same work takes ``dt (1 - pu_q)``) is charged to the background job's
  component (``data_parallel``), not to the compute component; compute-idle
  time goes to the component of what the compute queue waits for: the first
  unfinished job its next job waits for, else the first running foreground
  job, else the first running background job.

A run ends when every foreground job is done; background jobs left unfinished
are returned with their remaining time (:attr:`JobRun.background_left`), so
that a stage can carry them into its next block (:mod:`harness.schedule.physical`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

from harness.cost.views import Pricer
from harness.ir.concrete import Command, ConcretePlanIR, Program

COMPUTE = "compute"
#: Relative rounding below which a job counts as finished.
_EPS = 1e-12


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """One schedulable unit (see the module rules)."""

    name: str  # command name (a whole pass's phases share it)
    queue: str
    kind: str  # flops | memory | network
    component: str
    duration_s: float
    deps: tuple[int, ...] = ()  # indices of jobs of the same run
    background: bool = False
    pass_name: str = ""
    tile: int = 0
    tiles: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Interval:
    """One job running from ``start_s`` to ``end_s`` (a preempted background job has several)."""

    job: int
    start_s: float
    end_s: float


@dataclasses.dataclass(frozen=True)
class JobRun:
    """The list schedule of one set of jobs, times from the run's start."""

    makespan_s: float  # when the last foreground job ended
    busy_s: dict[tuple[str, str], float]  # (queue, component): time its jobs progressed (compute: see below)
    component_busy_s: dict[str, float]  # compute queue, per component (background slowdown excluded)
    gap_s: dict[tuple[str, str], float]  # compute-idle time, per (queue, component) of the job waited for
    slowdown_s: dict[str, float]  # compute time lost to background jobs, per their component
    intervals: tuple[Interval, ...]
    memory_phases: tuple[tuple[float, float], ...]  # memory jobs' intervals (start, end), merged, in order
    gaps: tuple[tuple[float, float, str, str], ...]  # compute-idle intervals: start, end, queue, component
    done_s: tuple[float | None, ...]  # end time per job (None: background job left unfinished)
    background_left: tuple[tuple[int, float], ...]  # (job, remaining seconds), queue order

    @property
    def exposed_s(self) -> float:
        """Makespan minus the compute queue's busy time."""
        return sum(self.gap_s.values())

    def queue_busy_s(self, queue: str) -> float:
        return sum(v for (q, _), v in self.busy_s.items() if q == queue)


def _compute_durations(command: Command, pricer: Pricer) -> tuple[tuple[str, float], ...]:
    cost = pricer.work(command.work, optimizer=command.pass_name == "optimizer")
    if command.phase == "flops":
        return (("flops", cost.compute_s / command.tiles),)
    if command.phase == "memory":
        return (("memory", cost.memory_s / command.tiles),)
    if pricer.roofline:
        return (("memory" if cost.memory_s >= cost.compute_s else "flops", cost.processing_s),)
    return (("flops", cost.compute_s), ("memory", cost.memory_s))


def _network_durations(command: Command, pricer: Pricer) -> tuple[tuple[str, float], ...]:
    if command.work is None:
        t = pricer.message_s(command.message)
        if command.reduction_operations:
            t += pricer.compute_s(command.reduction_operations, "vector")
        return (("network", t / command.tiles),)
    cost = pricer.work(command.work)
    local = (("memory" if cost.memory_s >= cost.compute_s else "flops", cost.processing_s),) if pricer.roofline \
        else (("flops", cost.compute_s), ("memory", cost.memory_s))
    return (("network", pricer.message_s(command.message)), *local)


def program_jobs(program: Program, pricer: Pricer, offset: int = 0) -> list[Job]:
    """The jobs of a program's commands (indices from ``offset``; a command's dependencies point at the last job
    of each awaited command)."""
    jobs: list[Job] = []
    last: dict[str, int] = {}
    for command in program.commands:
        deps = tuple(last[d] for d in command.depends_on)
        common = dict(component=command.component, pass_name=command.pass_name, tile=command.tile,
                      tiles=command.tiles)
        if command.kind == "compute":
            for kind, seconds in _compute_durations(command, pricer):
                jobs.append(Job(command.name, COMPUTE, kind, duration_s=seconds, deps=deps, **common))
                deps = (offset + len(jobs) - 1,)
        elif command.kind == "transfer":
            raise ValueError(f"{command.name}: tier-2 transfers are scheduled by the stage, not in a block program")
        else:
            for kind, seconds in _network_durations(command, pricer):
                jobs.append(Job(command.name, command.queue, kind, duration_s=seconds, deps=deps, **common))
                deps = (offset + len(jobs) - 1,)
        last[command.name] = offset + len(jobs) - 1
    return jobs


def sync_jobs(c: ConcretePlanIR, pricer: Pricer, block: str, deps: tuple[int, ...], *,
              background: bool, messages: tuple[str, ...] | None = None) -> list[Job]:
    """One block's DP gradient sync (the ``data_parallel`` program's messages, or those named in ``messages``),
    each waiting for ``deps``; chained in program order."""
    program = c.program("data_parallel")
    jobs: list[Job] = []
    for command in program.commands if program else ():
        if messages is not None and command.message.collective not in messages:
            continue
        jobs.append(Job(f"{block}/{command.name}", command.queue, "network", "data_parallel",
                        pricer.message_s(command.message), deps, background, "weight_grad"))
        deps = ()  # FIFO on one queue keeps the order
    return jobs


def run_jobs(jobs: list[Job], processor_usage: dict[str, float]) -> JobRun:
    """List-schedule ``jobs`` (see the module rules); ``processor_usage`` per network queue."""
    n = len(jobs)
    remaining = [j.duration_s for j in jobs]
    done: list[float | None] = [None] * n
    fg: dict[str, deque[int]] = {}
    bg: dict[str, deque[int]] = {}
    for i, j in enumerate(jobs):
        fg.setdefault(j.queue, deque())
        bg.setdefault(j.queue, deque())
        (bg if j.background else fg)[j.queue].append(i)
    queues = list(fg)
    running: dict[str, int] = {}
    segment: dict[str, list] = {}  # queue -> [job, start, end] of the segment it is running (merged while running)
    busy: dict[tuple[str, str], float] = {}
    component: dict[str, float] = {}
    gap: dict[tuple[str, str], float] = {}
    slowdown: dict[str, float] = {}
    intervals: list[Interval] = []
    gaps: list[tuple[float, float, str, str]] = []
    fg_left = sum(1 for j in jobs if not j.background)
    now = 0.0

    unmet = [len(j.deps) for j in jobs]
    dependents: list[list[int]] = [[] for _ in jobs]
    for i, j in enumerate(jobs):
        for d in j.deps:
            dependents[d].append(i)

    def flush(q: str) -> None:
        seg = segment.pop(q, None)
        if seg is not None and seg[2] > seg[1]:
            intervals.append(Interval(*seg))

    while fg_left:
        for q in queues:
            current = running.get(q)
            head = fg[q][0] if fg[q] else None
            head_ready = head is not None and not unmet[head]
            if current is not None:
                if not (jobs[current].background and head_ready):
                    continue
                bg[q].appendleft(current)  # preempt the background job
                del running[q]
            if head_ready:
                running[q] = fg[q].popleft()
            elif bg[q] and not unmet[bg[q][0]] and q != COMPUTE:
                running[q] = bg[q].popleft()
        if not running:
            stuck = next(jobs[i].name for q in queues for i in fg[q])
            raise RuntimeError(f"the schedule deadlocks at {stuck}")
        compute = running.get(COMPUTE)
        in_memory = any(jobs[i].kind == "memory" for i in running.values())
        flop_rate = 1.0
        for q in running:
            if q != COMPUTE:
                flop_rate *= 1.0 - processor_usage.get(q, 0.0)
        rates = {}
        step = math.inf
        for q, i in running.items():
            job = jobs[i]
            if q == COMPUTE:
                rate = flop_rate if job.kind == "flops" else 1.0
            elif job.background:
                rate = 0.0 if in_memory else 1.0
            else:
                rate = 1.0
            rates[q] = rate
            if rate > 0:
                step = min(step, remaining[i] / rate)
        if step == math.inf:
            raise RuntimeError("the schedule cannot progress")
        end = now + step
        if compute is None:
            waited = _blocker(jobs, fg.get(COMPUTE, ()), done, running)
            gap[waited] = gap.get(waited, 0.0) + step
            if step > 0:
                if gaps and gaps[-1][1] == now and gaps[-1][2:] == waited:
                    gaps[-1] = (gaps[-1][0], end, *waited)
                else:
                    gaps.append((now, end, *waited))
        else:
            job = jobs[compute]
            lost = 0.0
            if job.kind == "flops":
                for q, i in running.items():
                    if q != COMPUTE and jobs[i].background:
                        share = step * processor_usage.get(q, 0.0)
                        slowdown[jobs[i].component] = slowdown.get(jobs[i].component, 0.0) + share
                        lost += share
            component[job.component] = component.get(job.component, 0.0) + step - lost
        for q, i in list(running.items()):
            rate = rates[q]
            if rate > 0:
                key = (q, jobs[i].component)
                busy[key] = busy.get(key, 0.0) + step
                remaining[i] -= step * rate
                seg = segment.get(q)
                if seg is not None and seg[0] == i and seg[2] == now:
                    seg[2] = end
                else:
                    flush(q)
                    segment[q] = [i, now, end]
            else:
                flush(q)
            if remaining[i] <= _EPS * jobs[i].duration_s:
                remaining[i] = 0.0
                done[i] = end
                for x in dependents[i]:
                    unmet[x] -= 1
                flush(q)
                del running[q]
                if not jobs[i].background:
                    fg_left -= 1
        now = end
    left = []
    for q in queues:
        flush(q)
        if q in running:
            left.append((running[q], remaining[running[q]]))
        left += [(i, remaining[i]) for i in bg[q]]
    memory_phases = _union(sorted((v.start_s, v.end_s) for v in intervals if jobs[v.job].kind == "memory"))
    return JobRun(now, busy, component, gap, slowdown, tuple(intervals), memory_phases, tuple(gaps),
                  tuple(done), tuple(left))


def _blocker(jobs: list[Job], compute_queue, done, running) -> tuple[str, str]:
    """(queue, component) of the running job the idle compute queue waits for (see the module rules): the job
    its next job waits for if running, else the job running on that job's queue, else what that job waits for;
    without a next compute job, the first running foreground job, else the first running background job."""
    by_queue = {q: i for q, i in running.items()}
    if compute_queue:
        pending = [d for d in jobs[compute_queue[0]].deps if done[d] is None]
        seen = set()
        while pending:
            d = pending.pop(0)
            if d in seen:
                continue
            seen.add(d)
            job = jobs[d]
            current = by_queue.get(job.queue)
            if current is not None and not (jobs[current].background and current != d):
                return job.queue, jobs[current].component
            pending = [x for x in job.deps if done[x] is None] + pending
    for background in (False, True):
        for q, i in running.items():
            if jobs[i].background == background:
                return q, jobs[i].component
    return COMPUTE, "idle"


def _union(intervals: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    out: list[tuple[float, float]] = []
    for a, b in intervals:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)
