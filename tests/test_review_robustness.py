"""Regressions of a robustness review of main (issue 12): each hostile input gets one ``error: `` line naming the
file (or ``<command line>``) and the field, exit 2, and nothing written; checked through the real command line
(:func:`harness.cli.main`, in-process unless a signal is involved).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main

from conftest import ROOT

EVIDENCE = ROOT / "evidence"
SMALL_JSON = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64, "num_blocks": 4}


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def one_error_line(status: int, err: str, *needles) -> str:
    assert status == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert str(needle) in err, (needle, err)
    return err


def files_under(directory: Path) -> set[Path]:
    return {p.relative_to(directory) for p in directory.rglob("*")}


# --- 1. search --system is a profile name, never a path ------------------------------------------------------------

@pytest.fixture
def search_dir(tmp_path):
    (tmp_path / "small.json").write_text(json.dumps(SMALL_JSON))
    (tmp_path / "elsewhere").mkdir()
    text = (EVIDENCE / "a100_80g.yaml").read_text()
    assert text.startswith("name: a100_80g\n")
    (tmp_path / "elsewhere" / "mine.yaml").write_text(text.replace("name: a100_80g", "name: mine", 1))
    return tmp_path


def search_argv(directory: Path, system: str, *extra) -> list:
    return ["search", "--model", directory / "small.json", "--system", system, "--procs", "2", "--max-batch", "2",
            "--datatype", "float16", "--workers", "1", "--no-progress", "--output", directory / "top.json", *extra]


@pytest.mark.parametrize("system", ["elsewhere/mine.yaml", "ABS", "elsewhere/mine", "../evidence/a100_80g",
                                    "a100_80g.yaml"])
def test_search_refuses_a_profile_path(search_dir, capsys, monkeypatch, system):
    monkeypatch.chdir(search_dir)
    system = str(search_dir / "elsewhere" / "mine.yaml") if system == "ABS" else system
    before = files_under(search_dir)
    one_error_line(*run(capsys, *search_argv(search_dir, system))[::2], "<command line>: --system: ")
    assert files_under(search_dir) == before


def test_oracle_search_record_refuses_a_profile_path(search_dir, capsys, monkeypatch):
    monkeypatch.chdir(search_dir)
    vendor = search_dir / "vendor"
    status, _, err = run(capsys, "oracle", "record", "--calculon-src", "/nonexistent", "--search", "--vendor", vendor,
                         "--model", search_dir / "small.json", "--system", "elsewhere/mine.yaml", "--procs", "2",
                         "--max-batch", "2", "--output", "search/x.json")
    one_error_line(status, err, "<command line>: --system: ", "not an evidence profile name")
    assert not vendor.exists()


def test_search_reaches_a_profile_elsewhere_with_project(search_dir, capsys):
    (search_dir / "evidence").mkdir()
    shutil.move(search_dir / "elsewhere" / "mine.yaml", search_dir / "evidence" / "mine.yaml")
    status, _, err = run(capsys, "--project", search_dir, *search_argv(search_dir, "mine"))
    assert status == 0, err
    assert json.loads((search_dir / "top.json").read_text())[0]["evidence"]["profile"] == "mine"
