"""Hostile input, every command and file kind: one error line naming file and field, a non-zero exit, never a
traceback, never a silent wrong number (issue 12).

Each class of hostile content is tried on every command that reads that kind of file, through the real command
line (``harness.cli.main``, in-process). The expected field and message are the ones a reader needs to fix the file.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest


from conftest import CASES_DIR, ROOT, one_error_line, run_cli as run

BASE_CASE = (CASES_DIR / "megatron-22B_full.yaml").read_text()
EVIDENCE = ROOT / "evidence"
REFERENCE = ROOT.parent / "shared" / "reference" / "calculon-0.1.0"


def case_text(old: str, new: str, text: str = BASE_CASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# (id, content, field, message fragment); content is the whole case file (text or bytes)
HOSTILE_CASES = [
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "<file>", "not UTF-8 text"),
    ("latin-1", BASE_CASE.replace("# Table 5", "# Tabl\u00e9 5").encode("latin-1"), "<file>", "not UTF-8 text"),
    ("deep-flow", "schema: " + "[" * 100_000 + "]" * 100_000 + "\n", "", "nest"),
    ("deep-block", "".join("  " * i + "a:\n" for i in range(3_000)), "", "nested deeper than 64 levels"),
    ("nan", case_text("hidden: 6144", "hidden: .nan"), "model.hidden", "not a finite number"),
    ("inf", case_text("iteration_s: 1.42", "iteration_s: .inf"), "comparison.paper.iteration_s",
     "not a finite number"),
    ("1e999", case_text("iteration_s: 1.42", "iteration_s: 1e999"), "comparison.paper.iteration_s",
     "not a finite number"),
    # a denormal reference made calibrate's relative errors infinite (a report of "inf %" figures)
    ("paper-denormal", case_text("iteration_s: 1.42", "iteration_s: 5e-324"), "comparison.paper.iteration_s",
     "greater than or equal to 0.0001"),
    ("int-beyond-float", case_text("global_batch: 4", "global_batch: " + "9" * 400), "execution.global_batch",
     "beyond the float range"),
    ("int-2^63", case_text("global_batch: 4", f"global_batch: {2**63}"), "execution.global_batch",
     "less than or equal to 16777216"),
    ("huge-width", case_text("hidden: 6144", f"hidden: {2**40}"), "model.hidden", "less than or equal to"),
    ("processors", case_text("data_parallel: 1", "data_parallel: 16777216").replace("global_batch: 4",
                                                                                  "global_batch: 16777216"),
     "execution", "exceeds the bound"),
    ("duplicate-key", case_text("  blocks: 48", "  blocks: 48\n  blocks: 96"), "model.blocks", "duplicate key"),
    ("bool-for-int", case_text("tensor_parallel: 8", "tensor_parallel: true"), "execution.tensor_parallel",
     "valid integer, got true (a boolean)"),
    ("string-for-int", case_text("hidden: 6144", 'hidden: "6144"'), "model.hidden",
     'valid integer, got "6144" (a string)'),
    ("float-for-int", case_text("hidden: 6144", "hidden: 6144.0"), "model.hidden", "valid integer"),
    ("string-for-bool", case_text("training: true", 'training: "yes"'), "execution.training",
     'valid boolean, got "yes" (a string)'),
    ("int-for-bool", case_text("training: true", "training: 1"), "execution.training", "valid boolean"),
    ("system-relative-path", case_text("system: a100_80g", "system: ../evidence/a100_80g"), "system",
     "should match pattern"),
    ("system-absolute-path", case_text("system: a100_80g", f"system: {EVIDENCE / 'a100_80g'}"), "system",
     "should match pattern"),
    ("system-missing", case_text("system: a100_80g", "system: no_such_profile"), "system",
     "no evidence profile named 'no_such_profile'"),
    ("alias", case_text("  blocks: 48", "  blocks: &b 48").replace("  hidden: 6144", "  hidden: *b"), "model.",
     "anchors and aliases are not supported"),
    ("python-tag", case_text("id: megatron-22B/full", "id: !!python/object/apply:os.system [echo]"), "id",
     "unsupported YAML tag"),
    ("id-newline", case_text("id: megatron-22B/full", 'id: "a\\nb"'), "id", "must not contain a control character: U+000A"),
    # a profile name is lower case: lower (which reads no profile) refuses these as estimate does
    ("system-upper-case", case_text("system: a100_80g", "system: A100_80G"), "system", "should match pattern"),
    ("system-NaN", case_text("system: a100_80g", "system: NaN"), "system", "should match pattern"),
    # an identifier holds no control (Cc) or format (Cf) character: a bidi override, a zero-width space, a C1 control
    ("id-bidi-override", case_text("id: megatron-22B/full", 'id: "megatron\u202e-22B"'), "id",
     "must not contain a format (invisible or bidi) character: U+202E"),
    ("id-zero-width", case_text("id: megatron-22B/full", 'id: "mega\u200btron"'), "id", "U+200B (category Cf)"),
    ("id-c1-control", case_text("id: megatron-22B/full", 'id: "mega\\x85tron"'), "id", "U+0085 (category Cc)"),
    ("oracle-record-bidi", case_text("oracle_record: megatron-22B/full", 'oracle_record: "a\u2066b"'),
     "comparison.oracle_record", "U+2066 (category Cf)"),
    ("list-root", "- 1\n- 2\n", "<root>", "must be a mapping"),
    ("empty", "", "<root>", "must be a mapping"),
    ("unknown-field", case_text("  blocks: 48", "  blocks: 48\n  experts: 8"), "model.experts", "unknown field"),
]


def _write_case(tmp_path: Path, content: str | bytes) -> Path:
    directory = tmp_path / "cases"
    directory.mkdir(exist_ok=True)
    path = directory / "hostile.yaml"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


CASE_COMMANDS = {
    "lower": lambda p, t: ["lower", p],
    "estimate": lambda p, t: ["estimate", p],
    "estimate-json": lambda p, t: ["estimate", "--json", p],
    "estimate-output": lambda p, t: ["estimate", p, "--output", t / "out.json"],
    "explain": lambda p, t: ["explain", p],
    "explain-by-task": lambda p, t: ["explain", "--by-task", "--json", p],
    "trace": lambda p, t: ["trace", p, "--output", t / "trace.json", "--png", t / "s.png"],
    "calibrate": lambda p, t: ["calibrate", "--cases", p.parent, "--output", t / "report.json"],
    "contract-check": lambda p, t: ["contract", "check", "--cases", p.parent],
}


@pytest.mark.parametrize("command", list(CASE_COMMANDS))
@pytest.mark.parametrize("name,content,field,message", HOSTILE_CASES, ids=[c[0] for c in HOSTILE_CASES])
def test_hostile_case_file_every_command(tmp_path, capsys, command, name, content, field, message):
    path = _write_case(tmp_path, content)
    status, out, err = run(capsys, *CASE_COMMANDS[command](path, tmp_path))
    if (name, command) == ("system-missing", "lower"):  # lowering is hardware-free: it reads no profile
        assert status == 0 and err == ""
        return
    one_error_line(status, err, f"{path}: {field}", message)
    assert not any(tmp_path.glob("out.json")) and not any(tmp_path.glob("trace.json"))
    assert not any(tmp_path.glob("report.json")) and not any(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("command", list(CASE_COMMANDS))
def test_unreadable_case_paths(tmp_path, capsys, command, monkeypatch):
    missing = tmp_path / "cases" / "missing.yaml"
    (tmp_path / "cases").mkdir()
    if command in ("calibrate", "contract-check"):  # these read a directory: a missing one, a file, an empty one
        for directory, message in ((tmp_path / "nope", "no such case directory"),
                                   (ROOT / "README.md", "not a directory"),
                                   (tmp_path / "cases", "no case files (*.yaml) in this directory")):
            argv = CASE_COMMANDS[command](directory / "x.yaml", tmp_path)
            one_error_line(*run(capsys, *argv)[::2], f"{directory}: --cases: {message}")
        return
    one_error_line(*run(capsys, *CASE_COMMANDS[command](missing, tmp_path))[::2], f"{missing}: <file>: no such file")
    one_error_line(*run(capsys, *CASE_COMMANDS[command](tmp_path, tmp_path))[::2],
                   f"{tmp_path}: <file>: is a directory")
    locked = _write_case(tmp_path, BASE_CASE)
    locked.chmod(0)
    real_open = os.open

    def refuse(path, *args, **kwargs):  # root reads anything: fail as the system call does for other users
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    one_error_line(*run(capsys, *CASE_COMMANDS[command](locked, tmp_path))[::2], f"{locked}: <file>: permission denied")


def test_pytest_plugin_refuses_zero_cases(tmp_path):
    """End to end: a missing --harness-cases directory fails the run (exit 4), it does not skip everything."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "pytest", "-m", "calibration", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist", f"--harness-cases={tmp_path / 'missing'}", "tests/test_calibration.py"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 4, result.stderr[-500:]
    assert f"{tmp_path / 'missing'}: --harness-cases: no such case directory" in result.stderr


