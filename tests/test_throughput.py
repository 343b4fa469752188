"""Issue 23.6: tokens/s, model TFLOP/s and MFU per GPU with the FLOP convention stated; memory labelled per
processor; the scope of each figure labelled. Checked on hand-computed cases against Calculon's recorded
totals (an independent source for the time)."""

from __future__ import annotations

import json

import pytest

from harness.cases import load_case
from harness.pipeline import lower
from harness.throughput import FLOP_CONVENTION, block_matrix_flops

from conftest import CASES_DIR, calculon_figures, run_cli


def narayanan_flops(case_name: str) -> float:
    """72 B s l h^2 (1 + s/6h): Narayanan et al. 2021's model FLOPs of a GPT iteration without the logits
    (feedforward 4h, heads x head size = h, training)."""
    case = load_case(CASES_DIR / f"{case_name}.yaml")
    m, e = case.model, case.execution
    assert m.feedforward == 4 * m.hidden and m.attention_heads * m.head_size == m.hidden and e.training
    b, s, l, h = e.global_batch, m.sequence_length, m.blocks, m.hidden
    return 72 * b * s * l * h * h * (1 + s / (6 * h))


@pytest.mark.parametrize("case_name, gpus", [("megatron-22B_full", 8), ("gpt3-175B_seqsel", 64)])
def test_mfu_of_hand_computed_cases(capsys, case_name, gpus):
    total_s = calculon_figures(case_name, "system_evidence")["total_s"]
    case = load_case(CASES_DIR / f"{case_name}.yaml")
    assert case.execution.processors == gpus
    status, out, _ = run_cli(capsys, "estimate", case_name, "--json")
    entry = json.loads(out)[0]
    view = entry["views"]["system_evidence"]
    assert status == 0 and view["total_s"] == pytest.approx(total_s, rel=1e-12)
    t = view["throughput"]
    flops = narayanan_flops(case_name)
    assert t["model_flops_per_iteration"] == pytest.approx(flops, rel=1e-12)
    assert t["tokens_per_s_per_processor"] == pytest.approx(
        case.execution.global_batch * case.model.sequence_length / total_s / gpus, rel=1e-12)
    assert t["model_flops_per_s_per_processor"] == pytest.approx(flops / total_s / gpus, rel=1e-12)
    assert t["model_flops_utilization"] == pytest.approx(flops / total_s / gpus / 312e12, rel=1e-12)  # A100 fp16
    assert entry["flop_convention"] == FLOP_CONVENTION and "72 B s l h^2" in FLOP_CONVENTION
    assert "one processor" in entry["scopes"]["memory_bytes"] and "one microbatch" in entry["scopes"]["workload"]


@pytest.mark.parametrize("context_parallel", [2, 4])
def test_context_parallelism_keeps_the_model_flops_of_the_iteration(context_parallel):
    """Model FLOPs are the model's and the batch's, not the layout's (read off the reference layout, which has no
    CP; the CLI test below lowers CP cases end to end); the MFU is per processor of the CP layout: TP x CP x PP x
    DP of them (it was 1/CP of the model FLOPs once, and the MFU with it)."""
    from harness.cases import EstimateInput
    from harness.throughput import reference_input, throughput

    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    e = data.execution
    layout = e.model_copy(update={"context_parallel": context_parallel,
                                  "network_tiers": e.network_tiers.model_copy(update={"context": 0})})
    split = EstimateInput(model=data.model, execution=layout, system=data.system)
    figures = throughput(lower(reference_input(split)).plan, split, 2.0, 1e15)
    assert figures.model_flops_per_iteration == pytest.approx(narayanan_flops("megatron-22B_full"), rel=1e-12)
    assert layout.processors == 8 * context_parallel
    per_processor = narayanan_flops("megatron-22B_full") / 2.0 / (8 * context_parallel)
    assert figures.model_flops_utilization == pytest.approx(per_processor / 1e15, rel=1e-12)


def test_22B_by_hand():
    """The numbers themselves: 72 * 4 * 2048 * 48 * 6144^2 * (1 + 2048/36864) = 1.12810e15 model FLOPs, i.e.
    2.938e12 per block, per GPU (TP 8), per microbatch of 4: what the plan's matrix tasks add up to."""
    assert narayanan_flops("megatron-22B_full") == pytest.approx(1.128098930098176e15, rel=1e-12)
    plan = lower(load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input(), "x").plan
    assert block_matrix_flops(plan) == pytest.approx(1.128098930098176e15 / 48 / 8, rel=1e-12)


