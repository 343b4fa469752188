"""Fit a revision from corpora, and the measured-evidence report that proves (or refutes) it generalizes.

``fit_revision``: read the corpora, build the fitted structure on the base
profile (:func:`harness.measurements.fit.template`), fit it, refuse the fit
when it is not a claim its data supports (a class reproduced worse than
:data:`~harness.measurements.fit.FIT_TOLERANCE_MAPE_PCT`, a parameter on a
bound, fewer targets than parameters: :class:`~harness.measurements.fit.FitRefused`),
check the fast evaluator against the real estimate path (at most
:data:`CHECK_REL` apart), and return the revision with its provenance.

``run_report``: refit from the corpora (and say whether the refit reproduces
the shipped revision's digest), estimate every iteration record with the
real estimate path under the shipped revision and the base (both views,
registered with the measurements oracle before any measured value is
released), cross-validate (leave one shape out, leave one GPU count out),
compare the check records (never fitted: component-level truth, other
targets), attribute the move from the base to
the fitted revision to its families (exact Shapley values of the mean signed
error and of the MAPE, per node class), and check the budgets.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from harness.cost.views import COST_VIEWS, profile_families
from harness.errors import HarnessError, InputError
from harness.estimate import estimate_lowering
from harness.inputs import real_path
from harness.evidence.profile import FAMILY_SECTIONS, EvidenceProfile
from harness.explain import shapley
from harness.measurements import crossval as cv
from harness.measurements.corpus import Corpus, read_corpus
from harness.measurements.design import Design
from harness.measurements.fit import (
    FitRefused,
    FitResult,
    claim_problems,
    fit_design,
    node_class,
    provenance,
    residual_summary,
    template,
)
from harness.measurements.nccl_tests import combined_sweeps
from harness.measurements.oracle import POLICY, MeasurementsOracle
from harness.vocabulary import CURVE_FAMILIES, PEAK_ONLY, SYSTEM_EVIDENCE

CHECK_REL = 1e-9
FIT_KINDS = ("iteration", "layer_pass", "gemm", "memory_transfer")


@dataclasses.dataclass(frozen=True)
class Budgets:
    """The report's budgets (the issue's acceptance figures: they are not fitted to today's numbers)."""

    one_node_mape_pct: float = 8.0  # vTrain's own profiler-based model: 8.4 % on its single-node rows
    multi_node_mape_pct: float = 10.0  # vTrain: 14.7 % on its multi-node rows
    abs_bias_pct: float = 3.0  # a revision that errs systematically in one direction is not calibrated
    evaluator_rel: float = CHECK_REL  # the fit's fast evaluator against the real estimate path


@dataclasses.dataclass(frozen=True)
class FitInputs:
    corpora: tuple[Corpus, ...]
    records: tuple  # fit records (iteration, layer_pass, gemm, memory_transfer)
    sweeps: tuple  # collective_sweep records


def load_inputs(paths: Sequence[Path | str], *, fitting: bool = True) -> FitInputs:
    """Read the corpora; a corpus is read once even if named twice (``fitting``: they must hold an
    iteration record)."""
    corpora, seen = [], set()
    for path in paths:
        key = real_path(path)
        if key in seen:
            continue
        seen.add(key)
        corpora.append(read_corpus(path))
    if not corpora:
        raise HarnessError("no measurement corpus given (--measurements FILE...)")
    records = tuple(r for c in corpora for r in c.records if r.kind in FIT_KINDS)
    ids: dict[str, str] = {}
    for c in corpora:
        for r in c.records:
            if r.id in ids:
                raise HarnessError(f"{c.path}: record id {r.id!r} also appears in {ids[r.id]}")
            ids[r.id] = c.path
    if fitting and not any(r.kind == "iteration" for r in records):
        raise InputError(", ".join(c.path for c in corpora), "kind",
                         "no iteration record to fit (the corpora hold only other kinds of record)")
    return FitInputs(tuple(corpora), records, tuple(r for c in corpora for r in c.records
                                                   if r.kind == "collective_sweep"))


@dataclasses.dataclass(frozen=True)
class FittedRevision:
    profile: EvidenceProfile
    result: FitResult
    design: Design
    template: EvidenceProfile
    evaluator_rel: float