class _Config:
    """The part of a pytest config the plugin reads."""

    def __init__(self, cases):
        self.option = {"--harness-cases": str(cases) if cases else None}
        self.rootpath = ROOT

    def getoption(self, name):
        return self.option.get(name)

    def addinivalue_line(self, *args):
        pass


def test_pytest_plugin_zero_case_rules(tmp_path):
    from harness import pytest_plugin

    empty = tmp_path / "empty"
    empty.mkdir()
    for directory, message in ((empty, "no case files (*.yaml) in this directory"), (ROOT / "README.md", "not a directory")):
        with pytest.raises(pytest.UsageError, match=re.escape(f"{directory}: --harness-cases: {message}")):
            pytest_plugin.pytest_configure(_Config(directory))
    inference = tmp_path / "inference"
    inference.mkdir()
    shutil.copy(CASES_DIR / "inference_gpt3-175B_ar.yaml", inference)

    class Metafunc:
        fixturenames = ["case"]
        config = _Config(inference)

        class definition:
            nodeid = "tests/test_calibration.py::test_x"

            @staticmethod
            def get_closest_marker(name):
                return name == "calibration" or None

    with pytest.raises(pytest.Collector.CollectError, match="needs a case with a paper value.*zero cases never pass"):
        pytest_plugin.pytest_generate_tests(Metafunc)