def test_the_text_output_labels_memory_per_processor_and_states_the_convention(capsys):
    status, out, _ = run_cli(capsys, "estimate", "megatron-22B_full")
    lines = out.splitlines()
    assert status == 0 and lines[0] == "megatron-22B/full"
    assert "GiB per processor" in lines[1] and lines[2].split()[:2] == ["per", "GPU:"]
    assert "tokens/s" in lines[2] and "model TFLOP/s" in lines[2] and "MFU" in lines[2]
    assert lines[-1] == f"({FLOP_CONVENTION})"


def test_a_quantizing_recipe_prints_its_gemms_peak_beside_the_layout_datatypes(capsys, tmp_path):
    """An nvfp4 recipe on B200 (hostile-input probe: "MFU 125.1% of 2250 TFLOP/s" alone read as a wrong number):
    MFU stays against the layout datatype's peak (the FLOP convention), and the text line adds the model FLOP/s
    against the float4 GEMMs' peak (the data sheet's, from the profile), so that a figure past 100 % is read as
    meant; a recipe that quantizes nothing prints the plain line."""
    import yaml

    from harness.evidence.profile import load_profile

    case = yaml.safe_load((CASES_DIR / "megatron-22B_full.yaml").read_text())
    case["system"] = "b200"
    case["execution"].update(datatype="bfloat16", precision="nvfp4")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(case))
    status, out, _ = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"), "--json")
    assert status == 0
    views = json.loads(out)[0]["views"]
    b200 = load_profile("b200")
    bf16, fp4 = b200.matrix["bfloat16"].peak_flops_per_s, b200.matrix["float4"].peak_flops_per_s
    assert fp4 > bf16
    status, text, _ = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"))
    lines = text.splitlines()
    for at, name in ((2, "peak_only"), (4, "system_evidence")):
        t = views[name]["throughput"]
        assert t["peak_flops_per_s_per_processor"] == bf16
        assert lines[at].endswith(f"MFU {t['model_flops_per_s_per_processor'] / bf16:.1%} of {bf16 / 1e12:g} TFLOP/s "
                                  f"(bfloat16; {t['model_flops_per_s_per_processor'] / fp4:.1%} of the float4 GEMMs' "
                                  f"{fp4 / 1e12:g} TFLOP/s)"), lines[at]
    case["execution"]["precision"] = "bf16"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(case))
    status, text, _ = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"))
    assert status == 0 and text.splitlines()[2].endswith(" TFLOP/s") and "GEMMs'" not in text


GQA_CASE = """schema: blueprinting.case.v0
id: t/llama-like
system: h100_sxm_80g
model: {hidden: 2048, feedforward: 5632, sequence_length: 4096, attention_heads: 16, kv_heads: 2, head_size: 128,
        blocks: 16, vocabulary: 32000, mlp: swiglu, norm: rmsnorm, position: rope}
execution:
  tensor_parallel: 1
  pipeline_parallel: 1
  data_parallel: 8
  global_batch: 64
  microbatch: 2
  datatype: bfloat16
  network_tiers: {tensor: 0, pipeline: 0, data: 0}
"""


@pytest.mark.parametrize("layout", [
    {}, {"attention_kernel": "flash"}, {"attention_kernel": "materialized"},
    {"tensor_parallel": 2, "data_parallel": 4}, {"tensor_parallel": 4, "data_parallel": 2},  # TP > kv_heads = 2
    {"tensor_parallel": 8, "data_parallel": 1, "attention_kernel": "flash", "tp_communication": "rs_ag"},
    {"context_parallel": 2, "data_parallel": 4, "attention_kernel": "flash", "network_tiers":
     {"tensor": 0, "pipeline": 0, "data": 0, "context": 0}},
    {"pipeline_parallel": 4, "data_parallel": 2, "recompute": "full"},
])
def test_the_model_flops_are_the_models_whatever_the_layout(capsys, tmp_path, layout):
    """Hostile-input probe: a flash kernel gave 11.0 % fewer model FLOPs (its executed work: the causal tiles
    skipped, the scores recomputed in its backward), and TP beyond the 2 key/value heads more (the replicated K and
    V projections of every rank, +5.2 % at TP 8). The convention's count, written out here: per token 2 x (Q, K, V,
    O and the SwiGLU's three matrices) forward, the two score products 2 x 2 b heads s^2 d per microbatch over the
    full scores, the backward twice the forward; 16 blocks, 32 microbatches of 2 samples."""
    import yaml

    case = yaml.safe_load(GQA_CASE)
    case["execution"].update(layout)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(case))
    status, out, err = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"), "--json")
    assert status == 0, err
    h, ffn, heads, kv, d, s, b = 2048, 5632, 16, 2, 128, 4096, 2
    weights = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * ffn
    per_microbatch = 3 * (2 * b * s * weights + 2 * (2 * b * heads * s * s * d))
    for view in json.loads(out)[0]["views"].values():
        assert view["throughput"]["model_flops_per_iteration"] == pytest.approx(16 * 32 * per_microbatch, rel=1e-12)


