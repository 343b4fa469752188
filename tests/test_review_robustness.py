"""Regressions of a robustness review of main (issue 12): each hostile input gets one ``error: `` line naming the
file (or ``<command line>``) and the field, exit 2, and nothing written; checked through the real command line
(:func:`harness.cli.main`, in-process unless a signal is involved).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


from conftest import ROOT, one_error_line, run_cli as run

EVIDENCE = ROOT / "evidence"
SMALL_JSON = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64, "num_blocks": 4}


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


# --- 2. oracle import-reference checks every record before writing anything -----------------------------------------

@pytest.fixture
def reference_setup(tmp_path):
    """A two-record reference file (the first two vendored Table 5 records in the shared format) and a vendor
    directory with the project's manifest."""
    from conftest import vendored_reference

    data = vendored_reference(2)
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    shutil.copy(ROOT / "vendor" / "calculon-0.1.0" / "MANIFEST.json", vendor / "MANIFEST.json")
    return data, vendor


def import_reference(capsys, tmp_path, vendor, data) -> tuple[int, str, str]:
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps(data))
    return run(capsys, "oracle", "import-reference", reference, "--output", "records/x.json", "--vendor", vendor)


def test_import_reference_of_a_well_formed_file_writes_it(reference_setup, tmp_path, capsys):
    data, vendor = reference_setup
    status, out, err = import_reference(capsys, tmp_path, vendor, data)
    assert status == 0, err
    written = json.loads((vendor / "records" / "x.json").read_text())["records"]
    assert [r["id"] for r in written] == [r["case"] for r in data["records"]]
    assert "records/x.json" in json.loads((vendor / "MANIFEST.json").read_text())["files"]


def test_a_vendored_reference_imports_to_the_vendored_records(tmp_path, capsys):
    """The fixture's reference file (built from the vendored records, so the tests need no ``../shared``) is
    faithful: importing it gives back every vendored Table 5 record, figure for figure."""
    from conftest import vendored_reference

    from harness.oracles.records import vendor_dir

    vendored = json.loads((vendor_dir() / "records" / "cases.json").read_text())["records"]
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    shutil.copy(ROOT / "vendor" / "calculon-0.1.0" / "MANIFEST.json", vendor / "MANIFEST.json")
    status, _, err = import_reference(capsys, tmp_path, vendor, vendored_reference(len(vendored)))
    assert status == 0, err
    written = json.loads((vendor / "records" / "x.json").read_text())["records"]
    fields = ("id", "system", "calculon_model", "calculon_execution", "views")
    assert [{f: r[f] for f in fields} for r in written] == [{f: r[f] for f in fields} for r in vendored]
    assert len(written) == 16


def _set(path: str, value):
    def edit(data):
        *parents, last = path.split("/")
        target = data
        for key in parents:
            target = target[int(key) if isinstance(target, list) else key]
        target[int(last) if isinstance(target, list) else last] = value
    return edit


def _delete(path: str):
    def edit(data):
        *parents, last = path.split("/")
        target = data
        for key in parents:
            target = target[int(key) if isinstance(target, list) else key]
        del target[last]
    return edit


def _duplicate(data):
    data["records"][1]["case"] = data["records"][0]["case"]


HOSTILE_REFERENCES = [
    ("string-time", _set("records/0/system_evidence/total_time", "0.1"), "records[0].system_evidence.total_time"),
    ("negative-time", _set("records/0/system_evidence/fw_time", -1.0), "records[0].system_evidence.fw_time"),
    ("bool-figure", _set("records/1/peak_only/bw_time", True), "records[1].peak_only.bw_time"),
    ("negative-layer", _set("records/0/system_evidence/layers/2/fw_flops", -5),
     "records[0].system_evidence.layers[2].fw_flops"),
    ("layers-not-list", _set("records/0/system_evidence/layers", {"a": 1}), "records[0].system_evidence.layers"),
    ("missing-tensor-par", _delete("records/0/execution/tensor_par"), "records[0].execution.tensor_par"),
    ("string-tensor-par", _set("records/0/execution/tensor_par", "8"), "records[0].execution.tensor_par"),
    ("path-system", _set("records/1/system", "../../etc/x"), "records[1].system"),
    ("unknown-key", _set("records/0/surprise", 1), "records[0].surprise"),
    ("missing-view", _delete("records/0/system_evidence"), "records[0].system_evidence"),
    ("error-not-string", _set("records/0/peak_only", {"error": 3}), "records[0].peak_only.error"),
    ("duplicate-id", _duplicate, "records[1].case"),
    ("records-not-list", _set("records", {"a": 1}), "records"),
    ("no-digest", _delete("meta/source_tree_sha256"), "meta.source_tree_sha256"),
]


