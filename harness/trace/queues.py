"""The queue trace: Chrome trace of a TP/DP-overlap or offload iteration, the physical schedule, one thread per queue.

Layout (opens in Perfetto / chrome://tracing):

- one process per pipeline stage (``pid`` = stage, named ``stage <s>``), thread
  0 ``operations``: every operation of the stage (a chunk's forward or
  backward for one microbatch) as a complete event, args ``stage``,
  ``microbatch``, ``chunk``, ``phase``;
- one process ``stage 0 queues`` (``pid`` = PP) with one thread per queue of
  the ConcretePlanIR: ``compute``, each ``network.tierN``, ``memory.tier2``,
  and a thread ``exposed`` holding the compute queue's idle time, each event
  named by the component it waits for (``pipeline_bubble``: another stage).
  A command's event carries ``queue``, ``component`` and its operation
  (``op``, e.g. ``F mb0 c1 block2 (edge)``, or ``tail`` for the step after the
  last operation); overlapped GEMMs appear as their tiles
  (``.../tileN.flops|memory|send``); a background job (a DP sync, a tier-2
  transfer) has one event per stretch it progressed, so a thread's events add
  up to its busy time. Every event's ``args.duration_s`` is its exact length
  in seconds (``ts`` and ``dur`` are microseconds quantized to nanoseconds).

Queue events cover the first stage's operations of the first
``task_microbatches`` microbatches and its step; with all microbatches they
cover the whole iteration of the first stage, whose exposed events then add
up to the physical projection's exposed components
(``tests/test_trace_queues.py``). ``otherData`` holds both projections'
components (the estimate is ``calculon-0.1.0``'s) and the first stage's busy
and exposed time per queue and component. Bounded like every trace
(:func:`check_queue_trace_size`) and checked for finite, non-negative times.
"""

from __future__ import annotations

from typing import Any

from harness.cost.views import CostView, pricer_for
from harness.evidence.profile import EvidenceProfile
from harness.ir.concrete import ConcretePlanIR
from harness.schedule.physical import PhysicalSchedule, physical_schedule
from harness.schedule.projection import calculon_projection
from harness.trace.bounds import (
    MAX_TRACE_EVENTS,
    MAX_TRACE_OPERATIONS,
    check_queue_trace_size,
    require_physical_trace,
)

EXPOSED = "exposed"


def _us(seconds: float) -> float:
    return round(seconds * 1e9) / 1000


def _complete(name: str, cat: str, pid: int, tid: int, start_s: float, end_s: float, args: dict) -> dict:
    start = _us(start_s)
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": start,
            "dur": max(0.0, _us(end_s) - start), "args": {**args, "duration_s": end_s - start_s}}


def _meta(pid: int, tid: int, kind: str, value) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid,
            "args": {"sort_index" if kind.endswith("sort_index") else "name": value}}


def queue_events(concrete: ConcretePlanIR, schedule: PhysicalSchedule) -> list[dict]:
    """Metadata, every stage's operations, then the first stage's queue events."""
    pp = concrete.schedule.pipeline_parallel
    events: list[dict] = []
    for stage in range(pp):
        events += [_meta(stage, 0, "process_name", f"stage {stage}"), _meta(stage, 0, "process_sort_index", stage),
                   _meta(stage, 0, "thread_name", "operations")]
    for op in schedule.ops:
        letter = "F" if op.phase == "forward" else "B"
        events.append(_complete(f"{letter} mb{op.microbatch} c{op.chunk}", op.phase, op.stage, 0, op.start_s,
                                op.end_s, {"stage": op.stage, "microbatch": op.microbatch, "chunk": op.chunk,
                                           "phase": op.phase}))
    threads = [q.name for q in concrete.queues] + [EXPOSED]
    tid = {name: i for i, name in enumerate(threads)}
    events += [_meta(pp, 0, "process_name", "stage 0 queues"), _meta(pp, 0, "process_sort_index", pp)]
    events += [_meta(pp, tid[name], "thread_name", name) for name in threads]
    for e in schedule.events:
        cat = "exposed" if e.queue == EXPOSED else e.component
        events.append(_complete(e.name, cat, pp, tid[e.queue], e.start_s, e.end_s,
                                {"queue": e.queue, "component": e.component, "op": e.op}))
    return events


