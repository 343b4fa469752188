"""Shared test configuration (case fixtures come from the harness pytest plugin).

Test data lives in the project (``vendor/``, ``cases/``, ``goldens/``), so the
suite runs wherever the project is checked out. The shared reference material
(``../shared/reference`` beside the checkout) is used only to check that the
vendored conversions of it are faithful (:func:`shared_reference`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.cases import EstimateInput
from harness.errors import HarnessError
from harness.estimate import check_tiers, estimate_lowering
from harness.ir.checks import layout_problems
from harness.pipeline import lower
from harness.pytest_plugin import UPDATE_FLAGS, goldens_dir, option_value

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "cases"
REFERENCE_DIR = ROOT.parent / "shared" / "reference"


@pytest.fixture(autouse=True)
def _fresh_locations():
    """Every test starts and ends with unconfigured locations: ``harness.cli.main`` configures them for the
    process (``--project DIR``), and a test that ran it on a temporary project must not make the next test on
    the same worker read that project's profiles (a hostile ``a100_measured`` there priced another test's
    records at 1e7 s)."""
    from harness import locations

    locations.reset()
    yield
    locations.reset()


def shared_reference(relative: str) -> Path:
    """``REFERENCE_DIR / relative``; when it is missing the test fails where ``$CI`` is set and is skipped
    elsewhere, with the path in the message. Only the checks that the vendored conversions equal the shared
    files use it (every other test reads the vendored data); ``tox`` does not pass ``$CI`` on, so under
    ``tox -e tests`` on a checkout without ``../shared`` these few checks skip rather than fail."""
    path = REFERENCE_DIR / relative
    if not path.exists():
        message = f"{path} not found (the shared reference material is not beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def vendored_reference(count: int) -> dict:
    """A reference file in the shared format (``meta`` and ``records`` of ``case``, ``model``, ``execution``,
    ``system``, ``system_evidence``, ``peak_only``) holding the first ``count`` vendored Table 5 records
    (``vendor/.../records/cases.json``): input for ``oracle import-reference`` tests that needs no
    ``../shared`` beside the checkout. Its conversion back is checked by
    ``test_a_vendored_reference_imports_to_the_vendored_records``."""
    import json

    from harness.oracles.records import vendor_dir

    vendored = json.loads((vendor_dir() / "records" / "cases.json").read_text())
    oracle = vendored["oracle"]

    def view(v: dict) -> dict:
        return v["stats"] if "stats" in v else {"error": v["error"]}

    return {"meta": {"oracle": oracle["name"], "version": oracle["version"],
                     "source_tree_sha256": oracle["source_tree_sha256"], "digest_rule": oracle["digest_rule"]},
            "records": [{"case": r["id"], "model": r["calculon_model"], "execution": r["calculon_execution"],
                         "system": r["system"], **{name: view(v) for name, v in r["views"].items()}}
                        for r in vendored["records"][:count]]}


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``harness.cli.main(argv)`` in-process: its exit status (or the one argparse exits with), stdout, stderr."""
    from harness.cli import main

    try:
        status = main([str(a) for a in argv])
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


def one_error_line(status, err: str, *needles) -> str:
    """The bad-input rule: exit 2 and exactly one ``error: `` line, no traceback and no internal error, that
    contains each of ``needles`` (the file, the field ...)."""
    assert status == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "internal error" not in err, err
    for needle in needles:
        assert str(needle) in err, (needle, err)
    return err


def calculon_figures(case_name: str, view: str) -> dict[str, float]:
    """Calculon 0.1.0's recorded figures of a case (``cases/<case_name>.yaml``), by our metric names
    (``total_s``, ``components_s.forward``, ``memory_bytes.weight``, ...): an independent reference for tests
    of code that reports the same figures."""
    from harness.cases import load_case
    from harness.oracles.calculon import METRIC_GROUPS, oracle_values
    from harness.oracles.records import RecordIndex

    case = load_case(CASES_DIR / f"{case_name}.yaml")
    stats = RecordIndex().get(case.comparison.oracle_record or case.id).views[view].stats
    metrics = [m for group in ("timing", "memory") for m in METRIC_GROUPS[group]]
    return oracle_values(stats, case.execution.training, metrics)


@pytest.fixture(scope="session")
def _golden_copies() -> dict[Path, Path]:
    """This session's copies of golden directories (see ``original_datadir``), by the directory copied."""
    return {}


@pytest.fixture
def original_datadir(request, tmp_path_factory, _golden_copies) -> Path:
    """pytest-regressions goldens live under goldens/<test module>/, not beside the tests. pytest-regressions
    writes a golden it does not find into this directory (and fails once): so, unless a golden-update option is
    given (which CI refuses: harness.pytest_plugin), this is a session copy of it, and a missing golden fails on
    every run, never written next to the goldens (it re-baselined itself on the second run)."""
    real = goldens_dir(request.config) / Path(request.node.fspath).stem
    if any(option_value(request.config, flag) for flag in UPDATE_FLAGS):
        return real
    if real not in _golden_copies:
        copy = tmp_path_factory.mktemp("goldens") / real.name
        if real.is_dir():
            shutil.copytree(real, copy)
        else:
            copy.mkdir()
        _golden_copies[real] = copy
    return _golden_copies[real]


def brute_force_outcome(shape, execution, profile) -> tuple[str, float | None]:
    """What the estimate says of one layout, the way a brute-force enumeration in a search test compares it
    with the search's row: ``("invalid", None)`` for a layout the checks or the tiers refuse, else the status
    and the system-evidence total."""
    if layout_problems(shape, execution):
        return ("invalid", None)
    data = EstimateInput(model=shape, execution=execution, system=profile.name)
    try:
        check_tiers(data, profile, "<test>")
        est = estimate_lowering(lower(data), profile)
    except HarnessError:
        return ("invalid", None)
    return (est.status, est.views["system_evidence"].total_s)
