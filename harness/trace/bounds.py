"""What every trace shares: its work bounds (checked before any simulation), its physical-figure check, its writer.

Both modes of ``harness trace`` (:mod:`harness.trace.tasks`, the event
simulation of a portable plan; :mod:`harness.trace.queues`, the physical
schedule of a TP/DP-overlap or offload layout) are bounded by the same
limits, counted from the plan's shape before anything runs, and checked for
finite, non-negative times by :func:`require_physical_trace`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.ir.concrete import ConcretePlanIR
from harness.ir.portable import PortablePlanIR
from harness.outputs import write_text

#: Work bounds of one trace (checked before simulating, :func:`check_trace_size`): pipeline operations
#: (PP x chunks x microbatches x phases) and trace events (operations, nested blocks and tasks, metadata).
#: Measured on the 2-core machine (a loaded one): gpt3-175B/seqsel with 4096 microbatches, 196,608 operations
#: and about 205,000 events, takes 10 s and 250 MB peak (about 1.2 kB per event while the trace is built and
#: written). The bounds keep a trace within about a dozen seconds and 400 MB; ``--max-operations`` raises the
#: first for whoever has the time and memory.
MAX_TRACE_OPERATIONS = 200_000
MAX_TRACE_EVENTS = 300_000


def trace_size(plan: PortablePlanIR, task_microbatches: int) -> tuple[int, int]:
    """(pipeline operations, an upper bound of the trace events) of ``plan``, from its schedule shape only."""
    s = plan.schedule
    phases = 2 if s.training else 1
    per_microbatch = s.pipeline_parallel * s.chunks_per_stage * phases
    operations = per_microbatch * s.microbatches
    nested_ops = per_microbatch * min(task_microbatches, s.microbatches)
    events = 4 * s.pipeline_parallel + 2 + operations + nested_ops * (s.blocks_per_chunk * (len(plan.tasks) + 3) + 3)
    return operations, events


def check_trace_size(plan: PortablePlanIR, source: str, *, task_microbatches: int = 1,
                     max_operations: int = MAX_TRACE_OPERATIONS, max_events: int = MAX_TRACE_EVENTS) -> None:
    """Refuse, before any simulation, an iteration whose trace would exceed the work bounds. A raised
    ``max_operations`` raises the events bound in proportion (the events grow with the operations); the error
    names the option that would help: ``--task-microbatches`` when tasks are nested in more than one
    microbatch, else ``--max-operations``."""
    s = plan.schedule
    max_events = max(max_events, round(max_events * max_operations / MAX_TRACE_OPERATIONS))
    operations, events = trace_size(plan, task_microbatches)
    if operations > max_operations:
        raise InputError(source, "trace", f"the iteration has {operations} pipeline operations (PP {s.pipeline_parallel}"
                                          f" x {s.chunks_per_stage} chunks x {s.microbatches} microbatches x "
                                          f"{2 if s.training else 1} phases), more than the trace limit "
                                          f"{max_operations} (--max-operations)")
    if events > max_events and task_microbatches > 1:
        raise InputError(source, "--task-microbatches", f"the trace would hold up to {events} events, more than "
                                                        f"the limit {max_events}: nest tasks in fewer microbatches")
    if events > max_events:
        raise InputError(source, "--max-operations", f"the trace would hold up to {events} events, more than the "
                                                     f"limit {max_events} ({max_operations} operations allowed): raise "
                                                     f"--max-operations")


def _jobs(program) -> int:
    """Jobs a program's commands run as (harness.schedule.queues: a whole pass is two, a collective with local
    work three)."""
    count = 0
    for c in program.commands:
        if c.kind == "compute":
            count += 2 if c.phase == "whole" else 1
        else:
            count += 3 if c.work is not None else 1
    return count


def queue_trace_size(concrete: ConcretePlanIR, task_microbatches: int) -> tuple[int, int]:
    """(pipeline operations, an upper bound of the events) from the plan's shape and commands only.

    Per recorded block at most four events per job: its interval (a background sync: one per stretch it
    progressed, each ended by a job start or a memory phase), the compute queue's idle stretches, the pieces of
    a transfer between memory phases; the step likewise.
    """
    s = concrete.schedule
    operations, _ = trace_size(concrete, 0)  # a ConcretePlanIR carries the plan's schedule and tasks
    recorded = s.chunks_per_stage * (2 if s.training else 1) * min(task_microbatches, s.microbatches)
    per_block = 4 * max((_jobs(p) for p in concrete.programs if p.kind in ("forward", "backward")), default=0) + 8
    step = concrete.program("optimizer")
    dp = concrete.program("data_parallel")
    tail = 4 * s.blocks_per_stage * ((_jobs(step) if step else 0) + (_jobs(dp) if dp else 0)) + 8
    events = 4 * s.pipeline_parallel + 16 + operations + recorded * s.blocks_per_chunk * per_block + tail
    return operations, events


def check_queue_trace_size(concrete: ConcretePlanIR, source: str, *, task_microbatches: int = 1,
                           max_operations: int = MAX_TRACE_OPERATIONS, max_events: int = MAX_TRACE_EVENTS) -> None:
    """Refuse, before any scheduling, an iteration whose trace would exceed the work bounds."""
    operations, events = queue_trace_size(concrete, task_microbatches)
    if operations > max_operations:
        raise InputError(source, "trace", f"the iteration has {operations} pipeline operations, more than the trace "
                                          f"limit {max_operations} (--max-operations)")
    if events > max_events:
        raise InputError(source, "--task-microbatches", f"the queue trace would hold up to {events} events, more "
                                                        f"than the limit {max_events}: trace fewer microbatches")


def require_physical_trace(events: list[dict], figures: dict[str, float], source: str) -> None:
    """The one check of a trace's figures and events (the task trace and the queue trace): every figure, and every complete event's start, duration and
    ``args.duration_s`` (where it has one), is a finite, non-negative number, or the trace is an
    :class:`~harness.errors.InputError` naming ``source`` and the figure or event."""
    for name, value in figures.items():
        if not 0.0 <= value < math.inf:
            raise InputError(source, f"trace.{name}", f"{value!r} is not a finite, non-negative figure")
    for event in events:
        if event["ph"] == "X" and not (0.0 <= event["ts"] < math.inf and 0.0 <= event["dur"] < math.inf
                                       and 0.0 <= event["args"].get("duration_s", 0.0) < math.inf):
            raise InputError(source, f"trace event {event['name']}", f"ts {event['ts']!r} / dur {event['dur']!r} "
                                                                     "is not a finite, non-negative time")


def write_trace(doc: dict[str, Any], path: Path | str) -> None:
    """Write the trace document atomically (strict JSON); an unwritable path is an InputError naming it."""
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    write_text(path, text, option="--output")
