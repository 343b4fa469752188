"""The harness's pytest plugin (registered through the ``pytest11`` entry point).

Options are namespaced under ``--harness-*`` (plus ``--differential-full``).
Markers (registered for ``--strict-markers``):

- ``calibration``: the full Table 5 experiment;
- ``baseline_regression``: the CI gate (contract and goldens);
- ``oracle_live``: needs a Calculon checkout (``--harness-calculon-src`` or
  ``HARNESS_CALCULON_SRC``); skipped with the reason otherwise;
- ``differential``: checks against the vendored differential corpus;
- ``slow``: excluded from the default suite.
"""

from __future__ import annotations

import os

import pytest

MARKERS = {
    "calibration": "the Table 5 calibration experiment (estimates, then oracles)",
    "baseline_regression": "the CI gate: baseline contract and goldens",
    "oracle_live": "needs a Calculon 0.1.0 checkout (--harness-calculon-src or HARNESS_CALCULON_SRC)",
    "differential": "parity against the vendored differential corpus",
    "slow": "slow; excluded from the default suite",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "Blueprinting calibration harness")
    group.addoption("--harness-calculon-src", default=os.environ.get("HARNESS_CALCULON_SRC"),
                    help="Calculon 0.1.0 source checkout for oracle_live tests")
    group.addoption("--differential-full", action="store_true",
                    help="check every record of the differential corpus (default: a fixed sample)")


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
