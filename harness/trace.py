"""Chrome trace event JSON of a simulated iteration (opens in Perfetto / chrome://tracing).

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
forward tasks in reverse, then the boundary send.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from harness.cost.views import CostView, Pricer
from harness.errors import InputError
from harness.estimate import cost_view
from harness.evidence.profile import EvidenceProfile
from harness.explain import Contributor, contributors
from harness.ir.model import ModelIR
from harness.ir.portable import PortablePlanIR
from harness.schedule.compose import chunk_times
from harness.schedule.simulate import Simulation, StageOp, simulate

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


def task_spans(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView) -> TaskSpans:
    """Every contributor's time in a base and an edge block (zero-time ones left out)."""
    parts = contributors(plan, Pricer(profile, view, plan.datatype))
    by_phase = {ph: [c for c in parts if c.phase == ph] for ph in ("forward", "recompute", "recommunication", "pipeline")}
    forward_order = by_phase["forward"] + by_phase["pipeline"]
    backward_order = by_phase["recompute"] + by_phase["recommunication"] + by_phase["forward"][::-1] + by_phase["pipeline"]
    times = {id(c): chunk_times(plan.schedule, c.block) for c in parts}

    def spans(order: list[Contributor], attr: str) -> tuple[tuple[Contributor, float], ...]:
        return tuple((c, getattr(times[id(c)], attr)) for c in order if getattr(times[id(c)], attr) != 0.0)

    return TaskSpans(spans(forward_order, "base_forward_s"), spans(forward_order, "edge_forward_s"),
                     spans(backward_order, "base_backward_s"), spans(backward_order, "edge_backward_s"))


def _nested(op: StageOp, start_ns: int, end_ns: int, spans: TaskSpans, args: dict[str, Any]) -> list[dict]:
    """Block and task events inside one operation; each child is clipped to its parent."""
    events: list[dict] = []
    base, edge = op.blocks
    cursor = start_ns
    for index in range(base + edge):
        kind = "base" if index < base else "edge"
        tasks = getattr(spans, f"{op.phase}_{kind}")
        block_end = min(end_ns, cursor + _ns(sum(t for _, t in tasks)))
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
                events += _nested(op, start, end, spans, args)
        if stage == 0:  # the iteration ends with the first stage's step
            cursor = _ns(sim.makespan_s)
            for phase, seconds in (("data_parallel", sim.data_parallel_s), ("optimizer", sim.optimizer_s)):
                if seconds:
                    events.append(_event(phase, phase, stage, STEP_TID, cursor, cursor + _ns(seconds),
                                         {"microbatch": None, "chunk": None, "phase": phase}))
                    cursor += _ns(seconds)
    return events


def build_trace(plan: PortablePlanIR, profile: EvidenceProfile, view: CostView, *, task_microbatches: int = 1,
                label: str = "", model: ModelIR | None = None) -> tuple[dict[str, Any], Simulation]:
    """Simulate ``plan`` under ``view`` and return the trace document with the simulation
    (``model``: the plan's ModelIR, for a profile with the ``output_layer`` family)."""
    block, comp = cost_view(plan, profile, view, model=model)
    sim = simulate(plan.schedule, block, comp)
    spans = task_spans(plan, profile, view) if task_microbatches > 0 else None
    summary = {name: getattr(sim, name) for name in (
        "makespan_s", "total_s", "first_stage_busy_s", "first_stage_idle_s", "closed_form_bubble_s",
        "closed_form_total_s", "bubble_difference_s", "exact", "note")}
    doc = {"traceEvents": trace_events(sim, spans, task_microbatches), "displayTimeUnit": "ms",
           "otherData": {"label": label, "view": view.name, **summary}}
    return doc, sim


def write_trace(doc: dict[str, Any], path: Path | str) -> None:
    """Write the trace document; an unwritable path is an InputError naming it."""
    try:
        Path(path).write_text(json.dumps(doc, separators=(",", ":")))
    except OSError as error:
        raise InputError(str(path), "--output", error.strerror or str(error)) from None
