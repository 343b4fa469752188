"""The fit's fast evaluator: a corpus's plans as arrays, priced for many candidate profiles.

A fit prices the same plans under hundreds of candidate profiles. Pricing
each plan through :func:`harness.estimate.cost_view` would take seconds per
candidate; this module lowers every record once and keeps what a price
depends on as arrays:

- every non-empty pass of every plan task (operations, bytes, engine,
  whether it is the optimizer step) with its coefficient in the record's
  target (the iteration total, or a block's forward / backward time): the
  composition (:func:`harness.schedule.compose.compose`) is linear in the
  block times (:func:`harness.schedule.block.block_times`), so each block-time
  field has one coefficient per record, found by composing unit block times;
- every distinct message with its coefficients (priced by the real
  :class:`~harness.cost.views.Pricer`: few, and they carry the network rules);
- the output tasks once per microbatch (the plan's, or those of the
  template's default vocabulary, family ``output_layer``), and the host's
  time per microbatch (family ``launch``);
- the unfused gradient accumulation of every weight-holding block task
  (family ``gradient_accumulation``), with the iteration's multiple of a
  block's accumulation (:func:`harness.cost.accumulation.block_multiples`);
- microbenchmarks: a ``gemm`` record is one matrix pass (``2mnk``
  operations, its operands and result as traffic), a ``memory_transfer``
  record one vector pass moving its bytes; neither waits for the host (a
  benchmark times the device).

Rule: the arrays are read the way ``block_times`` reads a plan, and
:func:`Design.predict` equals the estimate's ``system_evidence`` total (or
block times) of every record to rounding; :func:`Design.check` compares
them with the real estimate path (the fit runs it on its result, and a test
on a corpus).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from harness.cost.accumulation import accumulate_works, accumulation_applies, block_multiples
from harness.passes.output_layer import model_plan_tasks
from harness.cost.views import COST_VIEWS, CostView, Pricer
from harness.errors import HarnessError
from harness.estimate import check_tiers, cost_view
from harness.evidence.profile import EvidenceProfile
from harness.ir.portable import Message
from harness.ir.model import BYTES_PER_ELEMENT
from harness.ir.portable import Work
from harness.measurements.corpus import GemmRecord, IterationRecord, LayerPassRecord, MemoryTransferRecord
from harness.pipeline import lower
from harness.schedule.block import BlockTimes
from harness.schedule.compose import compose

SYSTEM_EVIDENCE_VIEW = COST_VIEWS["system_evidence"]
FIELDS = tuple(f.name for f in dataclasses.fields(BlockTimes))
_INDEX = {name: i for i, name in enumerate(FIELDS)}
# a layer_pass record's forward and backward: one base block's forward and backward critical path
LAYER_FORWARD = ("forward_s", "tp_forward_base_s")
LAYER_BACKWARD = ("recompute_s", "recomm_base_s", "activation_grad_s", "weight_grad_s", "tp_backward_base_s")


def _unit(field: str | None) -> BlockTimes:
    return BlockTimes(*(1.0 if name == field else 0.0 for name in FIELDS))


def composition_coefficients(plan) -> np.ndarray:
    """The iteration total's coefficient of each block-time field (the composition is linear in them)."""
    zero = compose(plan.schedule, _unit(None)).total_s
    return np.array([compose(plan.schedule, _unit(f)).total_s - zero for f in FIELDS])


