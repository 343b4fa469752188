"""How the harness finds its data (harness.locations): precedence, discovery, shadowing, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import locations
from harness.errors import HarnessError, InputError
from harness.locations import Locations, discover, resolve

from conftest import ROOT


def test_explicit_project_beats_the_environment_which_beats_discovery(tmp_path):
    (tmp_path / "a" / "cases").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    start = tmp_path / "a" / "x" / "y"
    start.mkdir(parents=True)
    env = {"HARNESS_PROJECT": str(tmp_path / "b")}
    assert resolve(tmp_path / "b", cwd=start, environ={}).project == tmp_path / "b"
    assert resolve(tmp_path / "a", cwd=start, environ=env).origin == "--project"
    by_env = resolve(cwd=start, environ=env)
    assert (by_env.project, by_env.origin) == (tmp_path / "b", "$HARNESS_PROJECT")
    found = resolve(cwd=start, environ={"HARNESS_PROJECT": ""})
    assert (found.project, found.origin) == (tmp_path / "a", "working directory")


def test_discovery_stops_at_the_nearest_project(tmp_path):
    (tmp_path / "outer" / "evidence").mkdir(parents=True)
    (tmp_path / "outer" / "inner" / "cases").mkdir(parents=True)
    assert discover(tmp_path / "outer" / "inner") == tmp_path / "outer" / "inner"
    assert discover(tmp_path / "outer") == tmp_path / "outer"


@pytest.mark.parametrize("env", [False, True])
def test_a_project_that_is_not_a_directory_is_a_one_line_input_error(tmp_path, env):
    missing = tmp_path / "missing"
    with pytest.raises(InputError) as info:
        resolve(None if env else missing, environ={"HARNESS_PROJECT": str(missing)} if env else {})
    assert str(info.value) == f"{missing}: {'HARNESS_PROJECT' if env else '--project'}: not a directory"


def test_project_profiles_shadow_packaged_ones_and_the_rest_falls_back(tmp_path):
    packaged = tmp_path / "packaged"
    for relative in ("evidence/a.yaml", "evidence/b.yaml", "cases/x.yaml", "vendor/calculon-0.1.0/MANIFEST.json",
                     "goldens/baseline_regression_contract.json"):
        (packaged / relative).parent.mkdir(parents=True, exist_ok=True)
        (packaged / relative).write_text("")
    project = tmp_path / "project"
    (project / "evidence").mkdir(parents=True)
    (project / "evidence" / "a.yaml").write_text("")
    where = Locations(project, "--project", packaged)
    assert where.profile_path("a") == project / "evidence" / "a.yaml"
    assert where.profile_path("b") == packaged / "evidence" / "b.yaml"
    assert where.profile_path("c") == project / "evidence" / "c.yaml"  # missing: named where it was looked for first
    assert (where.cases_dir(), where.vendor_dir(), where.contract_path()) == (
        packaged / "cases", packaged / "vendor" / "calculon-0.1.0",
        packaged / "goldens" / "baseline_regression_contract.json")
    assert where.writable(Path("goldens") / "c.json", "x") == project / "goldens" / "c.json"
    with pytest.raises(HarnessError, match="^the contract is written into a project directory: give --project DIR"):
        Locations(None, "working directory", packaged).writable(Path("c.json"), "the contract")
    with pytest.raises(HarnessError, match="no evidence profile 'a': no project directory and no packaged data"):
        Locations(None, "none", None).profile_path("a")


def test_a_profile_is_the_first_regular_file_with_its_status(tmp_path):
    """``profile_file`` (what ``load_profile`` reads): a directory or a dangling link named like a profile in
    the project is passed over for the packaged file; a link to a file counts; the status is that file's."""
    packaged, project = tmp_path / "packaged", tmp_path / "project"
    for name in ("a", "b", "c"):
        (packaged / "evidence").mkdir(parents=True, exist_ok=True)
        (packaged / "evidence" / f"{name}.yaml").write_text(name * 3)
    (project / "evidence" / "a.yaml").mkdir(parents=True)
    (project / "evidence" / "b.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "real.yaml").write_text("linked")
    (project / "evidence" / "c.yaml").symlink_to(tmp_path / "real.yaml")
    where = Locations(project, "--project", packaged)
    for name, expected in (("a", packaged / "evidence" / "a.yaml"), ("b", packaged / "evidence" / "b.yaml"),
                           ("c", project / "evidence" / "c.yaml")):
        path, status = where.profile_file(name)
        assert path == expected and status.st_size == len(path.read_text()) and status.st_ino == path.stat().st_ino
    assert where.profile_file("d") == (project / "evidence" / "d.yaml", None)
    assert locations.regular_file_status(project / "evidence") is None


def test_a_source_checkout_is_its_own_packaged_data():
    assert locations.packaged_root() == ROOT


def test_the_command_line_configures_the_process(tmp_path, capsys):
    from harness.cli import main

    assert main(["--project", str(tmp_path / "nope"), "contract", "check"]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'}: --project: not a directory\n"
    assert main(["lower", str(ROOT / "cases" / "megatron-22B_full.yaml"), "--project", str(tmp_path)]) == 0


def test_a_command_run_in_process_leaves_no_project_behind(tmp_path):
    """``main([... --project X])`` sets the locations for that command only: a later in-process caller (a test,
    the wheel check) still finds its own project. Before, the other project's evidence/ stayed configured and a
    later ``load_profile`` read that project's profile of the same name (an order-dependent wrong price)."""
    from harness import locations
    from harness.cli import main

    (tmp_path / "evidence").mkdir()
    locations.reset()
    before = locations.current().project
    assert main(["lower", str(ROOT / "cases" / "megatron-22B_full.yaml"), "--project", str(tmp_path)]) == 0
    assert locations.current().project == before != tmp_path