# ----------------------------------------------------------------------------------------- evidence profiles

BASE_PROFILE = (EVIDENCE / "a100_80g.yaml").read_text()


def profile_text(old: str, new: str) -> str:
    """The profile with the first ``key: value`` line of ``old``'s key given ``new`` (whatever its value was)."""
    key = old.split(":", 1)[0].strip()
    if key == "threshold":  # the second threshold of the first curve: above the first one
        return re.sub(r"(threshold: [^\n]+\n(?:.*\n)*?\s*- threshold: )[^\n]+", r"\g<1>" + new.split(": ", 1)[1],
                      BASE_PROFILE, count=1)
    text, count = re.subn(rf"^(\s*){re.escape(key)}: [^\n]*$", lambda m: m.group(1) + new.strip(), BASE_PROFILE,
                          count=1, flags=re.MULTILINE)
    assert count == 1, key
    return text


HOSTILE_PROFILES = [
    ("denormal-peak", profile_text("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: 1.0e-300"),
     "matrix.float16.peak_flops_per_s", "greater than or equal to 1000000"),
    ("denormal-efficiency", profile_text("efficiency: 0.95", "efficiency: 1.0e-320"),
     "matrix.float16.operation_size_efficiency.points.0.efficiency", "greater than or equal to 0.0001"),
    ("zero-bandwidth", profile_text("bandwidth_bytes_per_s: 2048000000000.0", "bandwidth_bytes_per_s: 0.0"),
     "memory_tier1.bandwidth_bytes_per_s", "greater than or equal to 1000"),
    ("inf-peak", profile_text("peak_flops_per_s: 312000000000000.0", "peak_flops_per_s: .inf"),
     "matrix.float16.peak_flops_per_s", "not a finite number"),
    ("nan-latency", profile_text("latency_s: 1.0e-05", "latency_s: .nan"), "networks.0.latency_s",
     "not a finite number"),
    ("negative-offset", profile_text("participant_offset: -1.0", "participant_offset: -1000.0"),
     "networks.0.collectives.p2p.participant_offset", "greater than or equal to -2"),
    ("huge-multiplier", profile_text("volume_multiplier: 1.5", "volume_multiplier: 1.0e+300"),
     "networks.0.collectives.p2p.volume_multiplier", "less than or equal to 1000"),
    ("string-peak", profile_text("peak_flops_per_s: 312000000000000.0", 'peak_flops_per_s: "312e12"'),
     "matrix.float16.peak_flops_per_s", "valid number"),
    ("bool-size", profile_text("size_processors: 8", "size_processors: true"), "networks.0.size_processors",
     "valid integer, got true"),
    ("duplicate-key", profile_text("processing_mode: no_overlap", "processing_mode: no_overlap\n"
                                                                  "processing_mode: roofline"),
     "processing_mode", "duplicate key"),
    ("binary", b"\xff\xfe\x00name", "<file>", "not UTF-8"),
    ("deep", "name: " + "[" * 10_000 + "]" * 10_000 + "\n", "", "nest"),
    ("increasing-curve", profile_text("threshold: 16000000000.0", "threshold: 9.99e+17"),
     "matrix.float16.operation_size_efficiency.points", "thresholds must strictly decrease"),
]


@pytest.fixture
def evidence_dir(tmp_path, monkeypatch):
    """A project directory whose evidence/ (a copy of ours) the commands read ($HARNESS_PROJECT)."""
    from harness import locations

    project = tmp_path / "project"
    directory = project / "evidence"
    shutil.copytree(EVIDENCE, directory)
    monkeypatch.setenv(locations.ENV_PROJECT, str(project))
    locations.reset()
    yield directory
    locations.reset()


@pytest.mark.parametrize("command", ["lower-ok", "estimate", "estimate-json", "explain", "trace", "calibrate"])
@pytest.mark.parametrize("name,content,field,message", HOSTILE_PROFILES, ids=[p[0] for p in HOSTILE_PROFILES])
def test_hostile_profile_every_command(tmp_path, capsys, evidence_dir, command, name, content, field, message):
    target = evidence_dir / "a100_80g.yaml"
    (target.write_bytes if isinstance(content, bytes) else target.write_text)(content)
    case = CASES_DIR / "megatron-22B_full.yaml"
    if command == "lower-ok":  # lowering reads no evidence: it still works
        assert run(capsys, "lower", case)[0] == 0
        return
    argv = CASE_COMMANDS[command](case, tmp_path)
    if command == "calibrate":
        argv[2] = CASES_DIR
    status, out, err = run(capsys, *argv)
    one_error_line(status, err, f"{target}: {field}", message)


