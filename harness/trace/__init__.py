"""Chrome traces of an iteration (``harness trace``): one entry point, :func:`trace_lowering`, in two modes.

- The task trace (:mod:`harness.trace.tasks`): a portable plan's pipeline
  simulated event by event (:mod:`harness.schedule.simulate`), one process
  per stage, blocks and tasks nested in the first microbatches' operations.
- The queue trace (:mod:`harness.trace.queues`): a layout with TP/DP overlap
  or offload, traced from its ConcretePlanIR's physical schedule, one thread
  per queue of the first stage next to every stage's operations.

The mode is the lowering's: :attr:`~harness.pipeline.Lowering.concurrent`
picks the queue trace. Both are bounded before anything runs and checked for
finite, non-negative times (:mod:`harness.trace.bounds`), and both give a
:class:`~harness.schedule.simulate.Simulation` of their operations for the
Gantt chart (:meth:`Trace.drawn`, :mod:`harness.report.gantt`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.cost.views import CostView
from harness.evidence.profile import EvidenceProfile
from harness.ir.concrete import ConcretePlanIR
from harness.pipeline import Lowering
from harness.schedule.physical import PhysicalSchedule
from harness.schedule.simulate import Simulation
from harness.trace.bounds import (
    MAX_TRACE_EVENTS,
    MAX_TRACE_OPERATIONS,
    check_queue_trace_size,
    check_trace_size,
    queue_trace_size,
    require_physical_trace,
    trace_size,
    write_trace,
)
from harness.trace.queues import EXPOSED, as_simulation, build_queue_trace
from harness.trace.tasks import TaskSpans, build_trace, task_spans

__all__ = ["EXPOSED", "MAX_TRACE_EVENTS", "MAX_TRACE_OPERATIONS", "TaskSpans", "Trace", "as_simulation",
           "build_queue_trace", "build_trace", "check_queue_trace_size", "check_trace_size", "queue_trace_size",
           "require_physical_trace", "task_spans", "trace_lowering", "trace_size", "write_trace"]


@dataclasses.dataclass(frozen=True)
class Trace:
    """One traced iteration: the Chrome trace document, and the task trace's simulation or the queue trace's
    physical schedule (with its ConcretePlanIR); the other mode's fields are None."""

    doc: dict[str, Any]
    simulation: Simulation | None = None
    schedule: PhysicalSchedule | None = None
    concrete: ConcretePlanIR | None = None

    def drawn(self) -> Simulation:
        """The operations to draw as a :class:`~harness.schedule.simulate.Simulation` (the Gantt chart): the
        task trace's own, or the physical schedule's (:func:`~harness.trace.queues.as_simulation`; it needs
        recorded microbatches)."""
        if self.simulation is not None:
            return self.simulation
        other = self.doc["otherData"]
        return as_simulation(self.concrete, self.schedule, other["calculon_total_s"],
                             other["calculon_components_s"]["pipeline_bubble"])


def check_size(lowering: Lowering, source: str, *, task_microbatches: int = 1,
               max_operations: int = MAX_TRACE_OPERATIONS) -> None:
    """Refuse, before anything runs, an iteration whose trace (in the lowering's mode) would exceed the bounds."""
    if lowering.concurrent:
        check_queue_trace_size(lowering.concrete(), source, task_microbatches=task_microbatches,
                               max_operations=max_operations)
    else:
        check_trace_size(lowering.plan, source, task_microbatches=task_microbatches, max_operations=max_operations)


def trace_lowering(lowering: Lowering, profile: EvidenceProfile, view: CostView, *, task_microbatches: int = 1,
                   label: str = "", source: str = "<input>",
                   max_operations: int = MAX_TRACE_OPERATIONS) -> Trace:
    """Trace one lowering under ``view`` in its mode (see the package rules); bounded first."""
    check_size(lowering, source, task_microbatches=task_microbatches, max_operations=max_operations)
    if not lowering.concurrent:
        doc, sim = build_trace(lowering.plan, profile, view, task_microbatches=task_microbatches, label=label,
                               source=source, max_operations=max_operations, model=lowering.model)
        return Trace(doc, simulation=sim)
    concrete = lowering.concrete()
    doc, schedule = build_queue_trace(concrete, profile, view, task_microbatches=task_microbatches, label=label,
                                      source=source, max_operations=max_operations)
    return Trace(doc, schedule=schedule, concrete=concrete)
