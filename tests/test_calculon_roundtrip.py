"""Issue 23.1 / 24.1: Calculon's format in and out through ONE mapping, every field of every vendored record.

Every Calculon model/execution pair the repository vendors (the case, differential, overlap and memory records,
the differential and overlap batch inputs, the search parity records' top executions: 9,744 pairs) is
imported and exported again, and must come back key for key and value for value (``True`` is not ``1``); the
case YAML that ``harness import calculon`` writes must read back to the same pair, so no Calculon setting is
lost on the way to a case (the defect: TP/DP overlap and offload were dropped, 13.89 s instead of 12.31 s).
"""

from __future__ import annotations

import functools
import gzip
import json

import pytest

from harness.cases import load_case, parse_case
from harness.cli import main
from harness.estimate import estimate
from harness.interop.calculon_format import CALCULON_FIELDS, calculon_from_input, calculon_names, input_from_calculon
from harness.interop.case_document import case_document, case_text
from harness.inputs import parse_yaml

from conftest import ROOT

VENDOR = ROOT / "vendor" / "calculon-0.1.0"


@functools.lru_cache(maxsize=None)
def vendored_pairs() -> tuple[tuple[str, str, str], ...]:
    """``(source, model JSON, execution JSON, system)`` of every vendored Calculon input, as canonical JSON text
    (so that the comparison sees types: ``true`` vs ``1``)."""
    out = []
    for path in sorted((VENDOR / "records").glob("*.json*")):
        data = json.load(gzip.open(path) if path.suffix == ".gz" else path.open())
        out += [(f"{path.name}:{r['id']}", r["calculon_model"], r["calculon_execution"], r["system"])
                for r in data["records"]]
    for path in sorted(VENDOR.glob("*/inputs.jsonl.gz")):
        for number, line in enumerate(gzip.open(path, "rt"), 1):
            r = json.loads(line)
            out.append((f"{path.parent.name}/{path.name}:{number}", r["model"], r["execution"], r["system"]))
    for path in sorted((VENDOR / "search").glob("*.json")):
        data = json.load(path.open())
        out += [(f"search/{path.name}:top{i}", data["request"]["calculon_model"], t["execution"],
                 data["request"]["system"]) for i, t in enumerate(data["top"])]
    return tuple(out)


def canonical(model, execution) -> str:
    return json.dumps([model, execution], sort_keys=True)


def test_the_corpus_is_what_the_test_claims():
    pairs = vendored_pairs()
    assert len(pairs) == 16 + 1500 + 3000 + 400 + 300 + 28 + 1500 + 3000 + 4 * 5


def test_the_mapping_names_every_field_of_the_format_and_the_corpus_uses_exactly_those():
    used = {"model": set(), "execution": set()}
    for _, model, execution, _ in vendored_pairs():
        used["model"] |= set(model)
        used["execution"] |= set(execution)
    # Calculon 0.1.0's Model and Execution JSON keys (calculon/model.py, calculon/execution.py), listed by hand
    assert used["model"] == set(calculon_names("model")) == {
        "hidden", "feedforward", "seq_size", "attn_heads", "attn_size", "num_blocks"}
    assert used["execution"] == set(calculon_names("execution")) == {
        "num_procs", "tensor_par", "pipeline_par", "data_par", "tensor_par_net", "pipeline_par_net", "data_par_net",
        "batch_size", "microbatch_size", "datatype", "fused_activation", "attention_type", "activation_recompute",
        "pipeline_interleaving", "optimizer_sharding", "tensor_par_comm_type", "tensor_par_overlap",
        "seq_par_ag_redo", "data_par_overlap", "weight_offload", "activations_offload", "optimizer_offload",
        "training"}
    assert len({(f.section, f.calculon) for f in CALCULON_FIELDS}) == len(CALCULON_FIELDS)