def fit_revision(inputs: FitInputs, base: EvidenceProfile, name: str, *, layer_weight: float = 0.0,
                 benchmark_weight: float = 1.0, progress: Callable[[int], None] | None = None,
                 oracle: MeasurementsOracle | None = None, combine: str | None = None) -> FittedRevision:
    """Fit the revision ``name`` on ``base`` to the corpora (see the module rules); a fit that does not hold
    as a claim (:func:`~harness.measurements.fit.claim_problems`) is :class:`~harness.measurements.fit.FitRefused`.
    ``combine``: how repeated collective sweeps are combined (:func:`~harness.measurements.nccl_tests.combined_sweeps`;
    ``None``: they are an error)."""
    sources = ", ".join(c.path for c in inputs.corpora)
    sweeps = combined_sweeps(inputs.sweeps, combine, sources)
    skeleton = template(base, sweeps, name, source=sources)
    design = Design(inputs.records, skeleton)
    oracle = oracle or MeasurementsOracle(inputs.records)
    measured = design.per_target(dict(enumerate(oracle.training(inputs.records))))
    result = fit_design(design, skeleton, measured, layer_weight=layer_weight, benchmark_weight=benchmark_weight,
                        datatype=design.datatype, progress=progress)
    problems = claim_problems(design, result)
    if problems:
        raise FitRefused(problems, residual_summary(design, result))
    used = {c.path: sum(1 for r in c.records if r.kind in FIT_KINDS + ("collective_sweep",)) for c in inputs.corpora}
    fit = provenance(result, base, inputs.corpora, used, design.datatype, layer_weight, benchmark_weight, sweeps,
                     combine)
    profile = result.profile.model_copy(update={
        "fit": fit,
        "description": f"{name}: {base.name} refitted to measured runs ({', '.join(c.header.name for c in inputs.corpora)})",
        "provenance": (f"Fitted by 'harness evidence fit' on {base.name} (revision {base.revision()[:12]}) to the "
                       f"measurement corpora listed under fit.corpora; parameters, bounds and uncertainties under "
                       f"fit.parameters; fixed structure under fit.fixed; see docs/measured-evidence.md"),
    })
    worst = design.check(profile)
    if not worst <= CHECK_REL:
        raise HarnessError(f"the fit's evaluator and the estimate path differ by {worst:.3g} (relative) on the "
                           f"fitted revision: a bug, not a fit")
    return FittedRevision(profile, result, design, skeleton, worst)


# ------------------------------------------------------------------------------------------------- report

MOVES = ("processing_mode", *CURVE_FAMILIES)


def moves_of(fitted: EvidenceProfile) -> tuple[str, ...]:
    """The moves base -> ``fitted`` the attribution splits over: the processing mode and every curve family
    ``fitted`` defines (a family it lacks moves nothing: ``a100_measured`` lacks ``grouped_gemm``), in
    :data:`MOVES` order."""
    return ("processing_mode", *profile_families(fitted))


def hybrid(base: EvidenceProfile, fitted: EvidenceProfile, moved: frozenset[str], datatype: str) -> EvidenceProfile:
    """``base`` with the parts of ``fitted`` named in ``moved`` (processing mode, or a curve family)."""
    update: dict[str, Any] = {}
    if "processing_mode" in moved:
        update["processing_mode"] = fitted.processing_mode
    for family, attribute in (("matrix", "matrix"), ("vector", "vector")):
        if family in moved:
            engines = dict(getattr(base, attribute))
            engines[datatype] = engines[datatype].model_copy(update={
                "operation_size_efficiency": getattr(fitted, attribute)[datatype].operation_size_efficiency})
            update[attribute] = engines
    if "memory" in moved:
        update["memory_tier1"] = base.memory_tier1.model_copy(
            update={"transfer_size_efficiency": fitted.memory_tier1.transfer_size_efficiency})
    tiers = []
    for b, f in zip(base.networks, fitted.networks):
        tier = f.model_copy(update={"measured_collectives": None}) if "network" in moved else b
        if "collective_curves" in moved:
            tier = tier.model_copy(update={"measured_collectives": f.measured_collectives})
        tiers.append(tier)
    update["networks"] = tuple(tiers)
    for family, attribute in FAMILY_SECTIONS.items():
        if family in moved:
            update[attribute] = getattr(fitted, attribute)
    return base.model_copy(update=update)


