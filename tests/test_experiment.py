"""The calibration experiment: isolation, oracles, report, budgets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cases import load_case
from harness.errors import OracleIsolationError, OracleRecordError
from harness.experiment.isolation import ComparisonGate
from harness.experiment.report import report_json_schema
from harness.experiment.run import run_experiment
from harness.oracles.calculon_oracle import LiveCalculon, RecordedCalculon

from conftest import CASES_DIR, ROOT


@pytest.fixture(scope="module")
def report():
    return run_experiment(CASES_DIR)


def test_oracle_runs_only_after_both_estimates():
    case = load_case(CASES_DIR / "gpt3-175B_full.yaml")
    gate = ComparisonGate()
    with pytest.raises(OracleIsolationError, match="gpt3-175B/full: comparison data requested before its "
                                                   "peak_only, system_evidence estimate"):
        gate.open(case)
    gate.register_estimate(case.id, "peak_only")
    with pytest.raises(OracleIsolationError, match="before its system_evidence estimate"):
        gate.open(case)
    gate.register_estimate(case.id, "system_evidence")
    assert gate.open(case).paper.iteration_s == 18.13


def test_experiment_consults_no_oracle_before_every_estimate(report):
    kinds = [kind for kind, _ in report.isolation["events"]]
    assert kinds.index("oracle") == 2 * len(report.cases)  # all estimates, then all oracles
    assert kinds.count("oracle") == len(report.cases)


def test_report_reproduces_the_seed(report):
    s = report.summary
    assert s.cases == 8 and s.paper_cases == 8 and s.workload_comparisons == 152
    assert round(s.peak_only_vs_calculon_mape_pct, 2) == 12.99
    assert s.evidence_vs_calculon_max_abs_pct <= 1e-9 and s.memory_max_abs_bytes <= 1
    assert round(s.evidence_vs_paper_mape_pct, 2) == 3.65 and round(s.evidence_vs_paper_max_abs_pct, 2) == 8.87
    assert report.all_cases.cases == 16 and report.violations == ()
    totals = {r.id: round(r.views["peak_only"]["total_s"], 4) for r in report.cases if r.paper}
    assert totals == {"megatron-22B/full": 1.1691, "megatron-22B/seqsel": 0.9351, "gpt3-175B/full": 15.4997,
                      "gpt3-175B/seqsel": 11.55, "turing-530B/full": 44.8563, "turing-530B/seqsel": 30.6678,
                      "megatron-1T/full": 81.6511, "megatron-1T/seqsel": 59.3347}


def test_report_carries_provenance_digests_and_attribution(report):
    p = report.provenance
    assert p.oracle.source_tree_sha256 == "e41fad9d24921311b57d1208f5d4edbe4893b2ddb091a1b1422e866e0fec74da"
    assert p.evidence[0].revision == p.evidence[0].oracle_records_revision
    case = report.cases[0]
    assert set(case.digests) == {"model_ir", "distributed_task_ir", "portable_plan_ir"}
    assert [c["pass_name"] for c in case.checkpoints] == ["transformer-distribute", "transformer-plan-work"]
    gap = case.views["system_evidence"]["total_s"] - case.views["peak_only"]["total_s"]
    assert sum(case.attribution["attribution_s"].values()) == pytest.approx(gap, rel=1e-9)


def test_committed_json_schema_is_current():
    committed = json.loads((ROOT / "schemas" / "calibration-report.v0.schema.json").read_text())
    assert committed == json.loads(json.dumps(report_json_schema())), "regenerate schemas/ (see README)"


def _copy_project(tmp_path: Path, vendor: bool = True) -> Path:
    root = tmp_path / "project"
    for name in ("harness", "cases", "evidence") + (("vendor",) if vendor else ()):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _harness(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_estimates_do_not_depend_on_names_papers_or_vendor(tmp_path):
    original = _harness(ROOT, "estimate", "--json", *sorted(map(str, CASES_DIR.glob("*.yaml"))))
    root = _copy_project(tmp_path, vendor=False)
    for path in (root / "cases").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        data["id"] = "anonymous-" + path.stem.replace("gpt3", "x").replace("megatron", "y")
        if data["comparison"]["paper"]:
            data["comparison"]["paper"]["iteration_s"] = 1.0
        data["comparison"]["oracle_record"] = None
        path.write_text(yaml.safe_dump(data))
    changed = _harness(root, "estimate", "--json", *sorted(str(p) for p in (root / "cases").glob("*.yaml")))
    assert original.returncode == changed.returncode == 0, changed.stderr
    strip = lambda out: json.dumps([{k: v for k, v in e.items() if k != "id"} for e in json.loads(out)])  # noqa: E731
    assert strip(original.stdout) == strip(changed.stdout)


def test_calibrate_fails_when_the_evidence_moves(tmp_path):
    root = _copy_project(tmp_path)
    profile = root / "evidence" / "a100_80g.yaml"
    profile.write_text(profile.read_text().replace("peak_flops_per_s: 312000000000000.0",
                                                   "peak_flops_per_s: 311000000000000.0", 1))
    run = _harness(root, "calibrate", "--output", str(tmp_path / "r.json"))
    assert run.returncode == 1
    assert "revision" in run.stdout and "VIOLATION" in run.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["violations"]


def test_corrupted_or_missing_records_are_clear_errors(tmp_path):
    root = _copy_project(tmp_path)
    vendor = root / "vendor" / "calculon-0.1.0"
    records = vendor / "records" / "cases.json"
    records.write_text(records.read_text().replace('"total_time":1.3955953652004964', '"total_time":1.4', 1))
    with pytest.raises(OracleRecordError, match=f"{records}: SHA-256 .* does not match the manifest"):
        RecordedCalculon(vendor=vendor)
    (vendor / "MANIFEST.json").unlink()
    with pytest.raises(OracleRecordError, match="MANIFEST.json: missing"):
        RecordedCalculon(vendor=vendor)
    oracle = RecordedCalculon()
    case = load_case(CASES_DIR / "gpt3-175B_full.yaml")
    with pytest.raises(OracleRecordError, match="no vendored record 'nope'"):
        oracle.views("nope", case.estimate_input())
    other = case.estimate_input().model_copy(update={"system": "a100_80e"})
    with pytest.raises(OracleRecordError, match="was made from other inputs"):
        oracle.views("gpt3-175B/full", other)


@pytest.mark.oracle_live
def test_live_calculon_equals_the_vendored_records(calculon_src):
    live, recorded = LiveCalculon(calculon_src), RecordedCalculon()
    for path in sorted(CASES_DIR.glob("*.yaml")):
        case = load_case(path)
        record_id = case.comparison.oracle_record or case.id
        assert live.views(record_id, case.estimate_input()) == recorded.views(record_id, case.estimate_input())


def test_calibrate_command_writes_report_and_plots(tmp_path, capsys):
    from harness.cli import main

    status = main(["calibrate", "--cases", str(CASES_DIR), "--output", str(tmp_path / "report.json"),
                   "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert status == 0 and "budgets: all met" in out and "peak-only vs Calculon MAPE: 12.99%" in out
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["schema"] == "blueprinting.calculon-calibration-experiment.v0"
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == [
        "components.png", "gap_waterfall.png", "totals.png"]
    # the default comparison: both measured profiles, each case's error from its own estimate and the paper value
    assert [c["profile"] for c in data["comparisons"]] == ["a100_measured", "a100_measured_fused_accumulation"]
    from harness.estimate import estimate

    for compared in data["comparisons"]:
        for row in compared["cases"]:
            case = next(load_case(p) for p in CASES_DIR.glob("*.yaml") if load_case(p).id == row["id"])
            total = estimate(case.estimate_input().model_copy(update={"system": compared["profile"]}))
            assert row["system_evidence_total_s"] == total.views["system_evidence"].total_s
            assert row["error_pct"] == pytest.approx(100 * (row["system_evidence_total_s"] - row["paper_s"])
                                                     / row["paper_s"], rel=1e-12)


def test_a_case_without_a_vendored_record_is_its_own_files_error(tmp_path, capsys):
    """``calibrate`` / ``contract check`` of a case whose record was never vendored: one line naming the case
    file and the field that names the record (``id``, or ``comparison.oracle_record`` when it is given), not only
    the records directory."""
    from conftest import one_error_line, run_cli

    cases = tmp_path / "cases"
    cases.mkdir()
    text = (CASES_DIR / "gpt3-175B_full.yaml").read_text()
    document = yaml.safe_load(text)
    document["id"] = "mine/unrecorded"
    document["comparison"] = {}
    (cases / "mine.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    output = tmp_path / "cal.json"
    err = one_error_line(*run_cli(capsys, "calibrate", "--cases", cases, "--output", output)[::2],
                         f"{cases / 'mine.yaml'}: id: ", "no vendored record 'mine/unrecorded'")
    assert "harness oracle record --cases" in err and not output.exists()
    document["comparison"] = {"oracle_record": "mine/absent"}
    (cases / "mine.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    one_error_line(*run_cli(capsys, "calibrate", "--cases", cases, "--output", output)[::2],
                   f"{cases / 'mine.yaml'}: comparison.oracle_record: ", "no vendored record 'mine/absent'")


def test_calculon_src_without_the_live_oracle_is_refused_not_ignored(tmp_path, capsys):
    from conftest import one_error_line, run_cli

    output = tmp_path / "cal.json"
    one_error_line(*run_cli(capsys, "calibrate", "--output", output, "--calculon-src", tmp_path / "nowhere")[::2],
                   "<command line>: --calculon-src: is for --oracle live")
    assert not output.exists()
