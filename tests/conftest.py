"""Shared test configuration (case fixtures come from the harness pytest plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.pytest_plugin import goldens_dir

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "cases"
REFERENCE_DIR = ROOT.parent / "shared" / "reference"


@pytest.fixture
def original_datadir(request) -> Path:
    """pytest-regressions goldens live under goldens/<test module>/, not beside the tests."""
    return goldens_dir(request.config) / Path(request.node.fspath).stem
