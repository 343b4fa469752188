"""Issue 23 (4, 5, 8, 2's error): cases by name from any directory, `list`, infeasible results exit 1 and say so
first, `--system` on every command that prices, `--version`, the program's own name, help for every option."""

from __future__ import annotations

import argparse
import json

import pytest

from harness import locations
from harness.cases import load_case
from harness.cli import build_parser, program_name
from harness.estimate import estimate

from conftest import CASES_DIR, ROOT, one_error_line, run_cli


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory that is no project (no evidence/ or cases/ in it or above it)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(locations.ENV_PROJECT, raising=False)
    yield work
    locations.reset()


def infeasible_case(tmp_path):
    """Megatron-22B full recompute on ONE A100 (TP 1): 368 GB of tier-1 memory needed, 80 GiB there."""
    text = (CASES_DIR / "megatron-22B_full.yaml").read_text()
    path = tmp_path / "infeasible.yaml"
    path.write_text(text.replace("tensor_parallel: 8", "tensor_parallel: 1").replace("id: megatron-22B/full",
                                                                                       "id: one-gpu"))
    return path


def test_a_packaged_case_is_named_from_another_directory(elsewhere, capsys):
    assert locations.resolve(cwd=elsewhere).project is None
    expected = estimate(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input())
    for argument in ("megatron-22B_full", "megatron-22B_full.yaml", "cases/megatron-22B_full.yaml",
                     "concurrency/megatron-22B_overlap"):
        status, out, err = run_cli(capsys, "estimate", argument, "--json")
        assert status == 0, err
        if argument.startswith(("megatron", "cases")):
            assert json.loads(out)[0]["views"]["system_evidence"]["total_s"] == \
                expected.views["system_evidence"].total_s


def test_an_unknown_case_name_is_one_line_saying_where_it_looked(elsewhere, capsys):
    err = one_error_line(*run_cli(capsys, "estimate", "megatron-22B_fulll")[::2], "megatron-22B_fulll",
                         str(ROOT / "cases"), "harness list cases")
    assert "no such file, and no case of that name" in err


def test_list_names_every_packaged_case_and_profile_from_another_directory(elsewhere, capsys):
    status, out, _ = run_cli(capsys, "list", "cases")
    rows = [line.split() for line in out.splitlines()]
    assert status == 0
    names = {p.relative_to(CASES_DIR).with_suffix("").as_posix() for p in CASES_DIR.rglob("*.yaml")}
    assert {r[0] for r in rows} == names and len(rows) == len(names)
    assert ["megatron-22B_full", "megatron-22B/full", "a100_80g"] in [r[:3] for r in rows]
    status, out, _ = run_cli(capsys, "list", "profiles")
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert status == 0 and set(rows) == {p.stem for p in (ROOT / "evidence").glob("*.yaml")}
    assert rows["h100_80g_nvl8"] == "float8,float16" and rows["a100_80g"] == "float16"


@pytest.mark.parametrize("command", [["estimate"], ["estimate", "--json"], ["explain"], ["explain", "--json"],
                                     ["explain", "--by-task"], ["trace", "--output", "{tmp}/t.json"]])
