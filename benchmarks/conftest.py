"""Benchmark fixtures: the Table 5 cases, the public differential corpus, cold caches.

Rules: a *cold* measurement clears every memo of the estimate path before each
round (:func:`harness.estimate.clear_caches`), so each round lowers, interns,
serializes and prices from scratch, like the first estimate of a fresh
process; a *warm* one repeats an input whose lowering is cached. Inputs are
built (and validated) outside the timed region.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cases import load_case

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "cases"
PUBLIC_CORPUS = ROOT.parent / "shared" / "reference" / "oracle-records" / "differential-public.json"


def table5_cases():
    """The cases with a paper value (Korthikanti et al. 2022, Table 5), by file name."""
    cases = [load_case(path) for path in sorted(CASES_DIR.glob("*.yaml"))]
    return [c for c in cases if c.comparison.paper is not None]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "table5_case" in metafunc.fixturenames:
        cases = table5_cases()
        metafunc.parametrize("table5_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def corpus_configs() -> list[tuple[dict, dict, str]]:
    """``(model, execution, system)`` of the 400 public differential configurations (Calculon's terms)."""
    if not PUBLIC_CORPUS.is_file():
        pytest.skip(f"{PUBLIC_CORPUS} not found (the shared reference records are not installed)")
    records = json.loads(PUBLIC_CORPUS.read_text())["records"]
    return [(r["model"], r["execution"], r["system"]) for r in records]


@pytest.fixture(scope="session")
def corpus_inputs(corpus_configs):
    """The corpus as validated :class:`~harness.cases.EstimateInput` objects."""
    from harness.interop.calculon_format import input_from_calculon

    return [input_from_calculon(*config) for config in corpus_configs]
