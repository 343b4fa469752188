"""Held-out tests of a ``megatron-core`` revision (:mod:`harness.measurements.runs_fit`): leave one model, one
scale, one software release out.

Groups are configuration properties read from the records, never names (:func:`group_key`):

- ``model``: the model's shape without its depth (hidden, feedforward, heads, key/value heads, head size,
  vocabulary, MLP, norm): a truncated proxy of a model is the model;
- ``scale``: the GPU count;
- ``release``: the software release the run used (the record's ``software: ...`` note, written by
  ``evidence import runs`` from the row's ``software``).

Rules: for each group the structure is refitted on every other record (the same bounds, start, objective;
the parameters those training records exercise, :func:`~harness.measurements.runs_fit.exercised`; the
measurements oracle releases the training records' values only); the held-out records are estimated under
both views and registered with the oracle, then their measured seconds are released. A held-out record
that exercises a parameter no training record exercises (an fp8 row when every fp8 row is held out) gets
no prediction: it is counted as ``not_enough_data`` with the parameter named, never given the value the
optimizer started from. A fold with fewer training records than parameters is not fitted (the same).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from harness.cost.views import COST_VIEWS
from harness.measurements.crossval import Metrics, errors_pct
from harness.measurements.fit import Parameter
from harness.measurements.oracle import MeasurementsOracle
from harness.measurements.runs_fit import RunsDesign, exercised, fit_records
from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE

GROUPINGS = ("model", "scale", "release")
SOFTWARE = "software: "


def release_of(record) -> str:
    """The software release of a runs record (the last part of its note), or "" when it states none."""
    note = record.note or ""
    return note[note.index(SOFTWARE) + len(SOFTWARE):] if SOFTWARE in note else ""


def group_key(record, grouping: str) -> str:
    """The record's group under ``grouping`` (module rules)."""
    m, e = record.model, record.execution
    if grouping == "model":
        return (f"h{m.hidden} ff{m.feedforward} heads{m.attention_heads}/{m.kv_heads or m.attention_heads}"
                f"x{m.head_size or m.hidden // m.attention_heads} vocab{m.vocabulary} {m.mlp or 'gelu'}")
    if grouping == "scale":
        return f"{e.processors} GPUs"
    if grouping == "release":
        return release_of(record)
    raise ValueError(f"unknown grouping {grouping!r} (known: {', '.join(GROUPINGS)})")


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Held-out predictions of every record under one grouping."""

    grouping: str
    groups: tuple[str, ...]  # per record
    predicted_s: np.ndarray  # per record, system_evidence (NaN: not predicted)
    measured_s: np.ndarray  # per record (NaN: not predicted, so not released)
    fits: dict[str, dict[str, float]]  # group -> fitted values
    not_enough_data: dict[str, str]  # group -> why some or all of its records got no prediction


def held_out(design: RunsDesign, oracle: MeasurementsOracle, grouping: str, parameters: Sequence[Parameter],
             island: int, progress: Callable[[str], None] | None = None) -> HeldOut:
    """Leave each group out in turn (module rules)."""
    records = design.records
    groups = tuple(group_key(r, grouping) for r in records)
    predicted = np.full(len(records), np.nan)
    measured = np.full(len(records), np.nan)
    fits: dict[str, dict[str, float]] = {}
    missing: dict[str, str] = {}
    for group in sorted(set(groups)):
        if progress is not None:
            progress(group)
        held = [i for i, g in enumerate(groups) if g == group]
        training = [i for i, g in enumerate(groups) if g != group]
        fold = tuple(p for p in parameters if any(exercised(p, records[i]) for i in training))
        if not training:
            missing[group] = "every record is in this group: nothing to fit on"
            continue
        if len(training) < len(fold):
            missing[group] = f"{len(training)} training records for {len(fold)} parameters"
            continue
        predictable = [i for i in held if all(p in fold for p in parameters if exercised(p, records[i]))]
        if len(predictable) < len(held):
            unfitted = sorted({p.name for i in held for p in parameters if exercised(p, records[i]) and p not in fold})
            missing[group] = (f"{len(held) - len(predictable)} of {len(held)} held-out records exercise "
                              f"{', '.join(unfitted)}, which no training record does")
        if not predictable:
            continue
        values = np.full(len(records), np.nan)
        values[training] = [v[0] for v in oracle.training(records[i] for i in training)]
        result = fit_records(design, values, fold, island)
        label = f"cv:{grouping}:{group}"
        estimates = {view: design.predict(result.profile, COST_VIEWS[view]) for view in (PEAK_ONLY, SYSTEM_EVIDENCE)}
        for view in estimates:
            for i in predictable:
                oracle.register_estimate(records[i].id, label, view)
        for i in predictable:
            predicted[i] = estimates[SYSTEM_EVIDENCE][i]
            measured[i] = oracle.compare(records[i], label)[0]
        fits[group] = result.values
    return HeldOut(grouping, groups, predicted, measured, fits, missing)


def metrics_of(predicted: np.ndarray, measured: np.ndarray) -> Metrics:
    """The error statistics of the rows where both the prediction and the measurement are finite (a row with no
    prediction is not counted); the arithmetic is crossval's, the one definition of MAPE and signed bias."""
    chosen = np.isfinite(predicted) & np.isfinite(measured)
    return Metrics.of(errors_pct(predicted[chosen], measured[chosen]))
