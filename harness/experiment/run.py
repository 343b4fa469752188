"""Run the calibration experiment: estimates first, then oracles, then the report.

Order (enforced by :class:`ComparisonGate`): every case is lowered once and
costed under both views; only when *all* estimates exist is any comparison
section released, the Calculon oracle consulted (recorded or live) and the
paper value read.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

from harness import __version__, locations
from harness.cases import CaseFile, load_case_files
from harness.digest import digest_data, sha256_file
from harness.errors import InputError, OracleRecordError
from harness.estimate import Estimate, estimate_lowering, check_tiers
from harness.evidence.profile import load_profile, profile_path
from harness.experiment.isolation import POLICY, ComparisonGate
from harness.inputs import real_path
from harness.experiment.report import (
    Budgets,
    CaseInputs,
    CaseResult,
    ComparedCase,
    ComponentParity,
    MetricError,
    OracleProvenance,
    PaperComparison,
    ProfileComparison,
    ProfileProvenance,
    Provenance,
    Report,
    Summary,
    ViewComparison,
)
from harness.explain import attribute
from harness.oracles.calculon import (
    CAPACITY_FIELDS,
    MEMORY_FIELDS,
    TIMING_FIELDS,
    WORKLOAD_FIELDS,
    check_view,
    oracle_values,
    signed_error_pct,
)
from harness.pipeline import lower
from harness.vocabulary import COMPONENTS, PEAK_ONLY, SYSTEM_EVIDENCE, VIEWS

PAPER = "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, Table 5"


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _estimate_all(cases: list[tuple[Path, CaseFile]], gate: ComparisonGate) -> dict[str, tuple[Any, Estimate, Any]]:
    """Phase 1: lower and cost every case (no comparison data is reachable)."""
    out = {}
    for path, case in cases:
        data = case.estimate_input()
        profile = load_profile(data.system, referrer=str(path))
        check_tiers(data, profile, str(path))
        lowering = lower(data, str(path))
        est = estimate_lowering(lowering, profile)
        for view in VIEWS:
            gate.register_estimate(case.id, view)
        out[case.id] = (lowering, est, attribute(lowering, profile))
    return out


def _view_comparison(parity) -> ViewComparison:
    metrics = {c.metric: MetricError(estimate=c.estimate, oracle=c.oracle, error_pct=c.error_pct,
                                     abs_error=abs(c.estimate - c.oracle)) for c in parity.comparisons}
    memory = [m.abs_error for name, m in metrics.items() if name in MEMORY_FIELDS]
    return ViewComparison(status_match=parity.verdict_match, calculon_error=None, metrics=metrics,
                          max_abs_error_pct=parity.max_abs_error_pct,
                          max_abs_memory_error_bytes=max(memory, default=0.0))


def _calculon_figures(stats: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    """Calculon's total, components and tier-1 memory under our names (or its error)."""
    if stats is None:
        return {"error": error}
    values = oracle_values(stats, metrics=list(TIMING_FIELDS) + ["memory_bytes.tier1_total"])
    return {"total_s": values["total_s"], "memory_tier1_bytes": values["memory_bytes.tier1_total"],
            "components_s": {m.split(".", 1)[1]: v for m, v in values.items() if m.startswith("components_s.")}}


