"""The independent FLOP oracle: the vendored records (vendor/flops/*.json) and their recorder.

The default suite reads the records only; torch and transformers are never imported here except by the slow
re-recording test, which skips without them (``tox -e flop-oracle`` installs them).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib.util import find_spec

import pytest

from harness.oracles.flops import FLOP_RECORD_SCHEMA, load_flop_record

from conftest import ROOT, one_error_line, run_cli

FLOPS = ROOT / "vendor" / "flops"
RECORDS = sorted(FLOPS.glob("*.json"))
CONFIGS = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in sorted((FLOPS / "configs").glob("*.json"))}


def shape(config: dict) -> dict:
    """The layer's shape from a config.json, read here by hand (GPT-2 has its own key names)."""
    if config["model_type"] == "gpt2":
        hidden = config["n_embd"]
        return {"hidden": hidden, "heads": config["n_head"], "kv_heads": config["n_head"],
                "head_dim": hidden // config["n_head"], "ffn": config["n_inner"] or 4 * hidden, "gated": False}
    heads = config["num_attention_heads"]
    return {"hidden": config["hidden_size"], "heads": heads, "kv_heads": config.get("num_key_value_heads", heads),
            "head_dim": config.get("head_dim") or config["hidden_size"] // heads, "ffn": config["intermediate_size"],
            "gated": config["model_type"] != "gpt_neox"}


def hand_counted(config: dict, microbatch: int, sequence: int) -> tuple[int, int]:
    """(linear, attention) FLOPs of one layer, forward + backward, from the shape alone: a product of ``m x k``
    and ``k x n`` is ``2 m k n``; the backward computes the input and the weight gradient of each linear
    layer (2 products as large as the forward) and two products per score product; so 3x the forward."""
    s = shape(config)
    tokens = microbatch * sequence
    q, kv = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    weights = s["hidden"] * q + 2 * s["hidden"] * kv + q * s["hidden"]  # Q, K, V, output projection
    weights += (3 if s["gated"] else 2) * s["hidden"] * s["ffn"]  # gate and up (or the one up) and down
    scores = 2 * (2 * microbatch * s["heads"] * sequence * sequence * s["head_dim"])  # Q K^T and P V, full s x s
    return 3 * 2 * tokens * weights, 3 * scores


def test_at_least_eight_architectures_and_two_microbatch_sizes_are_vendored():
    records = [load_flop_record(p) for p in RECORDS]
    assert len({r.config_sha256 for r in records}) >= 8
    assert len({r.microbatch for r in records}) >= 2
    assert {r.config["model_type"] for r in records} >= {"llama", "mistral", "qwen2", "qwen3", "gpt2"}


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_each_record_is_the_hand_count_of_its_vendored_config(path):
    record = load_flop_record(path)
    assert record.id == path.stem and json.loads(path.read_text())["schema"] == FLOP_RECORD_SCHEMA
    config_file = CONFIGS[record.config_sha256]  # the config it was counted from is vendored beside it
    assert json.loads(config_file.read_text()) == record.config
    linear, attention = hand_counted(record.config, record.microbatch, record.sequence_length)
    assert (record.linear_flops, record.attention_flops) == (linear, attention)
    # the backward pass is twice the forward, operation class by operation class
    assert sum(record.backward.get(op, 0) for op in ("aten.mm", "aten.addmm")) == 2 * sum(
        record.forward.get(op, 0) for op in ("aten.mm", "aten.addmm"))
    assert record.backward.get("aten.bmm", 0) == 2 * record.forward["aten.bmm"]
    assert record.provenance.torch and record.provenance.transformers


def test_the_default_suite_never_imports_torch():
    code = ("import sys, harness.cli, harness.oracles.flops, harness.commands.oracle; "
            "sys.exit(int('torch' in sys.modules or 'transformers' in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("argv, field", [
    (["--flops", "--microbatch", "1", "--sequence-length", "8", "--id", "x"], "--config"),
    (["--flops", "--config", "c.json", "--sequence-length", "8", "--id", "x"], "--microbatch"),
    (["--flops", "--config", "c.json", "--microbatch", "0", "--sequence-length", "8", "--id", "x"], "--microbatch"),
    (["--flops", "--config", "c.json", "--microbatch", "1", "--sequence-length", "8", "--id", "../x"], "--id"),
    (["--cases", "cases"], "--calculon-src"),
])
def test_bad_flop_oracle_arguments_are_one_line_errors(capsys, argv, field):
    status, _, err = run_cli(capsys, "oracle", "record", *argv)
    one_error_line(status, err, field)


