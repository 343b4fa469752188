"""``harness estimate --runs ROWS.json --system PROFILE|auto``: every measured run estimated, or refused with its field.

Per row (:func:`estimate_runs`), in file order, ``{"id", "status", "reason", "total_s", "measured_s",
"error_pct", "views"}``:

- ``status`` is ``ok`` or ``infeasible`` (the estimate path's: figures given; infeasible = the harness
  thinks the layout does not fit the system, e.g. its memory), ``unsupported`` (the row has a feature the
  harness cannot price: ``reason`` names the row field(s), :mod:`harness.measurements.runs`; no figures) or
  ``invalid`` (the row describes no valid case, or the estimate failed for it: ``reason`` says why);
  an ``ok`` row whose case is estimated but never fitted (:attr:`~harness.measurements.runs.RunCase.unfitted`:
  its measurement depends on software facts the case does not state) has ``reason``
  ``"never fitted: FIELD: why"`` and is counted in the summary under that field;
- ``total_s`` and ``error_pct`` are those of the chosen view (``--view``, default ``system_evidence``),
  ``error_pct = 100 x (total_s - measured_s) / measured_s``; ``views`` holds both views'.

The profile: ``--system NAME`` prices every row on NAME; ``--system auto`` prices each row on the profile
named as its ``system.gpu`` (``h100_sxm_80g``, ``b200``, ``b300``; ``gb200`` -> ``gb200_nvl72``, ``gb300`` ->
``gb300_nvl72``, :data:`AUTO_PROFILES`), ``--system auto-measured`` on its GPU's fitted revision
(``h100_measured``, ``b200_measured``, ``gb200_measured``: :data:`MEASURED_PROFILES`; figures of the rows they
were fitted on are in sample), or for B300 and GB300, which no measured run covers, on their transferred
revisions (``b300_transferred``, ``gb300_transferred``: B200's and GB200's fitted values on their data sheets;
the summary counts the rows they price); a GPU without one is ``unsupported``. A row whose GEMMs are in a
datatype the revision did not fit (nvfp4's float4: no shared run) is estimated on the data sheet's curve and
says so (``reason`` ``precision: ... unchecked``, counted in the summary)
with field ``system.gpu``. A row whose NVLink domain is larger than the profile's tier 0 is
``unsupported`` (field ``system.gpus_per_nvlink_domain``): the placement would not be the run's.
An evidence profile that cannot price a row's datatype is ``unsupported`` (the profile's error).

:func:`summary` groups the rows with figures by GPU, model family (the first word of the display name,
up to its first ``-``: ``Llama``, ``Qwen3``, ``GPT``; display only, after estimating) and precision:
count, MAPE (mean of ``|error_pct|``) and signed bias (mean of ``error_pct``), per view; and counts the
unsupported rows by the first field refused and by every field refused, and the never-fitted rows by
field. Nothing is fitted here.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any, Iterable

from harness.cost.views import COST_VIEWS
from harness.errors import EvidenceError, HarnessError, InputError
from harness.estimate import DEFAULT_VIEWS, estimate
from harness.evidence.profile import EvidenceProfile, load_profile
from harness.measurements.runs import run_case
from harness.measurements.runs_transfer import TRANSFERRED, unfitted_gemm_engine
from harness.passes.precision import quantized_gemm_datatype
from harness.measurements.runs_schema import MeasuredRun

AUTO = "auto"
#: ``--system auto``: the profile of a row's ``system.gpu`` where its name is not the GPU's (a rack profile is
#: named after its NVLink domain); any other GPU's profile is named as the GPU.
AUTO_PROFILES = {"gb200": "gb200_nvl72", "gb300": "gb300_nvl72"}
AUTO_MEASURED = "auto-measured"
#: ``--system auto-measured``: the fitted revision of a row's ``system.gpu`` (docs/modern-evidence.md) where its
#: name is not ``<gpu>_measured``; a GPU no measured run covers has its transferred revision (a sibling's fitted
#: values on its data sheet, :mod:`harness.measurements.runs_transfer`), counted in the summary.
MEASURED_PROFILES = {"h100_sxm_80g": "h100_measured", "b300": "b300_transferred", "gb300": "gb300_transferred"}
AUTOMATIC = (AUTO, AUTO_MEASURED)
DEFAULT_VIEW = "system_evidence"
STATUSES = ("ok", "infeasible", "unsupported", "invalid")


@dataclasses.dataclass(frozen=True)
class RowResult:
    """One row's outcome (``fields``: the row fields refused, for counting)."""

    run: MeasuredRun
    status: str
    reason: str | None
    totals_s: dict[str, float]
    fields: tuple[str, ...] = ()
    unfitted: tuple[str, ...] = ()  # the row fields that keep an estimated row out of every fit
    transferred: str | None = None  # the transferred revision that priced the row (fitted to no run of its GPU)
    #: the GEMM datatype the revision prices with the data sheet's curve (no measured run of it fitted), or None
    unfitted_gemms: str | None = None

    def error_pct(self, view: str) -> float | None:
        total = self.totals_s.get(view)
        return None if total is None else 100.0 * (total - self.run.measured.iteration_s) / self.run.measured.iteration_s

    def json(self, view: str = DEFAULT_VIEW) -> dict[str, Any]:
        return {"id": self.run.id, "status": self.status, "reason": self.reason, "total_s": self.totals_s.get(view),
                "measured_s": self.run.measured.iteration_s, "error_pct": self.error_pct(view),
                "views": {name: {"total_s": total, "error_pct": self.error_pct(name)}
                          for name, total in self.totals_s.items()}}


