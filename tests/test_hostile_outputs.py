"""Outputs, bounds and guards (issue 12): no lost or half-written file, no overwritten input, no work done before
an output is known to be writable, no trace without a bound, no non-finite or negative figure, no stale profile."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness import outputs
from harness.errors import InputError
from harness.evidence import profile as profile_module

from conftest import CASES_DIR, ROOT, one_error_line, run_cli as run

CASE = CASES_DIR / "megatron-22B_full.yaml"


@pytest.fixture
def no_work(monkeypatch):
    """Fail loudly if a command starts its work (lowering, the experiment, the simulation, Calculon)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the command started its work before checking its outputs")

    import harness.commands.trace as trace_command
    import harness.experiment.run as experiment
    import harness.oracles.runner as runner

    monkeypatch.setattr(trace_command, "lower", refuse)
    monkeypatch.setattr(experiment, "run_experiment", refuse)
    monkeypatch.setattr(runner.CalculonRunner, "__init__", refuse)


# ------------------------------------------------------------------------------------------ refusals up front


def test_output_refusals(tmp_path, capsys, no_work, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    case_copy = tmp_path / "cases" / "case.yaml"
    case_copy.parent.mkdir()
    shutil.copy(CASE, case_copy)
    link = tmp_path / "link.yaml"
    link.symlink_to(case_copy)
    hard = tmp_path / "hard.yaml"
    os.link(case_copy, hard)
    blocker = tmp_path / "file"
    blocker.write_text("")
    m, e = tmp_path / "m.json", tmp_path / "e.json"
    m.write_text("{}")
    e.write_text("{}")
    batch = tmp_path / "in.jsonl"
    batch.write_text("")
    refused = [
        (["estimate", case_copy, "--output", tmp_path], f"{tmp_path}: --output: is a directory"),
        (["estimate", case_copy, "--output", case_copy], "an input of this command"),
        (["estimate", case_copy, "--output", link], "an input of this command"),
        (["estimate", case_copy, "--output", hard], "an input of this command"),
        (["estimate", "--calculon-batch", batch, "--output", batch], "an input of this command"),
        (["estimate", case_copy, "--output", blocker / "out.json"], f"cannot be created: {blocker} is not a directory"),
        (["calibrate", "--cases", case_copy.parent, "--output", tmp_path], "--output: is a directory"),
        (["calibrate", "--cases", case_copy.parent, "--output", case_copy], "an input of this command"),
        (["calibrate", "--cases", case_copy.parent, "--output", tmp_path / "r.json", "--plots", blocker],
         f"{blocker}: --plots: exists and is not a directory"),
        (["calibrate", "--cases", case_copy.parent, "--output", tmp_path / "p" / "totals.png", "--plots", tmp_path / "p"],
         "is also the path of another output"),
        (["trace", case_copy, "--output", case_copy], "--output: would overwrite"),
        (["trace", case_copy, "--output", tmp_path / "t.json", "--png", tmp_path / "t.json"],
         "is also the path of another output"),
        (["trace", case_copy, "--output", tmp_path], "--output: is a directory"),
        (["trace", case_copy, "--output", tmp_path / "t.json", "--png", case_copy], "--png: would overwrite"),
        (["import", "calculon", "--model", m, "--execution", e, "--system", "a100_80g", "-o", m],
         "an input of this command"),
        (["contract", "write", "--cases", case_copy.parent, "--contract", tmp_path], "--contract: is a directory"),
        (["contract", "write", "--cases", case_copy.parent, "--contract", case_copy], "an input of this command"),
        (["oracle", "record", "--calculon-src", tmp_path, "--cases", case_copy.parent, "--output", "../escape.json",
          "--vendor", tmp_path / "vendor"], "must be a path inside the vendor directory"),
        (["estimate", case_copy, "--output", ROOT / "evidence" / "a100_80g.yaml"], "the tool's own data"),
        (["trace", case_copy, "--output", ROOT / "goldens" / "baseline_regression_contract.json"], "the tool's own data"),
        (["calibrate", "--cases", case_copy.parent, "--output", ROOT / "vendor" / "calculon-0.1.0" / "MANIFEST.json"],
         "the tool's own data"),
        (["oracle", "record", "--calculon-src", tmp_path, "--batch", batch, "--output", "x.json", "--vendor", blocker],
         f"cannot be created: {blocker} is not a directory"),
    ]
    for argv, message in refused:
        status, out, err = run(capsys, *argv)
        one_error_line(status, err, message)
    assert case_copy.read_text() == CASE.read_text() and m.read_text() == "{}"


def test_unwritable_places_are_refused_up_front(tmp_path, capsys, no_work, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    existing = tmp_path / "readonly.json"
    existing.write_text("old")
    existing.chmod(0o444)
    real_access = os.access

    def access(path, mode, *args, **kwargs):  # root may write anywhere: answer as for other users
        if Path(path) in (locked, existing):
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(outputs.os, "access", access)
    one_error_line(*run(capsys, "trace", CASE, "--output", locked / "t.json")[::2],
                   f"{locked / 't.json'}: --output: cannot be written: the directory {locked} is not writable")
    one_error_line(*run(capsys, "trace", CASE, "--output", existing)[::2], f"{existing}: --output: the file is read-only")
    one_error_line(*run(capsys, "calibrate", "--output", tmp_path / "r.json", "--plots", locked)[::2],
                   f"{locked}: --plots: the directory is not writable")
    assert existing.read_text() == "old"


def test_missing_parent_directories_are_created(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "out.json"
    assert run(capsys, "estimate", CASE, "--output", out)[0] == 0
    assert json.loads(out.read_text())[0]["id"] == "megatron-22B/full"


def test_stream_devices_are_written_directly(capsys):
    assert run(capsys, "estimate", CASE, "--output", "/dev/null")[0] == 0
    assert Path("/dev/null").exists() and not Path("/dev/null").is_file()


# ------------------------------------------------------------------------------------------------ atomicity


def test_a_failed_write_leaves_the_target_untouched(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old report")
    with pytest.raises(RuntimeError):
        with outputs.atomic_output(target) as handle:
            handle.write("half of the new")
            raise RuntimeError("stopped midway")
    assert target.read_text() == "old report" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_modes_of_new_and_replaced_files(tmp_path):
    mask = os.umask(0o022)
    try:
        new = outputs.write_text(tmp_path / "new.json", "x")
        assert (new.stat().st_mode & 0o777) == 0o644
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o600)
        outputs.write_text(kept, "new")
        assert (kept.stat().st_mode & 0o777) == 0o600 and kept.read_text() == "new"
    finally:
        os.umask(mask)


def test_a_concurrent_reader_never_sees_a_partial_file(tmp_path):
    target = tmp_path / "report.json"
    versions = [json.dumps({"version": i, "pad": "x" * (50_000 + 7_000 * i)}) for i in range(40)]
    outputs.write_text(target, versions[0])
    seen: list[str] = []
    done = threading.Event()

    def reader():
        while not done.is_set():
            seen.append(target.read_text())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for text in versions:
            outputs.write_text(target, text)
    finally:
        done.set()
        thread.join()
    assert seen and all(text in versions for text in seen)


def test_file_size_limit_leaves_the_previous_output_intact(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("previous\n")
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)); "
              "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", script, "estimate", "--json", str(CASE), "--output", str(out)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"{out}: --output: cannot write: File too large" in result.stderr
    assert out.read_text() == "previous\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_batch_output_streams_the_same_bytes_as_one_json_dump(tmp_path, capsys):
    from harness.commands.estimate import JsonListWriter

    entries = [{"id": "a", "views": {"v": {"total_s": 1.5, "c": [1, 2]}}}, {"id": None, "reason": "x\ny"}, {}]
    for count in range(len(entries) + 1):
        with open(tmp_path / "o.json", "w") as handle:
            writer = JsonListWriter(handle)
            for entry in entries[:count]:
                writer.write(entry)
            writer.close()
        assert (tmp_path / "o.json").read_text() == json.dumps(entries[:count], indent=1) + "\n"


# ---------------------------------------------------------------------------------------------- trace bounds


def _big_case(tmp_path: Path, global_batch: int) -> Path:
    text = (CASES_DIR / "gpt3-175B_seqsel.yaml").read_text().replace("global_batch: 64", f"global_batch: {global_batch}")
    path = tmp_path / "big.yaml"
    path.write_text(text)
    return path


def test_trace_refuses_oversized_iterations_before_simulating(tmp_path, capsys, monkeypatch):
    import harness.trace.tasks as trace_module

    def refuse(*args, **kwargs):
        raise AssertionError("simulated an oversized iteration")

    monkeypatch.setattr(trace_module, "simulate", refuse)
    path = _big_case(tmp_path, 2**20)
    ops = 8 * 3 * 2**20 * 2
    one_error_line(*run(capsys, "trace", path, "--output", tmp_path / "t.json")[::2],
                   f"{path}: trace: the iteration has {ops} pipeline operations (PP 8 x 3 chunks x {2**20} "
                   f"microbatches x 2 phases), more than the trace limit {trace_module.MAX_TRACE_OPERATIONS}")
    one_error_line(*run(capsys, "trace", CASE, "--output", tmp_path / "t.json", "--max-operations", "1")[::2],
                   "the iteration has 2 pipeline operations", "more than the trace limit 1")
    one_error_line(*run(capsys, "trace", _big_case(tmp_path, 64), "--output", tmp_path / "t.json",
                        "--task-microbatches", "1000")[::2], "--task-microbatches: the trace would hold up to")
    assert not (tmp_path / "t.json").exists()


# ------------------------------------------------------------------------------------------------ final guard


@pytest.fixture
def poisoned(monkeypatch):
    """Make the closed form produce a NaN bubble for layouts with global batch 8 (arithmetic gone wrong)."""
    import harness.estimate as estimate_module

    real = estimate_module.cost_view

    def cost_view(plan, profile, view, **options):
        block, comp = real(plan, profile, view, **options)
        if plan.schedule.global_batch == 8:
            comp.components_s["pipeline_bubble"] = math.nan
        return block, comp

    monkeypatch.setattr(estimate_module, "cost_view", cost_view)


def test_a_nan_figure_is_an_error_naming_the_input_never_ok(tmp_path, capsys, poisoned):
    from harness.estimate import NonPhysicalEstimateError, estimate

    text = CASE.read_text().replace("global_batch: 4", "global_batch: 8")
    path = tmp_path / "nan.yaml"
    path.write_text(text)
    from harness.cases import load_case

    with pytest.raises(NonPhysicalEstimateError) as info:
        estimate(load_case(path).estimate_input(), source=str(path))
    assert str(info.value).startswith(f"{path}: peak_only.components_s.pipeline_bubble: nan is not a finite, "
                                      "non-negative figure")
    status, out, err = run(capsys, "estimate", "--json", path)
    one_error_line(status, err, "pipeline_bubble: nan is not a finite")
    assert out == ""


def test_a_nan_figure_makes_its_batch_line_invalid(tmp_path, capsys, poisoned):
    from harness.interop.calculon_format import calculon_from_input
    from harness.cases import load_case

    model, execution = calculon_from_input(load_case(CASE).estimate_input())
    lines = []
    for index, batch in enumerate((4, 8, 4)):
        e = dict(execution, batch_size=batch, microbatch_size=4)
        lines.append(json.dumps({"id": f"l{index}", "model": model, "execution": e, "system": "a100_80g"}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.json"
    assert run(capsys, "estimate", "--calculon-batch", path, "--output", out)[0] == 1
    entries = json.loads(out.read_text())
    assert [e["status"] for e in entries] == ["ok", "invalid", "ok"]
    assert entries[1]["reason"].startswith("line 2: peak_only.components_s.pipeline_bubble: nan is not a finite")
    assert "NaN" not in out.read_text()


# ------------------------------------------------------------------------------------------ profile cache


def test_profile_cache_follows_content_not_timestamps(tmp_path, monkeypatch):
    directory = tmp_path / "evidence"
    directory.mkdir()
    path = directory / "a100_80g.yaml"
    original = (ROOT / "evidence" / "a100_80g.yaml").read_text()
    path.write_text(original)
    first = profile_module.load_profile("a100_80g", directory)
    frozen = os.stat(path)

    class Coarse:
        """os.stat on a file system whose timestamps did not move (coarse clock, same size, same inode)."""

        def __init__(self, status):
            self.status = status

        def __getattr__(self, name):
            return getattr(frozen, name) if name.startswith("st_") and name != "st_mode" else getattr(self.status, name)

        @property
        def st_mode(self):
            return self.status.st_mode

    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: Coarse(real_stat(p, *a, **k)))  # every os.stat
    edited = original.replace("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 311000000000000.0")
    assert len(edited) == len(original)
    path.write_text(edited)
    second = profile_module.load_profile("a100_80g", directory)  # same identity, recent stamps: content decides
    assert second.matrix["float16"].peak_flops_per_s == 311e12 and second.revision() != first.revision()
    assert profile_module.load_profile("a100_80g", directory) is second

    # once the stamps are older than the racy window, an unchanged identity is trusted without reading
    real_time = profile_module.time.time_ns
    monkeypatch.setattr(profile_module.time, "time_ns", lambda: real_time() + 10 * profile_module.RACY_NS)
    profile_module.load_profile("a100_80g", directory)  # re-read once: records a read time past the window

    def no_read(*args, **kwargs):
        raise AssertionError("read a profile whose identity and old timestamps vouch for the cached content")

    monkeypatch.setattr(profile_module, "read_bytes", no_read)
    assert profile_module.load_profile("a100_80g", directory) is second


def test_oracle_record_validates_its_batch_before_loading_calculon(tmp_path, capsys, monkeypatch):
    import harness.oracles.runner as runner

    def refuse(*args, **kwargs):
        raise AssertionError("loaded Calculon before validating the inputs")

    monkeypatch.setattr(runner.CalculonRunner, "__init__", refuse)
    batch = tmp_path / "in.jsonl"
    batch.write_text('{"id": "a", "model": {"hidden": NaN}, "execution": {}, "system": "a100_80g"}\n')
    one_error_line(*run(capsys, "oracle", "record", "--calculon-src", tmp_path, "--batch", batch, "--output",
                        "records/x.json", "--vendor", tmp_path / "vendor")[::2],
                   f"{batch}: line 1: model.hidden: NaN is not a finite number")
    one_error_line(*run(capsys, "oracle", "import-reference", batch, "--output", "../x.json", "--vendor",
                        tmp_path / "vendor")[::2], "../x.json: --output: must be a path inside the vendor directory")


# ------------------------------------------------------------------------- several outputs: all of them or none

SEARCH = ["search", "--model", CASE, "--system", "a100_80g", "--procs", "4", "--max-batch", "4", "--datatype",
          "float16", "--no-progress"]


def _second_output_fails(tmp_path, capsys, argv, option, message):
    """Run ``argv`` (an existing ``--output`` OLD in tmp_path, a second output that cannot be written): exit 2,
    one error line naming the second output's option, the existing output byte-identical, no file left."""
    old = tmp_path / "out.json"
    old.write_bytes(b"OLD\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    err = one_error_line(*run(capsys, *argv, "--output", old)[::2], option, message)
    assert old.read_bytes() == b"OLD\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err


@pytest.mark.parametrize("second", [["--png", "/proc/x.png"], ["--png", "/sys/x.png"]])
def test_trace_checks_its_png_destination_for_real_before_any_work(tmp_path, capsys, no_work, second):
    # as root os.access says yes to /proc and /sys: the check creates (and removes) a file there instead
    _second_output_fails(tmp_path, capsys, ["trace", CASE, *second], f"{second[1]}: --png: cannot be written",
                         "cannot create a file in the directory")


@pytest.mark.parametrize("option", ["--plot", "--pareto", "--results", "--emit-case"])
def test_search_checks_every_destination_for_real_before_the_search(tmp_path, capsys, monkeypatch, option):
    import harness.commands.search as search_command

    def refuse(*args, **kwargs):
        raise AssertionError("the search started before its outputs were checked")

    monkeypatch.setattr(search_command, "search_problem", refuse)
    _second_output_fails(tmp_path, capsys, [*SEARCH, option, "/proc/s.out"], f"/proc/s.out: {option}: cannot be "
                         "written", "cannot create a file in the directory /proc")


def test_report_commands_check_their_plot_directory_for_real(tmp_path, capsys, no_work):
    _second_output_fails(tmp_path, capsys, ["calibrate", "--plots", "/proc/plots"], "/proc/plots: --plots",
                         "cannot create a file in the directory /proc")
    _second_output_fails(tmp_path, capsys, ["calibrate", "--plots", "/sys"], "/sys: --plots", "cannot create a file")


@pytest.fixture
def unchecked(monkeypatch):
    """The up-front check as it was (os.access only, always true for root): a destination the check passes but
    the write refuses, so that what a failed write late in the run leaves is seen."""
    monkeypatch.setattr(outputs, "_probe", lambda *args: None)


def test_a_failed_png_leaves_the_trace_as_it_was(tmp_path, capsys, unchecked):
    err = _second_output_fails(tmp_path, capsys, ["trace", CASE, "--png", "/proc/x.png"], "/proc/x.png: --png",
                               "cannot write")
    assert err.count("error:") == 1


@pytest.mark.parametrize("option", ["--plot", "--pareto", "--emit-case"])
def test_a_failed_search_output_leaves_every_other_output_as_it_was(tmp_path, capsys, unchecked, option):
    results, pareto = tmp_path / "r.parquet", tmp_path / "p.json"
    results.write_bytes(b"OLD RESULTS")
    argv = [*SEARCH, "--results", results, option, "/proc/s.out"]
    if option != "--pareto":
        pareto.write_bytes(b"OLD PARETO")
        argv += ["--pareto", pareto]
    _second_output_fails(tmp_path, capsys, argv, f"/proc/s.out: {option}", "cannot write")
    assert results.read_bytes() == b"OLD RESULTS" and (option == "--pareto" or pareto.read_bytes() == b"OLD PARETO")


def test_outputs_committed_together_are_put_in_place_together_or_not_at_all(tmp_path):
    a, b, new = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "new.json"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises(RuntimeError):
        with outputs.committed_together():
            outputs.write_text(a, "new a")
            assert a.read_text() == "old a"  # complete, not yet in place
            outputs.write_text(new, "new", exclusive=True)
            raise RuntimeError("the second output failed")
    assert (a.read_text(), b.read_text(), new.exists()) == ("old a", "old b", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    with outputs.committed_together():
        outputs.write_text(a, "new a")
        with outputs.committed_together():  # nested: belongs to the outer block
            outputs.write_text(b, "new b")
        assert b.read_text() == "old b"
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    b.write_text("old b")
    with pytest.raises(InputError, match="exists"):  # an exclusive output that appeared meanwhile refuses the lot
        with outputs.committed_together():
            outputs.write_text(a, "newer a")
            outputs.write_text(new, "new", exclusive=True)
            outputs.write_text(b, "x", exclusive=True)
    assert (a.read_text(), b.read_text(), new.exists()) == ("new a", "old b", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_a_gz_output_name_is_written_compressed_as_a_gz_input_is_read(tmp_path, capsys):
    """``estimate --output o.json.gz`` wrote plain JSON under a .gz name (hostile-input probe), where inputs named
    .gz are read decompressed and write_bytes compresses: the same JSON bytes, gzip-compressed with a fixed header
    (mtime 0), so two runs give equal files; write_text follows the same rule."""
    import gzip

    status, _, _ = run(capsys, "estimate", "megatron-22B_full", "--json", "--output", tmp_path / "o.json")
    assert status == 0
    status, _, _ = run(capsys, "estimate", "megatron-22B_full", "--json", "--output", tmp_path / "o.json.gz")
    packed = (tmp_path / "o.json.gz").read_bytes()
    assert status == 0 and packed[:2] == b"\x1f\x8b" and packed[4:8] == b"\0\0\0\0"  # gzip, mtime 0
    assert gzip.decompress(packed) == (tmp_path / "o.json").read_bytes()
    run(capsys, "estimate", "megatron-22B_full", "--json", "--output", tmp_path / "o.json.gz")
    assert (tmp_path / "o.json.gz").read_bytes() == packed
    outputs.write_text(tmp_path / "t.txt.gz", "é\n")
    assert gzip.decompress((tmp_path / "t.txt.gz").read_bytes()) == "é\n".encode()
    assert outputs.write_text(tmp_path / "t.txt", "é\n").read_bytes() == "é\n".encode()