@pytest.mark.parametrize("edit, field", [h[1:] for h in HOSTILE_REFERENCES], ids=[h[0] for h in HOSTILE_REFERENCES])
def test_import_reference_refuses_a_bad_record_writing_nothing(reference_setup, tmp_path, capsys, edit, field):
    data, vendor = reference_setup
    edit(data)
    manifest = (vendor / "MANIFEST.json").read_bytes()
    one_error_line(*import_reference(capsys, tmp_path, vendor, data)[::2], f"{tmp_path / 'ref.json'}: {field}: ")
    assert (vendor / "MANIFEST.json").read_bytes() == manifest
    assert files_under(vendor) == {Path("MANIFEST.json")}


@pytest.mark.parametrize("root", [[], "records", 3, None])
def test_import_reference_of_a_non_mapping_root_names_the_root(reference_setup, tmp_path, capsys, root):
    _, vendor = reference_setup
    one_error_line(*import_reference(capsys, tmp_path, vendor, root)[::2], f"{tmp_path / 'ref.json'}: <root>: ",
                   "must be a mapping")
    assert files_under(vendor) == {Path("MANIFEST.json")}


# --- 3. evidence import nccl-tests: unique ids, and a corpus is checked by the reader's rules before it is written --

def _nccl_tables(tmp_path) -> tuple[Path, Path]:
    from test_measurements import nccl_text

    sizes = [2**20 * k for k in (1, 2, 4, 8)]
    for directory, bus in (("d1", [20.0, 40.0, 75.0, 110.0]), ("d2", [10.0, 30.0, 60.0, 90.0])):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "ar.txt").write_text(nccl_text(8, sizes, bus, csv=False))
    return tmp_path / "d1" / "ar.txt", tmp_path / "d2" / "ar.txt"


def test_nccl_import_of_two_files_with_one_name_gives_unique_ids_the_reader_accepts(tmp_path, capsys):
    from harness.measurements.corpus import read_corpus

    first, second = _nccl_tables(tmp_path)
    corpus = tmp_path / "c.jsonl"
    status, _, err = run(capsys, "evidence", "import", "nccl-tests", first, second, "--tier", "0", "--output", corpus)
    assert status == 0, err
    records = read_corpus(corpus).records
    assert [r.id for r in records] == ["d1/ar.txt", "d2/ar.txt"]
    assert records[0].measured_s != records[1].measured_s  # each table under its own id


def test_nccl_import_of_one_name_keeps_the_file_name_as_id(tmp_path, capsys):
    from harness.measurements.corpus import read_corpus

    first, _ = _nccl_tables(tmp_path)
    corpus = tmp_path / "c.jsonl"
    assert run(capsys, "evidence", "import", "nccl-tests", first, "--tier", "0", "--output", corpus)[0] == 0
    assert [r.id for r in read_corpus(corpus).records] == ["ar.txt"]


def test_nccl_import_of_the_same_file_twice_is_refused_naming_both(tmp_path, capsys, monkeypatch):
    first, _ = _nccl_tables(tmp_path)
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "c.jsonl"
    before = files_under(tmp_path)
    one_error_line(*run(capsys, "evidence", "import", "nccl-tests", first, "d1/../d1/ar.txt", "--tier", "0",
                        "--output", corpus)[::2], "d1/../d1/ar.txt", str(first))
    assert files_under(tmp_path) == before