def _profile(name: str, cache: dict[str, EvidenceProfile | str]) -> EvidenceProfile | str:
    """The profile ``name``, or the reason it cannot be loaded (kept per name)."""
    if name not in cache:
        try:
            cache[name] = load_profile(name)
        except EvidenceError as error:
            cache[name] = error.message
    return cache[name]


def estimate_run(run: MeasuredRun, system: str, source: str, profiles: dict, views=DEFAULT_VIEWS) -> RowResult:
    """One row's outcome on the profile ``system`` (a name, or :data:`AUTO`)."""
    gpu = run.system.gpu
    name = {AUTO: AUTO_PROFILES.get(gpu, gpu),
            AUTO_MEASURED: MEASURED_PROFILES.get(gpu, f"{gpu}_measured")}.get(system, system)
    case = run_case(run, name, source)
    if case.invalid is not None:
        return RowResult(run, "invalid", case.reason, {})
    problems = list(case.unsupported)
    profile = _profile(name, profiles)
    domain = run.system.gpus_per_nvlink_domain
    if isinstance(profile, str):
        problems.append(("system.gpu", f"no evidence profile for {name!r} ({profile})"))
    elif profile.networks and domain > profile.networks[0].size_processors:
        problems.append(("system.gpus_per_nvlink_domain", f"{domain} GPUs, but tier 0 of evidence profile {name} "
                                                          f"holds {profile.networks[0].size_processors}"))
    if problems or case.input is None:
        return RowResult(run, "unsupported", "; ".join(f"{field}: {why}" for field, why in problems), {},
                         tuple(field for field, _ in problems))
    try:
        est = estimate(case.input, views, source=f"{source}: {run.id}")
    except EvidenceError as error:  # the profile cannot price this row (a datatype it has no engine for)
        return RowResult(run, "unsupported", f"{error.field}: {error.message}", {}, (error.field,))
    except InputError as error:
        if error.message.startswith(f"evidence profile {name} has no"):
            return RowResult(run, "unsupported", f"{error.field}: {error.message}", {}, (error.field,))
        return RowResult(run, "invalid", f"{error.field}: {error.message}", {})
    except HarnessError as error:
        return RowResult(run, "invalid", str(error), {})
    reason = est.reason
    if case.unfitted and reason is None:
        reason = "never fitted: " + "; ".join(f"{field}: {why}" for field, why in case.unfitted)
    gemms = quantized_gemm_datatype(case.input.execution.precision) or case.input.execution.datatype
    unfitted_gemms = gemms if unfitted_gemm_engine(profile, gemms) else None
    if unfitted_gemms and reason is None:
        reason = (f"precision: {profile.name} prices {gemms} GEMMs with the data sheet's curve (no measured run in "
                  f"{gemms} fitted it): unchecked")
    return RowResult(run, est.status, reason, {v: est.views[v].total_s for v in est.views},
                     unfitted=tuple(field for field, _ in case.unfitted),
                     transferred=name if name in TRANSFERRED else None, unfitted_gemms=unfitted_gemms)