def test_an_infeasible_case_exits_1_and_says_so_first(tmp_path, capsys, command):
    path = infeasible_case(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    status, out, err = run_cli(capsys, argv[0], path, *argv[1:])
    assert status == 1, err
    assert "1 of 1 case(s) infeasible" in err
    if "--json" in argv:
        assert json.loads(out)[0]["status"] == "infeasible"
        assert "memory tier 1 needs" in json.loads(out)[0]["reason"]
    else:
        assert out.splitlines()[0].startswith("one-gpu: INFEASIBLE on a100_80g: memory tier 1 needs 368")


def test_a_feasible_case_still_exits_0(capsys):
    for argv in (["estimate", "megatron-22B_full"], ["explain", "megatron-22B_full"]):
        status, out, _ = run_cli(capsys, *argv)
        assert status == 0 and "INFEASIBLE" not in out


def test_system_prices_the_case_on_another_profile_in_every_command(tmp_path, capsys):
    case = load_case(CASES_DIR / "megatron-22B_full.yaml")
    h100 = estimate(case.estimate_input().model_copy(update={"system": "h100_80g_nvl8"}))
    a100 = estimate(case.estimate_input())
    assert h100.views["system_evidence"].total_s != a100.views["system_evidence"].total_s
    status, out, _ = run_cli(capsys, "estimate", "megatron-22B_full", "--system", "h100_80g_nvl8", "--json")
    assert status == 0 and json.loads(out)[0]["views"]["system_evidence"]["total_s"] == \
        h100.views["system_evidence"].total_s
    status, out, _ = run_cli(capsys, "explain", "megatron-22B_full", "--system", "h100_80g_nvl8", "--json")
    assert status == 0 and json.loads(out)[0]["system_evidence_total_s"] == h100.views["system_evidence"].total_s
    status, out, _ = run_cli(capsys, "trace", "megatron-22B_full", "--system", "h100_80g_nvl8",
                             "--output", tmp_path / "t.json")
    assert status == 0 and f"closed form {h100.views['system_evidence'].total_s:.6f} s" in out
    status, out, _ = run_cli(capsys, "lower", "megatron-22B_full", "--system", "h100_80g_nvl8", "--json")
    assert status == 0 and json.loads(out)["digest"] == h100.digests["portable_plan_ir"]


def test_a_bad_system_is_the_options_error(capsys):
    one_error_line(*run_cli(capsys, "estimate", "megatron-22B_full", "--system", "nosuch")[::2],
                   "--system", "no evidence profile named 'nosuch'")


def test_a_missing_datatype_lists_the_profiles_datatypes_and_how_to_add_one(tmp_path, capsys):
    path = tmp_path / "bf16.yaml"
    path.write_text((CASES_DIR / "megatron-22B_full.yaml").read_text().replace("float16", "bfloat16"))
    err = one_error_line(*run_cli(capsys, "estimate", path, "--system", "h100_80g_nvl8")[::2], path,
                         "execution.datatype", "no bfloat16 matrix engine", "its datatypes: float8, float16",
                         "evidence/h100_80g_nvl8.yaml", "`matrix: bfloat16:`", "docs/cases.md")
    assert err


def test_version_and_the_programs_own_name(capsys):
    status, out, _ = run_cli(capsys, "--version")
    assert status == 0 and out.startswith(f"{program_name()} 0.1.0")
    assert program_name("/usr/local/bin/harness") == "harness"
    assert program_name("/x/harness/__main__.py") == "python -m harness"


def _actions(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        else:
            yield path, action


def test_every_option_and_argument_of_every_command_has_help():
    missing = [(" ".join(path), a.option_strings or a.dest) for path, a in _actions(build_parser()) if not a.help]
    assert not missing, f"give these command-line arguments a help= text (issue 23.8: help for every option): {missing}"


def test_calibrate_says_an_infeasible_case_first_and_exits_1(tmp_path, capsys, monkeypatch):
    """Issue 23.5 in calibrate: a case directory with the one-GPU layout (Calculon refuses it too: the oracle here
    answers its record with Calculon's refusal, the other case's from the vendored records) printed its row with
    a bracketed [infeasible] among the tables and exited 0 ("budgets: all met"). Now its line comes first and the
    exit status is 1; with a paper value, once more per --compare profile (80 GiB there too)."""
    from harness.oracles import calculon_oracle
    from harness.oracles.records import ViewRecord
    from harness.vocabulary import VIEWS

    class RefusingTheOneGpuCase(calculon_oracle.RecordedCalculon):
        def views(self, record_id, data):
            if record_id == "one-gpu":
                return {view: ViewRecord(error="Mem tier1 needs 368.01 GB but only has 85.90 GB") for view in VIEWS}
            return super().views(record_id, data)

    monkeypatch.setattr(calculon_oracle, "RecordedCalculon", RefusingTheOneGpuCase)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "megatron-22B_full.yaml").write_text((CASES_DIR / "megatron-22B_full.yaml").read_text())
    path = infeasible_case(cases)
    with_paper = path.read_text().replace("  oracle_record: megatron-22B/full\n", "")  # its own record
    path.write_text(with_paper[:with_paper.index("comparison:")])  # no paper value: no paper budget to miss
    needs = "memory tier 1 needs 368"
    status, out, err = run_cli(capsys, "calibrate", "--cases", cases, "--output", tmp_path / "report.json")
    assert status == 1, err
    assert out.splitlines()[0].startswith(f"one-gpu: INFEASIBLE on a100_80g: {needs}")
    assert "budgets: all met" in out  # the exit status is the infeasible case's, not a budget's
    assert "1 of 4 case(s) infeasible" in err  # 2 cases; megatron-22B/full on each of the two compared profiles
    path.write_text(with_paper)
    status, out, err = run_cli(capsys, "calibrate", "--cases", cases, "--output", tmp_path / "report.json")
    lines = out.splitlines()
    assert status == 1 and lines[0].startswith(f"one-gpu: INFEASIBLE on a100_80g: {needs}")
    assert lines[1].startswith(f"one-gpu: INFEASIBLE on a100_measured (--compare): {needs}")
    assert lines[2].startswith(f"one-gpu: INFEASIBLE on a100_measured_fused_accumulation (--compare): {needs}")
    assert "3 of 6 case(s) infeasible" in err
    report = json.loads((tmp_path / "report.json").read_text())
    reasons = {c["id"]: c["reason"] for c in report["comparisons"][0]["cases"]}
    assert reasons["megatron-22B/full"] is None and reasons["one-gpu"].startswith(needs)


def test_calibrate_of_feasible_cases_still_exits_0(tmp_path, capsys):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "megatron-22B_full.yaml").write_text((CASES_DIR / "megatron-22B_full.yaml").read_text())
    status, out, err = run_cli(capsys, "calibrate", "--cases", cases, "--output", tmp_path / "r.json", "--compare")
    assert status == 0, err
    assert "INFEASIBLE" not in out and "budgets: all met" in out