def test_write_corpus_refuses_what_the_reader_would_refuse_writing_nothing(tmp_path):
    from harness.errors import InputError
    from harness.measurements.corpus import write_corpus
    from harness.measurements.nccl_tests import parse_nccl_tests

    first, second = _nccl_tables(tmp_path)
    sweeps = [parse_nccl_tests(path, "all_reduce", 0) for path in (first, second)]  # both "ar.txt"
    header = {"kind": "corpus", "schema_name": "blueprinting.measurement-corpus", "schema_version": 0, "name": "x",
              "description": "x", "source": {"citation": "x", "licence": "x"},
              "environment": {"hardware": "x", "software": "x"}, "placement": "x"}
    from harness.measurements.corpus import CorpusHeader

    with pytest.raises(InputError, match=r"c\.jsonl: --output: .*duplicate id 'ar\.txt'"):
        write_corpus(tmp_path / "c.jsonl", CorpusHeader.model_validate(header), sweeps)
    assert not (tmp_path / "c.jsonl").exists()


# --- 4. SIGTERM unwinds like Ctrl-C: no temporary file beside the output, the target untouched -----------------------

def _batch_file(path: Path, lines: int) -> None:
    from harness.cases import load_case
    from harness.interop.calculon_format import calculon_from_input

    from conftest import CASES_DIR

    model, execution = calculon_from_input(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input())
    with path.open("w") as handle:
        for index in range(lines):  # distinct batches: no line is a repeat of another
            e = dict(execution, batch_size=4 * (1 + index % 512), microbatch_size=4)
            handle.write(json.dumps({"id": f"l{index}", "model": model, "execution": e, "system": "a100_80g"}) + "\n")


def test_sigterm_mid_batch_leaves_no_temporary_file_and_the_old_output(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    batch, output = tmp_path / "in.jsonl", tmp_path / "out.json"
    _batch_file(batch, 5_000)  # seconds of work (about 5 ms a line): it is still running when the signal comes
    output.write_text("old\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "harness", "estimate", "--calculon-batch", str(batch),
                                "--output", str(output)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.json.*.tmp")):  # the batch is being written
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.01)
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.json"]
    assert output.read_text() == "old\n"


# --- 5. evidence fit replaces an existing profile only with --replace ----------------------------------------------

@pytest.fixture
def fit_corpus(tmp_path):
    """An iteration corpus the fit accepts (the tests of the fit's corpus, tests/test_measurements.py)."""
    from test_measurements import HEADER, SWEEPS, _priced_records, write_lines

    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8))
    return [corpus, SWEEPS]


def test_evidence_fit_refuses_to_replace_an_existing_profile_without_replace(tmp_path, capsys, fit_corpus):
    other = tmp_path / "proj" / "evidence" / "other.yaml"
    other.parent.mkdir(parents=True)
    other.write_text("name: other\n# somebody's profile\n")
    argv = ["evidence", "fit", "--base", "a100_80g", "--measurements", *fit_corpus, "--output", other]
    one_error_line(*run(capsys, *argv)[::2], f"{other}: --output: ", "--replace")
    assert other.read_text() == "name: other\n# somebody's profile\n"
    assert sorted(p.name for p in other.parent.iterdir()) == ["other.yaml"]
    status, out, err = run(capsys, *argv, "--replace")
    assert status == 0, err
    assert other.read_text().startswith("name: other\n") and "issue_s_per_operation" in other.read_text()


def test_nccl_profile_output_refuses_to_replace_an_existing_profile_without_replace(tmp_path, capsys):
    first, _ = _nccl_tables(tmp_path)
    target = tmp_path / "mine.yaml"
    target.write_text("keep\n")
    argv = ["evidence", "import", "nccl-tests", first, "--tier", "0", "--output", tmp_path / "c.jsonl", "--apply",
            "a100_80g", "--profile-output", target]
    one_error_line(*run(capsys, *argv)[::2], f"{target}: --profile-output: ", "--replace")
    assert target.read_text() == "keep\n" and not (tmp_path / "c.jsonl").exists()
    assert run(capsys, *argv, "--replace")[0] == 0
    assert target.read_text().startswith("name: mine\n")