def estimate_runs(runs: Iterable[MeasuredRun], system: str, source: str, views=DEFAULT_VIEWS) -> list[RowResult]:
    profiles: dict[str, EvidenceProfile | str] = {}
    return [estimate_run(run, system, source, profiles, views) for run in runs]


def family(run: MeasuredRun) -> str:
    """The display family: the first word of ``model.name`` up to its first ``-`` (``Nemotron-4 15B`` ->
    ``Nemotron``), the whole word when it starts with ``-`` (``-`` -> ``-``: never an empty label); total, though
    the schema refuses a name without a word."""
    word = next(iter(run.model.name.split()), "")
    return word.split("-")[0] or word


def _stats(errors: list[float]) -> str:
    mape = sum(abs(e) for e in errors) / len(errors)
    bias = sum(errors) / len(errors)
    return f"n={len(errors):3d}  MAPE {mape:6.1f} %  bias {bias:+7.1f} %"


def summary(results: list[RowResult]) -> list[str]:
    """The printed summary (module rules)."""
    lines = []
    statuses = Counter(r.status for r in results)
    lines.append(f"{len(results)} rows: " + ", ".join(f"{statuses[s]} {s}" for s in STATUSES))
    first = Counter(r.fields[0] for r in results if r.status == "unsupported" and r.fields)
    every = Counter(f for r in results if r.status == "unsupported" for f in dict.fromkeys(r.fields))
    if first:
        lines.append("unsupported, by the first field refused: "
                     + ", ".join(f"{field} {count}" for field, count in first.most_common()))
        lines.append("unsupported, by every field refused: "
                     + ", ".join(f"{field} {count}" for field, count in every.most_common()))
    unfitted = Counter(field for r in results for field in dict.fromkeys(r.unfitted))
    if unfitted:
        lines.append("estimated, never fitted (not in any fitted corpus): "
                     + ", ".join(f"{field} {count}" for field, count in unfitted.most_common()))
    transferred = Counter(r.transferred for r in results if r.transferred and r.totals_s)
    if transferred:
        lines.append("estimated on transferred evidence (a sibling's fitted values, fitted to no run of the GPU): "
                     + ", ".join(f"{name} {count}" for name, count in sorted(transferred.items())))
    unfitted_gemms = Counter(r.unfitted_gemms for r in results if r.unfitted_gemms and r.totals_s)
    if unfitted_gemms:
        lines.append("estimated with GEMMs no measured run fitted (the data sheet's curve, unchecked): "
                     + ", ".join(f"{datatype} {count}" for datatype, count in sorted(unfitted_gemms.items())))
    for reason, count in Counter(r.reason for r in results if r.status == "invalid").most_common():
        lines.append(f"invalid ({count}): {reason}")
    estimated = [r for r in results if r.totals_s]
    for view in COST_VIEWS:
        rows = [r for r in estimated if view in r.totals_s]
        if not rows:
            continue
        lines.append(f"{view}: all {_stats([r.error_pct(view) for r in rows])}")
        for label, key in (("gpu", lambda r: r.run.system.gpu), ("family", lambda r: family(r.run)),
                           ("precision", lambda r: r.run.precision)):
            groups: dict[str, list[float]] = defaultdict(list)
            for r in rows:
                groups[key(r)].append(r.error_pct(view))
            for group in sorted(groups):
                lines.append(f"  {label:9s} {group:14s} {_stats(groups[group])}")
    return lines
