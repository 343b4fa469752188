"""Grouped cross-validation of a fit: does the revision hold on runs it was not fitted on?

Groups are configuration properties, never names:

- ``shape``: the model shape (hidden, heads, head size, feedforward,
  sequence length, blocks): leave one shape out;
- ``processors``: the GPU count (TP x PP x DP): leave one GPU count out;
- harder tests (:data:`EXTRA_GROUPINGS`, reported without a budget): leave
  one hidden size out (``hidden``), one block count out (``blocks``), one
  TP degree out (``tensor_parallel``), one microbatch size out
  (``microbatch``), and ``multi_node``: fit the one-node runs only and
  predict every multi-node run (one-node runs are never held out there).

Rules: for each group, the revision is refitted on every other record (the
same structure, bounds, start and objective as the shipped fit; the
measurements oracle releases the training records' values only), the
held-out records are predicted under both views and registered, and only
then are their measured seconds released for the comparison; each iteration
record is held out exactly once. Metrics (per node class ``one_node`` /
``multi_node``, and per group): MAPE ``mean |e|`` and bias ``mean e`` of ``e
= 100 (predicted - measured) / measured``, and the worst rows. Layer-pass
records and microbenchmarks are never held out (they are component-level
checks and inputs, reported separately). A fold with fewer training iteration
records than fitted parameters is not fitted (:func:`fold_problem`): its
held-out records get no prediction and the report says
:data:`NOT_ENOUGH_DATA`, never a figure.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from harness.cost.views import COST_VIEWS
from harness.measurements.design import Design
from harness.measurements.fit import PARAMETERS, fit_design, node_class
from harness.measurements.oracle import MeasurementsOracle
from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE

GROUPINGS = ("shape", "processors")  # the budgets apply to these
EXTRA_GROUPINGS = ("hidden", "blocks", "tensor_parallel", "microbatch", "multi_node")
_LABELS = {
    "processors": lambda r: f"{r.execution.processors} GPUs",
    "hidden": lambda r: f"hidden {r.model.hidden}",
    "blocks": lambda r: f"{r.model.blocks} blocks",
    "tensor_parallel": lambda r: f"TP {r.execution.tensor_parallel}",
    "microbatch": lambda r: f"microbatch {r.execution.microbatch}",
    # one-node runs are never held out (""): fit them only, predict the multi-node runs
    "multi_node": lambda r: "multi-node runs",
}


def group_key(record, grouping: str, island: int = 8) -> str:
    """The record's group under ``grouping`` (a label built from the configuration; "" is never held out)."""
    if grouping == "shape":
        m = record.model
        return (f"h{m.hidden} ff{m.feedforward} heads{m.attention_heads}x{m.head_size} seq{m.sequence_length} "
                f"blocks{m.blocks}")
    if grouping == "multi_node" and node_class(record, island) == "one_node":
        return ""
    if grouping in _LABELS:
        return _LABELS[grouping](record)
    raise ValueError(f"unknown grouping {grouping!r} (known: {', '.join(GROUPINGS + EXTRA_GROUPINGS)})")


@dataclasses.dataclass(frozen=True)
class Metrics:
    """Error statistics of a set of predictions, percent."""

    count: int
    mape_pct: float
    bias_pct: float
    max_abs_pct: float

    @classmethod
    def of(cls, errors: np.ndarray) -> "Metrics":
        if len(errors) == 0:
            return cls(0, 0.0, 0.0, 0.0)
        return cls(len(errors), float(np.mean(np.abs(errors))), float(np.mean(errors)), float(np.max(np.abs(errors))))