def test_the_documented_refit_of_the_shipped_profile_uses_replace():
    text = (ROOT / "docs" / "measured-evidence.md").read_text()
    command = text[text.index("python -m harness evidence fit"):]
    command = command[:command.index("#")]
    assert "--output evidence/a100_measured.yaml" in command and "--replace" in command


# --- 6. an error names its option once, and the no-iteration error names the corpora --------------------------------

def test_command_line_errors_name_their_option_once(tmp_path, capsys, fit_corpus):
    first, _ = _nccl_tables(tmp_path)
    fit = ["evidence", "fit", "--base", "a100_80g", "--measurements", *fit_corpus]
    nccl = ["evidence", "import", "nccl-tests", first, "--output", tmp_path / "nc.jsonl"]
    for argv, option in [
        ([*fit, "--output", tmp_path / "x.yaml", "--name", "y"], "--output"),
        ([*fit, "--output", tmp_path / "x.yaml", "--name", "a/b"], "--name"),
        (["evidence", "fit", "--base", "/etc/x", "--measurements", *fit_corpus, "--output", tmp_path / "x.yaml"],
         "--base"),
        ([*fit, "--output", tmp_path / "x.yaml", "--layer-weight", "-1"], "--layer-weight"),
        ([*nccl, "--tier", "2000"], "--tier"),
        ([*nccl, "--tier", "0", "--participants", "1"], "--participants"),
        ([*nccl, "--tier", "3", "--apply", "a100_80g", "--profile-output", tmp_path / "p.yaml"], "--tier"),
        ([*nccl, "--tier", "0", "--apply", "../x", "--profile-output", tmp_path / "p.yaml"], "--apply"),
        ([*nccl, "--tier", "0", "--name", "a b"], "--name"),
        (["calibrate", "--compare", "../x", "--output", tmp_path / "r.json"], "--compare"),
    ]:
        err = one_error_line(*run(capsys, *argv)[::2], f": {option}: ")
        assert err.count(option) == 1, err
        assert not any((tmp_path / name).exists() for name in ("nc.jsonl", "p.yaml", "r.json")), argv


def test_fit_without_iteration_records_names_the_corpora(tmp_path, capsys, fit_corpus):
    from test_measurements import SWEEPS

    one_error_line(*run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements", SWEEPS, "--output",
                        tmp_path / "x.yaml")[::2], f"{SWEEPS}: kind: ", "no iteration record")
    assert not (tmp_path / "x.yaml").exists()


# --- evidence import vtrain of a CSV without a data row is an error, not "0 iteration records" ----------------------

VTRAIN_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor "
                 "parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n")


@pytest.mark.parametrize("content", [VTRAIN_HEADER, VTRAIN_HEADER + "\n\n"])
def test_vtrain_import_of_a_header_only_csv_is_refused(tmp_path, capsys, content):
    """The hostile sweep's vtrain-header-only: exit 0 and an empty corpus written (a zero-case success). With a
    second, valid file the empty one is still refused: it was named to be imported."""
    empty, good = tmp_path / "empty.csv", tmp_path / "good.csv"
    empty.write_text(content)
    good.write_text(VTRAIN_HEADER + "4,16,4,2048,16,24,1024,1,2,2,410.4\n")
    for files in ([empty], [good, empty]):
        one_error_line(*run(capsys, "evidence", "import", "vtrain", *files, "--output", tmp_path / "o.jsonl")[::2],
                       f"{empty}: ", "no data row")
        assert not (tmp_path / "o.jsonl").exists()
    status, out, err = run(capsys, "evidence", "import", "vtrain", good, "--output", tmp_path / "o.jsonl")
    assert status == 0 and out.startswith("1 iteration records"), err
