"""Measurement corpora, importers, the fit's evaluator and the fit itself (fast; the full refit is slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.cost.views import profile_families
from harness.errors import InputError, OracleIsolationError
from harness.evidence.profile import load_profile
from harness.measurements import fit as fitting
from harness.measurements.corpus import read_corpus
from harness.measurements.design import Design
from harness.measurements.experiment import MOVES, hybrid, load_inputs, moves_of
from harness.measurements.nccl_tests import derived_sweeps, parse_nccl_tests, sweep_curve
from harness.measurements.oracle import MeasurementsOracle
from harness.measurements.vtrain import import_vtrain
from harness.vocabulary import CURVE_FAMILIES

from conftest import ROOT

CORPUS = ROOT / "measurements" / "vtrain" / "vtrain-a100.jsonl"
SWEEPS = ROOT / "measurements" / "vtrain" / "vtrain-allreduce-a100.jsonl"
HEADER = {"kind": "corpus", "schema_name": "blueprinting.measurement-corpus", "schema_version": 0, "name": "t",
          "description": "test", "source": {"citation": "here", "licence": "none"},
          "environment": {"hardware": "none", "software": "none"}}
RECORD = {"kind": "iteration", "id": "r1", "measured_iteration_s": 1.5,
          "model": {"hidden": 1024, "feedforward": 4096, "sequence_length": 1024, "attention_heads": 16,
                    "head_size": 64, "blocks": 12},
          "execution": {"tensor_parallel": 2, "pipeline_parallel": 1, "data_parallel": 1, "global_batch": 4,
                        "microbatch": 1, "recompute": "full", "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0}}}


def write_lines(path: Path, *objects) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects))
    return path


def test_a_corpus_round_trips(tmp_path):
    corpus = read_corpus(write_lines(tmp_path / "c.jsonl", HEADER, RECORD))
    assert corpus.header.name == "t" and len(corpus.records) == 1
    record = corpus.records[0]
    assert record.measured_iteration_s == 1.5 and record.execution.tensor_parallel == 2
    assert len(corpus.sha256) == 64


@pytest.mark.parametrize("lines, field, line, message", [
    ([RECORD], "kind", 1, "the first line of a corpus must be its header"),
    ([HEADER, "{not json"], "<json>", 2, "not valid JSON"),
    ([HEADER, {**RECORD, "measured_iteration_s": -1.0}], "measured_iteration_s", 2, "greater than or equal to 0.0001"),
    ([HEADER, {**RECORD, "measured_iteration_s": "1.5"}], "measured_iteration_s", 2, "valid number"),
    ([HEADER, {**RECORD, "execution": {**RECORD["execution"], "tensor_parallel": 3}}], "execution.tensor_parallel", 2,
     "TP=3 does not divide"),
    ([HEADER, {**RECORD, "colour": "red"}], "colour", 2, "unknown field"),
    ([HEADER, {**RECORD, "kind": "guess"}], "kind", 2, "is not a record kind"),
    ([HEADER, RECORD, RECORD], "id", 3, "duplicate id 'r1' (also on line 2)"),
    ([{**HEADER, "schema_version": 7}], "schema_version", 1, "less than or equal to 0"),
    ([{**HEADER, "schema_version": False}], "schema_version", 1, "valid integer"),  # False == 0 in Python
    ([{**HEADER, "schema_version": 0.0}], "schema_version", 1, "valid integer"),
])
def test_bad_corpus_lines_are_one_error_naming_file_line_and_field(tmp_path, lines, field, line, message):
    path = write_lines(tmp_path / "c.jsonl", *lines)
    with pytest.raises(InputError) as info:
        read_corpus(path)
    text = str(info.value)
    assert text.startswith(f"{path}: {field}: ") and "\n" not in text, text
    assert message in text and (f"(line {line})" in text or field == f"line {line}"), text


def test_the_vtrain_importer_applies_the_readme_mapping(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
                   "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n"
                   "8,16,2,2048,16,24,1024,2,1,4,512.5\n"
                   "64,512,4,3072,32,30,2048,4,4,4,4764.0\n")
    one, many = import_vtrain([csv])
    assert (one.model.feedforward, one.model.head_size, one.execution.datatype) == (8192, 128, "float16")
    assert (one.execution.recompute, one.execution.tp_communication) == ("full", "ar")
    assert one.execution.network_tiers.model_dump() == {"tensor": 0, "pipeline": 0, "data": 0}  # TP x PP = 8
    assert many.execution.network_tiers.model_dump() == {"tensor": 0, "pipeline": 1, "data": 1}  # 16 > 8, 64 GPUs
    assert one.measured_iteration_s == pytest.approx(0.5125) and one.id == "runs.csv:2"
    csv.write_text(csv.read_text().replace("64,512,4", "32,512,4"))
    with pytest.raises(InputError, match=r"runs\.csv: # GPUs: 32 != TP x PP x DP = 64 \(line 3\)"):
        import_vtrain([csv])


def nccl_text(n: int, sizes, busbw_gb_s, csv: bool) -> str:
    """A table as nccl-tests prints it, made from a chosen bus bandwidth (time = size x 2(n-1)/n / busbw)."""
    factor = 2 * (n - 1) / n
    lines = ["size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)"] if csv else [
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong",
        "#   (B)  (elements)            (us)  (GB/s) (GB/s)         (us)  (GB/s) (GB/s)"]
    for size, bus in zip(sizes, busbw_gb_s):
        t = size * factor / (bus * 1e9)
        if csv:
            lines.append(f"{size},{size // 4},float,{t * 1e9:.1f},{bus:.2f},{t * 1.01e9:.1f},{bus / 1.01:.2f}")
        else:
            alg = size / t / 1e9
            lines.append(f"{size} {size // 4} float sum -1 {t * 1e6:.2f} {alg:.2f} {bus:.2f} 0 "
                         f"{t * 1.01e6:.2f} {alg / 1.01:.2f} {bus / 1.01:.2f} 0")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("csv", [False, True])
def test_nccl_tests_tables_give_participants_times_and_a_curve_that_reproduces_them(tmp_path, csv):
    sizes = [2**20 * k for k in (1, 2, 4, 8, 64, 1024)]
    bus = [20.0, 40.0, 75.0, 110.0, 200.0, 230.0]
    path = tmp_path / "ar.txt"
    path.write_text(nccl_text(8, sizes, bus, csv))
    sweep = parse_nccl_tests(path, "all_reduce", 0)
    assert sweep.participants == 8 and sweep.sizes_bytes == tuple(float(s) for s in sizes)
    expected = [s * 1.75 / (b * 1e9) for s, b in zip(sizes, bus)]
    assert sweep.measured_s == pytest.approx(expected, rel=1e-3)  # the faster run, at the printed precision
    tier = load_profile("a100_80g").networks[0]
    c = sweep_curve(sweep, tier, "t")
    for size, time in zip(sizes, sweep.measured_s):  # monotone bandwidths: the curve reproduces every time
        eff = c.efficiency(size)
        assert tier.latency_s + size * 1.75 / (tier.bandwidth_bytes_per_s * eff) == pytest.approx(time, rel=1e-9)
    with pytest.raises(InputError, match="--participants: 4 given, the table's bus bandwidths imply 8"):
        parse_nccl_tests(path, "all_reduce", 0, participants=4)
    path.write_text(nccl_text(8, sizes[::-1], bus[::-1], csv))
    with pytest.raises(InputError, match="sizes must strictly increase"):
        parse_nccl_tests(path, "all_reduce", 0)


def test_a_noisy_table_becomes_a_curve_whose_bandwidth_never_drops_with_size(tmp_path):
    sizes = [2**20 * k for k in range(1, 9)]
    bus = [20.0, 40.0, 60.0, 55.0, 90.0, 85.0, 100.0, 120.0]  # two dips
    path = tmp_path / "ar.csv"
    path.write_text(nccl_text(4, sizes, bus, True))
    c = sweep_curve(parse_nccl_tests(path, "all_reduce", 0), load_profile("a100_80g").networks[0], "t")
    effs = [p.efficiency for p in c.points]
    assert all(a <= b for a, b in zip(effs, effs[1:]))


def test_reduce_scatter_and_all_gather_curves_are_derived_as_halves_of_the_all_reduce(tmp_path):
    sizes = [1 << 20, 1 << 24, 1 << 28]
    path = tmp_path / "ar.csv"
    path.write_text(nccl_text(8, sizes, [20.0, 120.0, 220.0], True))
    ar = parse_nccl_tests(path, "all_reduce", 0)
    derived = derived_sweeps([ar])
    assert [d.collective for d in derived] == ["reduce_scatter", "all_gather"]
    for d in derived:
        assert d.measured_s == tuple(t / 2 for t in ar.measured_s) and d.sizes_bytes == ar.sizes_bytes
    measured_rs = ar.model_copy(update={"collective": "reduce_scatter"})
    assert [d.collective for d in derived_sweeps([ar, measured_rs])] == ["all_gather"]  # a measured sweep wins
    # in the fitted structure (ring volumes, tier 0: latency 1e-5 s, 300e9 B/s) the curves reproduce half the time
    tier = fitting.template(load_profile("a100_80g"), [ar], "t").networks[0]
    assert tier.collectives["reduce_scatter"].volume_multiplier == 1.0
    half = 256 * 2**20 * 2 * 7 / 8 / 220e9 / 2  # the all-reduce's time at 256 MiB (busbw 220 GB/s), halved
    for collective in ("reduce_scatter", "all_gather"):
        point = tier.measured_collectives[collective][0].points[-1]
        assert point.efficiency == pytest.approx(256 * 2**20 * 7 / 8 / ((half - 1e-5) * 300e9), rel=1e-3)


@pytest.fixture(scope="module")
def small():
    """50 vTrain records (every 16th) with the shipped structure."""
    inputs = load_inputs([CORPUS, SWEEPS])
    records = inputs.records[::16]
    template = fitting.template(load_profile("a100_80g"), inputs.sweeps, "a100_measured")
    return records, template, Design(records, template)


def test_the_fits_evaluator_equals_the_estimate_path(small):
    records, template, design = small
    fitted, base = load_profile("a100_measured"), load_profile("a100_80g")
    assert design.check(fitted) < 1e-12
    assert design.check(base) < 1e-12  # step curves, no_overlap, no measured family
    assert design.check(hybrid(base, fitted, frozenset({"memory", "launch", "partitioned_p2p"}), "float16")) < 1e-12


def test_moving_every_part_of_the_fitted_profile_onto_the_base_prices_as_the_fitted_profile(small):
    records, template, design = small
    fitted, base = load_profile("a100_measured"), load_profile("a100_80g")
    whole = hybrid(base, fitted, frozenset(MOVES), "float16")
    # none left behind: every family but grouped_gemm (no mixture of experts in a100_measured's rows)
    assert profile_families(whole) == profile_families(fitted) == tuple(f for f in CURVE_FAMILIES
                                                                        if f != "grouped_gemm")
    assert moves_of(fitted) == ("processing_mode", *profile_families(fitted))
    assert np.array_equal(design.predict(whole), design.predict(fitted))


def test_the_fit_recovers_the_parameters_that_made_the_measurements(small):
    records, template, design = small
    truth = {"matrix_max_efficiency": 0.71, "matrix_half_size": 3e9, "memory_max_efficiency": 0.62,
             "memory_half_size": 2e6, "issue_s_per_operation": 3e-5, "issue_s_per_matrix_operation": 8e-5,
             "issue_s_per_microbatch": 2e-3}
    measured = design.predict(fitting.with_values(template, truth))
    result = fitting.fit_design(design, template, measured)
    assert np.max(np.abs(design.predict(result.profile) / measured - 1)) < 1e-5
    for name in ("matrix_max_efficiency", "memory_max_efficiency", "issue_s_per_operation",
                 "issue_s_per_matrix_operation", "issue_s_per_microbatch"):
        assert result.values[name] == pytest.approx(truth[name], rel=2e-3), name
    again = fitting.fit_design(design, template, measured)
    assert again.values == result.values and again.profile.revision() == result.profile.revision()


def test_a_structure_without_the_gemm_and_microbatch_host_times_fits_one_issue_time(small):
    records, template, design = small
    single = tuple(p for p in fitting.PARAMETERS if p.name not in ("issue_s_per_matrix_operation",
                                                                     "issue_s_per_microbatch"))
    truth = {"matrix_max_efficiency": 0.71, "matrix_half_size": 3e9, "memory_max_efficiency": 0.62,
             "memory_half_size": 2e6, "issue_s_per_operation": 5e-5}
    measured = design.predict(fitting.with_values(template, truth))
    result = fitting.fit_design(design, template, measured, parameters=single)
    assert set(result.values) == set(truth)
    assert result.profile.launch.issue_s_per_matrix_operation is None
    assert result.profile.launch.issue_s_per_microbatch is None
    assert result.values["issue_s_per_operation"] == pytest.approx(5e-5, rel=2e-3)


def test_measured_values_leave_the_oracle_only_for_training_or_after_both_estimates(small):
    records = small[0]
    oracle = MeasurementsOracle(records)
    assert oracle.training(records[:2])[0] == (records[0].measured_iteration_s,)
    with pytest.raises(OracleIsolationError, match="before its peak_only, system_evidence estimate"):
        oracle.compare(records[3], "a100_measured")
    oracle.register_estimate(records[3].id, "a100_measured", "system_evidence")
    with pytest.raises(OracleIsolationError, match="peak_only"):
        oracle.compare(records[3], "a100_measured")
    oracle.register_estimate(records[3].id, "a100_measured", "peak_only")
    assert oracle.compare(records[3], "a100_measured") == (records[3].measured_iteration_s,)
    assert [kind for kind, _ in oracle.events] == ["training", "estimate", "estimate", "measured"]


def test_the_shipped_revision_carries_its_provenance_and_the_tiers_of_a100_80g():
    profile, base = load_profile("a100_measured"), load_profile("a100_80g")
    fit = profile.fit
    assert fit.base_profile == "a100_80g" and fit.base_revision == base.revision()
    assert [(c.name, c.file) for c in fit.corpora] == [("vtrain-a100", "vtrain-a100.jsonl"),
                                                       ("vtrain-allreduce-a100", "vtrain-allreduce-a100.jsonl")]
    assert [c.sha256 for c in fit.corpora] == [read_corpus(path).sha256 for path in (CORPUS, SWEEPS)]
    assert [p.name for p in fit.parameters] == [p.name for p in fitting.PARAMETERS]
    for p in fit.parameters:
        assert p.lower <= p.value <= p.upper
    launch = next(p for p in fit.parameters if p.name == "issue_s_per_operation")
    assert 1e-6 <= launch.value <= 1e-4  # tens of microseconds per operation: host-bound, plausible
    assert [(t.size_processors, t.must_be_filled) for t in profile.networks] == \
           [(t.size_processors, t.must_be_filled) for t in base.networks]


def _priced_records(count: int) -> list[dict]:
    """``count`` records of RECORD's shape (growing batches) whose times are the shipped revision's estimates:
    data the fitted structure can reproduce with interior parameters (a fit is refused otherwise)."""
    from harness.measurements.corpus import IterationRecord

    records = [{**RECORD, "id": f"r{i}", "execution": {**RECORD["execution"], "global_batch": 2 * (i + 1)}}
               for i in range(count)]
    fitted = load_profile("a100_measured")
    parsed = [IterationRecord.model_validate(r) for r in records]
    times = Design(parsed, fitted).predict(fitted)
    return [{**r, "measured_iteration_s": float(t)} for r, t in zip(records, times)]


def test_evidence_fit_writes_a_revision_and_refuses_a_bad_corpus(tmp_path, capsys):
    corpus = write_lines(tmp_path / "c.jsonl", HEADER, *_priced_records(8))
    out = tmp_path / "evidence" / "tiny_fit.yaml"
    assert main(["evidence", "fit", "--base", "a100_80g", "--measurements", str(corpus), str(SWEEPS),
                 "--output", str(out)]) == 0
    text = out.read_text()
    assert "name: tiny_fit" in text and "issue_s_per_operation" in text
    bad = write_lines(tmp_path / "bad.jsonl", HEADER, {**RECORD, "measured_iteration_s": math.inf}
                      ).read_text().replace("Infinity", "1e999")
    (tmp_path / "bad.jsonl").write_text(bad)
    assert main(["evidence", "fit", "--base", "a100_80g", "--measurements", str(tmp_path / "bad.jsonl"),
                 "--output", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl" in err and "line 2" in err, err


def test_fit_weights_give_each_target_class_its_share():
    """3 one-node and 1 multi-node iterations (island 8), a layer pass with its 2 block passes and 4
    microbenchmarks, layer weight 0.5, benchmark weight 2: the iteration classes weigh the same in total, a
    unit of (3 + 1) / 2 = 2 targets; squared weights one-node 2/3 each, multi-node 2, a layer pass 0.5 x 2 / 2,
    a benchmark 2 x 2 / 4; an unselected target 0 (harness.measurements.fit.weights, by hand)."""
    from types import SimpleNamespace

    from harness.measurements.design import Target

    def iteration(processors):
        return SimpleNamespace(kind="iteration", execution=SimpleNamespace(processors=processors))

    records = [iteration(8), iteration(4), iteration(1), iteration(16), SimpleNamespace(kind="layer_pass"),
               *[SimpleNamespace(kind="gemm")] * 4, iteration(8)]
    targets = [Target(0, "iteration", 0), Target(1, "iteration", 0), Target(2, "iteration", 0),
               Target(3, "iteration", 0), Target(4, "layer_forward", 0), Target(4, "layer_backward", 1),
               *[Target(i, "gemm", 0) for i in range(5, 9)], Target(9, "iteration", 0)]
    selected = np.array([True] * 10 + [False])
    got = fitting.weights(SimpleNamespace(records=records, targets=targets), selected, 8, 0.5, 2.0)
    expected = np.sqrt([2 / 3] * 3 + [2.0] + [0.5] * 2 + [1.0] * 4 + [0.0])
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_the_fit_weighs_a_class_by_its_share_not_by_its_record_count(small):
    """One-node runs measured 10 % slow and multi-node runs 10 % fast cannot both fit; with the class weights
    the compromise (a linear loss: the cost is the sum of squared weighted residuals) does not move when
    every one-node record is counted twice (each then weighs half), while an unweighted fit would move
    towards the one-node runs."""
    records, template, design = small
    island = 8
    one_node = [r for r in records if fitting.node_class(r, island) == "one_node"]
    assert one_node and len(one_node) < len(records)
    truth = fitting.with_values(template, {p.name: p.start for p in fitting.PARAMETERS})

    def skewed(design_):
        factor = np.array([1.1 if fitting.node_class(design_.records[t.record], island) == "one_node" else 0.9
                           for t in design_.targets])
        return design_.predict(truth) * factor

    doubled = Design([*records, *one_node], template)
    once = fitting.fit_design(design, template, skewed(design), loss="linear")
    twice = fitting.fit_design(doubled, template, skewed(doubled), loss="linear")
    for name, value in once.values.items():
        assert twice.values[name] == pytest.approx(value, rel=1e-3), name
