"""Hostile input on the measurement surfaces, the outputs and the search (issue 24): the importers read their
formats strictly, a fit is a claim, cross-validation never reports a figure over no data, one output guard
protects every data file, the scheduler handshake has a deadline and ``--top`` is bounded.

Each test names the defect (``bad N``) or weak item of the issue it covers; each failed on the code before the
fix. The expected values are the tables' own: a table made for ``n`` GPUs must say ``n``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.evidence.profile import load_profile
from harness.measurements import fit as fitting
from harness.measurements.corpus import CollectiveSweepRecord
from harness.measurements.nccl_tests import parse_nccl_tests, sweep_curve, with_sweeps

from conftest import CASES_DIR, ROOT, one_error_line, run_cli as run
from test_measurements import HEADER, RECORD, SWEEPS, _priced_records, write_lines

T4_MODEL = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64, "num_blocks": 4}
T4_EXECUTION = {"tensor_par": 2, "pipeline_par": 1, "data_par": 1, "batch_size": 4, "microbatch_size": 4}
T4_ROW = {"sequence_parallel": True, "recompute": "attn_only", "forward_ms": 1.5, "backward_ms": 3.25}


def nccl_table(collective: str, n: int, sizes=(1 << 20, 1 << 24, 1 << 28), bus=(20.0, 120.0, 220.0), *,
               wrong: str = "0", ranks: int | None = None) -> str:
    """A table as nccl-tests prints it for ``collective`` on ``n`` ranks (float, 4 bytes): the size column is
    the whole message, the count column a full message (all_reduce) or one rank's share (reduce_scatter,
    all_gather); busbw = algbw x factor with factor 2(n-1)/n (all_reduce) or (n-1)/n."""
    factor = 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n
    redop = "none" if collective == "all_gather" else "sum"
    lines = [f"# nThread 1 nGpus {n} minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20"]
    lines += [f"#  Rank {r:2d} Group  0 Pid 1000 on host device {r} [0x07] NVIDIA A100-SXM4-80GB"
              for r in range(ranks if ranks is not None else 0)]
    lines.append("#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong")
    for size, b in zip(sizes, bus):
        count = size // 4 if collective == "all_reduce" else size // 4 // n
        t_us = size * factor / (b * 1e9) * 1e6
        alg = size / (t_us * 1e-6) / 1e9
        lines.append(f"{size} {count} float {redop} -1 {t_us:.2f} {alg:.2f} {b:.2f} {wrong} {t_us * 1.01:.2f} "
                     f"{alg / 1.01:.2f} {b / 1.01:.2f} 0")
    return "\n".join(lines) + "\n"


# --- bad 2: the table's header and columns say what it measured --------------------------------------------

@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
def test_an_nccl_table_is_read_as_the_collective_and_participants_its_columns_say(tmp_path, collective):
    path = tmp_path / "t.txt"
    path.write_text(nccl_table(collective, 8))
    sweep = parse_nccl_tests(path, None, 0)
    assert (sweep.collective, sweep.participants) == (collective, 8)


def test_an_all_gather_table_imported_as_all_reduce_is_refused_writing_nothing(tmp_path, capsys):
    path, out = tmp_path / "ag.txt", tmp_path / "c.jsonl"
    path.write_text(nccl_table("all_gather", 8))
    one_error_line(*run(capsys, "evidence", "import", "nccl-tests", path, "--tier", "0", "--collective", "all_reduce",
                        "--output", out)[::2], f"{path}: --collective: all_reduce given", "all_gather")
    assert not out.exists()
    status, _, err = run(capsys, "evidence", "import", "nccl-tests", path, "--tier", "0", "--output", out)
    assert status == 0, err
    record = json.loads(out.read_text().splitlines()[1])
    assert (record["collective"], record["participants"]) == ("all_gather", 8)


def test_the_header_ranks_must_agree_with_the_columns(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(nccl_table("all_reduce", 8, ranks=4))
    with pytest.raises(InputError, match="lists 4 ranks, its columns imply 8"):
        parse_nccl_tests(path, None, 0)


# --- weak: 8 B lines (busbw 0.00), #wrong, efficiencies outside [1e-4, 1], too many participants -----------

def test_a_standard_table_starting_at_8_bytes_is_read(tmp_path):
    """nccl-tests prints bus bandwidth 0.00 at 8 B: those lines cannot say a participant count, the others do."""
    path = tmp_path / "t.txt"
    path.write_text(nccl_table("all_reduce", 8, sizes=(8, 1 << 20, 1 << 24), bus=(0.001, 20.0, 120.0)))
    assert "0.00 " in path.read_text()
    assert parse_nccl_tests(path, None, 0).participants == 8


def test_wrong_results_are_refused(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(nccl_table("all_reduce", 8, wrong="3"))
    with pytest.raises(InputError, match=r"#wrong: 3: nccl-tests found wrong results"):
        parse_nccl_tests(path, None, 0)


def test_a_curve_beyond_the_tier_is_refused_not_clipped(tmp_path):
    tier = load_profile("a100_80g").networks[0]  # 300 GB/s per processor
    fast, slow = tmp_path / "fast.txt", tmp_path / "slow.txt"
    fast.write_text(nccl_table("all_reduce", 8, bus=(20.0, 600.0, 900.0)))  # 900 GB/s > 300 GB/s
    with pytest.raises(InputError, match=r"fast\.txt: measured_s: .* needs 3\.\d+ of the tier's"):
        sweep_curve(parse_nccl_tests(fast, None, 0), tier, str(fast))
    slow.write_text(nccl_table("all_reduce", 8, bus=(0.002, 0.004, 0.008)))  # < 1e-4 of 300 GB/s
    with pytest.raises(InputError, match=r"slow\.txt: measured_s: .*efficiencies lie in \[0.0001, 1\]"):
        sweep_curve(parse_nccl_tests(slow, None, 0, participants=8), tier, str(slow))


def test_more_participants_than_the_tier_connects_are_refused():
    tier = load_profile("a100_80g").networks[0]
    sweep = CollectiveSweepRecord(kind="collective_sweep", id="big", collective="all_reduce", participants=2**24,
                                  network_tier=0, sizes_bytes=(1e6,), measured_s=(1.0,))
    with pytest.raises(InputError, match=f"big: {2**24} participants on a tier of {tier.size_processors} processors"):
        sweep_curve(sweep, tier, "c.jsonl")


# --- bad 3: repeated sweeps ---------------------------------------------------------------------------------

def _sweep(ident: str, times) -> CollectiveSweepRecord:
    return CollectiveSweepRecord(kind="collective_sweep", id=ident, collective="all_reduce", participants=8,
                                 network_tier=0, sizes_bytes=(1e6, 1e7), measured_s=tuple(times))


def test_two_sweeps_of_one_curve_are_an_error_unless_combined_and_the_combination_ignores_their_order():
    from harness.measurements.nccl_tests import combined_sweeps

    a, b = _sweep("a", (1e-4, 2e-4)), _sweep("b", (1.5e-4, 1.5e-4))
    with pytest.raises(InputError, match="a, b: 2 sweeps of all_reduce on tier 0 with 8 participants"):
        with_sweeps(load_profile("a100_80g"), [a, b], "c.jsonl")
    with pytest.raises(InputError, match="--combine-sweeps"):
        combined_sweeps([a, b])
    (ab,), (ba,) = combined_sweeps([a, b], "fastest"), combined_sweeps([b, a], "fastest")
    assert ab == ba and ab.measured_s == (1e-4, 1.5e-4)  # the faster time at each size


def test_a_fit_with_repeated_sweeps_is_refused_without_combine(tmp_path, capsys):
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8))
    twice = tmp_path / "twice.jsonl"
    lines = SWEEPS.read_text().splitlines()
    again = json.loads(lines[1])
    again["id"] = "again"
    twice.write_text("\n".join(lines[:2] + [json.dumps(again)]) + "\n")
    out = tmp_path / "f.yaml"
    one_error_line(*run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements", corpus, twice, "--output",
                        out)[::2], "2 sweeps of all_reduce on tier 0", "--combine-sweeps")
    assert not out.exists()


# --- bad 4 and weak: Korthikanti Table 4 read strictly --------------------------------------------------------

@pytest.mark.parametrize("edit, field, message", [
    (lambda d: d["rows"][0].update(recompute=["none"]), "rows.0.recompute", "must be one of"),
    (lambda d: d["rows"][0].update(forward_ms=1e20), "rows.0.forward_ms", "must be <="),
    (lambda d: d["rows"][0].update(forward_ms="7.7"), "rows.0.forward_ms", "must be a number"),
    (lambda d: d.update(rows=[]), "rows", "no row"),
    (lambda d: d["execution"].update(weight_offload=True), "execution.weight_offload", "unknown field"),
    (lambda d: d["execution"].update(tensor_par_net=1), "execution.tensor_par_net", "unknown field"),
    (lambda d: d["execution"].update(datatype="bfloat16"), "execution.datatype", "set by the importer"),
    (lambda d: d["rows"][0].update(colour="red"), "rows.0.colour", "unknown field"),
    (lambda d: d["rows"][0].update(total_ms=9.0), "rows.0.total_ms", "is not forward_ms + backward_ms"),
], ids=["recompute-list", "huge", "string", "no-rows", "weight_offload", "tensor_par_net", "datatype", "key",
        "total"])
def test_korthikanti_table4_is_read_strictly(tmp_path, capsys, edit, field, message):
    data = {"model": dict(T4_MODEL), "execution": dict(T4_EXECUTION), "rows": [dict(T4_ROW)]}
    edit(data)
    path, out = tmp_path / "t4.json", tmp_path / "c.jsonl"
    path.write_text(json.dumps(data))
    one_error_line(*run(capsys, "evidence", "import", "korthikanti", "--table4", path, "--output", out)[::2],
                   f"{path}: {field}: ", message)
    assert not out.exists()


# --- weak: vTrain errors in plain words; a 1 ns iteration ----------------------------------------------------

@pytest.mark.parametrize("row, column, message", [
    ("8,16,2,2048,16,24,1024,2,1,4,0.000001", "iteration time (ms)", "must be >= 0.1"),
    (f"8,16,2,{2**40},16,24,1024,2,1,4,512.5", "hidden size", "less than or equal to"),
])
def test_vtrain_values_out_of_bounds_name_the_column_in_plain_words(tmp_path, capsys, row, column, message):
    path, out = tmp_path / "v.csv", tmp_path / "c.jsonl"
    path.write_text("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor "
                    "parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n" + row + "\n")
    err = one_error_line(*run(capsys, "evidence", "import", "vtrain", path, "--output", out)[::2],
                         f"{path}: {column}: ", message, "(line 2)")
    assert "pydantic" not in err
    assert not out.exists()


# --- bad 11: every option is checked before anything is written ----------------------------------------------

def test_nccl_import_checks_the_profile_name_and_the_header_options_before_writing(tmp_path, capsys):
    table, out = tmp_path / "ar.txt", tmp_path / "c.jsonl"
    table.write_text(nccl_table("all_reduce", 8))
    one_error_line(*run(capsys, "evidence", "import", "nccl-tests", table, "--tier", "0", "--output", out, "--apply",
                        "a100_80g", "--profile-output", tmp_path / "Bad_Name.yaml")[::2], "--profile-output",
                   "'Bad_Name' is not a profile name")
    assert not out.exists()
    for option in ("--licence", "--hardware", "--citation"):
        one_error_line(*run(capsys, "evidence", "import", "nccl-tests", table, "--tier", "0", "--output", out,
                            option, "x" * 10_001)[::2], f"<command line>: {option}: ", "at most 10000 characters")
        assert not out.exists()


# --- bad 8: a fit is a claim ------------------------------------------------------------------------------------

def test_a_fit_on_impossible_data_is_refused_with_its_residuals_and_writes_nothing(tmp_path, capsys):
    """8 runs of a 12-block model measured at 1 ms each: no plausible parameter reproduces them."""
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *[{**r, "measured_iteration_s": 1e-3}
                                                         for r in _priced_records(8)])
    out = tmp_path / "f.yaml"
    status, stdout, err = run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements", corpus, SWEEPS,
                              "--output", out)
    assert status == 1 and err.startswith("error: the fit does not reproduce its data, nothing written") and \
        err.count("\n") == 1, err
    assert "on a bound" in stdout and "mean |error|" in stdout and "tolerance 25 %" in stdout
    assert not out.exists()


def test_a_fit_that_reproduces_its_data_prints_its_residuals(tmp_path, capsys):
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8))
    out = tmp_path / "evidence" / "fine.yaml"
    status, stdout, err = run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements", corpus, SWEEPS,
                              "--output", out)
    assert status == 0, err
    assert "one_node       8 targets: mean |error|" in stdout and "on a bound" not in stdout
    fixed = load_profile_text(out)["fit"]["fixed"]
    assert "tier-0 collective curves from the corpus's nccl-tests sweeps" in fixed


def load_profile_text(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def test_the_provenance_claims_sweep_curves_only_when_there_were_sweeps():
    assert fitting._sweep_claims((), None) == ()
    sweep = _sweep("ar", (1e-4, 2e-4))
    claims = fitting._sweep_claims((sweep,), None)
    assert claims[0] == "tier-0 collective curves from the corpus's nccl-tests sweeps"
    assert "derived from the all_reduce sweeps" in claims[1]
    measured = [sweep] + [sweep.model_copy(update={"collective": c}) for c in ("reduce_scatter", "all_gather")]
    assert len(fitting._sweep_claims(measured, None)) == 1  # nothing derived when both halves are measured


# --- bad 7: cross-validation over no data ------------------------------------------------------------------------

def test_a_report_on_one_shape_says_not_enough_data_and_breaks_its_budgets(tmp_path, capsys):
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8))
    report = tmp_path / "r.json"
    status, stdout, err = run(capsys, "evidence", "report", "--profile", "a100_measured", "--base", "a100_80g",
                              "--measurements", corpus, SWEEPS, "--output", report)
    assert status == 1, err
    data = json.loads(report.read_text())
    shape = data["cross_validation"]["shape"]
    assert shape["not_enough_data"] and shape["fits"] == {} and shape["classes"]["one_node"]["count"] == 0
    assert any("shape cross-validation, multi_node: not enough data" in v for v in data["violations"])
    assert any("shape cross-validation, one_node: not enough data" in v for v in data["violations"])
    assert "budgets: all met" not in stdout and "not enough data" in stdout


# --- bad 12: microbenchmark records -------------------------------------------------------------------------------

@pytest.mark.slow
def test_fit_and_report_take_the_gemm_and_memory_transfer_records_the_docs_describe(tmp_path, capsys):
    from harness.measurements.corpus import GemmRecord, MemoryTransferRecord
    from harness.measurements.design import Design

    fitted = load_profile("a100_measured")
    benchmarks = [GemmRecord(kind="gemm", id="g1", m=4096, n=4096, k=4096, datatype="float16", measured_s=1.0),
                  MemoryTransferRecord(kind="memory_transfer", id="m1", bytes=1e9, measured_s=1.0)]
    times = Design(benchmarks, fitted).predict(fitted)
    priced = [b.model_copy(update={"measured_s": float(t)}).model_dump(mode="json") for b, t in zip(benchmarks, times)]
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8), *priced)
    status, _, err = run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements", corpus, SWEEPS,
                         "--output", tmp_path / "evidence" / "bench.yaml")
    assert status == 0, err
    checks = write_lines(tmp_path / "k.jsonl", HEADER, *priced)
    status, _, err = run(capsys, "evidence", "report", "--profile", "a100_measured", "--base", "a100_80g",
                         "--measurements", corpus, SWEEPS, "--check", checks, "--output", tmp_path / "r.json")
    assert "internal error" not in err and status in (0, 1), err
    rows = json.loads((tmp_path / "r.json").read_text())["checks"]
    assert [r["what"] for r in rows] == ["gemm", "memory_transfer"]
    assert [r["measured_s"] for r in rows] == [p["measured_s"] for p in priced]


# --- bad 6, bad 10, weak: one output guard --------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path):
    """A project directory with one case, one evidence profile, a corpus and a vendor copy (the guard's data)."""
    root = tmp_path / "proj"
    (root / "cases").mkdir(parents=True)
    shutil.copy(CASES_DIR / "megatron-22B_full.yaml", root / "cases" / "c.yaml")
    (root / "evidence").mkdir()
    shutil.copy(ROOT / "evidence" / "a100_80g.yaml", root / "evidence" / "a100_80g.yaml")
    (root / "measurements").mkdir()
    shutil.copy(SWEEPS, root / "measurements" / "sweeps.jsonl")
    shutil.copytree(ROOT / "vendor", root / "vendor")
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_no_output_replaces_a_case_or_a_corpus_directly_or_through_a_link(project, tmp_path, capsys):
    case, corpus = project / "cases" / "c.yaml", project / "measurements" / "sweeps.jsonl"
    link = tmp_path / "link.json"
    link.symlink_to(case)
    before = _snapshot(project)
    for target in (case, corpus, link):
        one_error_line(*run(capsys, "estimate", "--project", project, case, "--output", target)[::2],
                       "--output: would overwrite")
    one_error_line(*run(capsys, "evidence", "import", "nccl-tests", "--project", project, _table(tmp_path), "--tier",
                        "0", "--output", corpus)[::2], "--output: would overwrite")
    assert _snapshot(project) == before


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "ar.txt"
    path.write_text(nccl_table("all_reduce", 8))
    return path


def test_a_plots_directory_may_not_be_a_data_directory(project, capsys):
    from harness import locations
    from harness.outputs import check_output_dir

    locations.configure(project)
    try:
        with pytest.raises(InputError, match="a directory of the tool's own data"):
            check_output_dir(project / "cases", option="--plots")
        with pytest.raises(InputError, match="would overwrite"):
            from harness.outputs import write_text

            write_text(project / "cases" / "c.yaml", "x")
    finally:
        locations.reset()


def test_import_reference_replaces_a_vendored_file_only_with_replace(tmp_path, capsys):
    from conftest import vendored_reference

    vendor = tmp_path / "vendor"
    shutil.copytree(ROOT / "vendor" / "calculon-0.1.0", vendor)
    existing = "differential/inputs.jsonl.gz"
    before = (vendor / existing).read_bytes()
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps(vendored_reference(2)))
    one_error_line(*run(capsys, "oracle", "import-reference", reference, "--output", existing, "--vendor",
                        vendor)[::2], f"{vendor / existing}: --output: exists: give --replace")
    assert (vendor / existing).read_bytes() == before
    status, _, err = run(capsys, "oracle", "import-reference", reference, "--output", existing, "--vendor", vendor,
                         "--replace")
    assert status == 0, err