def test_offset_at_the_bound_gives_non_negative_times(tmp_path, capsys, evidence_dir):
    """participant_offset = -2 is the exact bound: 2 participants send zero bytes, never fewer."""
    text = re.sub(r"participant_offset: [^\n]+", "participant_offset: -2.0", BASE_PROFILE)
    (evidence_dir / "a100_80g.yaml").write_text(text)
    status, out, _ = run(capsys, "estimate", "--json", CASES_DIR / "megatron-22B_full.yaml")
    assert status == 0
    (entry,) = json.loads(out)
    for view in entry["views"].values():
        assert view["total_s"] > 0 and all(0 <= v < math.inf for v in view["components_s"].values())


# ------------------------------------------------------------------------------- Calculon model / execution JSON

MODEL = {"hidden": 6144, "feedforward": 24576, "seq_size": 2048, "attn_heads": 64, "attn_size": 96, "num_blocks": 48}
EXECUTION = json.loads((REFERENCE / "validation" / "seqsel" / "tab5" / "megatron-22B_seqsel.json").read_text()) \
    if REFERENCE.is_dir() else None


def _execution() -> dict:
    if EXECUTION is not None:
        return dict(EXECUTION)
    return {"num_procs": 8, "tensor_par": 8, "pipeline_par": 1, "data_par": 1, "tensor_par_net": 0,
            "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 4, "microbatch_size": 4, "datatype": "float16",
            "fused_activation": False, "attention_type": "multihead", "activation_recompute": "attn_only",
            "pipeline_interleaving": 1, "optimizer_sharding": False, "tensor_par_comm_type": "rs_ag",
            "tensor_par_overlap": "none", "seq_par_ag_redo": True, "data_par_overlap": False, "weight_offload": False,
            "activations_offload": False, "optimizer_offload": False, "training": True}


HOSTILE_JSON = [  # (id, which file, raw JSON text, field, message)
    ("nan", "model", json.dumps(MODEL).replace("6144,", "NaN,", 1), "hidden", "NaN is not a finite number"),
    ("1e999", "model", json.dumps(MODEL).replace("6144,", "1e999,", 1), "hidden", "not a finite number"),
    ("int-beyond-float", "model", json.dumps(MODEL).replace("6144,", "9" * 400 + ",", 1), "hidden",
     "beyond the float range"),
    ("int-2^63", "execution", json.dumps(_execution()).replace('"batch_size": 4', f'"batch_size": {2**63}'),
     "execution.batch_size", "less than or equal to"),
    ("duplicate", "model", json.dumps(MODEL)[:-1] + ', "hidden": 12288}', "hidden", "duplicate key"),
    ("deep", "model", "[" * 100_000 + "]" * 100_000, "<json>", "nested deeper than 64 levels"),
    ("bool-for-int", "execution", json.dumps(_execution()).replace('"tensor_par": 8', '"tensor_par": true'),
     "execution.tensor_par", "valid integer, got true"),
    ("string-for-int", "model", json.dumps(MODEL).replace("6144,", '"6144",', 1), "model.hidden",
     'got "6144" (a string)'),
    ("string-for-bool", "execution", json.dumps(_execution()).replace('"training": true', '"training": "yes"'),
     "execution.training", "valid boolean"),
    ("float-procs", "execution", json.dumps(_execution()).replace('"num_procs": 8', '"num_procs": 8.0'),
     "execution.num_procs", "valid integer"),
    ("list-root", "model", "[1, 2]", "model", "must be a JSON object"),
    ("syntax", "execution", '{"tensor_par": 8,}', "line 1", "not valid JSON"),
]


@pytest.mark.parametrize("name,which,text,field,message", HOSTILE_JSON, ids=[h[0] for h in HOSTILE_JSON])
def test_hostile_calculon_json(tmp_path, capsys, name, which, text, field, message):
    files = {"model": tmp_path / "m.json", "execution": tmp_path / "e.json"}
    files["model"].write_text(json.dumps(MODEL))
    files["execution"].write_text(json.dumps(_execution()))
    files[which].write_text(text)
    output = tmp_path / "case.yaml"
    status, out, err = run(capsys, "import", "calculon", "--model", files["model"], "--execution",
                           files["execution"], "--system", "a100_80g", "-o", output)
    one_error_line(status, err, f"{files[which]}: {field}", message)
    assert not output.exists()


