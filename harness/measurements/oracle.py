"""The measurements oracle: measured seconds, released behind the same gate as Calculon and the paper.

The estimate path never sees a measured value (it cannot import this
package: import-linter contract). Measured seconds leave the oracle in two
ways only, each logged in order:

- ``training(records)``: a fit asks for the values of the records it fits on
  (its training set; a cross-validation fold's held-out records are never
  among them);
- ``compare(record)``: a comparison asks for the values of one record, which
  is released only when both views (``peak_only``, ``system_evidence``) of
  that record under the profile being compared have been registered with
  :meth:`register_estimate`; otherwise :class:`OracleIsolationError`.

A record's values are a tuple of seconds: ``(iteration,)`` for an iteration
record, ``(forward, backward)`` for a layer_pass record, ``(seconds,)`` for a
microbenchmark (gemm, memory_transfer).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from harness.errors import OracleIsolationError
from harness.measurements.corpus import GemmRecord, IterationRecord, LayerPassRecord, MemoryTransferRecord
from harness.vocabulary import VIEWS

POLICY = ("A record's measured seconds are released for comparison only after both estimates (" + ", ".join(VIEWS)
          + ") of it under the compared profile exist; a fit receives the values of its training records only "
          "(never a held-out record's); the estimate path cannot import measurement code (import-linter contract).")


def measured_values(record: IterationRecord | LayerPassRecord | GemmRecord | MemoryTransferRecord) -> tuple[float, ...]:
    """The record's measured seconds, in the order of its design targets (see the module rules)."""
    if record.kind == "iteration":
        return (record.measured_iteration_s,)
    if record.kind == "layer_pass":
        return (record.measured_forward_s, record.measured_backward_s)
    return (record.measured_s,)  # a microbenchmark: gemm, memory_transfer


@dataclasses.dataclass
class MeasurementsOracle:
    """Measured seconds of a set of records, released by the rules of the module."""

    records: tuple[IterationRecord | LayerPassRecord, ...]
    estimated: dict[tuple[str, str], set[str]] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def register_estimate(self, record_id: str, profile: str, view: str) -> None:
        self.estimated.setdefault((record_id, profile), set()).add(view)
        self.events.append(("estimate", f"{record_id}:{profile}:{view}"))

    def training(self, records: Iterable[IterationRecord | LayerPassRecord]) -> list[tuple[float, ...]]:
        records = list(records)
        self.events.append(("training", f"{len(records)} records"))
        return [measured_values(r) for r in records]

    def compare(self, record: IterationRecord | LayerPassRecord, profile: str) -> tuple[float, ...]:
        missing = set(VIEWS) - self.estimated.get((record.id, profile), set())
        if missing:
            raise OracleIsolationError(f"record {record.id}: measured seconds requested before its "
                                       f"{', '.join(sorted(missing))} estimate(s) under {profile} exist")
        self.events.append(("measured", f"{record.id}:{profile}"))
        return measured_values(record)
