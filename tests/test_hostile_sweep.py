"""Regression tests for what the hostile-input sweep (``scripts/hostile_sweep.py``) found on main after issue 12.

One test per class of defect, each through the real command line (``harness.cli.main``, in-process) and each
asserting the rule, not today's text: one ``error:`` line naming the file or option, a non-zero exit, nothing
written. The sweep itself runs every command on every file kind (minutes); these run in seconds.
"""

from __future__ import annotations

import json
import os
import re

import pytest


from conftest import CASES_DIR, ROOT, one_error_line, run_cli as run

EVIDENCE = ROOT / "evidence"
MODEL = {"hidden": 6144, "feedforward": 24576, "seq_size": 2048, "attn_heads": 64, "attn_size": 96, "num_blocks": 48}


# ------------------------------------------------------------------------------------------- command line

@pytest.mark.parametrize("argv,needles", [
    ([], ("python -m harness:", "COMMAND")),
    (["frobnicate"], ("invalid choice: 'frobnicate'",)),
    (["trace", "c.yaml", "--output", "t.json", "--max-operations", "1e3"], ("--max-operations", "invalid int")),
    (["trace", "c.yaml"], ("python -m harness trace:", "--output")),
    (["estimate", "--view", "nope", "c.yaml"], ("--view", "invalid choice")),
    (["lower", "--json", "--canonical", "c.yaml"], ("--canonical", "not allowed with argument --json")),
    (["contract", "nope"], ("invalid choice: 'nope'",)),
    (["evidence", "import", "nccl-tests", "--tier", "x"], ("python -m harness evidence import nccl-tests:",
                                                           "--tier")),
])
def test_a_bad_command_line_is_one_error_line(capsys, argv, needles):
    """argparse printed its usage block and then the message: two lines, against the error rule."""
    one_error_line(*run(capsys, *argv)[::2], *needles)


@pytest.mark.parametrize("argv,option", [
    (["trace", "{case}", "--output", "{tmp}/t.json", "--png", ""], "--png"),
    (["calibrate", "--output", "{tmp}/r.json", "--plots", ""], "--plots"),
    (["calibrate", "--cases", "", "--output", "{tmp}/r.json"], "--cases"),
    (["contract", "check", "--cases", ""], "--cases"),
    (["estimate", ""], "CASE"),
    (["estimate", "{case}", "--output", ""], "--output"),
    (["import", "calculon", "--model", "m.json", "--execution", "e.json", "--system", ""], "--system"),
    (["--project", "", "estimate", "{case}"], "--project"),
])
def test_an_empty_value_is_refused(tmp_path, capsys, argv, option):
    """``--png ""`` silently drew no PNG and ``--plots ""`` wrote into the working directory (``Path("")`` is
    ``.``); ``--cases ""`` calibrated the working directory."""
    argv = [a.format(case=CASES_DIR / "megatron-22B_full.yaml", tmp=tmp_path) for a in argv]
    one_error_line(*run(capsys, *argv)[::2], f"argument {option}: an empty value")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------- paths

def test_symbolic_link_loops_are_named_never_an_internal_error(tmp_path, capsys, monkeypatch):
    """``Path.resolve`` raises RuntimeError on a link loop (Python 3.11): ``evidence fit`` on a looping corpus
    path was ``error: internal error RuntimeError``."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    corpus = ROOT / "measurements" / "korthikanti22.jsonl"
    for argv, needles in [
        (["evidence", "fit", "--base", "a100_80g", "--measurements", loop, "--output", tmp_path / "f.yaml"],
         (str(loop),)),
        (["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g", "--measurements", corpus,
          "--check", loop, "--output", tmp_path / "r.json"], (str(loop),)),
        (["--project", loop, "estimate", CASES_DIR / "megatron-22B_full.yaml"], (str(loop), "--project")),
        (["calibrate", "--cases", loop, "--output", tmp_path / "r.json"], (str(loop), "--cases")),
        (["calibrate", "--oracle", "live", "--calculon-src", loop, "--output", tmp_path / "r.json"], (str(loop),)),
        (["estimate", loop], (str(loop),)),
    ]:
        one_error_line(*run(capsys, *argv)[::2], *needles)
    monkeypatch.setenv("HARNESS_PROJECT", str(loop))
    one_error_line(*run(capsys, "estimate", CASES_DIR / "megatron-22B_full.yaml")[::2], "HARNESS_PROJECT")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


# ------------------------------------------------------------------------------------------ process counts

def test_worker_counts_are_bounded_before_any_process_starts(tmp_path, capsys):
    """``search --workers 100000`` started a LocalCluster of 100 000 processes; ``oracle record --cpus`` went to
    Calculon's process pool unchecked (0 silently meant every core)."""
    model = tmp_path / "m.json"
    model.write_text(json.dumps(MODEL))
    bound = 4 * (os.cpu_count() or 1)
    search = ["search", "--model", model, "--system", "a100_80g", "--procs", "8", "--max-batch", "8", "--datatype",
              "float16", "--no-progress"]
    one_error_line(*run(capsys, *search, "--workers", str(bound + 1))[::2], "--workers", f"must be at most {bound}")
    one_error_line(*run(capsys, *search, "--workers", "100000")[::2], "--workers", "not 100000")
    record = ["--project", tmp_path, "oracle", "record", "--calculon-src", tmp_path, "--search", "--model", model,
              "--system", "a100_80g", "--procs", "8", "--max-batch", "8", "--output", "search/x.json"]
    (tmp_path / "evidence").mkdir()
    for cpus, message in [("0", "must be a positive integer, not 0"), ("-3", "not -3"),
                          (str(bound + 1), f"must be at most {bound}")]:
        one_error_line(*run(capsys, *record, "--cpus", cpus)[::2], "--cpus", message)
    assert not (tmp_path / "vendor").exists()


