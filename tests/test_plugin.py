"""The harness pytest plugin, tested with pytester."""

from __future__ import annotations

import shutil

import pytest

from harness.pytest_plugin import UPDATE_FLAGS

from conftest import CASES_DIR

pytest_plugins = ["pytester"]

CASE_TEST = """
import pytest

def test_shape(case, lowering):
    assert lowering.model.shape == case.model

@pytest.mark.calibration
def test_only_paper_cases(case):
    assert case.comparison.paper is not None

def test_order(case, peak_only_estimate, evidence_estimate, calculon_oracle, comparison_gate):
    events = comparison_gate.events
    oracle_at = events.index(("oracle", case.id))
    assert ("estimate", case.id + ":peak_only") in events[:oracle_at]
    assert ("estimate", case.id + ":system_evidence") in events[:oracle_at]
"""


def _cases(pytester, *names):
    directory = pytester.path / "cases"
    directory.mkdir()
    for name in names:
        shutil.copy(CASES_DIR / f"{name}.yaml", directory / f"{name}.yaml")
    return directory


def test_adding_a_case_yaml_adds_its_tests(pytester):
    directory = _cases(pytester, "megatron-22B_full")
    pytester.makepyfile(test_cases=CASE_TEST)
    first = pytester.runpytest("--harness-cases", str(directory), "--collect-only", "-q")
    assert "test_cases.py::test_shape[megatron-22B/full]" in first.stdout.str()
    shutil.copy(CASES_DIR / "inference_megatron-22B_ar.yaml", directory)
    second = pytester.runpytest("--harness-cases", str(directory), "-q")
    second.assert_outcomes(passed=5)  # 2 cases x (shape, order) + 1 paper case
    assert "test_shape[inference/megatron-22B/ar]" in pytester.runpytest(
        "--harness-cases", str(directory), "--collect-only", "-q").stdout.str()


MIXED_CASE = """\
schema: blueprinting.case.v0
id: hf/deepseek-mixed-4
system: b200
model:
  hidden: 7168
  feedforward: 18432
  sequence_length: 8192
  attention_heads: 128
  head_size: 192
  blocks: 4
  vocabulary: 129280
  mlp: swiglu
  norm: rmsnorm
  position: rope
  attention_dropout: 0.0
  tied_embeddings: false
  mla:
    q_lora_rank: 1536
    kv_lora_rank: 512
    qk_rope_head_dim: 64
    qk_nope_head_dim: 128
    v_head_dim: 128
  moe:
    experts: 256
    top_k: 8
    expert_ffn: 2048
    shared_experts: 1
    dense_layers: 3
    router: sigmoid
execution:
  tensor_parallel: 1
  pipeline_parallel: 1
  data_parallel: 8
  global_batch: 128
  microbatch: 1
  pipeline_interleaving: 1
  datatype: bfloat16
  recompute: none
  tp_communication: ar
  seq_par_ag_redo: false
  optimizer_sharding: true
  fused_activation: false
  attention: multihead
  network_tiers:
    tensor: 0
    pipeline: 0
    data: 0
    expert: 0
  training: true
  tp_overlap: none
  dp_overlap: false
  offload:
    weights: false
    activations: false
    optimizer: false
  attention_kernel: flash
  expert_parallel: 8
comparison: {}
"""


def test_a_case_of_dense_and_moe_blocks_gets_both_estimates_and_refuses_its_one_plan_lowering(pytester):
    """A DeepSeek-V3-like case (3 dense blocks, then MoE) has two plans: its view fixtures are the estimate's
    (``harness estimate`` prices it stage by stage), the ``lowering`` fixture refuses it naming the field."""
    directory = pytester.path / "cases"
    directory.mkdir()
    (directory / "deepseek-mixed-4.yaml").write_text(MIXED_CASE)
    pytester.makepyfile(test_mixed="""
import pytest
from harness.errors import UnsupportedFeatureError
from harness.estimate import estimate

def test_views(case, peak_only_estimate, evidence_estimate):
    whole = estimate(case.estimate_input())
    assert peak_only_estimate.views["peak_only"] == whole.views["peak_only"]
    assert evidence_estimate.views["system_evidence"] == whole.views["system_evidence"]
    assert whole.views["system_evidence"].total_s > whole.views["peak_only"].total_s > 0

def test_lowering(request, case):
    with pytest.raises(UnsupportedFeatureError, match="model.moe.dense_layers: dense and MoE blocks"):
        request.getfixturevalue("lowering")
""")
    pytester.runpytest("--harness-cases", str(directory), "-q").assert_outcomes(passed=2)