@dataclasses.dataclass
class _Builder:
    target: list[int] = dataclasses.field(default_factory=list)
    coefficient: list[float] = dataclasses.field(default_factory=list)
    operations: list[float] = dataclasses.field(default_factory=list)
    bytes: list[float] = dataclasses.field(default_factory=list)
    matrix: list[bool] = dataclasses.field(default_factory=list)
    optimizer: list[bool] = dataclasses.field(default_factory=list)
    output_layer: list[bool] = dataclasses.field(default_factory=list)
    accumulation: list[bool] = dataclasses.field(default_factory=list)
    device_only: list[bool] = dataclasses.field(default_factory=list)

    def add(self, target: int, coefficient: float, work, *, optimizer: bool = False, output_layer: bool = False,
            accumulation: bool = False, device_only: bool = False) -> None:
        """One pass of ``work`` with its coefficient in the target."""
        size = work.bytes_read + work.bytes_written
        if coefficient == 0 or (work.operations == 0 and size == 0):
            return
        if work.datatype is not None:  # the design's arrays price every work at the plan's datatype
            raise ValueError(f"the fit's design prices one datatype per plan; a work states {work.datatype}")
        self.target.append(target)
        self.coefficient.append(coefficient)
        self.operations.append(work.operations)
        self.bytes.append(size)
        self.matrix.append(work.engine == "matrix" and not optimizer)
        self.optimizer.append(optimizer)
        self.output_layer.append(output_layer)
        self.accumulation.append(accumulation)
        self.device_only.append(device_only)


@dataclasses.dataclass(frozen=True)
class Target:
    """One value the design predicts: a record's iteration total, or one block pass of a layer_pass record."""

    record: int  # index of the record in the design's record list
    what: str  # "iteration", "layer_forward", "layer_backward", "gemm" or "memory_transfer"
    value: int  # index into the record's measured values (iteration: 0; layer_pass: 0 forward, 1 backward)