# --------------------------------------------------------------------------------------------------- evidence

MEASURED = (EVIDENCE / "a100_measured.yaml").read_text()


def _measured(tmp_path, old_pattern: str, new: str):
    """a100_measured with one edit of its body, as a hand-made profile: without its fit block, which states the
    fitted values (an edited body is no longer what was fitted: harness.evidence.profile refuses the pair)."""
    project = tmp_path / "project"
    (project / "evidence").mkdir(parents=True)
    unfitted = re.sub(r"\nfit:\n(?:[ -].*\n)*", "\n", MEASURED)  # the top-level fit section, to the next key
    assert "\nfit:" not in unfitted and "\nschema_name: " in unfitted
    text, count = re.subn(old_pattern, new, unfitted, count=1)
    assert count == 1, old_pattern
    (project / "evidence" / "a100_measured.yaml").write_text(text)
    return project


@pytest.mark.parametrize("pattern,new,field", [
    (r"half_size: [0-9.e+]+", "half_size: 1.0e300", "operation_size_efficiency.saturating.half_size"),
    (r"half_size: [0-9.e+]+", "half_size: 1.000001e18", "half_size"),
    (r"size_bytes: [0-9.e+]+", "size_bytes: 5.0e299", "points.0.size_bytes"),
    (r"threshold: [0-9.e+]+", "threshold: 1.0e300", "threshold"),
])
def test_request_sizes_beyond_1e18_are_refused(tmp_path, capsys, pattern, new, field):
    """A saturating ``half_size`` of 1e300 (within the old 1e300 bound) gave ``ok`` with a 5.9e288 s iteration:
    finite, non-negative and meaningless. The bound is printed as 1e+18, not as its 19 digits."""
    project = _measured(tmp_path, pattern, new)
    case = tmp_path / "c.yaml"
    case.write_text((CASES_DIR / "megatron-22B_full.yaml").read_text().replace("system: a100_80g",
                                                                             "system: a100_measured"))
    err = one_error_line(*run(capsys, "--project", project, "estimate", case)[::2], "a100_measured.yaml", field,
                         "less than or equal to 1e+18, got")
    assert not re.search(r"\d{16,}", err), err


def test_request_sizes_at_1e18_give_finite_figures(tmp_path, capsys):
    """The bound itself is valid evidence, and every figure it gives is finite and non-negative."""
    project = _measured(tmp_path, r"half_size: [0-9.e+]+", "half_size: 1.0e18")
    case = tmp_path / "c.yaml"
    case.write_text((CASES_DIR / "megatron-22B_full.yaml").read_text().replace("system: a100_80g",
                                                                             "system: a100_measured"))
    status, out, err = run(capsys, "--project", project, "estimate", "--json", case)
    assert status == 0, err
    (entry,) = json.loads(out)
    view = entry["views"]["system_evidence"]
    figures = [view["total_s"], *view["components_s"].values()]
    assert all(0 <= f < float("inf") for f in figures)
    # half_size 1e18 operations: every GEMM pays at least 1e18 / (peak x max efficiency) seconds
    peak = 312e12
    efficiency = float(re.search(r"max_efficiency: ([0-9.]+)", MEASURED).group(1))
    assert view["components_s"]["forward"] > 1e18 / (peak * efficiency)


@pytest.mark.parametrize("version", ["false", "0.0", "'0'", "1"])
def test_a_profile_version_is_the_integer_0_not_something_equal_to_it(version):
    """``False == 0 == 0.0`` in Python: a header compared by equality took ``schema_version: false``."""
    from harness.errors import EvidenceError
    from harness.evidence.profile import parse_profile

    text = (EVIDENCE / "a100_80g.yaml").read_text()
    assert "\nschema_version: 0\n" in text
    parse_profile(text.encode(), "x.yaml")  # the shipped header is accepted
    with pytest.raises(EvidenceError) as info:
        parse_profile(text.replace("\nschema_version: 0\n", f"\nschema_version: {version}\n").encode(), "x.yaml")
    assert str(info.value).startswith("x.yaml: schema_name: ") and "\n" not in str(info.value), str(info.value)
