"""The wheel, installed in a fresh virtual environment, runs every command from any directory.

One module-scoped build: the project's build inputs are copied to a temporary
directory, built into a wheel (``pip wheel --no-build-isolation --no-index``:
no network, the test environment's setuptools), installed without
dependencies into a new venv (``--without-pip``; ``pip --python``), and the
runtime dependencies already installed here are made importable through a
``.pth`` file (only their directories: the checkout's editable install is not
among them). Commands then run from a directory outside any project, so they
can only use the packaged data (``harness/_data``), and with ``--project``,
``HARNESS_PROJECT`` and discovery from the working directory. Every command
runs at least once on a tiny input (search, the evidence and oracle
commands through one interpreter: :meth:`Installed.run_many`), and its
outputs equal the checkout's.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from harness.cases import load_case
from harness.commands.estimate import estimate_json
from harness.estimate import estimate

from conftest import CASES_DIR, ROOT

BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "harness", "evidence", "cases",
                "vendor/calculon-0.1.0", "goldens/baseline_regression_contract.json")
#: Modules of the runtime dependencies (pyproject ``dependencies``; a test checks it names every one) and of
#: pydantic's own.
RUNTIME_DEPENDENCIES = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions", "numpy", "yaml", "rich",
                        "matplotlib", "scipy", "dask", "distributed", "pyarrow")
CASE = "gpt3-175B_seqsel"


class Installed:
    """A venv with the wheel installed, and a working directory outside any project."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "venv" / "bin" / "python"
        self.work = root / "elsewhere" / "deep"

    def run_many(self, commands: list[list], cwd: Path) -> tuple[list[tuple[int, str]], str]:
        """(exit code, standard output) of each of ``commands``, and their standard error; each runs through the
        installed ``harness.cli.main`` (what ``python -m harness`` runs) in ONE interpreter of the venv: one
        start-up for many commands."""
        results = self.root / "results.json"
        driver = ("import contextlib, io, json, sys\nfrom harness.cli import main\nresults = []\n"
                  "for argv in json.loads(sys.argv[1]):\n"
                  "    out = io.StringIO()\n"
                  "    with contextlib.redirect_stdout(out):\n"
                  "        results.append((main(argv), out.getvalue()))\n"
                  "open(sys.argv[2], 'w').write(json.dumps(results))\n")
        environment = {"PATH": f"{self.python.parent}:/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg"}
        run = subprocess.run([str(self.python), "-c", driver, json.dumps([[str(a) for a in c] for c in commands]),
                              str(results)], cwd=cwd, env=environment, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        return [tuple(r) for r in json.loads(results.read_text())], run.stderr

    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            expect: int = 0) -> subprocess.CompletedProcess:
        environment = {"PATH": f"{self.python.parent}:/usr/bin:/bin", "HOME": str(self.root), "MPLBACKEND": "Agg",
                       **(env or {})}
        run = subprocess.run([str(self.python), "-m", "harness", *args], cwd=cwd or self.work, env=environment,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == expect, f"{args}: exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
        return run


def _copy_build_inputs(destination: Path) -> None:
    for relative in BUILD_INPUTS:
        source = ROOT / relative
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.obtained*", "_data"))
        else:
            shutil.copy2(source, target)


@pytest.fixture(scope="session")
def installed(tmp_path_factory, worker_id) -> Installed:
    """Built once per test session: pytest-xdist workers share one build (the first builds, under a file lock)."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    root = shared / "wheel"
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "ready").exists():
            shutil.rmtree(root, ignore_errors=True)
            _build_and_install(root)
            (root / "ready").write_text("")
    return Installed(root)


def _build_and_install(root: Path) -> None:
    source, dist = root / "source", root / "dist"
    _copy_build_inputs(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                    "--wheel-dir", str(dist), str(source)], check=True, capture_output=True, text=True)
    wheel, = dist.glob("blueprinting_harness-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "venv" / "bin" / "python"), "install",
                    "--quiet", "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, text=True)
    purelib = subprocess.run([str(root / "venv" / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    dependency_dirs = {str(Path(importlib.import_module(name).__file__).parents[1]) for name in RUNTIME_DEPENDENCIES}
    assert str(ROOT) not in dependency_dirs
    (Path(purelib) / "_test_dependencies.pth").write_text("\n".join(sorted(dependency_dirs)) + "\n")
    (root / "elsewhere" / "deep").mkdir(parents=True)
    shutil.copy(CASES_DIR / f"{CASE}.yaml", root / "elsewhere" / "deep" / "case.yaml")


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    run = subprocess.run([str(installed.python), "-c", "import harness, harness.locations as l; "
                          "print(harness.__file__); print(l.current().describe())"],
                         cwd=installed.work, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    module, description = run.stdout.splitlines()
    assert module.startswith(str(installed.root / "venv")) and not module.startswith(str(ROOT))
    assert description == f"project: none; packaged data: {Path(module).parent / '_data'}"


def test_estimate_from_another_directory_uses_the_packaged_evidence(installed):
    from harness.commands.estimate import case_json, case_throughput

    out = json.loads(installed.run("estimate", "case.yaml", "--json").stdout)
    case = load_case(CASES_DIR / f"{CASE}.yaml")
    est = estimate(case.estimate_input())
    expected = [case_json(case.id, est, case_throughput("x", case.estimate_input(), est))]
    assert out == expected  # the checkout's own estimate
    # issue 23.4: the packaged case by name, from a directory without a project, through the installed wheel
    assert json.loads(installed.run("estimate", CASE, "--json").stdout) == expected


def test_every_command_runs_from_another_directory(installed, tmp_path):
    """lower, explain, trace, calibrate, contract check, import calculon and a Calculon batch (in one
    interpreter: :meth:`Installed.run_many`; ``python -m harness`` itself runs in the other tests)."""
    from harness.cli import main
    from harness.interop.calculon_format import calculon_from_input

    model, execution = tmp_path / "m.json", tmp_path / "e.json"
    m, e = calculon_from_input(load_case(CASES_DIR / f"{CASE}.yaml").estimate_input())
    model.write_text(json.dumps(m))
    execution.write_text(json.dumps(e))
    shutil.copy(ROOT / "docs" / "examples" / "calculon-batch.jsonl", tmp_path / "batch.jsonl")
    results, errors = installed.run_many([
        ["lower", "case.yaml", "--stage", "distributed"],
        ["explain", "case.yaml", "--json"],
        ["trace", "case.yaml", "--output", tmp_path / "t.json"],
        ["calibrate", "--output", tmp_path / "report.json"],
        ["contract", "check"],
        ["import", "calculon", "--model", model, "--execution", execution, "--system", "a100_80g", "-o",
         tmp_path / "imported.yaml"],
        ["estimate", "--calculon-batch", tmp_path / "batch.jsonl", "--output", tmp_path / "out.json"],
    ], cwd=installed.work)
    codes = [code for code, _ in results]
    assert codes == [0, 0, 0, 0, 0, 0, 1], errors  # the batch example's last line is invalid
    lower, explain, trace, calibrate, contract = (out for _, out in results[:5])
    assert "sha256:" in lower
    assert json.loads(explain)[0]["id"] == "gpt3-175B/seqsel"
    assert "closed form" in trace
    assert "budgets: all met" in calibrate and "peak-only vs Calculon MAPE: 12.99%" in calibrate
    assert "honoured" in contract
    original = load_case(CASES_DIR / f"{CASE}.yaml").estimate_input()
    assert load_case(tmp_path / "imported.yaml").estimate_input() == original
    assert main(["estimate", "--calculon-batch", str(tmp_path / "batch.jsonl"), "--output",
                 str(tmp_path / "checkout.json")]) == 1
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads((tmp_path / "checkout.json").read_text())


def _command_inputs(directory: Path) -> dict[str, Path]:
    """Tiny inputs of search, the evidence importers, fit and report, and oracle import-reference."""
    from test_measurements import HEADER, _priced_records, nccl_text, write_lines

    directory.mkdir(parents=True)
    paths = {name: directory / name for name in ("small.json", "vtrain.csv", "table4.json", "nccl.txt", "c.jsonl",
                                                 "sweeps.jsonl", "reference.json")}
    paths["small.json"].write_text(json.dumps(SMALL_MODEL))
    paths["vtrain.csv"].write_text(
        "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
        "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
        "8,16,2,2048,16,24,1024,2,1,4,512.5\n")
    paths["table4.json"].write_text(json.dumps({
        "model": SMALL_MODEL, "execution": {"tensor_par": 2, "pipeline_par": 1, "data_par": 1, "batch_size": 4,
                                            "microbatch_size": 4},
        "rows": [{"sequence_parallel": True, "recompute": "attn_only", "forward_ms": 1.5, "backward_ms": 3.25}]}))
    paths["nccl.txt"].write_text(nccl_text(8, [2**20, 2**24, 2**28], [20.0, 120.0, 220.0], csv=False))
    write_lines(paths["c.jsonl"], HEADER, *_priced_records(8))
    shutil.copy(ROOT / "measurements" / "vtrain" / "vtrain-allreduce-a100.jsonl", paths["sweeps.jsonl"])
    vendored = json.loads((ROOT / "vendor" / "calculon-0.1.0" / "records" / "cases.json").read_text())
    first = vendored["records"][0]
    paths["reference.json"].write_text(json.dumps({
        "meta": {"source_tree_sha256": vendored["oracle"]["source_tree_sha256"]},
        "records": [{"case": first["id"], "system": first["system"], "model": first["calculon_model"],
                     "execution": first["calculon_execution"],
                     **{view: body["stats"] for view, body in first["views"].items()}}]}))
    return paths


def _commands(inputs: dict[str, Path], out: Path, project: Path, cases: Path, workers: int) -> list[list]:
    """Every command family on the tiny inputs, writing into ``out`` (and the project's evidence/)."""
    i = inputs
    corpora = ["--measurements", i["c.jsonl"], i["sweeps.jsonl"]]
    return [
        ["search", "--model", i["small.json"], "--system", "a100_80g", "--procs", "2", "--max-batch", "2",
         "--datatype", "float16", "--top", "3", "--workers", str(workers), "--no-progress", "--output",
         out / "top.json", "--results", out / "all.parquet"],
        ["evidence", "import", "vtrain", i["vtrain.csv"], "--output", out / "vtrain.jsonl"],
        ["evidence", "import", "korthikanti", "--table4", i["table4.json"], "--cases", cases, "--output",
         out / "korthikanti.jsonl"],
        ["evidence", "import", "nccl-tests", i["nccl.txt"], "--tier", "0", "--output", out / "nccl.jsonl"],
        ["--project", project, "evidence", "fit", "--base", "a100_80g", *corpora, "--output",
         project / "evidence" / "tiny.yaml"],
        ["--project", project, "evidence", "report", "--profile", "tiny", "--base", "a100_80g", *corpora,
         "--output", out / "report.json"],
        ["oracle", "import-reference", i["reference.json"], "--output", "records/one.json", "--vendor",
         out / "vendor"],
        ["oracle", "record", "--calculon-src", out / "no-calculon", "--cases", cases, "--output", "records/x.json",
         "--vendor", out / "vendor"],
    ]


#: Exit codes: report breaks its budgets on eight records of one shape (1); record has no Calculon (2).
EXPECTED_EXITS = [0, 0, 0, 0, 0, 1, 0, 2]
SMALL_MODEL = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64,
               "num_blocks": 4}


def test_search_evidence_and_oracle_commands_give_the_checkouts_results(installed, tmp_path):
    """search (on a 2-worker LocalCluster: dask, distributed and pyarrow from the venv), the three evidence
    importers, evidence fit (scipy) and report, oracle import-reference and oracle record, from another
    directory; each output equals the checkout's own (in-process, search in one worker)."""
    from harness.cli import main

    inputs = _command_inputs(tmp_path / "inputs")
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(CASES_DIR / f"{CASE}.yaml", cases)
    results = {}
    for where in ("wheel", "checkout"):
        out, project = tmp_path / where, tmp_path / f"{where}-project"
        (project / "evidence").mkdir(parents=True)
        (out / "vendor").mkdir(parents=True)
        shutil.copy(ROOT / "vendor" / "calculon-0.1.0" / "MANIFEST.json", out / "vendor")
        if where == "wheel":
            ran, errors = installed.run_many(_commands(inputs, out, project, cases, workers=2), installed.work)
            codes = [code for code, _ in ran]
        else:
            codes, errors = [main([str(a) for a in argv]) for argv in _commands(inputs, out, project, cases, 1)], ""
        assert codes == EXPECTED_EXITS, f"{where}: {errors}"
        results[where] = {name: (out / name).read_text() for name in (
            "top.json", "vtrain.jsonl", "korthikanti.jsonl", "nccl.jsonl", "vendor/records/one.json")}
        results[where]["tiny.yaml"] = (project / "evidence" / "tiny.yaml").read_text()
        results[where]["report"] = json.loads((out / "report.json").read_text())
        results[where]["rows"] = pq.read_table(out / "all.parquet").num_rows
    assert results["wheel"] == results["checkout"]
    assert results["wheel"]["rows"] == 2128  # the space of 1024-wide, 4-block on 2 processors, batch 2
    assert [t["execution"]["tensor_par"] for t in json.loads(results["wheel"]["top.json"])] != []
    vendored = json.loads((ROOT / "vendor" / "calculon-0.1.0" / "records" / "cases.json").read_text())["records"][0]
    assert json.loads(results["wheel"]["vendor/records/one.json"])["records"] == [vendored]
    assert "name: tiny" in results["wheel"]["tiny.yaml"]


def test_outputs_need_a_project_and_never_go_into_the_package(installed):
    run = installed.run("contract", "write", expect=2)
    assert run.stderr.startswith("error: the baseline contract is written into a project directory")
    assert run.stderr.count("\n") == 1


def _project(root: Path, peak_flops_per_s: float) -> Path:
    """A project directory whose a100_80g profile has another matrix peak (shadowing the packaged one)."""
    (root / "evidence").mkdir(parents=True)
    profile = yaml.safe_load((ROOT / "evidence" / "a100_80g.yaml").read_text())
    profile["matrix"]["float16"]["peak_flops_per_s"] = peak_flops_per_s
    (root / "evidence" / "a100_80g.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return root


def test_project_directory_by_option_environment_and_discovery(installed, tmp_path):
    packaged = json.loads(installed.run("estimate", "case.yaml", "--json").stdout)[0]["views"]
    project = _project(tmp_path / "project", 2.0e14)
    by_option = installed.run("--project", str(project), "estimate", "case.yaml", "--json").stdout
    after_command = installed.run("estimate", "case.yaml", "--json", "--project", str(project)).stdout
    by_environment = installed.run("estimate", "case.yaml", "--json", env={"HARNESS_PROJECT": str(project)}).stdout
    (project / "sub").mkdir()
    discovered = installed.run("estimate", str(installed.work / "case.yaml"), "--json", cwd=project / "sub").stdout
    assert by_option == after_command == by_environment == discovered
    views = json.loads(by_option)[0]["views"]
    assert views["peak_only"]["components_s"]["forward"] > packaged["peak_only"]["components_s"]["forward"]
    assert views["peak_only"]["memory_bytes"] == packaged["peak_only"]["memory_bytes"]
    missing = installed.run("--project", str(tmp_path / "nope"), "estimate", "case.yaml", expect=2)
    assert missing.stderr == f"error: {tmp_path / 'nope'}: --project: not a directory\n"


def test_the_runtime_dependencies_name_every_dependency_of_the_project():
    """Each ``dependencies`` entry of pyproject.toml (and each extra it asks for: ``dask[distributed]``) is
    the distribution of a module in RUNTIME_DEPENDENCIES, so the installed wheel imports what it declares."""
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    def normal(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    distributions = packages_distributions()
    covered = {normal(d) for module in RUNTIME_DEPENDENCIES for d in distributions.get(module, ())}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in declared:
        name, extras = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", requirement).groups()
        for needed in [name, *(extras.split(",") if extras else [])]:
            assert normal(needed.strip()) in covered, requirement


def test_the_test_environment_builds_without_the_network():
    """The build above needs setuptools (>= the build-system's) and wheel here: the test extra installs them."""
    import setuptools
    import wheel  # noqa: F401

    assert int(setuptools.__version__.split(".")[0]) >= 68
    assert sysconfig.get_paths()["purelib"] and os.path.isfile(ROOT / "setup.py")


@pytest.mark.parametrize("system", ["a100_measured", "a100_measured_fused_accumulation"])
def test_the_packaged_measured_revision_estimates_batch_lines(installed, tmp_path, system):
    from harness.interop.calculon_format import calculon_from_input

    data = load_case(CASES_DIR / f"{CASE}.yaml").estimate_input().model_copy(update={"system": system})
    m, e = calculon_from_input(data)
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"id": "x", "model": m, "execution": e, "system": system}) + "\n")
    installed.run("estimate", "--calculon-batch", str(batch), "--output", str(tmp_path / "out.json"))
    out = json.loads((tmp_path / "out.json").read_text())
    assert out[0]["status"] == "ok"
    assert out[0]["views"]["system_evidence"]["total_s"] == estimate(data).views["system_evidence"].total_s
