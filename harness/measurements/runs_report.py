"""``harness evidence modern-report``: the megatron-core revisions refitted, in sample and held out.

For each shipped revision of :data:`REVISIONS` (the command that fitted it, as data): refit it from its
committed corpus (and say whether the refit reproduces the shipped digest), estimate every record under the
base (data-sheet) profile and the shipped revision (both views registered with the measurements oracle
before any measured value is released), hold out each model, each scale (GPU count) and each software
release in turn (:mod:`harness.measurements.runs_crossval`), and measure the release drift: per release, the
in-sample signed error, and the MAPE left if each release had its own revision (its rows' mean log error
removed: what a per-release revision would absorb). Budgets (:data:`BUDGETS`, the issue's, not today's
numbers): leave one model out, MAPE and the absolute signed bias; a budget whose fold cannot be predicted
is ``unchecked`` (said, never counted as met).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from harness.cost.views import COST_VIEWS
from harness.errors import HarnessError, InputError
from harness.evidence.profile import load_profile
from harness.measurements.experiment import load_inputs
from harness.measurements.oracle import MeasurementsOracle
from harness.measurements.runs_crossval import GROUPINGS, group_key, held_out, metrics_of, release_of
from harness.measurements.runs_fit import fit_runs_revision, island_of
from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE


@dataclasses.dataclass(frozen=True)
class RevisionSpec:
    """How a shipped megatron-core revision was fitted (the ``evidence fit`` options, docs/modern-evidence.md)."""

    base: str
    corpus: str  # file name in the corpora directory
    parameters: tuple[str, ...] | None = None  # None: every parameter the records exercise
    fixed_from: str | None = None
    fixed: tuple[str, ...] = ()


REVISIONS = {
    "b200_measured": RevisionSpec("b200", "runs-b200.jsonl"),
    "h100_measured": RevisionSpec("h100_sxm_80g", "runs-h100_sxm_80g.jsonl", ("matrix_max_efficiency", "matrix_float8_max_efficiency", "grouped_gemm_half_size")),
    "gb200_measured": RevisionSpec("gb200_nvl72", "runs-gb200.jsonl", fixed_from="b200_measured",
                                   fixed=("matrix_max_efficiency", "nvlink_efficiency")),
}


@dataclasses.dataclass(frozen=True)
class Budget:
    mape_pct: float
    abs_bias_pct: float | None


#: Held out, leave one model out (issue 22): H100 and B200 MAPE <= 10 %, signed bias within +-3 %; GB200 15 %.
BUDGETS = {"h100_measured": Budget(10.0, 3.0), "b200_measured": Budget(10.0, 3.0), "gb200_measured": Budget(15.0, None)}


def refit(name: str, corpora_dir: Path):
    """The revision ``name`` refitted by its :data:`REVISIONS` entry from ``corpora_dir``; its corpus must be the
    one the shipped revision names (SHA-256)."""
    if name not in REVISIONS:
        raise InputError("<command line>", "--profiles", f"{name!r} is not a megatron-core revision (known: "
                                                         f"{', '.join(REVISIONS)})")
    spec = REVISIONS[name]
    path = Path(corpora_dir) / spec.corpus
    inputs = load_inputs([path])
    shipped = load_profile(name)
    named = {c.file: c.sha256 for c in (shipped.fit.corpora if shipped.fit else ())}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if named.get(spec.corpus) != digest:
        raise HarnessError(f"{path}: not the corpus {name} was fitted on (SHA-256 {digest[:12]}, the revision names "
                           f"{named.get(spec.corpus, 'another file')[:12]})")
    records = [r for r in inputs.records if r.kind == "iteration"]
    sibling = load_profile(spec.fixed_from) if spec.fixed_from else None
    revision = fit_runs_revision(inputs.corpora, records, load_profile(spec.base), name,
                                 parameters=spec.parameters, fixed_from=sibling, fixed=spec.fixed)
    return shipped, revision


def release_drift(records, predicted: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    """Per release: rows, in-sample signed error; and the MAPE with each release's mean log error removed."""
    releases = [release_of(r) for r in records]
    log_error = np.log(predicted / measured)
    per, absorbed = {}, np.empty(len(records))
    for release in sorted(set(releases)):
        mask = np.array([x == release for x in releases])
        shift = float(np.mean(log_error[mask]))
        absorbed[mask] = 100 * (np.exp(log_error[mask] - shift) - 1)
        per[release] = {"count": int(mask.sum()), **dataclasses.asdict(metrics_of(predicted[mask], measured[mask])),
                        "per_release_scale": math.exp(-shift)}
    return {"releases": per, "mape_with_per_release_revisions_pct": float(np.mean(np.abs(absorbed)))}


