"""The megatron-core fit (harness.measurements.runs_fit, runs_crossval, runs_report): hand-computed pieces.

The refits of the shipped revisions and their held-out figures are slow (tests/test_modern_revisions.py); here:
which parameters a record exercises, where the fitted values sit in the profile and what a GEMM then costs,
the grouping keys, the release drift's arithmetic, and the held-out rule for a parameter no training row
informs (a six-record fold, under a second).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.cost.views import COST_VIEWS, Pricer
from harness.evidence.profile import load_profile
from harness.estimate import estimate
from harness.ir.portable import Message, Work
from harness.measurements.corpus import read_corpus
from harness.measurements.oracle import MeasurementsOracle
from harness.measurements.runs_crossval import group_key, held_out, release_of
from harness.measurements.runs_fit import (
    PARAMETERS,
    RunsDesign,
    exercised,
    fitted_parameters,
    template,
    with_values,
)
from harness.measurements.runs_report import release_drift

from conftest import ROOT

CORPUS = ROOT / "measurements" / "modern" / "runs-b200.jsonl"
BY_NAME = {p.name: p for p in PARAMETERS}


@pytest.fixture(scope="module")
def b200_records():
    return [r for r in read_corpus(CORPUS).records if r.kind == "iteration"]


def _first(records, **where):
    return next(r for r in records if all(getattr(r.execution, k) == v for k, v in where.items()))


def test_a_record_exercises_the_float8_efficiency_only_with_an_fp8_recipe(b200_records):
    bf16 = _first(b200_records, precision=None)
    fp8 = _first(b200_records, precision="fp8_current")
    mxfp8 = _first(b200_records, precision="mxfp8")
    float8 = BY_NAME["matrix_float8_max_efficiency"]
    assert (exercised(float8, bf16), exercised(float8, fp8), exercised(float8, mxfp8)) == (False, True, True)
    assert exercised(BY_NAME["matrix_max_efficiency"], bf16)  # attention and bf16 GEMMs: every record


def test_nvlink_is_exercised_by_a_group_of_more_than_one_gpu_on_tier_0(b200_records):
    nvlink = BY_NAME["nvlink_efficiency"]
    record = _first(b200_records, tensor_parallel=8)  # TP 8, DP 1, PP 1: the TP group is on tier 0
    assert exercised(nvlink, record)
    alone = record.model_copy(update={"execution": record.execution.model_copy(update={
        "tensor_parallel": 1, "data_parallel": 1, "pipeline_parallel": 1, "tp_communication": "ar",
        "optimizer_sharding": False})})
    assert not exercised(nvlink, alone)
    assert [p.name for p in fitted_parameters([alone])] == ["matrix_max_efficiency"]


def test_the_fitted_values_sit_where_the_pricer_reads_them():
    """bf16 GEMM at efficiency 0.5 on B200 (2.25e15 FLOP/s dense): 4.5e12 operations take 4.5e12 / (0.5 x
    2.25e15) = 4 ms, whatever their size (no fixed cost per GEMM: half_size 0); NVLink efficiency on tier 0."""
    base = load_profile("b200")
    assert base.matrix["bfloat16"].peak_flops_per_s == 2.25e15
    profile = with_values(template(base, "t"), {"matrix_max_efficiency": 0.5, "nvlink_efficiency": 0.3})
    assert profile.networks[0].efficiency == 0.3 and profile.networks[1].efficiency == base.networks[1].efficiency
    curve = profile.matrix["bfloat16"].operation_size_efficiency.saturating
    assert (curve.max_efficiency, curve.half_size) == (0.5, 0.0)
    assert profile.matrix["float8"] == base.matrix["float8"]  # no float8 value given: the base's curve
    pricer = Pricer(profile, COST_VIEWS["system_evidence"], "bfloat16")
    gemm = Work.trusted(operations=4.5e12, bytes_read=1e6, bytes_written=1e6, engine="matrix")
    assert pricer.work(gemm).processing_s == pytest.approx(4.5e12 / (0.5 * 2.25e15), rel=1e-12)
    small = Work.trusted(operations=4.5e6, bytes_read=0.0, bytes_written=0.0, engine="matrix")
    assert pricer.work(small).processing_s == pytest.approx(4.5e6 / (0.5 * 2.25e15), rel=1e-12)
    assert profile.processing_mode == "roofline"


def test_a_model_is_its_shape_without_its_depth_and_a_release_its_software(b200_records):
    record = _first(b200_records, tensor_parallel=8)
    deeper = record.model_copy(update={"model": record.model.model_copy(update={"blocks": 80})})
    assert group_key(deeper, "model") == group_key(record, "model")
    assert group_key(record, "model").startswith(f"h{record.model.hidden} ff{record.model.feedforward} ")
    assert group_key(record, "scale") == "8 GPUs"
    assert release_of(record) == record.note.split("; software: ")[1]


def test_release_drift_removes_each_releases_mean_log_error(b200_records):
    """Release A: predicted 1.1 and 0.9 of measured; release B: 1.2. Per-release scales 1 / exp(mean log
    ratio): A 1 / sqrt(0.99), B 1 / 1.2; with them A's errors are +-sqrt(1.1/0.9) - 1, B's 0."""
    a, b = b200_records[0], b200_records[-1]
    assert release_of(a) != release_of(b)
    drift = release_drift([a, a, b], np.array([1.1, 0.9, 1.2]), np.ones(3))
    assert drift["releases"][release_of(a)]["per_release_scale"] == pytest.approx(1 / math.sqrt(0.99))
    assert drift["releases"][release_of(b)]["per_release_scale"] == pytest.approx(1 / 1.2)
    assert drift["releases"][release_of(a)]["bias_pct"] == pytest.approx(0.0, abs=1e-12)
    left = 100 * (math.sqrt(1.1 / 0.9) - 1)
    assert drift["mape_with_per_release_revisions_pct"] == pytest.approx((left + 100 * (1 - math.sqrt(0.9 / 1.1))) / 3)


def test_a_held_out_record_whose_parameter_no_training_record_informs_is_not_predicted(b200_records):
    """Two SimuMax bf16 rows and the four Megatron-Bridge fp8 rows, by model: holding out the fp8 model leaves
    no fp8 training row, so its four rows get no figure (never the optimizer's start); holding out the bf16
    model fits every parameter on the fp8 rows and predicts both."""
    bf16 = [r for r in b200_records if r.execution.precision is None][:2]
    fp8 = [r for r in b200_records if r.execution.precision is not None]
    assert len(fp8) == 4
    design = RunsDesign(bf16 + fp8, template(load_profile("b200"), "t"))
    result = held_out(design, MeasurementsOracle(design.records), "model", PARAMETERS, 8)
    assert list(np.isfinite(result.predicted_s)) == [True, True, False, False, False, False]
    (why,) = result.not_enough_data.values()
    assert why == "4 of 4 held-out records exercise matrix_float8_max_efficiency, which no training record does"


@pytest.mark.parametrize("argv, needles", [
    (["--parameters", "bogus"], ("--parameters", "unknown parameter 'bogus'")),
    (["--fixed", "nvlink_efficiency"], ("--fixed", "--fixed and --fixed-from go together")),
    (["--fixed-from", "b200", "--fixed", "nvlink_efficiency"], ("--fixed-from", "b200 has no fitted")),
])
def test_a_bad_megatron_core_fit_option_is_one_line_and_writes_nothing(tmp_path, capsys, argv, needles):
    from conftest import one_error_line, run_cli

    out = tmp_path / "b200_test.yaml"
    status, _, err = run_cli(capsys, "evidence", "fit", "--structure", "megatron-core", "--base", "b200",
                             "--measurements", CORPUS, "--output", out, *argv)
    one_error_line(status, err, *needles)
    assert not out.exists()


def test_megatron_core_options_need_that_structure(tmp_path, capsys):
    from conftest import one_error_line, run_cli

    status, _, err = run_cli(capsys, "evidence", "fit", "--base", "b200", "--measurements", CORPUS,
                             "--output", tmp_path / "x.yaml", "--parameters", "matrix_max_efficiency")
    one_error_line(status, err, "--parameters", "needs --structure megatron-core")


def test_the_modern_report_refuses_a_revision_it_does_not_know_and_a_changed_corpus(tmp_path, capsys):
    from conftest import one_error_line, run_cli

    status, _, err = run_cli(capsys, "evidence", "modern-report", "--profiles", "a100_measured", "--corpora",
                             CORPUS.parent, "--output", tmp_path / "r.json")
    one_error_line(status, err, "--profiles", "not a megatron-core revision")
    changed = tmp_path / "corpora"
    changed.mkdir()
    text = CORPUS.read_text()
    (changed / CORPUS.name).write_text(text.replace('"measured_iteration_s":0.843', '"measured_iteration_s":0.844'))
    assert (changed / CORPUS.name).read_text() != text
    status, _, err = run_cli(capsys, "evidence", "modern-report", "--profiles", "b200_measured", "--corpora",
                             changed, "--output", tmp_path / "r.json")
    one_error_line(status, err, "not the corpus b200_measured was fitted on")
    assert not (tmp_path / "r.json").exists()


def test_the_modern_report_never_writes_over_a_corpus_it_reads(tmp_path, capsys):
    """Hostile-input probe: --output onto one of the --corpora files replaced the corpus with the report (exit 0);
    --corpora naming a file said '<file>/<corpus>: cannot open: Not a directory'. Both refused up front, on one
    line, the corpus as it was."""
    from conftest import one_error_line, run_cli

    corpora = tmp_path / "corpora"
    corpora.mkdir()
    (corpora / CORPUS.name).write_bytes(CORPUS.read_bytes())
    status, _, err = run_cli(capsys, "evidence", "modern-report", "--profiles", "b200_measured", "--corpora",
                             corpora, "--output", corpora / CORPUS.name)
    one_error_line(status, err, str(corpora / CORPUS.name), "--output")
    assert (corpora / CORPUS.name).read_bytes() == CORPUS.read_bytes()
    status, _, err = run_cli(capsys, "evidence", "modern-report", "--profiles", "b200_measured", "--corpora",
                             corpora / CORPUS.name, "--output", tmp_path / "r.json")
    one_error_line(status, err, f"{corpora / CORPUS.name}: --corpora: not a directory")
    assert not (tmp_path / "r.json").exists()


def test_the_megatron_core_structure_refuses_a_corpus_of_another_datatype(tmp_path, capsys):
    """Korthikanti et al.'s runs are fp16 Megatron-LM: not this structure's runs (one line, the record named)."""
    from conftest import one_error_line, run_cli

    corpus = ROOT / "measurements" / "korthikanti22.jsonl"
    status, _, err = run_cli(capsys, "evidence", "fit", "--structure", "megatron-core", "--base", "b200",
                             "--measurements", corpus, "--output", tmp_path / "b200_x.yaml")
    one_error_line(status, err, "execution.datatype", "float16: the megatron-core structure fits runs of bf16")


def _moe(records):
    return next(r for r in records if r.model.moe is not None and r.execution.pipeline_parallel == 1)


def test_the_experts_parameters_are_exercised_by_a_moe_record_and_the_all_to_all_only_on_tier_0(b200_records):
    grouped, all_to_all = BY_NAME["grouped_gemm_half_size"], BY_NAME["nvlink_all_to_all_efficiency"]
    moe = _moe(b200_records)  # SimuMax DeepSeek: EP 8 inside the node
    assert moe.execution.expert_parallel == 8 and moe.execution.network_tiers.expert == 0
    assert exercised(grouped, moe) and exercised(all_to_all, moe)
    dense = _first(b200_records, tensor_parallel=8)
    assert not exercised(grouped, dense) and not exercised(all_to_all, dense)
    gathered = moe.model_copy(update={"execution": moe.execution.model_copy(update={"moe_dispatcher": "allgather"})})
    assert exercised(grouped, gathered) and not exercised(all_to_all, gathered)
    across = moe.model_copy(update={"execution": moe.execution.model_copy(update={
        "network_tiers": moe.execution.network_tiers.model_copy(update={"expert": 1})})})
    assert not exercised(all_to_all, across)


def test_the_experts_values_sit_where_the_pricer_reads_them():
    """A grouped GEMM of 16 experts of g = 2 x 1024 x 2048 x 1536 = 6.442e9 operations each, at bf16
    efficiency 0.5 and half size 3e9: 16 g / (2.25e15 x 0.5 x g / (g + 3e9)); an all-to-all of 64 MiB over 8
    GPUs on NVLink at 0.2: (1 - 1/8) x 64 MiB / (900e9 x 0.2) + the tier's latency (the all_gather ring
    volume of the template), the tier's own efficiency (0.3) left to its other collectives."""
    base = load_profile("b200")
    profile = with_values(template(base, "t"), {"matrix_max_efficiency": 0.5, "nvlink_efficiency": 0.3,
                                                "grouped_gemm_half_size": 3e9, "nvlink_all_to_all_efficiency": 0.2})
    assert profile.grouped_gemm.half_size_operations == 3e9
    pricer = Pricer(profile, COST_VIEWS["system_evidence"], "bfloat16")
    g = 2 * 1024 * 2048 * 1536
    work = Work.trusted(operations=16 * g, bytes_read=0.0, bytes_written=0.0, engine="matrix", gemm_operations=g)
    assert pricer.work(work).compute_s == pytest.approx(16 * g / (2.25e15 * 0.5 * g / (g + 3e9)), rel=1e-12)
    tier = profile.networks[0]
    assert tier.bandwidth_bytes_per_s == 900e9
    size = 64 * 2**20
    a2a = Message(collective="all_to_all", message_bytes=size, participants=8, network_tier=0)
    assert pricer.message_s(a2a) == pytest.approx(tier.latency_s + (1 - 1 / 8) * size / (900e9 * 0.2), rel=1e-12)
    gather = Message(collective="all_gather", message_bytes=size, participants=8, network_tier=0)
    assert pricer.message_s(gather) == pytest.approx(tier.latency_s + (1 - 1 / 8) * size / (900e9 * 0.3), rel=1e-12)


