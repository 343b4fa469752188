"""Issue 23.7: the search's best execution as a case (`search --emit-case`), a labelled summary in the
project's names, and near-duplicates grouped in it (the top-K JSON keeps every entry: it is Calculon's)."""

from __future__ import annotations

import json

from harness.cases import load_case
from harness.commands.search import near_duplicate_groups
from harness.estimate import estimate

from conftest import run_cli

SMALL_JSON = {"hidden": 1024, "feedforward": 4096, "seq_size": 512, "attn_heads": 16, "attn_size": 64, "num_blocks": 4}


def test_emit_case_reads_back_to_the_searchs_best_and_the_summary_is_labelled(tmp_path, capsys):
    model, top, case_path = tmp_path / "small.json", tmp_path / "top.json", tmp_path / "best.yaml"
    model.write_text(json.dumps(SMALL_JSON))
    status, _, err = run_cli(capsys, "search", "--model", model, "--system", "a100_80g", "--procs", 2,
                             "--max-batch", 2, "--datatype", "float16", "--top", 5, "--workers", 1, "--no-progress",
                             "--output", top, "--emit-case", case_path)
    assert status == 0, err
    best = json.loads(top.read_text())[0]
    case = load_case(case_path)
    e = case.execution
    assert (e.tensor_parallel, e.pipeline_parallel, e.data_parallel, e.microbatch, e.global_batch) == (
        best["execution"]["tensor_par"], best["execution"]["pipeline_par"], best["execution"]["data_par"],
        best["execution"]["microbatch_size"], best["execution"]["batch_size"])
    assert estimate(case.estimate_input()).views["system_evidence"].total_s == best["total_s"]
    assert "tensor_par:" not in case_path.read_text() and "tensor_parallel: " in case_path.read_text()
    line = next(x for x in err.splitlines() if x.startswith("best: "))
    assert f"tensor_parallel {best['execution']['tensor_par']}, pipeline_parallel" in line
    assert f"recompute {best['execution']['activation_recompute']}, tp_communication " in line
    assert f"the best execution as a case to {case_path}" in err


class _Entry:
    def __init__(self, rate, **changes):
        base = {"tensor_par": 2, "pipeline_par": 1, "data_par": 1, "seq_par_ag_redo": False,
                "tensor_par_overlap": "none", "data_par_overlap": False, "activation_recompute": "none"}
        self.rate, self.execution = rate, {**base, **changes}


def test_near_duplicates_are_grouped_in_rank_order():
    entries = [_Entry(3.0), _Entry(3.0, seq_par_ag_redo=True), _Entry(2.9, activation_recompute="full"),
               _Entry(2.8, tensor_par_overlap="ring"), _Entry(2.7, activation_recompute="full", data_par_overlap=True)]
    assert near_duplicate_groups(entries) == [[0, 1, 3], [2, 4]]


def test_the_default_worker_count_follows_the_size_of_the_space(tmp_path, capsys):
    """Issue 23.9: on 2 cores the default 2-worker cluster took 8.9 s for the 53,352-execution 22B space that
    one worker searched in 4.4 s; a space that small is searched in this process unless told otherwise."""
    from harness.search.run import IN_PROCESS_EXECUTIONS, default_workers

    assert default_workers(53_352, 2) == 1 and default_workers(2_390_000, 2) == 2
    assert default_workers(IN_PROCESS_EXECUTIONS, 8) == 8 and default_workers(10**7, 1) == 1
    model = tmp_path / "small.json"
    model.write_text(json.dumps(SMALL_JSON))
    status, _, err = run_cli(capsys, "search", "--model", model, "--system", "a100_80g", "--procs", 2,
                             "--max-batch", 2, "--datatype", "float16", "--no-progress")
    assert status == 0 and "(in-process)" in err


def test_what_the_search_does_not_apply_is_noted(tmp_path, capsys):
    """A case file as the model: its execution section is not searched, and ``--precision all`` on float16 tries
    no recipe: both said on stderr (the search used to drop them without a word); a model JSON says neither."""
    import yaml

    from conftest import CASES_DIR

    case_file = tmp_path / "case.yaml"
    document = yaml.safe_load((CASES_DIR / "megatron-22B_full.yaml").read_text())
    document["model"] = {**document["model"], "hidden": 1024, "feedforward": 4096, "attention_heads": 16,
                         "head_size": 64, "blocks": 4, "sequence_length": 512}
    case_file.write_text(yaml.safe_dump(document, sort_keys=False))
    argv = ("search", "--system", "a100_80g", "--procs", 2, "--max-batch", 2, "--datatype", "float16", "--workers",
            1, "--no-progress", "--output", tmp_path / "top.json")
    status, _, err = run_cli(capsys, *argv, "--model", case_file, "--precision", "all")
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert status == 0 and len(notes) == 2, err
    assert notes[0].startswith(f"note: {case_file}: the search takes the case's model section only; its execution "
                               "section (attention, data_parallel, datatype, fused_activation, global_batch, ")
    # whole field names, the rest counted (it was cut at 120 characters, mid-word: 'network_ti)')
    listed = notes[0].split("section (")[1].split(") is not applied")[0]
    assert listed.endswith(f", and {len(document['execution']) - listed.count(',')} more")
    assert all(name in document["execution"] for name in listed.split(", and ")[0].split(", "))
    assert notes[1] == ("note: --precision all: no quantizing recipe runs with --datatype float16 on a100_80g (a "
                        "recipe needs bfloat16 and a float8 or float4 matrix engine): every layout is priced in "
                        "float16")
    model = tmp_path / "small.json"
    model.write_text(json.dumps(SMALL_JSON))
    status, _, err = run_cli(capsys, *argv, "--model", model)
    assert status == 0 and "note: " not in err