MOE_CASE = """schema: blueprinting.case.v0
id: t/moe-small
system: h100_sxm_80g
model: {hidden: 1024, feedforward: 4096, sequence_length: 2048, attention_heads: 16, head_size: 64, blocks: 8,
        vocabulary: 32000, kv_heads: 4, mlp: swiglu, norm: rmsnorm, position: rope,
        moe: {experts: 8, top_k: 2, expert_ffn: 1024}}
execution:
  tensor_parallel: 1
  pipeline_parallel: 1
  data_parallel: 8
  global_batch: 64
  microbatch: 1
  datatype: bfloat16
  attention_kernel: flash
  optimizer_sharding: true
  expert_parallel: 8
  expert_tensor_parallel: 1
  network_tiers: {tensor: 0, pipeline: 0, data: 0, expert: 0}
"""


@pytest.mark.parametrize("moe", [
    {}, {"load_imbalance": 2.0}, {"capacity_factor": 0.5},  # were +48 % and -24 % (the busiest expert's tokens)
    {"experts": 384, "top_k": 8},  # 2048 x 8 / 384 = 42.67 tokens per expert: was rounded up to 43 (+0.6 %)
])
def test_the_model_flops_of_experts_are_the_balanced_routings(capsys, tmp_path, moe):
    """Review: on the reference layout every expert was priced on the busiest expert's tokens, rounded up, so the
    case's load imbalance, capacity factor and the rounding reached the model FLOPs. Counted by hand: per token
    Q, K, V, O, the router (hidden x experts) and top_k SwiGLU experts (3 x hidden x expert width), forward and
    twice that backward; the scores 3 x 2 x (2 b heads s^2 d); 8 blocks, 64 samples."""
    import yaml

    case = yaml.safe_load(MOE_CASE)
    case["model"]["moe"].update(moe)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(case))
    status, out, err = run_cli(capsys, "estimate", str(tmp_path / "c.yaml"), "--json")
    assert status in (0, 1), err
    h, heads, kv, d, s = 1024, 16, 4, 64, 2048
    experts, top_k = case["model"]["moe"]["experts"], case["model"]["moe"]["top_k"]
    weights = h * heads * d + 2 * h * kv * d + heads * d * h + h * experts + top_k * 3 * h * 1024
    per_sample = 3 * (2 * s * weights + 2 * (2 * heads * s * s * d))
    for view in json.loads(out)[0]["views"].values():
        assert view["throughput"]["model_flops_per_iteration"] == pytest.approx(8 * 64 * per_sample, rel=1e-12)


def test_the_reference_layout_resets_every_parallel_and_concurrency_field():
    """Review: the reference layout names the fields it resets, so a new layout field was kept from the case: a
    MoE case with ``expert_overlap`` failed its estimate, the reference (EP 1) refusing the overlap. Every layout
    field is either reset or one the convention keeps (what the model computes in: datatype, recipe, attention
    form, the activation fusion, training; and what the reference sets itself)."""
    from harness.ir.model import ExecutionLayout
    from harness.throughput import REFERENCE_LAYOUT

    kept = {"attention", "datatype", "fused_activation", "precision", "training",
            "global_batch", "microbatch", "network_tiers", "offload"}  # the last four set by reference_input
    assert set(ExecutionLayout.model_fields) - set(REFERENCE_LAYOUT) == kept