@functools.lru_cache(maxsize=None)
def distinct_pairs() -> tuple[tuple[str, dict, dict, str], ...]:
    """The vendored pairs with distinct (model, execution, system): the corpora repeat many."""
    seen: dict[str, tuple] = {}
    for pair in vendored_pairs():
        seen.setdefault(canonical(*pair[1:3]) + pair[3], pair)
    return tuple(seen.values())


def test_every_vendored_pair_round_trips_through_the_mapping():
    wrong = [source for source, model, execution, system in distinct_pairs()
             if canonical(*calculon_from_input(input_from_calculon(model, execution, system, source)))
             != canonical(model, execution)]
    assert not wrong, wrong[:5]


@pytest.mark.slow
def test_every_vendored_pair_round_trips_through_the_case_document():
    wrong = []
    for source, model, execution, system in distinct_pairs():
        data = input_from_calculon(model, execution, system, source)
        case = parse_case(case_document("x", data), source)
        if case.estimate_input() != data or canonical(*calculon_from_input(case.estimate_input())) != \
                canonical(model, execution):
            wrong.append(source)
    assert not wrong, wrong[:5]


def covering_sample() -> list[tuple[str, dict, dict, str]]:
    """Vendored pairs holding every value each categorical Calculon field (a boolean, a name) takes in the corpus,
    and the smallest and the largest value of each numeric one."""
    chosen: dict[str, tuple] = {}
    pairs = distinct_pairs()
    for section, key in ((f.section, f.calculon) for f in CALCULON_FIELDS):
        values = [p[1 if section == "model" else 2][key] for p in pairs]
        if all(isinstance(v, (bool, str)) for v in values):
            for value, pair in zip(values, pairs):
                chosen.setdefault(f"{section}.{key}={value!r}", pair)
        else:
            chosen[f"{section}.{key} min"] = pairs[values.index(min(values))]
            chosen[f"{section}.{key} max"] = pairs[values.index(max(values))]
    return sorted({p[0]: p for p in chosen.values()}.values())


def test_the_case_yaml_text_reads_back_to_every_value_of_every_field():
    sample = covering_sample()
    assert any(p[2]["tensor_par_overlap"] != "none" for p in sample)
    assert any(p[2]["data_par_overlap"] for p in sample) and any(p[2]["weight_offload"] for p in sample)
    for source, model, execution, system in sample:
        data = input_from_calculon(model, execution, system, source)
        text = case_text("imported/x", data, "header")
        case = parse_case(parse_yaml(text, source).data, source)
        assert canonical(*calculon_from_input(case.estimate_input())) == canonical(model, execution), source


def test_importing_the_searchs_best_execution_estimates_what_the_search_says(tmp_path, capsys):
    """The issue's example: the 22B/4-processor search's best execution (TP overlap ring, DP overlap) imported as
    a case estimates the search's recorded total, not the figure without its overlap settings."""
    record = json.load((VENDOR / "search" / "megatron-22B_p4_b4.json").open())
    best = record["top"][0]
    m, e = tmp_path / "m.json", tmp_path / "e.json"
    m.write_text(json.dumps(record["request"]["calculon_model"]))
    e.write_text(json.dumps(best["execution"]))
    out = tmp_path / "best.yaml"
    assert main([str(a) for a in ("import", "calculon", "--model", m, "--execution", e, "--system", "a100_80g",
                                  "-o", out)]) == 0
    capsys.readouterr()
    case = load_case(out)
    assert (case.execution.tp_overlap, case.execution.dp_overlap) == (best["execution"]["tensor_par_overlap"],
                                                                      best["execution"]["data_par_overlap"])
    total = estimate(case.estimate_input()).views["system_evidence"].total_s
    assert total == pytest.approx(best["stats"]["total_time"], rel=1e-9)


def test_the_search_writes_every_field_of_the_format_and_no_other():
    from harness.search.results import EXECUTION_COLUMNS

    assert sorted(EXECUTION_COLUMNS) == sorted(calculon_names("execution"))