@pytest.mark.skipif(find_spec("torch") is not None, reason="torch is installed: the missing-extra error cannot occur")
def test_without_the_extra_the_flop_oracle_says_how_to_install_it(capsys, tmp_path):
    status, _, err = run_cli(capsys, "oracle", "record", "--flops", "--config", FLOPS / "configs" / "llama_gqa.json",
                             "--microbatch", "1", "--sequence-length", "8", "--id", "x", "--vendor", tmp_path)
    assert status != 0 and err.count("\n") == 1 and "pip install 'blueprinting-harness[flops]'" in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_recording_again_reproduces_the_vendored_record(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from harness.oracles.flops import record_flops

    vendored = load_flop_record(FLOPS / "qwen3_head_dim_b1_s128.json")
    again = record_flops(FLOPS / "configs" / "qwen3_head_dim.json", 1, 128, vendored.id)
    assert (again.forward, again.backward, again.config_sha256) == (
        vendored.forward, vendored.backward, vendored.config_sha256)


# --- the oracle against the plan -----------------------------------------------------------------------------

#: Plan primitives with matrix work, by the record's class.
MATRIX_CLASS = {"linear": "linear", "batch_matmul": "attention"}
EXECUTION = """tensor_parallel: 1
pipeline_parallel: 1
data_parallel: 1
global_batch: {b}
microbatch: {b}
datatype: bfloat16
recompute: none
network_tiers: {{tensor: 0, pipeline: 1, data: 1}}
"""


def record_input(record, tmp_path):
    """The case input of a record's layer: Llama, Mistral and Qwen configs through ``harness import hf``'s
    translation; GPT-2 and GPT-NeoX (no importer) read by hand as the native GeLU block: their matrix shapes are
    those of hidden, feedforward, heads and head size (learned or partial rotary positions and GPT-NeoX's
    parallel residual are not matrix work)."""
    from harness.cases import EstimateInput
    from harness.commands.import_hf import translate
    from harness.ir.model import ExecutionLayout, TransformerShape
    import yaml

    execution = EXECUTION.format(b=record.microbatch)
    config = record.config
    if config["model_type"] in ("gpt2", "gpt_neox"):
        s = shape(config)
        model = TransformerShape(hidden=s["hidden"], feedforward=s["ffn"], sequence_length=record.sequence_length,
                                 attention_heads=s["heads"], head_size=s["head_dim"], blocks=1)
        return EstimateInput(model=model, execution=ExecutionLayout(**yaml.safe_load(execution)), system="h100_sxm_80g")
    (tmp_path / "execution.yaml").write_text(execution)
    data, _ = translate(CONFIGS[record.config_sha256], tmp_path / "execution.yaml", record.sequence_length,
                        "h100_sxm_80g")
    return data


def plan_matrix_flops(data) -> dict[str, float]:
    """Forward + activation-gradient + weight-gradient matrix operations of the plan's block tasks (no clones:
    recompute none), by class."""
    from harness.pipeline import lower

    totals = {"linear": 0.0, "attention": 0.0}
    for task in lower(data).plan.tasks:
        for work in (task.forward, task.activation_grad, task.weight_grad):
            if work.engine == "matrix" and work.operations:
                assert task.phase == "forward" and task.primitive in MATRIX_CLASS, (task.name, task.primitive)
                totals[MATRIX_CLASS[task.primitive]] += work.operations
    return totals


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_each_record_equals_the_plans_matrix_work_exactly(path, tmp_path):
    record = load_flop_record(path)
    data = record_input(record, tmp_path)
    assert data.model.blocks == 1
    expected = {"linear": record.linear_flops, "attention": record.attention_flops}
    assert plan_matrix_flops(data) == expected  # the matrix work the plan prices
    from harness.estimate import estimate

    for view in estimate(data).views_json().values():  # the figure estimate --json reports
        assert view["workload"]["matrix_flops_per_block"] == expected
