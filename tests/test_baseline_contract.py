"""The CI gate: the baseline regression contract, and proof that it can fail."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.experiment.contract import build_contract, evaluate, load_contract
from harness.experiment.run import run_experiment

from conftest import CASES_DIR, ROOT


@pytest.fixture(scope="module")
def report():
    return run_experiment(CASES_DIR)


@pytest.mark.baseline_regression
def test_contract_is_honoured(report):
    broken = evaluate(load_contract(), report)
    assert broken == [], "\n".join(broken)


def test_every_broken_entry_is_listed_with_expected_obtained_and_budget(report):
    contract = build_contract(report)
    contract["aggregates"]["evidence_vs_paper_mape_pct"]["value"] += 0.01
    contract["portable_plan_digests"]["gpt3-175B/full"] = "0" * 64
    contract["evidence_revisions"]["a100_80g"] = "f" * 64
    broken = evaluate(contract, report)
    assert len(broken) == 3
    assert any(b.startswith("aggregates.evidence_vs_paper_mape_pct: expected") and "obtained" in b and "budget" in b
               for b in broken)
    assert any(b.startswith("portable_plan_digests[gpt3-175B/full]") for b in broken)


def _project_copy(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for name in ("harness", "cases", "evidence", "vendor", "goldens", "tests"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.obtained*"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


#: A test module that holds gate tests marks them at module level (``pytestmark``) or decorates them.
GATE_MARK = re.compile(r"^(pytestmark = .*|@)pytest\.mark\.baseline_regression\b", re.MULTILINE)


def gate_modules(root: Path) -> list[str]:
    """The test modules that hold gate tests (``-m baseline_regression``): the gate run collects these only,
    not the whole suite (collecting every module costs ten times the gate itself)."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py")
                  if GATE_MARK.search(p.read_text()))


def test_the_gate_modules_are_the_ones_that_hold_gate_tests(request):
    """The list the gate runs below collect is the set of modules whose tests carry the marker (when this
    session collected the whole suite)."""
    marked = {str(Path(item.path).relative_to(ROOT)) for item in request.session.items
              if item.get_closest_marker("baseline_regression")}
    if len({Path(item.path) for item in request.session.items}) < 10:
        pytest.skip("this session did not collect the suite")
    assert set(gate_modules(ROOT)) == marked
    assert {"tests/test_goldens.py", "tests/test_baseline_contract.py"} <= marked


def _gate(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "baseline_regression", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-x", "--no-header", "-o", "addopts=", *gate_modules(root)], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_gate_fails_when_the_evidence_moves(tmp_path):
    root = _project_copy(tmp_path)
    profile = root / "evidence" / "a100_80g.yaml"
    profile.write_text(profile.read_text().replace("peak_flops_per_s: 312000000000000.0",
                                                   "peak_flops_per_s: 311000000000000.0", 1))
    run = _gate(root)
    assert run.returncode == 1, run.stdout[-2000:]
    assert "failed" in run.stdout


def test_gate_fails_when_a_golden_number_is_edited(tmp_path):
    root = _project_copy(tmp_path)
    golden = root / "goldens" / "test_goldens" / "test_memory_gpt3_175B_full_.csv"
    header, row = golden.read_text().splitlines()
    cells = row.split(",")
    cells[2] = str(int(cells[2]) + 2)
    golden.write_text(f"{header}\n{','.join(cells)}\n")
    contract = root / "goldens" / "baseline_regression_contract.json"
    data = json.loads(contract.read_text())
    run = _gate(root)
    assert run.returncode == 1 and "test_memory" in run.stdout
    data["aggregates"]["peak_only_vs_paper_mape_pct"]["value"] = 15.0
    golden.write_text(f"{header}\n{row}\n")
    contract.write_text(json.dumps(data))
    run = _gate(root)
    assert run.returncode == 1 and "peak_only_vs_paper_mape_pct" in run.stdout