class Design:
    """The plans of a list of records, as arrays (see the module rules)."""

    def __init__(self, records: Sequence[IterationRecord | LayerPassRecord | GemmRecord | MemoryTransferRecord],
                 template: EvidenceProfile) -> None:
        self.records = tuple(records)
        self.template = template
        datatypes = {r.execution.datatype if hasattr(r, "execution") else r.datatype for r in self.records
                     if r.kind != "memory_transfer"}
        if len(datatypes) > 1:
            raise HarnessError(f"a fit is datatype-specific: the records mix {sorted(datatypes)}")
        self.datatype = datatypes.pop() if datatypes else "float16"
        targets: list[Target] = []
        microbatches: dict[int, float] = {}  # iteration target -> microbatches (the host's microbatch time)
        items = _Builder()
        messages: dict[tuple[Message, int], int] = {}  # (message, plan index for a boundary transfer or -1)
        m_target, m_index, m_coef = [], [], []
        self.lowerings = []
        for index, record in enumerate(self.records):
            if record.kind in ("gemm", "memory_transfer"):
                self.lowerings.append(None)
                t = len(targets)
                targets.append(Target(index, record.kind, 0))
                items.add(t, 1.0, benchmark_work(record), device_only=True)
                continue
            data = record.estimate_input(template.name)
            check_tiers(data, template, record.id)
            lowering = lower(data, record.id)
            self.lowerings.append(lowering)
            plan = lowering.plan
            if record.kind == "iteration":
                per_target = [("iteration", composition_coefficients(plan))]
            else:
                fw = np.array([1.0 if f in LAYER_FORWARD else 0.0 for f in FIELDS])
                bw = np.array([1.0 if f in LAYER_BACKWARD else 0.0 for f in FIELDS])
                per_target = [("layer_forward", fw), ("layer_backward", bw)]
            for value, (what, coef) in enumerate(per_target):
                t = len(targets)
                targets.append(Target(index, what, value))
                self._add_plan(plan, index, coef, t, items, messages, m_target, m_index, m_coef)
                if what == "iteration" and plan.schedule.training:
                    microbatches[t] = plan.schedule.microbatches
                    self._add_output_tasks(plan, lowering.model, t, items)
                    multiple = sum(block_multiples(plan.schedule))
                    for _, work in accumulate_works(plan.tasks, plan.bytes_per_element):
                        items.add(t, float(multiple), work, accumulation=True)
        self.targets = tuple(targets)
        self.messages = tuple(messages)
        self._item_target = np.array(items.target, dtype=np.intp)
        self._item_coefficient = np.array(items.coefficient)
        self._operations = np.array(items.operations)
        self._bytes = np.array(items.bytes)
        self._microbatches = np.array([microbatches.get(t, 0.0) for t in range(len(targets))])
        self._matrix = np.array(items.matrix, dtype=bool)
        self._optimizer = np.array(items.optimizer, dtype=bool)
        self._output_layer = np.array(items.output_layer, dtype=bool)
        self._accumulation = np.array(items.accumulation, dtype=bool)
        self._device_only = np.array(items.device_only, dtype=bool)
        self._message_target = np.array(m_target, dtype=np.intp)
        self._message_index = np.array(m_index, dtype=np.intp)
        self._message_coefficient = np.array(m_coef)

    @staticmethod
    def _add_plan(plan, plan_index, coef, t, items, messages, m_target, m_index, m_coef) -> None:
        c = dict(zip(FIELDS, coef))

        def message(msg, coefficient, boundary=False):
            if msg is None or coefficient == 0:
                return
            m_target.append(t)
            m_index.append(messages.setdefault((msg, plan_index if boundary else -1), len(messages)))
            m_coef.append(coefficient)

        if plan.vocabulary_weights is not None:
            raise ValueError("the fit's design has no vocabulary matrices (model.tied_embeddings)")
        for task in plan.tasks:  # as harness.schedule.block.block_times reads them
            if task.exchange == "ring":
                raise ValueError("the fit's design has no ring exchange (context parallelism)")
            if task.phase == "forward" and task.exchange != "collective":
                items.add(t, c["forward_s"], task.forward)
                items.add(t, c["activation_grad_s"], task.activation_grad)
                items.add(t, c["weight_grad_s"], task.weight_grad)
                items.add(t, c["optimizer_s"], task.optimizer, optimizer=True)
            elif task.phase == "forward":
                m = task.messages
                items.add(t, c["tp_forward_base_s"] + c["tp_forward_edge_s"], task.forward)
                items.add(t, c["tp_backward_base_s"] + c["tp_backward_edge_s"], task.activation_grad)
                message(m.forward_base, c["tp_forward_base_s"])
                message(m.forward_edge, c["tp_forward_edge_s"])
                message(m.backward_base, c["tp_backward_base_s"])
                message(m.backward_edge, c["tp_backward_edge_s"])
            elif task.phase == "recompute":
                items.add(t, c["recompute_s"], task.forward)
            else:
                message(task.messages.forward_base, c["recomm_base_s"])
                message(task.messages.forward_edge, c["recomm_edge_s"])
        message(plan.pipeline.forward, c["pp_forward_s"], boundary=True)
        message(plan.pipeline.backward, c["pp_backward_s"], boundary=True)
        for msg in plan.data_parallel.messages if plan.data_parallel else ():
            message(msg, c["dp_s"])

    def _add_output_tasks(self, plan, model, t: int, items: _Builder) -> None:
        """The output tasks once per microbatch (as :func:`harness.cost.outside.outside_work`): the
        plan's, always priced; else those of the template's default vocabulary, priced where the candidate
        applies family ``output_layer``."""
        tasks, default = plan.output_tasks, False
        if not tasks and self.template.output_layer is not None:
            tasks, default = model_plan_tasks(model.shape, model.execution, self.template.output_layer.vocabulary), True
        mb = float(plan.schedule.microbatches)
        for task in tasks or ():
            items.add(t, mb, task.forward, output_layer=default)
        for task in reversed(tasks or ()):
            items.add(t, mb, task.activation_grad, output_layer=default)
            items.add(t, mb, task.weight_grad, output_layer=default)

    def per_target(self, values: dict[int, tuple[float, ...]]) -> np.ndarray:
        """Per-target array of per-record values (``{record index: values}``; NaN where a record has none)."""
        return np.array([values[t.record][t.value] if t.record in values else np.nan for t in self.targets])

    def predict(self, profile: EvidenceProfile, view: CostView = SYSTEM_EVIDENCE_VIEW) -> np.ndarray:
        """Every target's seconds under ``profile`` and ``view``.

        ``profile`` may differ from the template in any number, curve or family, but the default output
        tasks are the template's (its vocabulary); without the family (or in a view without it) they are left
        out (a plan's own output tasks are always priced).
        """
        pricer = Pricer(profile, view, self.datatype)
        ops, size = self._operations, self._bytes
        coefficient = self._item_coefficient
        if self._output_layer.any() and (profile.output_layer is None or "output_layer" not in view.curves):
            coefficient = np.where(self._output_layer, 0.0, coefficient)
        if self._accumulation.any() and not accumulation_applies(profile, view):
            coefficient = np.where(self._accumulation, 0.0, coefficient)
        processing = pricer.processing_s_of(ops, size, self._matrix, ~(self._optimizer | self._device_only))
        out = np.bincount(self._item_target, weights=coefficient * processing, minlength=len(self.targets))
        if profile.launch is not None and "launch" in view.curves and profile.launch.issue_s_per_microbatch:
            out = out + self._microbatches * profile.launch.issue_s_per_microbatch  # the host's microbatch time
        if self.messages:
            times = self._message_times(profile, view, pricer)
            out += np.bincount(self._message_target, weights=self._message_coefficient * times[self._message_index],
                               minlength=len(self.targets))
        return out

    def _message_times(self, profile: EvidenceProfile, view: CostView, pricer: Pricer) -> np.ndarray:
        """Every distinct message's seconds. A message's price reads only the profile's networks and its two
        collective families, so the last result is reused while those are the same objects (identity of
        immutable values: a fit's candidates share them with its template) and the view is the same."""
        key = (profile.networks, profile.hierarchical_collectives, profile.partitioned_p2p, view)
        last = getattr(self, "_last_messages", None)
        if last is not None and all(a is b for a, b in zip(last[0][:3], key[:3])) and last[0][3] == view:
            return last[1]
        times = np.array([pricer.message_s(m) if i < 0 else pricer.boundary_s(m, self.lowerings[i].plan)
                          for m, i in self.messages])
        self._last_messages = (key, times)
        return times

    def check(self, profile: EvidenceProfile, view: CostView = SYSTEM_EVIDENCE_VIEW) -> float:
        """The largest relative difference between :meth:`predict` and the real estimate path."""
        predicted = self.predict(profile, view)
        worst = 0.0
        device = Pricer(profile, CostView.with_curves(view.curves - {"launch"}), self.datatype)
        for i, target in enumerate(self.targets):
            lowering = self.lowerings[target.record]
            if lowering is None:  # a microbenchmark: one pass, priced without the host (see the module rules)
                real = device.work(benchmark_work(self.records[target.record])).processing_s
                worst = max(worst, abs(predicted[i] - real) / real)
                continue
            block, comp = cost_view(lowering.plan, profile, view, model=lowering.model)
            if target.what == "iteration":
                real = comp.total_s
            else:
                fields = LAYER_FORWARD if target.what == "layer_forward" else LAYER_BACKWARD
                real = sum(getattr(block, f) for f in fields)
            worst = max(worst, abs(predicted[i] - real) / real)
        return worst


def benchmark_work(record: GemmRecord | MemoryTransferRecord) -> Work:
    """The one pass a microbenchmark record runs (see the module rules)."""
    if record.kind == "gemm":
        b = BYTES_PER_ELEMENT[record.datatype]
        return Work.trusted(operations=2.0 * record.m * record.n * record.k,
                            bytes_read=float(record.m * record.n + record.n * record.k) * b,
                            bytes_written=float(record.m * record.k) * b, engine="matrix")
    return Work.trusted(operations=0.0, bytes_read=record.bytes / 2, bytes_written=record.bytes / 2, engine="vector")