def attribution(design: Design, base: EvidenceProfile, fitted: EvidenceProfile, measured: np.ndarray,
                island: int = 8) -> dict[str, dict[str, dict[str, float]]]:
    """Shapley split of the move base -> fitted, per node class: ``{class: {metric: {move: pp}}}``
    for the mean signed error (``bias_pct``) and the MAPE (``mape_pct``) of the iteration records."""
    iterations = cv.iteration_targets(design) & np.isfinite(measured)
    classes = cv.target_node_classes(design, island)
    values: dict[frozenset[str], np.ndarray] = {}
    moves = moves_of(fitted)
    for size in range(len(moves) + 1):
        for moved in itertools.combinations(moves, size):
            key = frozenset(moved)
            values[key] = cv.errors_pct(design.predict(hybrid(base, fitted, key, design.datatype)),
                                        np.where(iterations, measured, 1.0))
    out = {}
    for c in ("one_node", "multi_node"):
        mask = iterations & (classes == c)
        if not mask.any():
            continue
        out[c] = {"bias_pct": shapley({k: float(np.mean(v[mask])) for k, v in values.items()}, moves),
                  "mape_pct": shapley({k: float(np.mean(np.abs(v[mask]))) for k, v in values.items()}, moves)}
    return out


def _metrics_json(m: cv.Metrics) -> dict[str, Any]:
    return dataclasses.asdict(m)


def describe(record) -> str:
    """A record's configuration in one line (no name: its shape and layout)."""
    m, e = record.model, record.execution
    return (f"h{m.hidden} heads{m.attention_heads} blocks{m.blocks} seq{m.sequence_length}, {e.processors} GPUs "
            f"TP{e.tensor_parallel} PP{e.pipeline_parallel} DP{e.data_parallel} mb{e.microbatch} gb{e.global_batch}")


def check_records(checks: FitInputs, template_profile: EvidenceProfile, base: EvidenceProfile,
                  fitted: EvidenceProfile) -> list[dict[str, Any]]:
    """Records compared but never fitted (component-level truth, other targets): measured vs base and fitted."""
    if not checks.records:
        return []
    design = Design(checks.records, template_profile)
    oracle = MeasurementsOracle(checks.records)
    predicted = {label: design.predict(profile) for label, profile in (("base", base), ("fitted", fitted))}
    rows = []
    for t_index, target in enumerate(design.targets):
        record = checks.records[target.record]
        for profile in (base, fitted):
            for v in (PEAK_ONLY, SYSTEM_EVIDENCE):
                oracle.register_estimate(record.id, profile.name, v)
        value = oracle.compare(record, fitted.name)[target.value]
        row = {"id": record.id, "what": target.what, "note": record.note, "measured_s": value}
        for label, p in predicted.items():
            row[f"{label}_s"] = float(p[t_index])
            row[f"{label}_error_pct"] = 100 * (float(p[t_index]) - value) / value
        rows.append(row)
    return rows