def errors_pct(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return 100.0 * (predicted - measured) / measured


@dataclasses.dataclass(frozen=True)
class CrossValidation:
    """Held-out predictions of every iteration target under one grouping."""

    grouping: str
    groups: tuple[str, ...]  # per target (iteration targets; others "")
    predicted_s: np.ndarray  # per target, system_evidence (NaN for targets that are not held out)
    measured_s: np.ndarray  # per target, released after the held-out predictions (NaN elsewhere)
    fits: dict[str, dict[str, float]]  # group -> fitted values
    not_enough_data: tuple[str, ...] = ()  # groups whose fold was not fitted (see :func:`fold_problem`)


#: What a fold reports instead of a figure when it cannot be fitted.
NOT_ENOUGH_DATA = "not enough data for this fold"


def fold_problem(design: Design, training: list[int], parameters: int) -> str | None:
    """Why a fold cannot be fitted (``None``: it can): it must train on at least as many iteration records as
    the fit has parameters (fewer: the fold's parameters are whatever the optimizer started from)."""
    count = sum(1 for i in training if design.records[i].kind == "iteration")
    if count < parameters:
        return f"{NOT_ENOUGH_DATA}: {count} training iteration records for {parameters} parameters"
    return None


def iteration_targets(design: Design) -> np.ndarray:
    return np.array([t.what == "iteration" for t in design.targets])


def cross_validate(design: Design, template, oracle: MeasurementsOracle, grouping: str, *, island: int = 8,
                   datatype: str = "float16", progress: Callable[[str], None] | None = None,
                   **fit_options) -> CrossValidation:
    """Leave each group out in turn (see the module rules)."""
    iterations = iteration_targets(design)
    groups = np.array([group_key(design.records[t.record], grouping, island) if it else ""
                       for t, it in zip(design.targets, iterations)])
    predicted = np.full(len(design.targets), np.nan)
    measured = np.full(len(design.targets), np.nan)
    fits = {}
    skipped: list[str] = []
    for group in sorted(set(groups) - {""}):
        if progress is not None:
            progress(group)
        held = groups == group
        held_records = sorted({design.targets[i].record for i in np.flatnonzero(held)})
        training = sorted({t.record for t, h in zip(design.targets, held) if not h} - set(held_records))
        if fold_problem(design, training, len(fit_options.get("parameters", PARAMETERS))):
            skipped.append(group)
            continue
        values = dict(zip(training, oracle.training(design.records[i] for i in training)))
        result = fit_design(design, template, design.per_target(values), island=island, datatype=datatype,
                            **fit_options)
        estimates = {view: design.predict(result.profile, COST_VIEWS[view]) for view in (PEAK_ONLY, SYSTEM_EVIDENCE)}
        for view in estimates:
            for i in held_records:
                oracle.register_estimate(design.records[i].id, f"cv:{grouping}:{group}", view)
        predicted[held] = estimates[SYSTEM_EVIDENCE][held]
        released = {i: oracle.compare(design.records[i], f"cv:{grouping}:{group}") for i in held_records}
        measured[held] = design.per_target(released)[held]
        fits[group] = result.values
    return CrossValidation(grouping, tuple(groups), predicted, measured, fits, tuple(skipped))


def target_node_classes(design: Design, island: int = 8) -> np.ndarray:
    """Per target, the node class of an iteration target ("" for layer passes and microbenchmarks, which have
    no layout of processors)."""
    return np.array([node_class(design.records[t.record], island) if t.what == "iteration" else ""
                     for t in design.targets])


def _valid(design: Design, predicted: np.ndarray, measured: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    chosen = iteration_targets(design) & np.isfinite(predicted) & np.isfinite(measured)
    return chosen if mask is None else chosen & mask


def class_metrics(design: Design, predicted: np.ndarray, measured: np.ndarray, island: int = 8,
                  mask: np.ndarray | None = None) -> dict[str, Metrics]:
    """Metrics per node class over the iteration targets with both values (and ``mask``)."""
    chosen = _valid(design, predicted, measured, mask)
    classes = target_node_classes(design, island)
    e = errors_pct(np.where(chosen, predicted, 1.0), np.where(chosen, measured, 1.0))
    return {c: Metrics.of(e[chosen & (classes == c)]) for c in ("one_node", "multi_node")}


def group_metrics(design: Design, cv: CrossValidation, island: int = 8) -> dict[str, dict[str, Metrics]]:
    """Metrics per held-out group, per node class."""
    out = {}
    groups = np.array(cv.groups)
    for group in sorted(set(cv.groups) - {""}):
        out[group] = {k: v for k, v in class_metrics(design, cv.predicted_s, cv.measured_s, island,
                                                     groups == group).items() if v.count}
    return out


def worst_rows(design: Design, predicted: np.ndarray, measured: np.ndarray, count: int = 5,
               mask: np.ndarray | None = None) -> list[tuple[int, float]]:
    """``(target index, error %)`` of the largest absolute errors among iteration targets."""
    chosen = _valid(design, predicted, measured, mask)
    e = errors_pct(np.where(chosen, predicted, 1.0), np.where(chosen, measured, 1.0))
    order = sorted(np.flatnonzero(chosen), key=lambda i: -abs(e[i]))
    return [(int(i), float(e[i])) for i in order[:count]]