class _EmptySearchCalculon:
    """A Calculon checkout's stand-in (none is vendored): its search finds no feasible execution of 8 layouts."""

    source_digest = "0" * 64

    def __init__(self, source, expected=None):
        self.source = source

    def optimal_execution(self, *args, **kwargs):
        return {"counts": {"executions": 8, "good": 0, "bad": 8}, "elapsed_s": 0.5, "top": []}


def test_oracle_search_record_says_no_feasible_execution_first_and_exits_1(tmp_path, capsys, monkeypatch):
    """Issue 23.5 in oracle record --search: an empty search printed "best sample rate None" inside its one line
    and exited 0; now it says first that Calculon found no feasible execution and exits 1 (the record, Calculon's
    verdict, is written)."""
    from harness.commands import oracle

    monkeypatch.setattr(oracle, "CalculonRunner", _EmptySearchCalculon)
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    status, out, err = run_cli(capsys, "oracle", "record", "--calculon-src", tmp_path, "--vendor", vendor, "--search",
                               "--model", CASES_DIR / "megatron-22B_full.yaml", "--system", "a100_80g", "--procs",
                               "8", "--max-batch", "8", "--output", "search/empty.json")
    assert status == 1, err
    lines = out.splitlines()
    assert lines[0].startswith("Calculon's search found NO FEASIBLE EXECUTION of ") and "8 bad of 8" in lines[0]
    assert lines[0].endswith("(exit status 1)") and lines[1].startswith("wrote Calculon's search (8 executions")
    assert json.loads((vendor / "search" / "empty.json").read_text())["top"] == []


FP8_CASE = """schema: blueprinting.case.v0
id: fp8-test
system: SYSTEM
model: {hidden: 4096, feedforward: 14336, sequence_length: 4096, attention_heads: 32, head_size: 128, blocks: 4,
        kv_heads: 8, mlp: swiglu, norm: rmsnorm, position: rope}
execution:
  tensor_parallel: 2
  pipeline_parallel: 1
  data_parallel: 4
  global_batch: 32
  microbatch: 1
  datatype: bfloat16
  attention_kernel: flash
  network_tiers: {tensor: 0, pipeline: 0, data: 0}
  precision: PRECISION
"""


@pytest.mark.parametrize("precision", ["fp8_delayed", "mxfp8", "nvfp4"])
def test_a_precision_without_its_gemm_engine_names_the_case_and_the_field(tmp_path, capsys, precision):
    gemm = "float4" if precision == "nvfp4" else "float8"
    path = tmp_path / "fp8.yaml"
    path.write_text(FP8_CASE.replace("SYSTEM", "a100_sxm_80g").replace("PRECISION", precision))
    needles = (f"{path}: execution.precision: precision {precision} runs the linear GEMMs in {gemm}",
               f"evidence profile a100_sxm_80g has no {gemm} matrix engine", "its matrix datatypes: ")
    one_error_line(*run_cli(capsys, "estimate", path)[::2], *needles)
    one_error_line(*run_cli(capsys, "explain", path)[::2], *needles)
    one_error_line(*run_cli(capsys, "trace", path, "--output", tmp_path / "t.json")[::2], *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp8.yaml"]
    # the same case on another profile: --system names the profile, the error still the case and field
    on_b200 = tmp_path / "b200.yaml"
    on_b200.write_text(FP8_CASE.replace("SYSTEM", "b200").replace("PRECISION", precision))
    one_error_line(*run_cli(capsys, "estimate", on_b200, "--system", "a100_sxm_80g")[::2],
                   f"{on_b200}: execution.precision:", f"evidence profile a100_sxm_80g has no {gemm} matrix engine")
    status, out, err = run_cli(capsys, "estimate", on_b200)
    assert status == 0 and err == "" and "fp8-test" in out


def test_the_precision_check_is_the_estimate_paths_own(tmp_path):
    from harness.errors import InputError

    path = tmp_path / "fp8.yaml"
    path.write_text(FP8_CASE.replace("SYSTEM", "a100_sxm_80g").replace("PRECISION", "fp8_current"))
    with pytest.raises(InputError) as caught:
        estimate(load_case(path).estimate_input(), source="mine")
    assert (caught.value.source, caught.value.field) == ("mine", "execution.precision")


def test_list_says_a_profile_file_whose_name_no_system_can_name_is_no_profile_name(tmp_path, capsys):
    """Hostile-input probe: evidence/A100_80G.yaml was listed as 'does not load: --system: system: ...' (an error of
    an option the user did not give); it is named for what it is."""
    import shutil

    (tmp_path / "evidence").mkdir()
    shutil.copy(ROOT / "evidence" / "a100_80g.yaml", tmp_path / "evidence" / "A100_80G.yaml")
    status, out, _ = run_cli(capsys, "--project", str(tmp_path), "list", "profiles")
    line = next(line for line in out.splitlines() if line.startswith("A100_80G "))
    assert status == 0 and line.endswith("A100_80G.yaml (not a profile name: lower-case letters, digits, '_', '.', '-', "
                                         "at most 64, starting with a letter or digit; never a path)"), line
    assert "--system" not in line