def _compare_case(path: Path, case: CaseFile, lowering, est: Estimate, attribution, gate: ComparisonGate,
                  oracle) -> CaseResult:
    """Phase 2: release the comparison section and compare."""
    comparison = gate.open(case)
    data = case.estimate_input()
    try:
        records = oracle.views(comparison.oracle_record or case.id, data)
    except OracleRecordError as error:  # the case names the record: its file and field, what the user edits
        field = "comparison.oracle_record" if comparison.oracle_record else "id"
        raise InputError(str(path), field, f"{error} (record it with `harness oracle record --cases DIR`, or "
                                           "name a vendored record in comparison.oracle_record)") from None
    parity, calculon = {}, {}
    for view in VIEWS:
        rec = records[view]
        p = check_view(case.id, view, est, rec.stats, rec.error, data.execution.training)
        vc = _view_comparison(p)
        parity[view] = vc.model_copy(update={"calculon_error": rec.error})
        calculon[view] = _calculon_figures(rec.stats, rec.error)
    evidence = parity[SYSTEM_EVIDENCE].metrics
    workload_keys = list(WORKLOAD_FIELDS) + list(CAPACITY_FIELDS)
    workload = {k.split(".", 1)[1]: evidence[k] for k in workload_keys if k in evidence}
    peak_gap = None
    if "total_s" in calculon[SYSTEM_EVIDENCE]:
        peak_gap = signed_error_pct(est.views[PEAK_ONLY].total_s, calculon[SYSTEM_EVIDENCE]["total_s"])
    paper = None
    if comparison.paper is not None:
        paper = PaperComparison(
            iteration_s=comparison.paper.iteration_s, citation=comparison.paper.citation,
            peak_only_error_pct=signed_error_pct(est.views[PEAK_ONLY].total_s, comparison.paper.iteration_s),
            system_evidence_error_pct=signed_error_pct(est.views[SYSTEM_EVIDENCE].total_s,
                                                       comparison.paper.iteration_s))
    return CaseResult(
        id=case.id, system=case.system, status=est.status, reason=est.reason,
        inputs=CaseInputs(case_file_sha256=sha256_file(path), model_sha256=digest_data(case.model.model_dump()),
                          execution_sha256=digest_data(case.execution.model_dump()),
                          system_sha256=sha256_file(profile_path(case.system))),
        digests=lowering.digests(), checkpoints=tuple(cp.to_data() for cp in lowering.checkpoints),
        workload=workload, views=est.views_json(), calculon=calculon, parity=parity,
        peak_only_vs_calculon_pct=peak_gap, paper=paper, attribution=attribution.model_dump(mode="json"),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(scope: str, results: list[CaseResult], budgets: Budgets, extra_violations: list[str]) -> Summary:
    violations = list(extra_violations)
    evidence_totals, peak_totals, comp = [], [], {c: ([], []) for c in COMPONENTS}
    all_evidence, workload_errors, memory_errors, workload_count = [], [], [], 0
    for r in results:
        for view, vc in r.parity.items():
            if not vc.status_match:
                violations.append(f"{r.id} [{view}]: feasibility verdict differs from Calculon's")
            for name, m in vc.metrics.items():
                if name in MEMORY_FIELDS:
                    if m.abs_error > budgets.memory_bytes:
                        violations.append(f"{r.id} [{view}] {name}: {m.abs_error:.0f} bytes from Calculon "
                                          f"(budget {budgets.memory_bytes:g})")
                elif not abs(m.error_pct) <= budgets.calculon_pct:
                    violations.append(f"{r.id} [{view}] {name}: {m.error_pct:+.3g} % from Calculon "
                                      f"(budget {budgets.calculon_pct:g} %)")
        ev = r.parity[SYSTEM_EVIDENCE].metrics
        if "total_s" in ev:
            evidence_totals.append(abs(ev["total_s"].error_pct))
            all_evidence += [abs(m.error_pct) for k, m in ev.items() if k not in MEMORY_FIELDS]
            memory_errors += [m.abs_error for k, m in ev.items() if k in MEMORY_FIELDS]
            for c in COMPONENTS:
                m = ev[f"components_s.{c}"]
                comp[c][0].append(abs(m.error_pct))
                comp[c][1].append(m.abs_error)
            workload_errors += [abs(m.error_pct) for m in r.workload.values()]
            workload_count += sum(1 for k in r.workload if not k.startswith("block_"))
        if r.peak_only_vs_calculon_pct is not None:
            peak_totals.append(abs(r.peak_only_vs_calculon_pct))
    paper = [r.paper for r in results if r.paper is not None]
    ev_paper = [abs(p.system_evidence_error_pct) for p in paper]
    summary = dict(
        scope=scope, cases=len(results), paper_cases=len(paper), workload_comparisons=workload_count,
        peak_only_vs_calculon_mape_pct=_mean(peak_totals) or 0.0,
        peak_only_vs_calculon_max_abs_pct=max(peak_totals, default=0.0),
        evidence_vs_calculon_mape_pct=_mean(evidence_totals) or 0.0,
        evidence_vs_calculon_max_abs_pct=max(all_evidence, default=0.0),
        workload_max_abs_pct=max(workload_errors, default=0.0),
        memory_max_abs_bytes=max(memory_errors, default=0.0),
        component_parity={c: ComponentParity(mape_pct=_mean(p) or 0.0, max_abs_pct=max(p, default=0.0),
                                             max_abs_s=max(s, default=0.0)) for c, (p, s) in comp.items()},
        evidence_vs_paper_mape_pct=_mean(ev_paper), evidence_vs_paper_max_abs_pct=max(ev_paper, default=None),
        peak_only_vs_paper_mape_pct=_mean([abs(p.peak_only_error_pct) for p in paper]),
    )
    if ev_paper:
        if summary["evidence_vs_paper_mape_pct"] > budgets.paper_mape_pct:
            violations.append(f"evidence vs paper MAPE {summary['evidence_vs_paper_mape_pct']:.4f} % exceeds "
                              f"{budgets.paper_mape_pct} %")
        if summary["evidence_vs_paper_max_abs_pct"] > budgets.paper_max_abs_pct:
            violations.append(f"evidence vs paper max |error| {summary['evidence_vs_paper_max_abs_pct']:.4f} % "
                              f"exceeds {budgets.paper_max_abs_pct} %")
    return Summary(**summary, budgets=budgets, violations=tuple(violations))


def _estimate_compared(cases: list[tuple[Path, CaseFile]], systems: tuple[str, ...],
                       gate: ComparisonGate) -> dict[str, dict[str, Estimate]]:
    """Phase 1 too: the cases with a paper value on the compared profiles (registered with the gate)."""
    out: dict[str, dict[str, Estimate]] = {}
    for system in systems:
        profile = load_profile(system)
        for path, case in cases:
            if case.comparison.paper is None:
                continue
            data = case.estimate_input().model_copy(update={"system": system})
            check_tiers(data, profile, str(path))
            out.setdefault(system, {})[case.id] = estimate_lowering(lower(data, str(path)), profile)
            for view in VIEWS:
                gate.register_estimate(f"{case.id}@{system}", view)
    return out


def _comparison(system: str, estimates: dict[str, Estimate], cases: list[tuple[Path, CaseFile]],
                gate: ComparisonGate) -> ProfileComparison:
    """Phase 2: each compared estimate next to the paper value its case releases."""
    rows = []
    for _, case in cases:
        if case.id not in estimates:
            continue
        est = estimates[case.id]
        paper = gate.open(case).paper
        total = est.views[SYSTEM_EVIDENCE].total_s
        rows.append(ComparedCase(id=case.id, status=est.status, reason=est.reason, peak_only_total_s=est.views[PEAK_ONLY].total_s,
                                 system_evidence_total_s=total, paper_s=paper.iteration_s if paper else None,
                                 error_pct=signed_error_pct(total, paper.iteration_s) if paper else None))
    errors = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return ProfileComparison(profile=system, revision=load_profile(system).revision(), cases=tuple(rows),
                             paper_mape_pct=_mean(errors), paper_max_abs_pct=max(errors, default=None))


def run_experiment(cases_dir: Path | str | None = None, oracle=None, budgets: Budgets | None = None,
                   gate: ComparisonGate | None = None, compare: tuple[str, ...] = ()) -> Report:
    """Estimate every case of ``cases_dir`` (default: the current locations' cases), both views, then compare
    with the oracle (default: the vendored records) and the paper. ``compare``: other evidence profiles whose
    paper-case estimates are reported next to the paper (a comparison, not a budget)."""
    from harness.oracles.calculon_oracle import RecordedCalculon

    cases_dir = locations.current().cases_dir() if cases_dir is None else Path(cases_dir)
    cases = load_case_files(cases_dir)
    gate = gate or ComparisonGate()
    estimates = _estimate_all(cases, gate)
    compared = _estimate_compared(cases, compare, gate)
    oracle = oracle or RecordedCalculon()
    results = [_compare_case(path, case, *estimates[case.id], gate=gate, oracle=oracle) for path, case in cases]
    revisions = getattr(oracle, "evidence_revisions", {})
    profiles, extra = [], []
    for name in sorted({c.system for _, c in cases}):
        prof = load_profile(name)
        recorded = revisions.get(name)
        profiles.append(ProfileProvenance(name=name, revision=prof.revision(), file_sha256=sha256_file(profile_path(name)),
                                          oracle_records_revision=recorded))
        if recorded and recorded != prof.revision():
            extra.append(f"evidence profile {name}: revision {prof.revision()[:12]} differs from the revision the "
                         f"Calculon records were made with ({recorded[:12]})")
    ident = oracle.identity
    provenance = Provenance(
        tool=f"blueprinting-harness {__version__}", git_commit=_git_commit(real_path(cases_dir).parent),
        python=platform.python_version(), paper=PAPER, evidence=tuple(profiles),
        oracle=OracleProvenance(name=ident.name, version=ident.version, commit=ident.commit,
                                source_tree_sha256=ident.source_tree_sha256, digest_rule=ident.digest_rule,
                                mode=oracle.mode, record_files=oracle.files))
    budgets = budgets or Budgets()
    table5 = [r for r in results if r.paper is not None]
    return Report(provenance=provenance, isolation={"policy": POLICY, "events": [list(e) for e in gate.events]},
                  cases=tuple(results), summary=summarize("cases with a paper value (Table 5)", table5, budgets, extra),
                  all_cases=summarize("every case", results, budgets, extra),
                  comparisons=tuple(_comparison(s, compared[s], cases, gate) for s in compare if s in compared))
