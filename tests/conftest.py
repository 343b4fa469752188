"""Shared test helpers (the case fixtures come from the harness pytest plugin)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "cases"
REFERENCE_DIR = ROOT.parent / "shared" / "reference"