def run_report(inputs: FitInputs, base: EvidenceProfile, shipped: EvidenceProfile | None, name: str, *,
               checks: FitInputs | None = None, budgets: Budgets = Budgets(),
               progress: Callable[[str], None] | None = None, combine: str | None = None) -> dict[str, Any]:
    """The measured-evidence report (see the module rules); ``violations`` lists the broken budgets."""
    say = progress or (lambda _message: None)
    oracle = MeasurementsOracle(inputs.records)
    say("fitting the revision from the corpora")
    refit = fit_revision(inputs, base, name, oracle=oracle, combine=combine)
    fitted = shipped or refit.profile
    design = refit.design
    iterations = [i for i, r in enumerate(inputs.records) if r.kind == "iteration"]

    say("estimating every iteration record (real estimate path) before any measured value is released")
    estimates: dict[str, np.ndarray] = {}
    for label, profile, view in (("peak_only", fitted, PEAK_ONLY), ("base", base, SYSTEM_EVIDENCE),
                                 ("fitted", fitted, SYSTEM_EVIDENCE)):
        predicted = np.full(len(design.targets), np.nan)
        for t_index, target in enumerate(design.targets):
            if target.what != "iteration":
                continue
            est = estimate_lowering(design.lowerings[target.record], profile, (COST_VIEWS[PEAK_ONLY],
                                                                                COST_VIEWS[SYSTEM_EVIDENCE]))
            for v in est.views:
                oracle.register_estimate(inputs.records[target.record].id, profile.name, v)
            predicted[t_index] = est.views[view].total_s
        estimates[label] = predicted
    released = {i: oracle.compare(inputs.records[i], fitted.name) for i in iterations}
    measured = design.per_target(released)

    say("cross-validating")
    cvs = [cv.cross_validate(design, refit.template, oracle, grouping,
                             progress=lambda g, grouping=grouping: say(f"  {grouping}: leaving out {g}"))
           for grouping in cv.GROUPINGS + cv.EXTRA_GROUPINGS]

    say("attributing the move from the base to the fitted revision (Shapley over its families)")
    moves = attribution(design, base, fitted, measured)

    say("comparing the check records (never fitted)")
    checked = check_records(checks, refit.template, base, fitted) if checks else []

    in_sample = {label: {c: _metrics_json(m) for c, m in cv.class_metrics(design, p, measured).items()}
                 for label, p in estimates.items()}
    cross = {}
    for result in cvs:
        worst = cv.worst_rows(design, result.predicted_s, result.measured_s, count=8)
        cross[result.grouping] = {
            "classes": {c: _metrics_json(m) for c, m in cv.class_metrics(design, result.predicted_s,
                                                                         result.measured_s).items()},
            "groups": {g: {c: _metrics_json(m) for c, m in per.items()}
                       for g, per in cv.group_metrics(design, result).items()},
            "worst_rows": [{"id": inputs.records[design.targets[i].record].id,
                            "configuration": describe(inputs.records[design.targets[i].record]),
                            "measured_s": float(result.measured_s[i]), "predicted_s": float(result.predicted_s[i]),
                            "error_pct": e} for i, e in worst],
            "fits": result.fits,
            "not_enough_data": {g: cv.NOT_ENOUGH_DATA for g in result.not_enough_data},
        }

    violations = []
    for grouping in cv.GROUPINGS:  # the budgets; the extra groupings are reported, not budgeted
        data = cross[grouping]
        for c, limit in (("one_node", budgets.one_node_mape_pct), ("multi_node", budgets.multi_node_mape_pct)):
            m = data["classes"][c]
            if not m["count"]:
                violations.append(f"{grouping} cross-validation, {c}: not enough data (no held-out {c} record "
                                  f"was predicted: the {limit} % budget cannot be checked)")
            if m["count"] and not m["mape_pct"] <= limit:
                violations.append(f"{grouping} cross-validation, {c}: MAPE {m['mape_pct']:.2f} % exceeds {limit} %")
            if m["count"] and not abs(m["bias_pct"]) <= budgets.abs_bias_pct:
                violations.append(f"{grouping} cross-validation, {c}: bias {m['bias_pct']:+.2f} % is beyond "
                                  f"+-{budgets.abs_bias_pct} %")
    reproduces = shipped is None or shipped.revision() == refit.profile.revision()
    if not reproduces:
        violations.append(f"the refit's revision {refit.profile.revision()[:12]} differs from the shipped "
                          f"{shipped.revision()[:12]}")
    if not refit.evaluator_rel <= budgets.evaluator_rel:
        violations.append(f"fast evaluator vs estimate path: {refit.evaluator_rel:.3g} > {budgets.evaluator_rel}")

    return {
        "schema_name": "blueprinting.measured-evidence-report", "schema_version": 0,
        "profile": {"name": fitted.name, "revision": fitted.revision(), "base": base.name,
                    "base_revision": base.revision(), "refit_revision": refit.profile.revision(),
                    "refit_reproduces_shipped": reproduces},
        "corpora": [{"path": c.path, "sha256": c.sha256, "name": c.header.name, "records": len(c.records)}
                    for c in inputs.corpora],
        "fit": {"parameters": [p.model_dump(mode="json") for p in refit.profile.fit.parameters],
                "cost": refit.result.cost, "evaluations": refit.result.evaluations, "status": refit.result.status,
                "evaluator_max_rel_difference": refit.evaluator_rel},
        "isolation": {"policy": POLICY, "events": len(oracle.events),
                      "first_events": [list(e) for e in oracle.events[:5]]},
        "in_sample": in_sample,
        "cross_validation": cross,
        "attribution_base_to_fitted": moves,
        "checks": checked,
        "check_corpora": [{"path": c.path, "sha256": c.sha256, "name": c.header.name, "records": len(c.records)}
                          for c in (checks.corpora if checks else ())],
        "budgets": dataclasses.asdict(budgets),
        "violations": violations,
        "rows": [{"id": inputs.records[design.targets[i].record].id, "class": node_class(
                      inputs.records[design.targets[i].record], 8),
                  "shape": cv.group_key(inputs.records[design.targets[i].record], "shape"),
                  "processors": inputs.records[design.targets[i].record].execution.processors,
                  "measured_s": float(measured[i]),
                  **{f"{label}_s": float(p[i]) for label, p in estimates.items()},
                  # None where a grouping never holds the row out (one-node rows under multi_node)
                  **{f"cv_{r.grouping}_s": float(r.predicted_s[i]) if math.isfinite(r.predicted_s[i]) else None
                     for r in cvs}}
                 for i in range(len(design.targets)) if math.isfinite(measured[i])],
    }