@pytest.mark.parametrize("data", [b"\x1f\x8b\x08\x00binary", "{\"hidden\": 1}".encode("utf-16")])
def test_binary_calculon_json(tmp_path, capsys, data):
    m, e = tmp_path / "m.json", tmp_path / "e.json"
    m.write_bytes(data)
    e.write_text(json.dumps(_execution()))
    one_error_line(*run(capsys, "import", "calculon", "--model", m, "--execution", e, "--system", "a100_80g")[::2],
                   f"{m}: <file>: not UTF-8 text")


@pytest.mark.parametrize("system", ["../evidence/a100_80g", "/etc/passwd", "a100_80g/../x"])
def test_import_system_is_a_name_never_a_path(tmp_path, capsys, system):
    m, e = tmp_path / "m.json", tmp_path / "e.json"
    m.write_text(json.dumps(MODEL))
    e.write_text(json.dumps(_execution()))
    one_error_line(*run(capsys, "import", "calculon", "--model", m, "--execution", e, "--system", system)[::2],
                   "--system: system:", "is not an evidence profile name")


@pytest.mark.parametrize("case_id, message", [
    ("x" * 300, f"\"{'x' * 37}...\" must be 1 to 256 characters, got 300"),
    ("a\nb", "\"a\\nb\" must not contain a control character: U+000A (category Cc)")])
def test_import_calculon_refuses_a_bad_id_first_naming_the_option(tmp_path, capsys, case_id, message):
    """As ``import hf``: before the files are read (the model file here is absent), as ``--id``, shown escaped
    and shortened (it was ``case <the whole id>: id``, after the files were read)."""
    e, output = tmp_path / "e.json", tmp_path / "case.yaml"
    e.write_text(json.dumps(_execution()))
    status, out, err = run(capsys, "import", "calculon", "--model", tmp_path / "absent.json", "--execution", e,
                           "--system", "a100_80g", "-o", output, "--id", case_id)
    one_error_line(status, err)
    assert err == f"error: <command line>: --id: {message}\n" and out == "" and not output.exists()


# ---------------------------------------------------------------------------------------------- batches

GOOD_LINE = {"id": "good", "model": MODEL, "execution": _execution(), "system": "a100_80g"}


def _line(**changes) -> str:
    data = json.loads(json.dumps(GOOD_LINE))
    for path, value in changes.items():
        section, _, field = path.partition("__")
        if field:
            data[section][field] = value
        else:
            data[section] = value
    return json.dumps(data)


HOSTILE_LINES = [  # (id, raw line, field, message)
    ("nan", _line(id="a").replace("6144,", "NaN,", 1), "model.hidden", "NaN is not a finite number"),
    ("int-beyond-float", _line(id="b").replace("6144,", "9" * 400 + ",", 1), "model.hidden", "beyond the float range"),
    ("int-2^63", _line(id="c", execution__batch_size=2**63), "execution.batch_size", "less than or equal to"),
    ("huge-hidden", _line(id="d", model__hidden=2**60), "model.hidden", "less than or equal to"),
    ("bool", _line(id="e", execution__tensor_par=True), "execution.tensor_par", "valid integer, got true"),
    ("string", _line(id="f", model__hidden="6144"), "model.hidden", "got \"6144\" (a string)"),
    ("duplicate", _line(id="g")[:-1] + ', "id": "g2"}', "id", "duplicate key"),
    ("deep", "[" * 100_000 + "]" * 100_000, "<json>", "nested deeper than 64 levels"),
    ("system-path", _line(id="h", system="../evidence/a100_80g"), "system", "is not an evidence profile name"),
    ("system-missing", _line(id="i", system="nope"), "system", "no evidence profile named 'nope'"),
    ("id-control", _line(id="j\u0007"), "id", "must not contain a control character: U+0007"),
    ("id-bidi", _line(id="j\u202ek"), "id", "must not contain a format (invisible or bidi) character: U+202E"),
    ("id-bom", _line(id="\ufeffj"), "id", "U+FEFF (category Cf)"),
    ("system-upper-case", _line(id="l", system="A100_80G"), "system", "is not an evidence profile name (lower-case"),
    ("list", "[1, 2]", "<root>", "a batch line must be a JSON object"),
    ("newline-key", _line(id="k")[:-1] + ', "\\n": 1}', "\\n", "unknown field"),  # found by the fuzz: one line
]


def _batch(tmp_path: Path, lines: list[str], name: str = "in.jsonl") -> Path:
    path = tmp_path / name
    text = "\n".join(lines) + "\n"
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name,line,field,message", HOSTILE_LINES, ids=[h[0] for h in HOSTILE_LINES])
def test_hostile_batch_line_is_invalid_and_the_batch_goes_on(tmp_path, capsys, name, line, field, message):
    path = _batch(tmp_path, [_line(id="first"), line, _line(id="last")])
    output = tmp_path / "out.json"
    status, out, err = run(capsys, "estimate", "--calculon-batch", path, "--output", output, "--view",
                           "system_evidence")
    assert status == 1 and "Traceback" not in err and err.count("\n") == 1
    first, bad, last = json.loads(output.read_text())
    assert (first["id"], first["status"], last["id"], last["status"]) == ("first", "ok", "last", "ok")
    assert bad["status"] == "invalid" and bad["views"] == {}
    assert bad["reason"].startswith(f"line 2: {field}: ") and message in bad["reason"], bad["reason"]
    assert "\n" not in bad["reason"]