def build_queue_trace(concrete: ConcretePlanIR, profile: EvidenceProfile, view: CostView, *,
                      task_microbatches: int = 1, label: str = "", source: str = "<input>",
                      max_operations: int = MAX_TRACE_OPERATIONS,
                      max_events: int = MAX_TRACE_EVENTS) -> tuple[dict[str, Any], PhysicalSchedule]:
    """Schedule ``concrete`` under ``view`` and return the trace document with the schedule (see the module rules)."""
    check_queue_trace_size(concrete, source, task_microbatches=task_microbatches, max_operations=max_operations,
                           max_events=max_events)
    pricer = pricer_for(profile, view, concrete.datatype)
    schedule = physical_schedule(concrete, pricer, record_microbatches=task_microbatches, source=source)
    calculon = calculon_projection(concrete, pricer)
    physical = schedule.projection
    events = queue_events(concrete, schedule)
    figures = {"total_s": physical.total_s, "calculon_total_s": calculon.total_s,
               **{f"components_s.{k}": v for k, v in physical.components_s.items()},
               **{f"busy_s.{q}.{c}": v for (q, c), v in schedule.busy_s.items()},
               **{f"exposed_s.{q}.{c}": v for (q, c), v in schedule.exposed_s.items()}}
    require_physical_trace(events, figures, source)
    other = {"label": label, "view": view.name, "projection": "physical", "total_s": physical.total_s,
             "components_s": physical.components_s, "calculon_total_s": calculon.total_s,
             "calculon_components_s": calculon.components_s, "recorded_microbatches": task_microbatches,
             "busy_s": [{"queue": q, "component": c, "seconds": v} for (q, c), v in sorted(schedule.busy_s.items())],
             "exposed_s": [{"queue": q, "component": c, "seconds": v}
                           for (q, c), v in sorted(schedule.exposed_s.items())],
             "slowdown_s": schedule.slowdown_s,
             "note": "the physical projection (list schedule of the ConcretePlanIR); the estimate reports the "
                     "calculon-0.1.0 projection (docs/concurrency.md)"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}, schedule


def as_simulation(concrete: ConcretePlanIR, schedule: PhysicalSchedule, calculon_total_s: float,
                  calculon_bubble_s: float):
    """The physical schedule's operations as a :class:`~harness.schedule.simulate.Simulation` (for the Gantt
    chart): the first stage's step after its last operation is drawn as its optimizer step."""
    from harness.schedule.simulate import Simulation, StageOp, chunk_blocks

    s = concrete.schedule
    blocks = chunk_blocks(s)
    stages: list[list[StageOp]] = [[] for _ in range(s.pipeline_parallel)]
    for op in schedule.ops:
        stages[op.stage].append(StageOp(op.stage, op.chunk, op.microbatch, op.phase, op.start_s, op.end_s,
                                        blocks[op.stage][op.chunk]))
    makespan = max(op.end_s for op in schedule.ops)
    busy = sum(op.end_s - op.start_s for op in stages[0])
    total = schedule.projection.total_s
    bubble = schedule.projection.components_s["pipeline_bubble"]
    return Simulation(
        pipeline_parallel=s.pipeline_parallel, chunks_per_stage=s.chunks_per_stage, microbatches=s.microbatches,
        training=s.training, ops=tuple(tuple(ops) for ops in stages), makespan_s=makespan, first_stage_busy_s=busy,
        first_stage_idle_s=makespan - busy, data_parallel_s=0.0, optimizer_s=total - makespan, total_s=total,
        closed_form_busy_s=busy, closed_form_bubble_s=calculon_bubble_s, closed_form_total_s=calculon_total_s,
        bubble_difference_s=bubble - calculon_bubble_s, exact=False,
        note="physical projection (list schedule); the closed form is the calculon-0.1.0 projection")
