"""The task trace: Chrome trace event JSON of a simulated iteration (opens in Perfetto / chrome://tracing).

Layout: one process (``pid``) per pipeline stage, named ``stage <s>`` by
``process_name`` metadata; thread 0 runs the chunk operations. Every
operation is a complete (``"X"``) event with ``ts`` / ``dur`` in
microseconds (quantized to nanoseconds) and ``args`` holding ``stage``,
``microbatch``, ``chunk`` and ``phase``. On thread 1 of stage 0, the first
stage's DP sync and optimizer step (the closed-form components) follow the
pipeline makespan; the iteration ends there (other stages' steps overlap it
and are not drawn).

Nesting (for the first ``task_microbatches`` microbatches): an operation
holds its blocks (base blocks, then the edge block), and a block holds its
tasks. A task's duration in a base or edge block is the closed form's block
time applied to that task alone (:func:`harness.explain.contributors` with
:func:`~harness.schedule.compose.chunk_times`), so the children add up to
their parent. Forward: the plan's forward tasks in order, then the boundary
send of the edge block. Backward: recompute clones, recommunication, the
forward tasks in reverse, then the boundary send. The last stage's last
chunk also runs the per-microbatch work outside the blocks (category
``output``): the output tasks and the host's microbatch time after its
forward blocks, the output tasks' backward before its backward blocks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from harness.cost.accumulation import accumulate_works, accumulation_applies
from harness.cost.output_layer import host_microbatch_s, output_tasks, task_seconds
from harness.cost.outside import block_accumulation_s, iteration_tasks, outside_work
from harness.cost.views import CostView, Pricer
from harness.estimate import cost_view
from harness.evidence.profile import EvidenceProfile
from harness.explain import Contributor, contributors
from harness.ir.model import ModelIR
from harness.ir.portable import PortablePlanIR
from harness.schedule.compose import chunk_times
from harness.schedule.simulate import Simulation, StageOp, simulate
from harness.trace.bounds import MAX_TRACE_OPERATIONS, check_trace_size, require_physical_trace

OPS_TID, STEP_TID = 0, 1

def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _event(name: str, cat: str, stage: int, tid: int, start_ns: int, end_ns: int, args: dict[str, Any]) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": stage, "tid": tid, "ts": start_ns / 1000,
            "dur": (end_ns - start_ns) / 1000, "args": {"stage": stage, **args}}


@dataclasses.dataclass(frozen=True)
class TaskSpans:
    """Per-task durations inside one base / edge block, forward and backward, in execution order."""

    forward_base: tuple[tuple[Contributor, float], ...]
    forward_edge: tuple[tuple[Contributor, float], ...]
    backward_base: tuple[tuple[Contributor, float], ...]
    backward_edge: tuple[tuple[Contributor, float], ...]
    #: once per microbatch on the last stage's last chunk, (name, primitive, seconds): after its forward blocks
    #: (the output tasks, then the host's microbatch time), before its backward blocks (the output tasks reversed)
    output_forward: tuple[tuple[str, str, float], ...] = ()
    output_backward: tuple[tuple[str, str, float], ...] = ()
    #: in every block's backward of each microbatch after the first, after its tasks, (name, primitive, seconds):
    #: the unfused gradient accumulation of each weight (:mod:`harness.cost.accumulation`)
    accumulate: tuple[tuple[str, str, float], ...] = ()


def task_spans(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView,
               model: ModelIR | None = None) -> TaskSpans:
    """Every contributor's time in a base and an edge block (zero-time ones left out), and the per-microbatch
    work of the last stage (:mod:`harness.cost.output_layer`)."""
    pricer = Pricer(profile, view, plan.datatype)
    parts = contributors(plan, pricer)
    by_phase = {ph: [c for c in parts if c.phase == ph] for ph in ("forward", "recompute", "recommunication", "pipeline")}
    forward_order = by_phase["forward"] + by_phase["pipeline"]
    backward_order = by_phase["recompute"] + by_phase["recommunication"] + by_phase["forward"][::-1] + by_phase["pipeline"]
    times = {id(c): chunk_times(plan.schedule, c.block) for c in parts}

    def spans(order: list[Contributor], attr: str) -> tuple[tuple[Contributor, float], ...]:
        return tuple((c, getattr(times[id(c)], attr)) for c in order if getattr(times[id(c)], attr) != 0.0)

    training = plan.schedule.training
    heads = [(t, *task_seconds(pricer, t)) for t in output_tasks(pricer, model, training, plan.output_tasks)]
    host = host_microbatch_s(pricer) if training else 0.0
    output_forward = tuple((t.name, t.primitive, f) for t, f, _ in heads if f) + (
        (("host.microbatch", "host", host),) if host else ())
    output_backward = tuple((t.name, t.primitive, b) for t, _, b in reversed(heads) if b)
    accumulate = ()
    if training and accumulation_applies(profile, view):
        accumulate = tuple((f"accumulate/{t.name}", "accumulate", seconds)
                           for t, w in accumulate_works(plan.tasks, plan.bytes_per_element)
                           if (seconds := pricer.work(w).processing_s))
    return TaskSpans(spans(forward_order, "base_forward_s"), spans(forward_order, "edge_forward_s"),
                     spans(backward_order, "base_backward_s"), spans(backward_order, "edge_backward_s"),
                     output_forward, output_backward, accumulate)


def _outputs(op: StageOp, start_ns: int, end_ns: int, spans: tuple[tuple[str, str, float], ...],
             args: dict[str, Any]) -> list[dict]:
    """The per-microbatch output events of a last-stage operation, from ``start_ns`` (clipped to ``end_ns``)."""
    events = []
    for name, primitive, seconds in spans:
        t_end = min(end_ns, start_ns + _ns(seconds))
        events.append(_event(name, "output", op.stage, OPS_TID, start_ns, t_end,
                             {**args, "task": name, "primitive": primitive, "time_s": seconds}))
        start_ns = t_end
    return events


def _nested(op: StageOp, start_ns: int, end_ns: int, spans: TaskSpans, args: dict[str, Any],
            last: bool = False) -> list[dict]:
    """Block and task events inside one operation; each child is clipped to its parent. ``last``: the last
    stage's last chunk, which also runs the per-microbatch output work (after its forward blocks, before its
    backward blocks)."""
    events: list[dict] = []
    base, edge = op.blocks
    cursor = start_ns
    outputs = spans.output_forward if op.phase == "forward" else spans.output_backward
    if last and outputs:
        head = _ns(sum(seconds for _, _, seconds in outputs))
        if op.phase == "backward":
            events += _outputs(op, start_ns, end_ns, outputs, args)
            cursor = min(end_ns, start_ns + head)
        else:
            events += _outputs(op, max(start_ns, end_ns - head), end_ns, outputs, args)
            end_ns = max(start_ns, end_ns - head)
    later = op.phase == "backward" and op.microbatch > 0
    for index in range(base + edge):
        kind = "base" if index < base else "edge"
        tasks = getattr(spans, f"{op.phase}_{kind}")
        accumulate = spans.accumulate if later else ()
        block_end = min(end_ns, cursor + _ns(sum(t for _, t in tasks) + sum(s for _, _, s in accumulate)))
        if index == base + edge - 1:
            block_end = end_ns
        events.append(_event(f"block {index} ({kind})", "block", op.stage, OPS_TID, cursor, block_end,
                             {**args, "block": index, "kind": kind}))
        t_cursor = cursor
        for contributor, seconds in tasks:
            t_end = min(block_end, t_cursor + _ns(seconds))
            events.append(_event(contributor.name, "task", op.stage, OPS_TID, t_cursor, t_end,
                                 {**args, "block": index, "task": contributor.name,
                                  "primitive": contributor.primitive, "time_s": seconds}))
            t_cursor = t_end
        for name, primitive, seconds in accumulate:
            t_end = min(block_end, t_cursor + _ns(seconds))
            events.append(_event(name, "accumulate", op.stage, OPS_TID, t_cursor, t_end,
                                 {**args, "block": index, "task": name, "primitive": primitive, "time_s": seconds}))
            t_cursor = t_end
        cursor = block_end
    return events


def trace_events(sim: Simulation, spans: TaskSpans | None = None,
                 task_microbatches: int = 0) -> list[dict]:
    """All events: metadata, operations (with nested blocks and tasks), then the step after the pipeline."""
    events: list[dict] = []
    for stage, ops in enumerate(sim.ops):
        events += [{"name": "process_name", "ph": "M", "pid": stage, "tid": 0, "args": {"name": f"stage {stage}"}},
                   {"name": "process_sort_index", "ph": "M", "pid": stage, "tid": 0, "args": {"sort_index": stage}},
                   {"name": "thread_name", "ph": "M", "pid": stage, "tid": OPS_TID, "args": {"name": "chunks"}},
                   {"name": "thread_name", "ph": "M", "pid": stage, "tid": STEP_TID, "args": {"name": "step"}}]
        for op in ops:
            args = {"microbatch": op.microbatch, "chunk": op.chunk, "phase": op.phase}
            start, end = _ns(op.start_s), _ns(op.end_s)
            letter = "F" if op.phase == "forward" else "B"
            events.append(_event(f"{letter} mb{op.microbatch} c{op.chunk}", op.phase, stage, OPS_TID, start, end, args))
            if spans is not None and op.microbatch < task_microbatches and end > start:
                last = stage == len(sim.ops) - 1 and op.chunk == sim.chunks_per_stage - 1
                events += _nested(op, start, end, spans, args, last)
        if stage == 0:  # the iteration ends with the first stage's step
            cursor = _ns(sim.makespan_s)
            for phase, seconds in (("data_parallel", sim.data_parallel_s), ("optimizer", sim.optimizer_s)):
                if seconds:
                    events.append(_event(phase, phase, stage, STEP_TID, cursor, cursor + _ns(seconds),
                                         {"microbatch": None, "chunk": None, "phase": phase}))
                    cursor += _ns(seconds)
    return events


def _require_physical(sim: Simulation, events: list[dict], source: str) -> None:
    """No trace holds a negative, NaN or infinite time (the bubble difference is signed by definition)."""
    require_physical_trace(events, {name: getattr(sim, name) for name in (
        "makespan_s", "total_s", "first_stage_busy_s", "data_parallel_s", "optimizer_s", "closed_form_total_s",
        "closed_form_bubble_s")}, source)


def build_trace(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, *, task_microbatches: int = 1,
                label: str = "", source: str = "<input>", max_operations: int = MAX_TRACE_OPERATIONS,
                model: ModelIR | None = None) -> tuple[dict[str, Any], Simulation]:
    """Simulate ``plan`` under ``view`` and return the trace document with the simulation.

    Bounded: :func:`check_trace_size` runs first; every time in the result is finite and non-negative.
    ``model``: the plan's ModelIR, for a profile with the ``output_layer`` family (the default vocabulary's
    output tasks are drawn on the last stage, as the plan's own).
    """
    check_trace_size(plan, source, task_microbatches=task_microbatches, max_operations=max_operations)
    block, comp = cost_view(plan, profile, view, model=model)
    pricer = Pricer(profile, view, plan.datatype)
    section = iteration_tasks(pricer, model, plan.schedule, plan.tasks, plan.bytes_per_element,
                              output_tasks_planned=plan.output_tasks, vocabulary_weights=plan.vocabulary_weights)
    extra = outside_work(pricer, section).per_microbatch_s
    accumulate = block_accumulation_s(pricer, section)
    sim = simulate(plan.schedule, block, comp, extra or (0.0, 0.0), accumulate)
    spans = task_spans(plan, profile, view, model) if task_microbatches > 0 else None
    summary = {name: getattr(sim, name) for name in (
        "makespan_s", "total_s", "first_stage_busy_s", "first_stage_idle_s", "closed_form_bubble_s",
        "closed_form_total_s", "bubble_difference_s", "exact", "note")}
    events = trace_events(sim, spans, task_microbatches)
    _require_physical(sim, events, source)
    doc = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"label": label, "view": view.name, **summary}}
    return doc, sim
