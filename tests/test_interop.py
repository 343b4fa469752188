"""Calculon-format interop: `import calculon`, `estimate --calculon-batch`, field names."""

from __future__ import annotations

import gzip
import json

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.commands.estimate import estimate_json
from harness.commands.import_calculon import default_id
from harness.errors import InputError
from harness.estimate import estimate
from harness.interop.calculon_batch import batch_line_json, parse_line, require_valid
from harness.interop.calculon_format import calculon_field, calculon_from_input, input_from_calculon

from conftest import CASES_DIR, calculon_figures

CASE = load_case(CASES_DIR / "gpt3-175B_full.yaml")
MODEL, EXECUTION = calculon_from_input(CASE.estimate_input())


def _files(tmp_path, model=MODEL, execution=EXECUTION, names=("gpt3-175B.json", "gpt3-175B_full.json")):
    m, e = tmp_path / names[0], tmp_path / names[1]
    m.write_text(json.dumps(model))
    e.write_text(json.dumps(execution))
    return m, e


def _line(record_id, system="a100_80g", model=MODEL, **changes):
    return batch_line_json(record_id, model, dict(EXECUTION, **changes), system)


@pytest.mark.parametrize("ours, theirs", [
    ("model.sequence_length", "model.seq_size"),
    ("execution.tensor_parallel", "execution.tensor_par"),
    ("execution.network_tiers.pipeline", "execution.pipeline_par_net"),
    ("execution.offload.weights", "execution.weight_offload"),
    ("execution.tp_overlap", "execution.tensor_par_overlap"),
    ("execution.num_procs", "execution.num_procs"),
    ("system", "system"),
])
def test_field_names_translate_to_calculon(ours, theirs):
    assert calculon_field(ours) == theirs


def test_import_writes_a_case_equal_to_the_original(tmp_path, capsys):
    m, e = _files(tmp_path)
    out = tmp_path / "case.yaml"
    assert main(["import", "calculon", "--model", str(m), "--execution", str(e), "--system", "a100_80g",
                 "-o", str(out), "--oracle-record", "gpt3-175B/full"]) == 0
    case = load_case(out)
    assert case.id == "gpt3-175B/full" == CASE.id
    assert case.estimate_input() == CASE.estimate_input()
    assert case.comparison.oracle_record == "gpt3-175B/full" and case.comparison.paper is None
    assert out.read_text().startswith("# Imported from Calculon inputs gpt3-175B.json + gpt3-175B_full.json")
    assert "wrote case gpt3-175B/full" in capsys.readouterr().err


def test_import_id_and_empty_comparison(tmp_path):
    m, e = _files(tmp_path, names=("shape.json", "layout.json"))
    out = tmp_path / "case.yaml"
    assert main(["import", "calculon", "--model", str(m), "--execution", str(e), "--system", "h100_80g_nvl8",
                 "-o", str(out)]) == 0
    case = load_case(out)
    assert (case.id, case.system, case.comparison.oracle_record) == ("shape/layout", "h100_80g_nvl8", None)
    assert default_id(m, e) == "shape/layout"
    assert main(["import", "calculon", "--model", str(m), "--execution", str(e), "--system", "a100_80g",
                 "-o", str(out), "--id", "mine"]) == 0
    assert load_case(out).id == "mine"


