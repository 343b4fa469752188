"""The harness's pytest plugin (registered through the ``pytest11`` entry point).

What it gives a test suite:

- every ``cases/*.yaml`` becomes a parameter of the session-scoped ``case``
  fixture, with the case id as test id (adding a YAML adds tests, no code);
  tests marked ``calibration`` are parametrized only by cases that have a
  paper value (the Table 5 cases);
- per case, ordered session fixtures: ``lowering`` (ModelIR,
  DistributedTaskIR, PortablePlanIR), ``peak_only_estimate``,
  ``evidence_estimate``, then ``calculon_oracle`` and ``paper_holdout``,
  which depend on both estimates and are released by a
  :class:`~harness.experiment.isolation.ComparisonGate`;
- ``golden_snapshot``: a syrupy JSON snapshot stored under
  ``goldens/<test module>/``; numeric goldens use pytest-regressions'
  ``num_regression`` with the same directory (see ``tests/conftest.py``);
- a report header naming the oracle version and digest and the evidence
  revisions; a refusal to update goldens under CI.

Options are namespaced ``--harness-*`` (and ``--differential-full``).
Markers (registered for ``--strict-markers``): see :data:`MARKERS`.

Zero cases never pass: ``--harness-cases`` naming a missing, non-directory
or empty directory, or a case file that does not load, is a usage error
(exit 4) before any test runs; a test that needs ``case`` when there is no
case (or, for ``calibration`` tests, no case with a paper value) is a
collection error, never a run that skips everything.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE

MARKERS = {
    "calibration": "the Table 5 calibration experiment (estimates, then oracles)",
    "baseline_regression": "the CI gate: baseline contract and goldens",
    "oracle_live": "needs a Calculon 0.1.0 checkout (--harness-calculon-src or HARNESS_CALCULON_SRC)",
    "differential": "parity against the vendored differential corpus",
    "slow": "slow; excluded from the default suite",
}
#: Every option of syrupy and pytest-regressions that writes goldens (tests/test_plugin.py checks that no other
#: option of theirs is named for updating or regenerating).
UPDATE_FLAGS = ("--snapshot-update", "--snapshot-update-new-only", "--force-regen", "--regen-all")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "Blueprinting calibration harness")
    group.addoption("--harness-cases", default=None, help="case directory (default: <rootdir>/cases)")
    group.addoption("--harness-goldens", default=None, help="golden directory (default: <rootdir>/goldens)")
    group.addoption("--harness-oracle", choices=("recorded", "live"), default="recorded",
                    help="Calculon oracle: vendored records (default) or a live checkout")
    group.addoption("--harness-calculon-src", default=os.environ.get("HARNESS_CALCULON_SRC"),
                    help="Calculon 0.1.0 source checkout (oracle_live tests, --harness-oracle live); "
                         "write --harness-calculon-src=PATH, since pytest pre-parses a separate value as a path")
    group.addoption("--differential-full", action="store_true",
                    help="check every record of the differential corpus (default: a fixed sample)")


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    if config.getoption("--harness-cases"):
        _load_cases(config)  # an explicit case directory must hold cases that load
    goldens = config.getoption("--harness-goldens")
    if goldens and not Path(goldens).is_dir():  # a usage error once (it was a traceback per test, or a new folder)
        raise pytest.UsageError(f"--harness-goldens: {goldens}: not a directory")
    if option_value(config, "--harness-oracle") == "live":  # a usage error once, not an error in every test
        src = config.getoption("--harness-calculon-src")
        if not src:
            raise pytest.UsageError("--harness-oracle live needs --harness-calculon-src=PATH or HARNESS_CALCULON_SRC")
        if not (Path(src) / "calculon" / "llm" / "llm.py").is_file():
            raise pytest.UsageError(f"--harness-calculon-src: {src}: not a Calculon source checkout "
                                    "(no calculon/llm/llm.py)")
    if os.environ.get("CI"):
        used = [flag for flag in UPDATE_FLAGS if option_value(config, flag)]
        if used:
            raise pytest.UsageError(f"golden updates ({', '.join(used)}) are refused under CI: "
                                    "update goldens locally with `tox -e goldens` and commit them for review")


def option_value(config: pytest.Config, flag: str):
    """The value of a command-line option of this or another plugin; None when no plugin registered it."""
    try:
        return config.getoption(flag)
    except ValueError:
        return None


def cases_dir(config: pytest.Config) -> Path:
    return Path(config.getoption("--harness-cases") or Path(config.rootpath) / "cases")


def goldens_dir(config: pytest.Config) -> Path:
    return Path(config.getoption("--harness-goldens") or Path(config.rootpath) / "goldens")


def pytest_report_header(config: pytest.Config) -> list[str]:
    from harness.errors import HarnessError
    from harness.evidence.profile import load_profile
    from harness.oracles.records import load_manifest

    lines = []
    try:
        oracle = load_manifest().oracle
        lines.append(f"harness oracle: {oracle.name} {oracle.version} source sha256 {oracle.source_tree_sha256}")
    except HarnessError as error:
        lines.append(f"harness oracle: unavailable ({error})")
    try:
        systems = sorted({c.system for c in _load_cases(config)})
        revisions = ", ".join(f"{s}@{load_profile(s).revision()[:12]}" for s in systems)
        lines.append(f"harness evidence: {revisions}")
    except HarnessError as error:
        lines.append(f"harness evidence: unavailable ({error})")
    return lines


def _load_cases(config: pytest.Config):
    """The cases of the case directory; [] only when no directory was named and the default is absent."""
    cached = getattr(config, "_harness_cases", None)
    if cached is None:
        from harness.cases import load_cases
        from harness.errors import HarnessError

        directory = cases_dir(config)
        if not config.getoption("--harness-cases") and not directory.exists():
            cached = []
        else:
            try:
                cached = load_cases(directory, option="--harness-cases")
            except HarnessError as error:
                raise pytest.UsageError(str(error)) from None
        config._harness_cases = cached
    return cached


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    cases = _load_cases(metafunc.config)
    what = "case"
    if metafunc.definition.get_closest_marker("calibration"):
        cases = [c for c in cases if c.comparison.paper is not None]
        what = "case with a paper value"
    if not cases:
        raise pytest.Collector.CollectError(f"{metafunc.definition.nodeid} needs a {what}, and {cases_dir(metafunc.config)} has "
                                "none (give --harness-cases=DIR): zero cases never pass")
    metafunc.parametrize("case", cases, ids=[c.id for c in cases], indirect=True, scope="session")


@pytest.fixture(scope="session")
def case(request):
    """One case file (parametrized over cases/*.yaml)."""
    return request.param


@pytest.fixture(scope="session")
def comparison_gate():
    """Releases comparison data only after both estimates of a case exist."""
    from harness.experiment.isolation import ComparisonGate

    return ComparisonGate()


@pytest.fixture(scope="session")
def lowering(case):
    """ModelIR, DistributedTaskIR, PortablePlanIR and pass checkpoints of the case."""
    from harness.pipeline import lower

    return lower(case.estimate_input(), case.id)


@pytest.fixture(scope="session")
def evidence_profile(case):
    from harness.evidence.profile import load_profile

    return load_profile(case.system)


def _view_fixture(view_name: str):
    @pytest.fixture(scope="session")
    def fixture(request, case, evidence_profile, comparison_gate):
        from harness.cost.views import COST_VIEWS
        from harness.estimate import estimate_lowering, estimate_mixed
        from harness.ir import blocks

        views = (COST_VIEWS[view_name],)
        data = case.estimate_input()
        if blocks.priced_by_stages(data.model, data.execution):  # two plans, no ``lowering``: each kind of block lowered on its own
            est = estimate_mixed(data, evidence_profile, views, case.id)
        else:
            est = estimate_lowering(request.getfixturevalue("lowering"), evidence_profile, views)
        comparison_gate.register_estimate(case.id, view_name)
        return est

    fixture.__doc__ = f"The {view_name} estimate of the case (an Estimate with one view)."
    return fixture


peak_only_estimate = _view_fixture(PEAK_ONLY)
evidence_estimate = _view_fixture(SYSTEM_EVIDENCE)


@pytest.fixture(scope="session")
def calculon_src(pytestconfig) -> Path:
    """The Calculon 0.1.0 checkout (``--harness-calculon-src=PATH`` or ``HARNESS_CALCULON_SRC``).

    Without one an ``oracle_live`` test is skipped, unless such tests were asked
    for (``-m oracle_live``): then it fails, so a run meant to compare with a
    live Calculon cannot pass without having compared.
    """
    source = pytestconfig.getoption("--harness-calculon-src")
    if source:
        return Path(source)
    message = "no Calculon checkout: pass --harness-calculon-src=PATH or set HARNESS_CALCULON_SRC"
    markexpr = pytestconfig.getoption("markexpr") or ""
    if "oracle_live" in markexpr.replace("not oracle_live", ""):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def oracle_source(pytestconfig):
    """The Calculon oracle: vendored records, or a live checkout."""
    from harness.oracles.calculon_oracle import LiveCalculon, RecordedCalculon

    if pytestconfig.getoption("--harness-oracle") == "live":
        src = pytestconfig.getoption("--harness-calculon-src")
        if not src:
            raise pytest.UsageError("--harness-oracle live needs --harness-calculon-src or HARNESS_CALCULON_SRC")
        return LiveCalculon(src)
    return RecordedCalculon()


@pytest.fixture(scope="session")
def calculon_oracle(case, peak_only_estimate, evidence_estimate, comparison_gate, oracle_source):
    """Calculon's view records for the case; only after both estimates."""
    comparison = comparison_gate.open(case)
    return oracle_source.views(comparison.oracle_record or case.id, case.estimate_input())


@pytest.fixture(scope="session")
def paper_holdout(case, peak_only_estimate, evidence_estimate, comparison_gate):
    """The paper value of the case (or None); only after both estimates."""
    return comparison_gate.open(case).paper


def _golden_extension():
    from syrupy.extensions.json import JSONSnapshotExtension

    class GoldenJSON(JSONSnapshotExtension):
        """JSON snapshots under <goldens>/<test module>/ (one file per snapshot)."""

        root: Path | None = None

        @classmethod
        def dirname(cls, *, test_location) -> str:
            return str(cls.root / Path(test_location.filepath).stem)

    return GoldenJSON


@pytest.fixture
def golden_snapshot(snapshot, pytestconfig):
    """A syrupy snapshot stored as JSON under goldens/<test module>/."""
    extension = getattr(pytestconfig, "_harness_golden_extension", None)
    if extension is None:
        extension = _golden_extension()
        extension.root = goldens_dir(pytestconfig)
        pytestconfig._harness_golden_extension = extension
    return snapshot.use_extension(extension)