def test_the_fits_evaluator_prices_a_model_of_dense_and_moe_blocks_as_the_estimate_does(b200_records):
    """SimuMax's DeepSeek rows (a dense first block, then MoE blocks): the design lowers each kind on its own,
    as ``estimate`` does (harness.estimate.estimate_mixed)."""
    moe = _moe(b200_records)
    assert moe.model.moe.dense_layers == 1
    profile = with_values(template(load_profile("b200"), "t"), {"grouped_gemm_half_size": 3e9,
                                                                 "nvlink_all_to_all_efficiency": 0.2})
    design = RunsDesign([moe], profile)
    assert design.mixed[0] is not None
    real = estimate(moe.estimate_input(profile.name).model_copy(update={"system": "b200"}))  # the data-sheet base
    on_base = RunsDesign([moe], load_profile("b200")).predict(load_profile("b200"))[0]
    assert on_base == real.views["system_evidence"].total_s
    assert design.check(profile) <= 1e-12
    # the same row with its DP sync overlapped: both kinds through their ConcretePlanIRs, still the estimate's
    overlapped = moe.model_copy(update={"execution": moe.execution.model_copy(update={"dp_overlap": True})})
    design = RunsDesign([overlapped], profile)
    assert design.mixed[0] is not None and design.concretes[0] is not None
    real = estimate(overlapped.estimate_input(profile.name).model_copy(update={"system": "b200"}))
    assert RunsDesign([overlapped], load_profile("b200")).predict(load_profile("b200"))[0] == (
        real.views["system_evidence"].total_s)
    assert design.check(profile) <= 1e-12