def profile_report(name: str, corpora_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    say(f"{name}: refitting from its corpus")
    shipped, revision = refit(name, corpora_dir)
    design = revision.design
    records = design.records
    base = load_profile(REVISIONS[name].base)
    oracle = MeasurementsOracle(records)
    estimates = {}
    for label, profile, view in (("peak_only", base, PEAK_ONLY), ("base", base, SYSTEM_EVIDENCE),
                                 ("fitted", shipped, SYSTEM_EVIDENCE)):
        estimates[label] = design.predict(profile, COST_VIEWS[view])
    for profile in (base, shipped):
        for view in (PEAK_ONLY, SYSTEM_EVIDENCE):
            for record in records:
                oracle.register_estimate(record.id, profile.name, view)
    measured = np.array([oracle.compare(r, shipped.name)[0] for r in records])
    island = island_of(base)
    folds = {}
    for grouping in GROUPINGS:
        result = held_out(design, oracle, grouping, revision.parameters, island,
                          progress=lambda g, grouping=grouping: say(f"  {name} {grouping}: leaving out {g}"))
        groups = np.array(result.groups)
        folds[grouping] = {
            "all": dataclasses.asdict(metrics_of(result.predicted_s, result.measured_s)),
            "groups": {g: dataclasses.asdict(metrics_of(result.predicted_s[groups == g], result.measured_s[groups == g]))
                       for g in sorted(set(result.groups))},
            "fits": result.fits, "not_enough_data": result.not_enough_data,
            "predicted_s": [None if math.isnan(v) else float(v) for v in result.predicted_s]}
    budget = BUDGETS[name]
    lomo = folds["model"]["all"]
    violations, unchecked = [], []
    if not lomo["count"]:
        unchecked.append(f"{name}: leave one model out predicts no record ({folds['model']['not_enough_data']}): "
                         f"the {budget.mape_pct} % budget cannot be checked")
    else:
        if not lomo["mape_pct"] <= budget.mape_pct:
            violations.append(f"{name}: leave one model out MAPE {lomo['mape_pct']:.2f} % exceeds {budget.mape_pct} %")
        if budget.abs_bias_pct is not None and not abs(lomo["bias_pct"]) <= budget.abs_bias_pct:
            violations.append(f"{name}: leave one model out bias {lomo['bias_pct']:+.2f} % is beyond "
                              f"+-{budget.abs_bias_pct} %")
        if folds["model"]["not_enough_data"]:
            unchecked.append(f"{name}: leave one model out leaves records unpredicted: "
                             f"{folds['model']['not_enough_data']}")
    reproduces = shipped.revision() == revision.profile.revision()
    if not reproduces:
        violations.append(f"{name}: the refit's revision {revision.profile.revision()[:12]} differs from the shipped "
                          f"{shipped.revision()[:12]}")
    return {
        "profile": {"name": name, "revision": shipped.revision(), "base": base.name, "base_revision": base.revision(),
                    "refit_revision": revision.profile.revision(), "refit_reproduces_shipped": reproduces},
        "parameters": [p.model_dump(mode="json") for p in shipped.fit.parameters],
        "fixed": list(shipped.fit.fixed),
        "in_sample": {label: dataclasses.asdict(metrics_of(p, measured)) for label, p in estimates.items()},
        "held_out": folds,
        "release_drift": release_drift(records, estimates["fitted"], measured),
        "budget": dataclasses.asdict(budget), "violations": violations, "unchecked": unchecked,
        "rows": [{"id": r.id, "note": r.note, "model": group_key(r, "model"), "scale": group_key(r, "scale"),
                  "release": release_of(r), "measured_s": float(measured[i]),
                  **{f"{label}_s": float(p[i]) for label, p in estimates.items()},
                  **{f"cv_{g}_s": folds[g]["predicted_s"][i] for g in GROUPINGS}}
                 for i, r in enumerate(records)],
    }


def modern_report(names, corpora_dir: Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    say = progress or (lambda _message: None)
    reports = [profile_report(name, Path(corpora_dir), say) for name in names]
    return {"schema_name": "blueprinting.modern-evidence-report", "schema_version": 0, "revisions": reports,
            "violations": [v for r in reports for v in r["violations"]],
            "unchecked": [u for r in reports for u in r["unchecked"]]}


def _cell(m: dict[str, Any]) -> str:
    return f"n={m['count']:3d}  MAPE {m['mape_pct']:6.2f} %  bias {m['bias_pct']:+7.2f} %" if m["count"] else "n=  0"


def print_modern_report(report: dict[str, Any]) -> None:
    for r in report["revisions"]:
        p = r["profile"]
        print(f"{p['name']} (base {p['base']}): revision {p['revision'][:12]}, refit reproduces it: "
              f"{p['refit_reproduces_shipped']}")
        for q in r["parameters"]:
            print(f"  {q['name']:30s} {q['value']:g} +- {q['standard_error']}")
        for label, m in r["in_sample"].items():
            print(f"  in sample   {label:10s} {_cell(m)}")
        for grouping, fold in r["held_out"].items():
            print(f"  held out    {grouping:10s} {_cell(fold['all'])}")
            for g, m in fold["groups"].items():
                if m["count"] or g not in fold["not_enough_data"]:
                    print(f"      {g[:58]:58s} {_cell(m)}")
            for g, why in fold["not_enough_data"].items():
                print(f"      {g[:58]:58s} not predicted: {why}")
        drift = r["release_drift"]
        print(f"  release drift: MAPE with a revision per release {drift['mape_with_per_release_revisions_pct']:.2f} %")
        for release, m in drift["releases"].items():
            print(f"      {release[:58]:58s} {_cell(m)}  scale {m['per_release_scale']:.4f}")
    for line in report["violations"]:
        print(f"BUDGET BROKEN: {line}")
    for line in report["unchecked"]:
        print(f"budget not checkable: {line}")


def write_modern_plots(report: dict[str, Any], directory: Path) -> list[Path]:
    """``modern_predicted_vs_measured.png``: per revision (rows) the base profile, the fitted revision in sample,
    and the structure held out (leave one model out, leave one release out), log-log with the diagonal."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from harness.measurements.plots import _save

    panels = (("base_s", "data-sheet base"), ("fitted_s", "fitted, in sample"),
              ("cv_model_s", "held out: leave one model out"), ("cv_release_s", "held out: leave one release out"))
    revisions = report["revisions"]
    fig = Figure(figsize=(4 * len(panels), 3.6 * len(revisions)))
    FigureCanvasAgg(fig)
    for row, r in enumerate(revisions):
        for column, (key, title) in enumerate(panels):
            ax = fig.add_subplot(len(revisions), len(panels), row * len(panels) + column + 1)
            points = [(x["measured_s"], x[key]) for x in r["rows"] if x.get(key) is not None]
            if points:
                measured, predicted = np.array(points).T
                ax.scatter(measured, predicted, s=14)
                low, high = min(measured.min(), predicted.min()) * 0.8, max(measured.max(), predicted.max()) * 1.25
                ax.plot([low, high], [low, high], color="black", linewidth=0.8)
                for factor in (0.9, 1.1):
                    ax.plot([low, high], [low * factor, high * factor], color="grey", linewidth=0.6, linestyle=":")
                ax.set_xscale("log")
                ax.set_yscale("log")
                e = 100 * (predicted - measured) / measured
                title += f"\nn={len(e)}, MAPE {np.mean(np.abs(e)):.1f} %, bias {np.mean(e):+.1f} %"
            else:
                ax.text(0.5, 0.5, "no record can be predicted\n(not enough data: see the report)",
                        ha="center", va="center", fontsize=8, transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(f"{r['profile']['name']}: {title}", fontsize=8)
            ax.set_xlabel("measured s per iteration", fontsize=7)
            ax.set_ylabel("predicted s", fontsize=7)
    directory.mkdir(parents=True, exist_ok=True)
    return [_save(fig, directory / "modern_predicted_vs_measured.png")]