def test_markers_are_registered_for_strict_markers(pytester):
    pytester.makepyfile("""
        import pytest
        @pytest.mark.calibration
        @pytest.mark.baseline_regression
        @pytest.mark.oracle_live
        @pytest.mark.differential
        @pytest.mark.slow
        def test_marked():
            pass
    """)
    pytester.runpytest("--strict-markers").assert_outcomes(passed=1)


def test_report_header_names_oracle_and_evidence(pytester):
    directory = _cases(pytester, "gpt3-175B_seqsel")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    out = pytester.runpytest("--harness-cases", str(directory)).stdout.str()
    assert "harness oracle: calculon 0.1.0 source sha256 e41fad9d" in out
    assert "harness evidence: a100_80g@" in out


@pytest.mark.parametrize("flag", UPDATE_FLAGS)
def test_golden_updates_are_refused_under_ci(pytester, monkeypatch, flag):
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest(flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"golden updates ({flag}) are refused under CI" in result.stderr.str()
    monkeypatch.delenv("CI")
    pytester.runpytest(flag, "-p", "no:cacheprovider").assert_outcomes(passed=1)  # outside CI the flag is accepted


def test_every_update_flag_of_the_golden_plugins_is_refused(pytester):
    """A syrupy or pytest-regressions option named for updating or regenerating is in UPDATE_FLAGS (a new
    version's new flag fails here instead of slipping past the CI refusal)."""
    help_text = pytester.runpytest("--help").stdout.str()
    options = {word.split("=")[0] for line in help_text.splitlines() for word in line.split()
               if word.startswith("--")}
    writing = {o for o in options if ("update" in o or "regen" in o) and ("snapshot" in o or "regen" in o)}
    assert writing == set(UPDATE_FLAGS)


@pytest.mark.parametrize("extra", [[], ["--harness-calculon-src=nowhere"]])
def test_a_live_oracle_without_a_calculon_checkout_is_one_usage_error(pytester, monkeypatch, extra):
    """Issue 24: ``--harness-oracle live`` without a checkout was an error in every test; it is a usage error
    before any test runs."""
    monkeypatch.delenv("HARNESS_CALCULON_SRC", raising=False)
    directory = _cases(pytester, "megatron-22B_full")
    pytester.makepyfile(test_cases=CASE_TEST)
    result = pytester.runpytest("--harness-cases", str(directory), "--harness-oracle", "live", *extra, "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--harness-calculon-src" in result.stderr.str() and "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("kind", ["file", "missing"])
def test_a_goldens_option_that_is_no_directory_is_one_usage_error(pytester, kind):
    """Hostile-input probe: a file was a NotADirectoryError traceback in every golden test; a missing path was
    created (a new, empty golden directory)."""
    target = pytester.path / "goldens.txt"
    if kind == "file":
        target.write_text("x")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--harness-goldens", str(target), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--harness-goldens: {target}: not a directory" in result.stderr.str()
    assert (kind == "file") == target.exists()


def test_a_missing_golden_fails_on_every_run_and_is_never_written(tmp_path):
    """Hostile-input probe: pytest-regressions wrote a golden it did not find into the goldens directory (even
    under CI), so the second run passed: a deleted golden re-baselined itself. It fails on every run now, and the
    goldens directory stays as it was."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    empty = tmp_path / "goldens"
    empty.mkdir()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=",
               "--harness-goldens", str(empty), "tests/test_goldens.py::test_components[megatron-22B/full]"]
    for _ in range(2):
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "CI": "true"})
        assert run.returncode == 1 and "1 failed" in run.stdout, run.stdout[-1500:]
        assert list(empty.rglob("*")) == []