def test_import_reference_refuses_empty_stats(tmp_path, capsys):
    from conftest import vendored_reference

    vendor = tmp_path / "vendor"
    vendor.mkdir()
    shutil.copy(ROOT / "vendor" / "calculon-0.1.0" / "MANIFEST.json", vendor / "MANIFEST.json")
    data = vendored_reference(1)
    data["records"][0]["system_evidence"] = {}
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps(data))
    one_error_line(*run(capsys, "oracle", "import-reference", reference, "--output", "records/x.json", "--vendor",
                        vendor)[::2], f"{reference}: records[0].system_evidence.", "required Calculon figure")
    assert not (vendor / "records").exists()


@pytest.mark.slow
def test_output_to_dev_stdout_through_a_pipe_is_written():
    done = subprocess.run([sys.executable, "-m", "harness", "estimate", str(CASES_DIR / "megatron-22B_full.yaml"),
                           "--json", "--output", "/dev/stdout"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)


def test_two_runs_writing_one_new_profile_do_not_both_succeed_without_replace(tmp_path):
    from harness.outputs import write_text

    target = tmp_path / "p.yaml"
    write_text(target, "first\n", exclusive=True)
    with pytest.raises(InputError, match="exists \\(written meanwhile by another run\\): give --replace"):
        write_text(target, "second\n", exclusive=True)
    assert target.read_text() == "first\n" and sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


# --- bad 5, weak: the scheduler handshake has a deadline ---------------------------------------------------------

@pytest.mark.parametrize("banner, message", [(b"", "no Dask handshake within 1 s"),
                                             (b"HTTP/1.1 200 OK\r\n\r\n", "not a Dask handshake")])
def test_a_scheduler_port_that_does_not_speak_dask_is_refused_naming_it(banner, message):
    from harness.search.run import probe_scheduler

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    held = []

    def serve():
        connection, _ = listener.accept()
        held.append(connection)
        if banner:
            connection.sendall(banner)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(InputError, match=f"--scheduler: cannot use the Dask scheduler at 'tcp://127.0.0.1:{port}'"
                                             f": .*{message}"):
            probe_scheduler(f"tcp://127.0.0.1:{port}", deadline_s=1)
    finally:
        thread.join(5)
        for c in held:
            c.close()
        listener.close()


# --- bad 9: --top is bounded by memory -----------------------------------------------------------------------------

def test_a_top_k_that_would_not_fit_in_memory_is_refused_before_the_work(capsys):
    from harness.search.run import CANDIDATE_BYTES, TOP_MEMORY_BYTES

    status, _, err = run(capsys, "search", "--model", CASES_DIR / "megatron-22B_full.yaml", "--system", "a100_80g",
                         "--procs", "16", "--max-batch", "16", "--datatype", "float16", "--top", "1000000",
                         "--no-progress")
    one_error_line(status, err, "<command line>: --top: 1000000 would hold up to",
                   f"at most {TOP_MEMORY_BYTES // CANDIDATE_BYTES}")


def test_a_fit_onto_a_file_that_is_no_profile_name_names_output_not_the_name_it_was_not_given(tmp_path, capsys):
    one_error_line(*run(capsys, "evidence", "fit", "--base", "a100_80g", "--measurements",
                        ROOT / "measurements" / "korthikanti22.jsonl", "--output", tmp_path / "MANIFEST.json")[::2],
                   "<command line>: --output: the output file (a profile is NAME.yaml): 'MANIFEST' is not a profile name")


def test_a_profile_written_under_another_name_than_its_file_is_refused(tmp_path, capsys):
    out = tmp_path / "other.yaml"
    one_error_line(*run(capsys, "evidence", "derive", "--from", "a100_measured", "--without", "gradient_accumulation",
                        "--reason", "x", "--name", "mine", "--output", out)[::2],
                   "--output", "a profile file is named after its profile: mine.yaml")
    assert not out.exists()


# --- weak: derive's name and reason ---------------------------------------------------------------------------------

def test_derive_names_the_name_rule_and_refuses_an_invisible_character_in_the_reason(tmp_path, capsys):
    out = tmp_path / "Mine.yaml"
    one_error_line(*run(capsys, "evidence", "derive", "--from", "a100_measured", "--without", "gradient_accumulation",
                        "--reason", "x", "--output", out)[::2], "--output: the output file (a profile is NAME.yaml)",
                   "'Mine' is not a profile name (lower-case letters")  # the name comes from --output: it names that
    one_error_line(*run(capsys, "evidence", "derive", "--from", "a100_measured", "--without", "gradient_accumulation",
                        "--reason", "fused \u202eaccumulation", "--output", tmp_path / "mine.yaml")[::2],
                   "--reason: holds the invisible character U+202E")
    assert not any(tmp_path.iterdir())


def test_calibrate_compare_of_a_missing_profile_names_the_option(tmp_path, capsys):
    one_error_line(*run(capsys, "calibrate", "--compare", "nosuch", "--output", tmp_path / "r.json")[::2],
                   "<command line>: --compare: no evidence profile named 'nosuch'")
    assert not (tmp_path / "r.json").exists()


def test_a_raised_max_operations_raises_the_events_bound_and_the_error_names_the_option_that_helps():
    """400 000 operations (PP 8 x 25 000 microbatches x 2 phases) and about as many events: within
    ``--max-operations 1000000``; the events bound grows with it (it blamed ``--task-microbatches``, which was 1)."""
    from types import SimpleNamespace

    from harness.trace import check_trace_size

    schedule = SimpleNamespace(training=True, pipeline_parallel=8, chunks_per_stage=1, microbatches=25_000,
                               blocks_per_chunk=6)
    plan = SimpleNamespace(schedule=schedule, tasks=[None] * 20)
    check_trace_size(plan, "c.yaml", task_microbatches=1, max_operations=1_000_000)
    with pytest.raises(InputError, match="c.yaml: --max-operations: the trace would hold up to"):
        check_trace_size(plan, "c.yaml", task_microbatches=1, max_operations=400_000, max_events=100_000)
    with pytest.raises(InputError, match="c.yaml: --task-microbatches: "):
        check_trace_size(plan, "c.yaml", task_microbatches=25_000, max_operations=1_000_000)


def test_more_pipeline_stages_than_blocks_is_refused(tmp_path, capsys):
    """PP 64 on the 48 blocks of Megatron-22B left 16 empty stages, estimated ``ok``."""
    text = (CASES_DIR / "megatron-22B_full.yaml").read_text()
    assert "pipeline_parallel: 1\n" in text and "global_batch: 4\n" in text
    case = tmp_path / "c.yaml"
    case.write_text(text.replace("pipeline_parallel: 1\n", "pipeline_parallel: 64\n"))
    one_error_line(*run(capsys, "estimate", case)[::2], f"{case}: execution.pipeline_parallel: PP=64 exceeds the 48 "
                                                        "blocks")


def test_the_zero_lines_nccl_tests_prints_below_one_element_per_rank_are_skipped(tmp_path):
    text = nccl_table("all_gather", 8)
    header = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
    path = tmp_path / "ag.txt"
    path.write_text(text.replace(header, header + "0 0 float none -1 0.19 0.00 0.00 0 0.18 0.00 0.00 0\n"))
    sweep = parse_nccl_tests(path, None, 0)
    assert (sweep.collective, sweep.participants, sweep.sizes_bytes[0]) == ("all_gather", 8, float(1 << 20))