def test_bad_bytes_in_a_batch_make_their_line_invalid(tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_bytes(_line(id="a").encode() + b"\n\xff\xfe\xfd\n" + b'{"id": "' + b"x" * (2 * 2**20) + b'"}\n'
                     + _line(id="b").encode() + b"\n")
    output = tmp_path / "out.json"
    assert run(capsys, "estimate", "--calculon-batch", path, "--output", output)[0] == 1
    entries = json.loads(output.read_text())
    assert [e["status"] for e in entries] == ["ok", "invalid", "invalid", "ok"]
    assert entries[1]["reason"].startswith("line 2: <line>: not UTF-8 text")
    assert entries[2]["reason"].startswith("line 3: <line>: longer than 1048576 bytes")


def test_truncated_gzip_batch_keeps_every_complete_line(tmp_path, capsys):
    lines = [_line(id=f"l{i}") for i in range(60)]
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    output = tmp_path / "out.json"
    status, _, err = run(capsys, "estimate", "--calculon-batch", path, "--output", output, "--view", "peak_only")
    assert status == 1 and "Traceback" not in err
    *kept, last = json.loads(output.read_text())
    complete = __import__("zlib").decompressobj(31).decompress(data[: len(data) * 3 // 4]).count(b"\n")
    assert [e["id"] for e in kept] == [f"l{i}" for i in range(complete)] and all(e["status"] == "ok" for e in kept)
    assert last["status"] == "invalid" and last["id"] is None
    assert last["reason"] == (f"line {complete + 1}: <file>: truncated: the compressed stream ends early; the "
                              f"{complete} complete lines before it were read")


@pytest.mark.parametrize("content,message", [
    (None, "no such file"), ("dir", "is a directory"), (b"not gzip at all\n", "not a valid gzip file"),
])
def test_unreadable_batch_is_one_error_and_no_output(tmp_path, capsys, content, message):
    path = tmp_path / "in.jsonl.gz"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    output = tmp_path / "out.json"
    one_error_line(*run(capsys, "estimate", "--calculon-batch", path, "--output", output)[::2], f"{path}: ", message)
    assert not output.exists()


# ------------------------------------------------------------------------------------- baseline contract

CONTRACT = json.loads((ROOT / "goldens" / "baseline_regression_contract.json").read_text())


def _contract_edit(edit) -> str:
    data = json.loads(json.dumps(CONTRACT))
    edit(data)
    return json.dumps(data)


def _set_aggregate(key, value):
    return lambda d: d["aggregates"]["evidence_vs_paper_mape_pct"].__setitem__(key, value)


HOSTILE_CONTRACTS = [
    ("list", "[]", "<root>", "must be a JSON object"),
    ("nan-value", _contract_edit(_set_aggregate("value", 0.125)).replace('"value": 0.125', '"value": NaN'),
     "aggregates.evidence_vs_paper_mape_pct.value", "not a finite number"),
    ("nan-tolerance", _contract_edit(_set_aggregate("tolerance_pct", 0.5)).replace('"tolerance_pct": 0.5', '"tolerance_pct": NaN'),
     "aggregates.evidence_vs_paper_mape_pct.tolerance_pct", "not a finite number"),
    ("loose-tolerance", _contract_edit(_set_aggregate("tolerance_pct", 100)), "<root>", "above its frozen budget"),
    ("loose-budget", _contract_edit(lambda d: d["budgets"].__setitem__("paper_mape_pct", 50.0)), "budgets",
     "looser than the frozen budget"),
    ("string-number", _contract_edit(_set_aggregate("value", "3.65")), "aggregates.evidence_vs_paper_mape_pct.value",
     "valid number, got \"3.65\""),
    ("list-number", _contract_edit(_set_aggregate("value", [3.65])), "aggregates.evidence_vs_paper_mape_pct.value",
     "valid number"),
    ("unknown-key", _contract_edit(lambda d: d.__setitem__("extra", 1)), "extra", "unknown field"),
    ("unknown-aggregate", _contract_edit(lambda d: d["aggregates"].__setitem__("bogus", {"value": 1, "tolerance_pct": 0})),
     "aggregates.bogus", "Input should be"),
    ("missing-key", _contract_edit(lambda d: d.pop("cases")), "cases", "required field is missing"),
    ("bad-digest", _contract_edit(lambda d: d["portable_plan_digests"].__setitem__("gpt3-175B/full", "x")),
     "portable_plan_digests.gpt3-175B/full", "should match pattern"),
    ("duplicate", json.dumps(CONTRACT)[:-1] + ', "schema": "x"}', "schema", "duplicate key"),
    ("deep", "[" * 100_000 + "]" * 100_000, "<json>", "nested deeper"),
]


@pytest.mark.parametrize("name,text,field,message", HOSTILE_CONTRACTS, ids=[h[0] for h in HOSTILE_CONTRACTS])
def test_hostile_contract(tmp_path, capsys, name, text, field, message):
    path = tmp_path / "contract.json"
    path.write_text(text)
    status, out, err = run(capsys, "contract", "check", "--contract", path)
    one_error_line(status, err, f"{path}: {field}", message)
    assert "honoured" not in out


def test_binary_contract(tmp_path, capsys):
    path = tmp_path / "contract.json"
    path.write_bytes(b"\x00\x01\xff")
    one_error_line(*run(capsys, "contract", "check", "--contract", path)[::2], f"{path}: --contract: not UTF-8 text")


# ------------------------------------------------------------------------------------- vendored records


@pytest.fixture
def vendor(tmp_path):
    directory = tmp_path / "vendor"
    shutil.copytree(ROOT / "vendor" / "calculon-0.1.0", directory)
    return directory


@pytest.mark.parametrize("text,message", [
    ("[1, NaN]", "NaN is not a finite number"),
    ('{"schema": "a", "schema": "b"}', "duplicate key"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ('{"schema": 1}', "not a valid manifest"),
])
def test_hostile_manifest(vendor, text, message):
    from harness.errors import OracleRecordError
    from harness.oracles.records import load_manifest

    (vendor / "MANIFEST.json").write_text(text)
    with pytest.raises(OracleRecordError) as info:
        load_manifest(vendor)
    assert str(info.value).startswith(str(vendor / "MANIFEST.json")) and message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ['"1.5"', "true", "[1.5]", "null"])
def test_record_edited_with_its_digest_is_one_error_line(tmp_path, capsys, value):
    """A record whose figure was edited and whose manifest digest was recomputed to match: still one line."""
    import hashlib

    project = tmp_path / "project"
    vendor = project / "vendor" / "calculon-0.1.0"
    shutil.copytree(ROOT / "vendor" / "calculon-0.1.0", vendor)
    records = vendor / "records" / "cases.json"
    text = records.read_text()
    edited = re.sub(r'"total_time":[-0-9.e+]+', f'"total_time":{value}', text, count=1)
    assert edited != text
    records.write_text(edited)
    manifest = json.loads((vendor / "MANIFEST.json").read_text())
    manifest["files"]["records/cases.json"] = hashlib.sha256(edited.encode()).hexdigest()
    (vendor / "MANIFEST.json").write_text(json.dumps(manifest))
    status, out, err = run(capsys, "--project", project, "calibrate", "--cases", CASES_DIR, "--output",
                           tmp_path / "report.json")
    one_error_line(status, err, "total_time", "is not a finite number")
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize("content", [b"", b"\n  \n\n", gzip.compress(b"", mtime=0)], ids=["empty", "blank", "empty-gz"])
def test_empty_batch_is_an_error_not_an_empty_success(tmp_path, capsys, content):
    path = tmp_path / ("in.jsonl.gz" if content.startswith(b"\x1f\x8b") else "in.jsonl")
    path.write_bytes(content)
    output = tmp_path / "out.json"
    one_error_line(*run(capsys, "estimate", "--calculon-batch", path, "--output", output)[::2],
                   f"{path}: <file>: no batch lines")
    assert not output.exists()


# ------------------------------------------------------------------------------- evidence import / fit / report

NCCL_TABLE = "# nccl-tests\n  1024  256 float sum -1  10.5  0.10  0.18  0  10.1  0.10  0.18  0\n"


def _evidence_cases(tmp_path: Path) -> list[tuple[list, str]]:
    csv_bad, csv_bin, t4, nccl = (tmp_path / n for n in ("bad.csv", "bin.csv", "t4.json", "nccl.txt"))
    csv_bad.write_text("a,b\n1,2\n")
    csv_bin.write_bytes(b"\x89PNG\x00\xff")
    t4.write_text('{"model": {}, "execution": {}, "rows": [], "x": NaN}')
    nccl.write_text(NCCL_TABLE)
    corpus = ROOT / "measurements" / "korthikanti22.jsonl"
    out = tmp_path / "out.jsonl"
    profile = EVIDENCE / "a100_80g.yaml"
    return [
        (["evidence", "import", "vtrain", csv_bad, "--output", out], f"{csv_bad}: # GPUs: required column is missing"),
        (["evidence", "import", "vtrain", csv_bin, "--output", out], f"{csv_bin}: line 1: not UTF-8 text"),
        (["evidence", "import", "vtrain", tmp_path, "--output", out], f"{tmp_path}: <file>: is a directory"),
        (["evidence", "import", "vtrain", csv_bad, "--output", csv_bad], "--output: would overwrite"),
        (["evidence", "import", "korthikanti", "--table4", t4, "--output", out], f"{t4}: x: NaN is not a finite"),
        (["evidence", "import", "nccl-tests", nccl, "--tier", str(2**70), "--output", out], "--tier: must be a network"),
        (["evidence", "import", "nccl-tests", nccl, "--tier", "0", "--output", out, "--apply", "a100_80g",
          "--profile-output", profile], "--profile-output: would overwrite"),
        (["evidence", "import", "nccl-tests", nccl, "--tier", "0", "--output", out, "--apply", "../x",
          "--profile-output", tmp_path / "p.yaml"], "<command line>: --apply: '../x' is not an evidence profile name"),
        (["evidence", "fit", "--base", "a100_80g", "--measurements", corpus, "--output", tmp_path / "x.yaml",
          "--layer-weight", "inf"], "--layer-weight: weights must be finite and >= 0, got inf"),
        (["evidence", "fit", "--base", "a100_80g", "--measurements", corpus, "--output", tmp_path / "x.yaml",
          "--benchmark-weight", "nan"], "--benchmark-weight: weights must be finite and >= 0, got nan"),
        (["evidence", "fit", "--base", "a100_80g", "--measurements", corpus, "--output", profile],
         "--output: would overwrite"),
        (["evidence", "fit", "--base", "/etc/x", "--measurements", corpus, "--output", tmp_path / "x.yaml"],
         "<command line>: --base: '/etc/x' is not an evidence profile name"),
        (["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g", "--measurements", corpus,
          "--output", profile], "--output: would overwrite"),
        (["evidence", "report", "--profile", "a100_measured", "--base", "a100_80g", "--measurements",
          tmp_path / "nope.jsonl", "--output", tmp_path / "r.json"], "nope.jsonl: <file>: no such file"),
    ]


def test_hostile_evidence_commands(tmp_path, capsys):
    before = {p: p.read_bytes() for p in EVIDENCE.glob("*.yaml")}
    for argv, message in _evidence_cases(tmp_path):
        status, out, err = run(capsys, *argv)
        one_error_line(status, err, message)
    assert {p: p.read_bytes() for p in EVIDENCE.glob("*.yaml")} == before
    assert not (tmp_path / "out.jsonl").exists()


# ----------------------------------------------------------------------------------------------------- search


def test_hostile_search_requests(tmp_path, capsys):
    model = tmp_path / "m.json"
    model.write_text(json.dumps(MODEL))
    binary, nan = tmp_path / "b.json", tmp_path / "n.json"
    binary.write_bytes(b"\x89PNG\x00")
    nan.write_text(json.dumps(MODEL).replace("6144,", "NaN,", 1))
    base = ["search", "--system", "a100_80g", "--datatype", "float16", "--workers", "1", "--no-progress"]
    cases = [
        (["--model", model, "--procs", str(10**20), "--max-batch", "4"], "--procs: must be at most 16777216"),
        (["--model", model, "--procs", "4", "--max-batch", str(2**40)], "--max-batch: must be at most 16777216"),
        (["--model", model, "--procs", "4", "--max-batch", "4", "--top", str(10**12)], "--top: must be at most"),
        (["--model", model, "--procs", "4", "--max-batch", "4", "--output", EVIDENCE / "a100_80g.yaml"],
         "--output: would overwrite"),
        (["--model", model, "--procs", "4", "--max-batch", "4", "--output", model], "--output: would overwrite"),
        (["--model", binary, "--procs", "4", "--max-batch", "4"], f"{binary}: <file>: not UTF-8 text"),
        (["--model", nan, "--procs", "4", "--max-batch", "4"], f"{nan}: hidden: NaN is not a finite number"),
    ]
    before = (EVIDENCE / "a100_80g.yaml").read_bytes()
    for extra, message in cases:
        status, out, err = run(capsys, *base, *extra)
        one_error_line(status, err, message)
    assert (EVIDENCE / "a100_80g.yaml").read_bytes() == before and model.read_text() == json.dumps(MODEL)


@pytest.mark.parametrize("value", ["1_6", " 4 ", "\u0664", "4.0", "0x10"])
@pytest.mark.parametrize("argv", [
    ("search", "--model", "m.json", "--system", "a100_80g", "--max-batch", "2", "--datatype", "float16", "--procs"),
    ("estimate", "megatron-22B_full", "--jobs"),
])
def test_an_integer_option_is_ascii_decimal_digits(capsys, argv, value):
    """Hostile-input probe: int() read '1_6' as 16, ' 4 ' as 4 and an Arabic-Indic digit as 4; every integer option
    of the command line takes ASCII decimal digits (harness.cli.DECIMAL), one error line otherwise."""
    status, _, err = run(capsys, *argv, value)
    one_error_line(status, err, f"argument {argv[-1]}: invalid int value: {value!r}")
