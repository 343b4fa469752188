"""Hidden and exposed time per queue of a TP/DP-overlap or offload layout (``harness explain``'s gap mode).

With overlap or offload, a component is no longer the sum of its tasks'
times: part of a queue's work runs under the compute queue's work (hidden),
part of it makes the compute queue wait (exposed). The split comes from the
physical projection (the list schedule of the ConcretePlanIR,
:mod:`harness.schedule.physical`), for the first stage over one iteration:

- a network or tier-2 component (``tensor_parallel``, ``recommunication``,
  ``pipeline_parallel``, ``data_parallel``, ``forward_offload``,
  ``backward_offload``): per queue that carried it, ``busy_s`` (the time its
  commands ran), ``exposed_s`` (the compute queue's idle time waiting for
  them), ``hidden_s = busy_s - exposed_s``, and ``slowdown_s`` (compute time
  lost orchestrating them: DP syncs under flop phases). Rule: the
  component's physical time is ``sum(exposed_s) + slowdown_s``;
- a compute component (``forward``, ``backward``, ``recompute``,
  ``optimizer``): the compute queue's busy time, all of it exposed;
- ``pipeline_bubble``: idle time waiting for other stages (no queue: it is
  no queue's work).

Each component also carries the estimate's value (``estimate_s``: the
``calculon-0.1.0`` projection, which reproduces Calculon 0.1.0, with a
measured profile's per-microbatch work, the ``output_layer`` and the host's
microbatch time of ``launch``, which the physical schedule does not model) next to the physical one (``physical_s``); ``docs/concurrency.md``
says why they differ.
Every figure is finite and non-negative, or the split is an error naming it.
"""

from __future__ import annotations

import math

from pydantic import Field

from harness.cost.views import CostView, pricer_for
from harness.errors import InputError
from harness.evidence.profile import EvidenceProfile
from harness.ir.base import Frozen
from harness.pipeline import Lowering
from harness.schedule.physical import physical_schedule
from harness.estimate import concrete_iteration
from harness.schedule.queues import COMPUTE
from harness.vocabulary import COMPONENTS

#: Components whose time is the compute queue's own work.
COMPUTE_COMPONENTS = ("forward", "backward", "recompute", "optimizer")
#: Rounding of busy - exposed (both sums of the same list schedule's steps) accepted as zero hidden time.
ROUNDING = 1e-12


class QueueShare(Frozen):
    """One queue's part of one component, first stage, one iteration (seconds)."""

    queue: str | None = Field(description="Queue name (None: the pipeline bubble, no queue's work).")
    busy_s: float = Field(description="Time the queue ran this component's work.")
    hidden_s: float = Field(description="Busy time the compute queue did not wait for (busy - exposed).")
    exposed_s: float = Field(description="Compute-queue idle time waiting for it.")
    slowdown_s: float = Field(description="Compute time lost orchestrating it (background DP syncs).")


class ComponentQueues(Frozen):
    """One timing component split over the queues that carry it."""

    component: str = Field(description="Timing component name.")
    estimate_s: float = Field(description="The estimate's value (calculon-0.1.0 projection), seconds.")
    physical_s: float = Field(description="The physical projection's value: exposed + slowdown (compute: busy).")
    queues: tuple[QueueShare, ...] = Field(description="Per queue, in queue order.")


class ViewQueues(Frozen):
    """The per-queue split of one cost view."""

    view: str = Field(description="Cost view name.")
    estimate_total_s: float = Field(description="The estimate's iteration time (calculon-0.1.0), seconds.")
    physical_total_s: float = Field(description="The physical projection's iteration time, seconds.")
    components: tuple[ComponentQueues, ...] = Field(description="Every timing component, in estimate order.")


def _check(source: str, where: str, value: float) -> float:
    if not 0.0 <= value < math.inf:
        raise InputError(source, where, f"{value!r} is not a finite, non-negative time")
    return value


def queue_split(lowering: Lowering, profile: EvidenceProfile, view: CostView, *, source: str = "<input>") -> ViewQueues:
    """The per-queue split of one view of a lowering with TP/DP overlap or offload (see the module rules)."""
    concrete = lowering.concrete()
    pricer = pricer_for(profile, view, concrete.datatype)
    schedule = physical_schedule(concrete, pricer, source=source)
    estimate = concrete_iteration(concrete, pricer, lowering.model)
    physical = schedule.projection
    order = [q.name for q in concrete.queues]
    components = []
    for name in COMPONENTS:
        shares = []
        if name in COMPUTE_COMPONENTS:
            if physical.components_s[name]:
                busy = physical.components_s[name]
                shares.append(QueueShare(queue=COMPUTE, busy_s=busy, hidden_s=0.0, exposed_s=busy, slowdown_s=0.0))
        elif name == "pipeline_bubble":
            if physical.components_s[name]:
                shares.append(QueueShare(queue=None, busy_s=0.0, hidden_s=0.0, exposed_s=physical.components_s[name],
                                         slowdown_s=0.0))
        else:
            used = {q for q, c in (*schedule.busy_s, *schedule.exposed_s) if c == name}
            slowdown = schedule.slowdown_s.get(name, 0.0)
            for q in sorted(used, key=order.index):
                busy = schedule.busy_s.get((q, name), 0.0)
                exposed = schedule.exposed_s.get((q, name), 0.0)
                hidden = busy - exposed
                if -ROUNDING * busy <= hidden < 0:
                    hidden = 0.0
                lost = slowdown if q == concrete.queue_of.get("data") and name == "data_parallel" else 0.0
                shares.append(QueueShare(queue=q, busy_s=busy, hidden_s=hidden, exposed_s=exposed, slowdown_s=lost))
        for share in shares:
            for field in ("busy_s", "hidden_s", "exposed_s", "slowdown_s"):
                _check(source, f"explain.{view.name}.{name}.{share.queue}.{field}", getattr(share, field))
        components.append(ComponentQueues(component=name, estimate_s=_check(source, f"{name}.estimate_s",
                                                                            estimate.components_s[name]),
                                          physical_s=physical.components_s[name], queues=tuple(shares)))
    return ViewQueues(view=view.name, estimate_total_s=estimate.total_s, physical_total_s=physical.total_s,
                      components=tuple(components))