@pytest.mark.parametrize("edit, where, field, message", [
    (lambda m, e: m.pop("attn_heads"), "model", "model.attn_heads", "required Calculon field is missing"),
    (lambda m, e: e.update(tensor_par=5, num_procs=40), "execution", "execution.tensor_par", "does not divide model.hidden"),
    (lambda m, e: e.update(tensor_par_overlap="ring", tensor_par=1, num_procs=8), "execution",
     "execution.tensor_par_overlap", "needs tensor_parallel > 1"),
    (lambda m, e: e.update(data_par_overlap=True), "execution", "execution.data_par_overlap",
     "needs data_parallel > 1"),
    (lambda m, e: e.update(bogus=1), "execution", "execution.bogus", "unknown Calculon field"),
    (lambda m, e: e.update(zz=1, bogus=1, yy=2), "execution", "execution.bogus", "unknown Calculon field"),  # first sorted
    (lambda m, e: [m.pop(k) for k in ("seq_size", "attn_heads", "num_blocks")], "model", "model.attn_heads",
     "required Calculon field is missing"),  # the first missing in sorted order, not the table's
    (lambda m, e: e.update(data_par_net=7), "execution", "execution.data_par_net", "tier 7 does not exist"),
    (lambda m, e: e.update(datatype="bfloat16"), "execution", "execution.datatype", "no bfloat16 matrix engine"),
])
def test_import_errors_are_one_line_naming_file_and_field(tmp_path, capsys, edit, where, field, message):
    model, execution = dict(MODEL), dict(EXECUTION)
    edit(model, execution)
    m, e = _files(tmp_path, model, execution)
    assert main(["import", "calculon", "--model", str(m), "--execution", str(e), "--system", "a100_80g"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {m if where == 'model' else e}: {field}: ") and message in err


def test_import_bad_json_names_the_line(tmp_path, capsys):
    m, e = _files(tmp_path)
    e.write_text('{\n "tensor_par": 8,\n}')
    assert main(["import", "calculon", "--model", str(m), "--execution", str(e), "--system", "a100_80g"]) == 2
    assert capsys.readouterr().err == f"error: {e}: line 3: not valid JSON: Expecting property name enclosed in double quotes (column 1)\n"


def _batch(tmp_path, lines, name="in.jsonl"):
    path = tmp_path / name
    text = "".join(line + "\n" for line in lines)
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


def test_batch_classifies_every_line_and_does_not_stop(tmp_path, capsys):
    lines = [
        _line("ok"),
        _line("too-small", tensor_par_net=0, pipeline_par_net=0),   # TP 8 x PP 8 on the 8-processor tier 0
        _line("memory", tensor_par=1, num_procs=8),                    # GPT-3 on 8 processors
        _line("overlap", tensor_par_overlap="ring", tensor_par=1, num_procs=8),
        "{not json",
        _line("layout", tensor_par=5, num_procs=40),
        json.dumps({"id": "extra", "model": MODEL, "execution": EXECUTION, "system": "a100_80g", "comment": 1}),
        "",
        _line("ok"),
        _line("bf16", datatype="bfloat16"),
        _line("nosys", system="tpu"),
    ]
    out = tmp_path / "out.json"
    assert main(["estimate", "--calculon-batch", str(_batch(tmp_path, lines)), "--output", str(out)]) == 1
    results = json.loads(out.read_text())
    assert [(r["id"], r["status"]) for r in results] == [
        ("ok", "ok"), ("too-small", "infeasible"), ("memory", "infeasible"), ("overlap", "invalid"),
        (None, "invalid"), ("layout", "invalid"), ("extra", "invalid"), ("ok", "invalid"), ("bf16", "invalid"),
        ("nosys", "invalid")]
    reasons = [r["reason"] for r in results]
    assert reasons[0] is None
    assert reasons[1].startswith("network tier 0 is not big enough: its groups need 64 processors")
    assert reasons[2].startswith("memory tier 1 needs ")
    assert reasons[3] == "line 4: execution.tensor_par_overlap: TP overlap (ring) needs tensor_parallel > 1"
    assert reasons[4].startswith("line 5: <json>: not valid JSON")
    assert reasons[5] == "line 6: execution.tensor_par: TP=5 does not divide model.hidden=12288"
    assert reasons[6] == "line 7: comment: unknown field (a line has id, model, execution, system)"
    assert reasons[7] == "line 9: id: duplicate id 'ok' (also on line 1)"
    assert reasons[8].startswith("line 10: execution.datatype: evidence profile a100_80g has no bfloat16 matrix "
                                 "engine (its datatypes: float16); to add one")
    assert reasons[9].startswith("line 11: system: ") and "no evidence profile named 'tpu'" in reasons[9]
    assert all(r["views"] == {} for r in results[3:])
    assert results[2]["views"]["system_evidence"]["memory_bytes"]["tier1_total"] > 80 * 2**30
    assert "10 batch lines" in capsys.readouterr().err


def test_a_batch_entry_carries_the_figures_calculon_recorded_for_the_case(tmp_path, capsys):
    path = _batch(tmp_path, [_line("gpt3-175B/full")], "in.jsonl.gz")
    assert main(["estimate", "--calculon-batch", str(path)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["id"], entry["status"], entry["reason"]) == ("gpt3-175B/full", "ok", None)
    for view in ("peak_only", "system_evidence"):
        calculon = calculon_figures("gpt3-175B_full", view)
        ours = entry["views"][view]
        assert ours["total_s"] == calculon["total_s"]
        assert {f"components_s.{k}": v for k, v in ours["components_s"].items()} == {
            k: v for k, v in calculon.items() if k.startswith("components_s.")}
        assert {f"memory_bytes.{k}": v for k, v in ours["memory_bytes"].items()} == {
            k: v for k, v in calculon.items() if k.startswith("memory_bytes.")}
    assert entry["views"]["system_evidence"]["total_s"] == pytest.approx(18.0288, abs=1e-4)  # Table 5


def test_batch_and_cases_are_exclusive(tmp_path, capsys):
    path = _batch(tmp_path, [_line("a")])
    assert main(["estimate", "--calculon-batch", str(path), str(CASES_DIR / "gpt3-175B_full.yaml")]) == 2
    assert "give case files or a batch, not both" in capsys.readouterr().err


def test_missing_batch_file_is_one_line(tmp_path, capsys):
    assert main(["estimate", "--calculon-batch", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'none.jsonl'}: <file>: ") and err.count("\n") == 1


def test_require_valid_names_the_first_bad_line(tmp_path):
    path = _batch(tmp_path, [_line("a"), _line("b", data_par_overlap=True)])
    with pytest.raises(InputError) as info:
        require_valid(path)
    assert str(info.value).startswith(f"{path}: line 2: execution.data_par_overlap: DP overlap needs data_parallel > 1")
    assert [record_id for record_id, _ in require_valid(_batch(tmp_path, [_line("a")]))] == ["a"]


def test_batch_lines_round_trip():
    entry = parse_line(_line("x"), 1)
    assert entry.status == "valid" and entry.input == input_from_calculon(MODEL, EXECUTION, "a100_80g")
    assert calculon_from_input(entry.input) == (MODEL, EXECUTION)


def test_the_documented_batch_example_gives_the_documented_statuses(tmp_path):
    out = tmp_path / "out.json"
    example = CASES_DIR.parent / "docs" / "examples" / "calculon-batch.jsonl"
    assert main(["estimate", "--calculon-batch", str(example), "--view", "system_evidence", "--output", str(out)]) == 1
    results = json.loads(out.read_text())
    assert [r["status"] for r in results] == ["ok", "infeasible", "infeasible", "ok", "invalid"]
    assert results[0]["views"]["system_evidence"]["total_s"] == 1.1366701004205777
    # Weight offload of the first configuration: Calculon 0.1.0 gives the same total (offload fully hidden),
    # tier 1 50709020672 bytes (2 blocks of weights instead of 48) and tier 2 the 48 blocks' weights.
    offload = results[3]["views"]["system_evidence"]
    assert offload["total_s"] == 1.1366701004205777
    assert (offload["memory_bytes"]["tier1_total"], offload["memory_bytes"]["tier2_total"]) == \
        (50709020672.0, 5438177280.0)
    assert results[2]["reason"] == "memory tier 1 needs 438877339648 bytes but has 85899345920 bytes"
