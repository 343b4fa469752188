"""Measured runs (``blueprinting.measured-runs.v0``) as cases: the row -> case table, the refusals, the estimate.

Expected cases are written out by hand from the row (and the placement rule of harness.measurements.runs);
the estimate of a supported row is compared with the estimate of the same case written as a case file.
"""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import BaseModel

from harness.cases import case_has_field
from harness.measurements.runs import RECIPES, ROW_FIELDS, STACKS, Stack, recipe_file, run_case
from harness.measurements.runs_estimate import AUTO_PROFILES, RowResult, estimate_runs, family, summary
from harness.measurements.runs_schema import MeasuredRun, read_runs
from conftest import one_error_line, run_cli, shared_reference

REPOSITORY = "example/stack"


def gpt_row(**changes) -> dict:
    """A GPT-3-175B-like run on 128 GPUs (multi-head, GeLU, LayerNorm, learned positions, tied embeddings)."""
    row = {
        "id": "test/gpt/bf16/128",
        "source": {"where": f"{REPOSITORY}@0000 README.md", "row": "GPT 175B", "quality": "ok"},
        "software": "a test stack", "system": {"gpu": "h100_sxm_80g", "num_gpus": 128, "gpus_per_nvlink_domain": 8},
        "model": {"name": "GPT-3 175B", "layers": 96, "hidden": 12288, "ffn_hidden": 49152, "heads": 96,
                  "kv_heads": 96, "head_dim": 128, "vocab": 51200, "seq_len": 2048, "mlp": "gelu",
                  "norm": "layernorm", "attention": "mha", "sliding_window": None, "tied_embeddings": True,
                  "position_embedding": "learned_absolute", "moe": None, "mla": None, "mtp_layers": None,
                  "truncated_from": None},
        "parallel": {"tp": 8, "pp": 8, "vp": 12, "cp": 1, "ep": 1, "etp": None, "dp": 2, "fsdp": False,
                     "sequence_parallel": True, "distributed_optimizer": True, "tp_comm_overlap": True},
        "batch": {"global_batch": 256, "micro_batch": 1, "gradient_accumulation": 128},
        "precision": "bf16",
        "recompute": {"granularity": "none", "modules": None, "layers": None},
        "measured": {"iteration_s": 20.0, "derived_from": "step_time", "as_reported": {"step": 20.0}},
        "consistency": [], "notes": "",
        "extra": {"model_cite": "NVIDIA/dgxc-benchmarking@35a9 nemo_megatron/gpt3_175b_hydra.yaml (dropout 0.1)"},
    }
    for path, value in changes.items():
        target = row
        *keys, last = path.split("__")
        for key in keys:
            target = target[key]
        target[last] = value
    return row


def run_of(row: dict) -> MeasuredRun:
    return MeasuredRun.model_validate(row)


@pytest.fixture
def plain_stack(monkeypatch):
    """A stack that runs today's attention (materialized), so that a GPT row maps with today's case fields."""
    monkeypatch.setitem(STACKS, REPOSITORY, Stack("materialized", True, "test stack"))


def schema_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every leaf field of the row schema: a section is descended into, a feature object (moe, mla) is one."""
    out = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and prefix == "":
            out |= schema_fields(annotation, f"{name}.")
        else:
            out.add(prefix + name)
    return out


def test_the_table_covers_every_row_field_exactly():
    assert set(ROW_FIELDS) == schema_fields(MeasuredRun)


def test_a_gpt_row_is_the_case_written_by_hand(plain_stack):
    case = run_case(run_of(gpt_row()), "h100_80g_nvl8")
    assert case.unsupported == () and case.invalid is None
    assert case.input.model.model_dump(exclude_none=True) == {
        "hidden": 12288, "feedforward": 49152, "sequence_length": 2048, "attention_heads": 96, "head_size": 128,
        "blocks": 96, "vocabulary": 51200, "tied_embeddings": True}  # stated: the vocabulary matrices counted
    e = case.input.execution
    assert (e.tensor_parallel, e.pipeline_parallel, e.data_parallel, e.pipeline_interleaving) == (8, 8, 2, 12)
    assert (e.global_batch, e.microbatch, e.datatype, e.recompute) == (256, 1, "bfloat16", "none")
    assert (e.tp_communication, e.tp_overlap, e.optimizer_sharding, e.dp_overlap) == ("rs_ag", "ring", True, True)
    # TP spans 8 ranks (tier 0 of an 8-GPU domain), DP spans 8 x 2 = 16 and PP all 128 (tier 1)
    assert (e.network_tiers.tensor, e.network_tiers.data, e.network_tiers.pipeline) == (0, 1, 1)
    assert e.attention == "multihead" and case.input.system == "h100_80g_nvl8"


def test_one_node_layout_places_everything_on_tier_0_and_shards_nothing_without_dp(plain_stack):
    row = gpt_row(system__num_gpus=8, parallel__tp=4, parallel__pp=1, parallel__vp=None, parallel__dp=2,
                  parallel__sequence_parallel=False, parallel__tp_comm_overlap=False,
                  batch__global_batch=16, batch__gradient_accumulation=8)
    e = run_case(run_of(row), "h100_80g_nvl8").input.execution
    assert (e.network_tiers.tensor, e.network_tiers.data, e.network_tiers.pipeline) == (0, 0, 0)
    assert (e.tp_communication, e.tp_overlap, e.optimizer_sharding, e.dp_overlap) == ("ar", "none", True, True)
    assert e.pipeline_interleaving == 1
    row = gpt_row(system__num_gpus=8, parallel__tp=8, parallel__pp=1, parallel__vp=None, parallel__dp=1,
                  batch__global_batch=16, batch__gradient_accumulation=16)
    e = run_case(run_of(row), "h100_80g_nvl8").input.execution
    assert (e.tp_communication, e.tp_overlap, e.optimizer_sharding, e.dp_overlap) == ("rs_ag", "ring", False, False)


def test_multi_query_is_todays_attention_or_kv_heads(plain_stack):
    case = run_case(run_of(gpt_row(model__kv_heads=1, model__attention="gqa")), "h100_80g_nvl8")
    if case_has_field("model.kv_heads"):
        assert case.input.model.kv_heads == 1
    else:
        assert case.input.execution.attention == "multiquery"


@pytest.mark.parametrize("changes, field, case_path", [
    ({"model__mlp": "swiglu"}, "model.mlp", "model.mlp"),
    ({"model__norm": "rmsnorm"}, "model.norm", "model.norm"),
    ({"model__kv_heads": 8, "model__attention": "gqa"}, "model.kv_heads", "model.kv_heads"),
    ({"model__tied_embeddings": False}, "model.tied_embeddings", "model.tied_embeddings"),
    ({"model__position_embedding": "rope"}, "model.position_embedding", "model.position"),
    ({"model__sliding_window": 4096}, "model.sliding_window", "model.sliding_window"),
    ({"parallel__cp": 2, "parallel__dp": 1, "batch__gradient_accumulation": 256}, "parallel.cp",
     "execution.context_parallel"),
    ({"precision": "fp8_delayed"}, "precision", "execution.precision"),
])
def test_a_feature_is_set_when_the_case_format_has_it_else_refused_by_name(plain_stack, changes, field, case_path):
    case = run_case(run_of(gpt_row(**changes)), "h100_80g_nvl8")
    if case_has_field(case_path):
        assert field not in dict(case.unsupported)
    else:
        assert case.input is None and field in dict(case.unsupported)
        assert case_path in dict(case.unsupported)[field]


@pytest.mark.parametrize("changes, field", [
    ({"model__position_embedding": "rope (50% of head dim)"}, "model.position_embedding"),
    ({"recompute__granularity": None}, "recompute.granularity"),
    ({"recompute__layers": 4}, "recompute.layers"),  # without granularity full
    ({"parallel__tp_comm_overlap": None}, "parallel.tp_comm_overlap"),
    ({"model__mtp_layers": 1}, "model.mtp_layers"),
    ({"model__attention": "gqa"}, "model.attention"),  # contradicts kv_heads = heads
    ({"source__where": "other/stack@1 x"}, "source.where"),
])
def test_what_no_case_field_holds_is_refused_by_name(plain_stack, changes, field):
    case = run_case(run_of(gpt_row(**changes)), "h100_80g_nvl8")
    assert case.input is None and field in dict(case.unsupported), case


def test_selective_recompute_of_named_modules_is_the_case_s_selective_recompute(plain_stack):
    # Megatron-Core's default modules (none stated) are the attention core: attn_only
    default = run_case(run_of(gpt_row(recompute__granularity="selective")), "h100_80g_nvl8")
    assert default.input.execution.recompute == "attn_only"
    named = run_case(run_of(gpt_row(recompute__granularity="selective", recompute__modules=["core_attn", "layernorm"])),
                     "h100_80g_nvl8")
    e = named.input.execution
    assert (e.recompute, e.recompute_modules) == ("selective", ("core_attn", "layernorm"))
    # the modules without selective granularity, and a whole submodule, are refused by name
    full = run_case(run_of(gpt_row(recompute__granularity="full", recompute__modules=["layernorm"])), "h100_80g_nvl8")
    assert full.input is None and "recompute.modules" in dict(full.unsupported)
    whole = run_case(run_of(gpt_row(recompute__granularity="selective", recompute__modules=["mlp"])), "h100_80g_nvl8")
    assert whole.input is None and "not modelled yet" in dict(whole.unsupported)["recompute.modules"]
    unknown = run_case(run_of(gpt_row(recompute__granularity="selective", recompute__modules=["layernorm", "attn"])),
                       "h100_80g_nvl8")
    assert unknown.invalid[0] == "recompute.modules" and "execution.recompute_modules.1" in unknown.invalid[1]


def test_recomputed_layers_are_the_blocks_of_each_chunk_recomputed(monkeypatch):
    # a stack that sets recompute_method: block with recompute_num_layers (Megatron-Bridge's, NeMo's, SimuMax's)
    monkeypatch.setitem(STACKS, REPOSITORY, Stack("materialized", True, "test stack", recompute_layers_method="block"))
    # 96 layers over PP 8 x 6 chunks: 12 per stage, 2 per chunk; 1 recomputed of each
    some = run_case(run_of(gpt_row(recompute__granularity="full", recompute__layers=1, parallel__vp=6)),
                    "h100_80g_nvl8")
    assert (some.input.execution.recompute, some.input.execution.recompute_blocks) == ("full", 1)
    none = run_case(run_of(gpt_row(recompute__granularity="full", recompute__layers=0)), "h100_80g_nvl8")
    assert none.input.execution.recompute == "none"
    other = run_case(run_of(gpt_row(recompute__granularity="selective", recompute__layers=2)), "h100_80g_nvl8")
    assert other.input is None and "recompute.layers" in dict(other.unsupported)
    # PP 8 x 12 chunks: one block per chunk, so 2 recomputes every block (full recomputation)
    every = run_case(run_of(gpt_row(recompute__granularity="full", recompute__layers=2)), "h100_80g_nvl8")
    assert (every.input.execution.recompute, every.input.execution.recompute_blocks) == ("full", 2)


def test_recomputed_layers_of_a_stack_whose_method_is_not_known_are_refused(plain_stack):
    # recompute_method uniform with N recomputes every layer, block the first N of each chunk: not guessed
    case = run_case(run_of(gpt_row(recompute__granularity="full", recompute__layers=1, parallel__vp=6)),
                    "h100_80g_nvl8")
    assert case.input is None and "recompute_method is not known" in dict(case.unsupported)["recompute.layers"]


def test_nemo_rows_overlap_the_data_parallel_sync_only_with_the_distributed_optimizer():
    """NeMo 2.0's comm-overlap callback: DP > 1 and the distributed optimizer (both, as its code reads); its Llama
    configs: no attention dropout. A dgxc-benchmarking row keeps its sync overlapped without the optimizer."""
    nemo = {"source__where": "NVIDIA/NeMo@03ec896 docs/source/performance/performance_summary.md",
            "extra": {"model_cite": "NVIDIA/NeMo@008df61 nemo/collections/llm/gpt/model/llama.py Llama3Config70B"}}
    with_optimizer = run_case(run_of(gpt_row(**nemo)), "h100_80g_nvl8")
    assert with_optimizer.unsupported == () and with_optimizer.input.execution.dp_overlap is True
    assert with_optimizer.input.model.attention_dropout == 0.0
    without = run_case(run_of(gpt_row(parallel__distributed_optimizer=False, **nemo)), "h100_80g_nvl8")
    assert without.input.execution.dp_overlap is False
    one_replica = run_case(run_of(gpt_row(system__num_gpus=64, parallel__dp=1, batch__gradient_accumulation=256,
                                          **nemo)), "h100_80g_nvl8")
    assert one_replica.input.execution.dp_overlap is False
    dgxc = {"source__where": "NVIDIA/dgxc-benchmarking@35a9 README.md", "parallel__distributed_optimizer": False}
    assert run_case(run_of(gpt_row(**dgxc)), "h100_80g_nvl8").input.execution.dp_overlap is True


@pytest.mark.parametrize("cite", [
    "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/deepseek/deepseek_provider.py DeepSeekV3ModelProvider",
    "NVIDIA/dgxc-benchmarking@8f5cbb3 nemotron/nemotron4-340b-synth.yaml (layernorm1p, squared-relu)",
    "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/qwen/qwen_provider.py Qwen3ModelProvider32B",
    "NVIDIA/dgxc-benchmarking@35a9aec llama3.1/llama3.1_405b.yaml (num_query_groups 16)",
])
def test_recipes_read_for_models_no_shared_row_runs_set_no_attention_dropout(plain_stack, cite):
    """Rows of other models (the withheld tables') cite their own recipe files: the ones read in the stack's code
    (DeepSeek's provider, Nemotron-4 340B's recipe, every Qwen provider) give dropout 0, never a refusal."""
    case = run_case(run_of(gpt_row(extra={"model_cite": cite})), "h100_80g_nvl8")
    assert "model.attention_dropout" not in dict(case.unsupported)
    assert case.input is not None and case.input.model.attention_dropout == 0.0


def test_every_stack_needs_the_flash_kernel():
    """The shipped stacks all run a fused attention kernel: until the case format has it, refused by name."""
    case = run_case(run_of(gpt_row(source__where="NVIDIA/dgxc-benchmarking@35a9 gpt3/README.md")), "h100_80g_nvl8")
    if not case_has_field("execution.attention_kernel"):
        assert "stack.attention_kernel" in dict(case.unsupported)
    else:
        assert case.input.execution.attention_kernel == "flash"


def test_model_names_never_reach_the_case(plain_stack):
    a = run_case(run_of(gpt_row()), "h100_80g_nvl8").input
    b = run_case(run_of(gpt_row(id="other", model__name="Anything else")), "h100_80g_nvl8").input
    assert a == b and "GPT" not in a.model_dump_json()


def _write_runs(tmp_path, rows) -> str:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"schema": "blueprinting.measured-runs.v0", "rows": rows}))
    return str(path)


CASE_YAML = """schema: blueprinting.case.v0
id: by-hand
system: h100_80g_nvl8
model: {hidden: 12288, feedforward: 49152, sequence_length: 2048, attention_heads: 96, head_size: 128, blocks: 96,
        vocabulary: 51200, tied_embeddings: true}
execution: {tensor_parallel: 8, pipeline_parallel: 8, data_parallel: 2, global_batch: 256, microbatch: 1,
            pipeline_interleaving: 12, datatype: bfloat16, recompute: none, tp_communication: rs_ag,
            optimizer_sharding: true, tp_overlap: ring, dp_overlap: true,
            network_tiers: {tensor: 0, pipeline: 1, data: 1}}
"""


def test_cli_estimates_a_row_as_its_case_file_and_reports_the_error(plain_stack, tmp_path, capsys):
    """The row's estimate is the estimate of the case written by hand; error_pct = 100 (total - 20) / 20."""
    bf16_profile = _profile_with_bfloat16(tmp_path)
    (tmp_path / "cases").mkdir()
    case_file = tmp_path / "case.yaml"
    case_file.write_text(CASE_YAML.replace("h100_80g_nvl8", bf16_profile))
    rows = _write_runs(tmp_path, [gpt_row(), gpt_row(id="mtp", model__mtp_layers=1)])
    status, out, err = run_cli(capsys, "--project", tmp_path, "estimate", case_file, "--json")
    assert status == 0, err
    by_hand = json.loads(out)[0]
    expected = {v: figures["total_s"] for v, figures in by_hand["views"].items()}
    status, out, err = run_cli(capsys, "--project", tmp_path, "estimate", "--runs", rows, "--system", bf16_profile,
                               "--output", tmp_path / "out.json")
    assert status == 0, err
    first, second = json.loads((tmp_path / "out.json").read_text())
    assert (first["status"], by_hand["status"]) == ("ok", "ok")
    assert first["total_s"] == expected["system_evidence"]
    assert first["views"]["peak_only"]["total_s"] == expected["peak_only"]
    assert first["error_pct"] == pytest.approx(100 * (expected["system_evidence"] - 20.0) / 20.0)
    assert second["status"] == "unsupported" and second["reason"].startswith("model.mtp_layers: ")
    assert second["total_s"] is None and second["measured_s"] == 20.0
    assert "2 rows: 1 ok, 0 infeasible, 1 unsupported, 0 invalid" in out
    assert "unsupported, by the first field refused: model.mtp_layers 1" in out


def _profile_with_bfloat16(tmp_path) -> str:
    """The H100 profile with its float16 engines also as bfloat16 (the bf16 rows need a bfloat16 engine)."""
    import yaml

    from harness import locations

    source = locations.current().profile_path("h100_80g_nvl8")
    profile = yaml.safe_load(source.read_text())
    for family in ("matrix", "vector"):
        profile[family].setdefault("bfloat16", copy.deepcopy(profile[family]["float16"]))
    profile["name"] = "h100_test_bf16"
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "h100_test_bf16.yaml").write_text(yaml.safe_dump(profile))
    return "h100_test_bf16"


def test_auto_system_names_the_missing_profile(plain_stack, monkeypatch):
    """Every GPU of the schema has a data-sheet profile now; a row whose GPU's profile is missing (here GB300's
    renamed away) is unsupported naming the profile looked for."""
    monkeypatch.setitem(AUTO_PROFILES, "gb300", "gb300_absent")
    results = estimate_runs([run_of(gpt_row(system__gpu="gb300"))], "auto", "runs.json")
    assert results[0].status == "unsupported" and results[0].fields == ("system.gpu",)
    assert "'gb300_absent'" in results[0].reason


def test_auto_measured_prices_each_row_on_its_gpus_fitted_revision(plain_stack):
    """h100_sxm_80g -> h100_measured (MEASURED_PROFILES), b200 -> b200_measured (<gpu>_measured), a GPU without
    one: unsupported naming the profile it looked for."""
    h100, b200 = run_of(gpt_row()), run_of(gpt_row(id="b", system__gpu="b200"))
    auto, named = estimate_runs([h100, b200], "auto-measured", "r"), estimate_runs([h100], "h100_measured", "r")
    assert auto[0].totals_s == named[0].totals_s and auto[0].status == "ok"
    assert auto[1].totals_s == estimate_runs([b200], "b200_measured", "r")[0].totals_s
    assert auto[0].totals_s != estimate_runs([h100], "auto", "r")[0].totals_s
    missing = estimate_runs([run_of(gpt_row(system__gpu="a100_sxm_80g"))], "auto-measured", "r")[0]
    assert missing.fields == ("system.gpu",) and "'a100_sxm_80g_measured'" in missing.reason


def test_auto_measured_prices_blackwell_ultra_on_its_transferred_revision(plain_stack):
    """B300 and GB300 (no measured run) -> b300_transferred, gb300_transferred; the summary counts them. The
    B300 data sheet has B200's bf16 rates, HBM bandwidth and NVLink, and twice its scale-out bandwidth: the
    128-GPU row's data-parallel traffic crosses nodes, so it is faster on B300, never slower."""
    b300, b200 = run_of(gpt_row(system__gpu="b300")), run_of(gpt_row(system__gpu="b200"))
    gb300 = run_of(gpt_row(id="g", system__gpu="gb300", system__gpus_per_nvlink_domain=72))
    auto = estimate_runs([b300, gb300], "auto-measured", "r")
    assert [r.transferred for r in auto] == ["b300_transferred", "gb300_transferred"]
    assert auto[0].totals_s == estimate_runs([b300], "b300_transferred", "r")[0].totals_s
    assert auto[1].totals_s == estimate_runs([gb300], "gb300_transferred", "r")[0].totals_s
    on_b200 = estimate_runs([b200], "auto-measured", "r")[0]
    assert on_b200.transferred is None
    assert auto[0].totals_s["system_evidence"] < on_b200.totals_s["system_evidence"]
    assert ("estimated on transferred evidence (a sibling's fitted values, fitted to no run of the GPU): "
            "b300_transferred 1, gb300_transferred 1") in summary(auto)
    assert not any("transferred" in line for line in summary([on_b200]))
    # one node (8 GPUs, no scale-out traffic, memory not binding): B300 prices it as B200, to the last bit
    node = dict(system__num_gpus=8, model__layers=8, parallel__pp=1, parallel__vp=None, parallel__dp=1,
                batch__global_batch=8, batch__gradient_accumulation=8)
    ultra = estimate_runs([run_of(gpt_row(system__gpu="b300", **node))], "auto-measured", "r")[0]
    blackwell = estimate_runs([run_of(gpt_row(system__gpu="b200", **node))], "auto-measured", "r")[0]
    assert ultra.status == blackwell.status == "ok" and ultra.totals_s == blackwell.totals_s


def test_gemms_in_a_datatype_no_run_fitted_are_said_unchecked(plain_stack):
    """No shared run is in nvfp4, so every revision's float4 engine is the data sheet's curve: such a row is
    estimated and says so; its bf16 twin, and the same row on the data sheet itself, say nothing."""
    fp4 = run_of(gpt_row(system__gpu="b200", precision="nvfp4"))
    bf16 = run_of(gpt_row(system__gpu="b200"))
    on_revision = estimate_runs([fp4, bf16], "auto-measured", "r")
    assert [r.unfitted_gemms for r in on_revision] == ["float4", None]
    assert on_revision[0].status == "ok" and on_revision[0].reason == (
        "precision: b200_measured prices float4 GEMMs with the data sheet's curve (no measured run in float4 "
        "fitted it): unchecked")
    assert ("estimated with GEMMs no measured run fitted (the data sheet's curve, unchecked): float4 1"
            in summary(on_revision))
    assert estimate_runs([fp4], "b300_transferred", "r")[0].unfitted_gemms == "float4"
    assert estimate_runs([fp4], "auto", "r")[0].unfitted_gemms is None  # a data sheet fits nothing


def test_a_larger_nvlink_domain_than_the_profile_is_refused(plain_stack):
    results = estimate_runs([run_of(gpt_row(system__gpus_per_nvlink_domain=72))], "h100_80g_nvl8", "runs.json")
    assert results[0].fields == ("system.gpus_per_nvlink_domain",) and "holds 8" in results[0].reason


def test_summary_mape_and_bias_by_hand():
    """Errors +10 % and -20 % on one GPU: MAPE 15 %, bias -5 %; the family is the name's first word."""
    a, b = run_of(gpt_row()), run_of(gpt_row(id="b", model__name="Llama 3 8B", measured__iteration_s=10.0))
    results = [RowResult(a, "ok", None, {"peak_only": 22.0}), RowResult(b, "ok", None, {"peak_only": 8.0})]
    assert results[0].error_pct("peak_only") == pytest.approx(10.0)
    assert results[1].error_pct("peak_only") == pytest.approx(-20.0)
    text = "\n".join(summary(results))
    assert "peak_only: all n=  2  MAPE   15.0 %  bias    -5.0 %" in text
    assert "gpu       h100_sxm_80g   n=  2  MAPE   15.0 %  bias    -5.0 %" in text
    assert "family    GPT            n=  1  MAPE   10.0 %  bias   +10.0 %" in text
    assert (family(a), family(b)) == ("GPT", "Llama")


@pytest.mark.parametrize("change, field", [
    ({"parallel__tp": "4"}, "rows.0.parallel.tp"),
    ({"parallel__dp": 4}, "rows.0"),  # TP x PP x CP x DP != num_gpus
    ({"model__unknown": 1}, "rows.0.model.unknown"),
    ({"precision": "fp6"}, "rows.0.precision"),
    ({"measured__iteration_s": -1.0}, "rows.0.measured.iteration_s"),
    ({"measured__iteration_s": 5e-324}, "rows.0.measured.iteration_s"),  # its error against an estimate: inf
])
def test_bad_rows_are_one_line_naming_file_and_field(tmp_path, capsys, change, field):
    path = _write_runs(tmp_path, [gpt_row(**change)])
    status, out, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto")
    one_error_line(status, err, path, field)


def test_duplicate_ids_and_missing_system_are_errors(tmp_path, capsys):
    path = _write_runs(tmp_path, [gpt_row(), gpt_row()])
    one_error_line(*run_cli(capsys, "estimate", "--runs", path, "--system", "auto")[::2], path, "rows.1.id")
    one_error_line(*run_cli(capsys, "estimate", "--runs", path)[::2], "--system")


def test_the_shared_rows_read():
    rows = read_runs(shared_reference("measurements/modern/runs-train.json"))
    assert len(rows) == 142


def test_every_recipe_the_shared_rows_cite_is_read():
    """No shared row is refused for want of a recipe fact: each file its extra.model_cite names is in RECIPES."""
    rows = read_runs(shared_reference("measurements/modern/runs-train.json"))
    assert {recipe_file(run) for run in rows} <= set(RECIPES)


NEMOTRON = {"model_cite": "NVIDIA/dgxc-benchmarking@35a9 nemotron/nemotron4-15b-synth.yaml (rotary_percentage 0.5)"}


def test_a_partial_rotary_embedding_is_rope_only_under_the_fused_kernel(plain_stack):
    """Nemotron-4's recipe runs TE's fused rotary kernel (apply_rope_fusion: it copies the unrotated half, so it
    moves all of Q and K): position rope. GPT-3's recipe states no fused kernel: refused by name."""
    partial = {"model__position_embedding": "rope (50% of head dim)"}
    case = run_case(run_of(gpt_row(extra=NEMOTRON, **partial)), "h100_80g_nvl8")
    assert "model.position_embedding" not in dict(case.unsupported)
    if case.input is not None:
        assert case.input.model.position == "rope"
    refused = dict(run_case(run_of(gpt_row(**partial)), "h100_80g_nvl8").unsupported)
    assert "fused rotary kernel" in refused["model.position_embedding"]
    other = dict(run_case(run_of(gpt_row(extra=NEMOTRON, model__position_embedding="rope (25% of head dim)")),
                          "h100_80g_nvl8").unsupported)
    assert "no case equivalent" in other["model.position_embedding"]


def test_evidence_import_runs_writes_the_rows_of_one_gpu_as_iteration_records(plain_stack, tmp_path, capsys):
    rows = _write_runs(tmp_path, [gpt_row(), gpt_row(id="mtp", model__mtp_layers=1),
                                  gpt_row(id="b200", system__gpu="b200", measured__iteration_s=9.5)])
    out = tmp_path / "corpus.jsonl"
    status, printed, err = run_cli(capsys, "evidence", "import", "runs", rows, "--gpu", "h100_sxm_80g",
                                   "--output", out)
    assert status == 0, err
    assert "1 iteration records" in printed and "left out 1: model.mtp_layers" in printed
    assert "left out 1: other GPU" in printed
    from harness.measurements.corpus import read_corpus

    corpus = read_corpus(out)
    (record,) = corpus.records
    assert record.id == "runs.json:rows.0" and record.measured_iteration_s == 20.0
    assert (record.model.hidden, record.model.blocks, record.model.vocabulary) == (12288, 96, 51200)
    e = record.execution
    assert (e.tensor_parallel, e.pipeline_parallel, e.data_parallel, e.tp_overlap) == (8, 8, 2, "ring")
    assert corpus.header.name == "runs-h100_sxm_80g"
    status, printed, err = run_cli(capsys, "evidence", "import", "runs", rows, "--gpu", "gb200", "--output", out)
    one_error_line(status, err, rows, "rows", "other GPU 3")


def test_a_case_no_pattern_prices_is_unsupported_naming_the_row_field(plain_stack, monkeypatch):
    """The estimate path's refusal of a valid case (UnsupportedFeatureError on execution.tp_overlap) is traced
    back to the row field the case field came from."""
    import harness.cases

    monkeypatch.setattr(harness.cases, "unsupported_features",
                        lambda shape, execution: [("execution.tp_overlap", "no form under TP overlap")])
    case = run_case(run_of(gpt_row()), "h100_80g_nvl8")
    assert case.input is None and case.invalid is None
    assert "no form under TP overlap" in dict(case.unsupported)["parallel.tp_comm_overlap"]


def test_a_layout_the_checks_do_not_model_yet_is_unsupported_not_invalid(monkeypatch):
    """Context parallelism with the flash kernel (every shipped stack's): harness.ir.checks refuses it as not
    modelled yet; the row is unsupported naming the stack's kernel, not invalid. Without that rule (or with a
    stack of today's materialized kernel) the row maps."""
    cp_row = gpt_row(parallel__cp=2, parallel__dp=1, batch__gradient_accumulation=256, parallel__tp_comm_overlap=False,
                     source__where="NVIDIA/dgxc-benchmarking@35a9 nemo_megatron/README_175b.md")
    if not (case_has_field("execution.context_parallel") and case_has_field("execution.attention_kernel")):
        pytest.skip("the case format lacks context parallelism or the attention kernel")
    case = run_case(run_of(cp_row), "h100_80g_nvl8")
    if case.input is None:
        assert case.invalid is None and "not modelled yet" in dict(case.unsupported)["stack.attention_kernel"]
    monkeypatch.setitem(STACKS, "NVIDIA/dgxc-benchmarking", Stack("materialized", False, "test"))
    e = run_case(run_of(cp_row), "h100_80g_nvl8").input.execution
    # CP spans TP x CP = 16 ranks: tier 1 of an 8-GPU domain
    assert (e.context_parallel, e.network_tiers.context, e.network_tiers.tensor) == (2, 1, 0)


def mla_row(**changes) -> dict:
    """The GPT row with DeepSeek-V3's latent attention in Megatron-Core's names (the shared SimuMax rows' form):
    qk_head_dim 128 (no position), qk_pos_emb_head_dim 64 (rotary), head_dim 128 (kv_channels), kv_heads null."""
    mla = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}
    return gpt_row(**{"model__mla": mla, "model__kv_heads": None, "model__attention": "mla",
                      "model__position_embedding": "rope (MLA decoupled rope dim 64)", "model__norm": "rmsnorm",
                      "model__mlp": "swiglu",
                      "parallel__tp_comm_overlap": False,
                      **changes})


def test_a_latent_attention_row_is_model_mla_with_the_query_key_head_width(plain_stack):
    case = run_case(run_of(mla_row()), "h100_80g_nvl8")
    assert case.unsupported == () and case.invalid is None, case
    mla = case.input.model.mla
    assert (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim) == (
        1536, 512, 128, 64, 128)
    assert case.input.model.head_size == 128 + 64  # the query/key head width, not the row's kv_channels
    # no query compression (DeepSeek-V2-Lite): null or 0 in the row, absent in the case
    for rank in (None, 0):
        changed = mla_row(model__mla={"q_lora_rank": rank, "kv_lora_rank": 512, "qk_head_dim": 128,
                                      "qk_pos_emb_head_dim": 64, "v_head_dim": 128})
        assert run_case(run_of(changed), "h100_80g_nvl8").input.model.mla.q_lora_rank is None


def test_a_head_dim_that_is_neither_latent_width_is_refused_by_name(plain_stack):
    case = run_case(run_of(mla_row(model__head_dim=96)), "h100_80g_nvl8")
    assert case.input is None and "neither mla.qk_head_dim 128" in dict(case.unsupported)["model.head_dim"]
    # the decoupled rope of another width than the row's latent attention's
    wrong = run_case(run_of(mla_row(model__position_embedding="rope (MLA decoupled rope dim 32)")), "h100_80g_nvl8")
    assert "without model.mla of that qk_pos_emb_head_dim" in dict(wrong.unsupported)["model.position_embedding"]


def test_the_distributed_optimizer_shards_over_data_x_context(plain_stack):
    """Megatron-Core shards the distributed optimizer over the data x context group (intra_dp_cp_group), so a
    CP 2, DP 1 row with the distributed optimizer shards its optimizer state over its 2 context ranks; a DP 1,
    CP 1 row has nobody to shard with."""
    cp_row = gpt_row(parallel__cp=2, parallel__dp=1, parallel__tp_comm_overlap=False,
                     batch__gradient_accumulation=256)
    e = run_case(run_of(cp_row), "h100_80g_nvl8").input.execution
    assert (e.context_parallel, e.data_parallel, e.optimizer_sharding) == (2, 1, True)
    lone = gpt_row(parallel__cp=1, parallel__dp=1, parallel__pp=16, parallel__vp=6, parallel__tp_comm_overlap=False,
                   batch__gradient_accumulation=256)
    assert run_case(run_of(lone), "h100_80g_nvl8").input.execution.optimizer_sharding is False
    off = gpt_row(parallel__cp=2, parallel__dp=1, parallel__distributed_optimizer=False,
                  parallel__tp_comm_overlap=False, batch__gradient_accumulation=256)
    assert run_case(run_of(off), "h100_80g_nvl8").input.execution.optimizer_sharding is False


def test_a_stack_whose_moe_execution_the_case_cannot_state_estimates_its_moe_rows_but_never_fits_them(
        monkeypatch, tmp_path, capsys):
    """Megatron-Bridge's MoE rows (STACKS' moe_unfitted) are estimated (the case is priceable) but never a fitted
    corpus's record (their measurement moves 2x between releases with the same case): ``estimate --runs`` gives
    them figures and the reason ``never fitted: stack.moe_execution: ...``, ``evidence import runs`` leaves them
    out under that field; the same stack's dense rows, and another stack's MoE rows, are fitted as before."""
    bridge = STACKS["NVIDIA-NeMo/Megatron-Bridge"]
    assert bridge.moe_unfitted is not None and "28.2 s" in bridge.moe_unfitted
    monkeypatch.setitem(STACKS, REPOSITORY, Stack("materialized", True, "test stack", moe_unfitted="varies by release"))
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 6144, "shared_experts": 0, "shared_expert_ffn_hidden": 0,
           "dense_layers": 0, "layer_freq": 1, "capacity_factor": None, "token_dropping": False}
    row = gpt_row(id="moe", model__moe=moe, parallel__ep=2)
    case = run_case(run_of(row), "h100_80g_nvl8")
    assert case.input is not None and case.input.model.moe.experts == 8 and case.unsupported == ()
    assert case.unfitted == (("stack.moe_execution", "varies by release"),)
    assert run_case(run_of(gpt_row()), "h100_80g_nvl8").unfitted == ()
    (result,) = estimate_runs([run_of(row)], "h100_sxm_80g", "runs.json")
    assert result.status == "ok" and result.totals_s["system_evidence"] > 0
    assert result.reason == "never fitted: stack.moe_execution: varies by release"
    assert "estimated, never fitted (not in any fitted corpus): stack.moe_execution 1" in summary([result])
    rows = _write_runs(tmp_path, [gpt_row(), row])
    out = tmp_path / "corpus.jsonl"
    status, printed, err = run_cli(capsys, "evidence", "import", "runs", rows, "--gpu", "h100_sxm_80g",
                                   "--output", out)
    assert status == 0, err
    assert "1 iteration records" in printed and "left out 1: stack.moe_execution" in printed
    monkeypatch.setitem(STACKS, REPOSITORY, Stack("materialized", True, "test stack"))
    assert run_case(run_of(row), "h100_80g_nvl8").unfitted == ()

def test_a_fully_sharded_row_is_execution_fsdp_with_its_own_overlap(plain_stack):
    """Megatron-FSDP rows (parallel.fsdp) set execution.fsdp; their gathers overlap by FSDP's prefetch, so the
    stack's DP overlap is off; with TP overlap (not modelled with FSDP) the row is unsupported naming the row
    field, not invalid."""
    row = gpt_row(parallel__fsdp=True, parallel__tp_comm_overlap=False)
    case = run_case(run_of(row), "h100_80g_nvl8")
    assert case.unsupported == () and case.invalid is None, case
    e = case.input.execution
    assert (e.fsdp, e.dp_overlap, e.optimizer_sharding) == (True, False, True)
    assert run_case(run_of(gpt_row(parallel__tp_comm_overlap=False)), "h100_80g_nvl8").input.execution.fsdp is None
    overlapped = run_case(run_of(gpt_row(parallel__fsdp=True)), "h100_80g_nvl8")
    assert overlapped.invalid is None and "parallel.tp_comm_overlap" in dict(overlapped.unsupported)


# ------------------------------------------------------------------ hostile rows (robustness: one error line, nothing written)

MOE = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 6144, "shared_experts": 0, "shared_expert_ffn_hidden": 0,
       "dense_layers": 0, "layer_freq": 1, "capacity_factor": 1.0, "token_dropping": True}
MLA = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128}


def numeric_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field of the row schema whose value is a number (``int`` or ``float``, optional or not), descending
    into every section and feature object (moe, mla)."""
    import typing

    out = []
    for name, info in model.model_fields.items():
        kinds = [k for k in (typing.get_args(info.annotation) or (info.annotation,)) if k is not type(None)]
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out += numeric_fields(kind, f"{prefix}{name}.")
        if any(kind in (int, float) for kind in kinds):
            out.append(prefix + name)
    return out


NUMERIC_FIELDS = numeric_fields(MeasuredRun)


def test_the_numeric_fields_are_every_number_of_the_schema(tmp_path):
    """The walk finds the numbers of every section (so the refusal test below covers the schema, not a few), and
    the row the refusal test starts from, with every feature object set, is a valid row."""
    (run,) = read_runs(_write_runs(tmp_path, [gpt_row(model__moe=dict(MOE), model__mla=dict(MLA))]))
    assert run.model.moe.capacity_factor == 1.0 and run.model.mla.kv_lora_rank == 512
    # system 2, model 11, moe 8, mla 5, parallel 7, batch 3, recompute 1, measured 1 (counted by hand)
    assert len(NUMERIC_FIELDS) == 38
    for field in ("measured.iteration_s", "model.moe.capacity_factor", "model.mla.q_lora_rank", "parallel.etp",
                  "system.num_gpus", "batch.gradient_accumulation", "recompute.layers", "model.truncated_from"):
        assert field in NUMERIC_FIELDS
    assert "model.tied_embeddings" not in NUMERIC_FIELDS and "parallel.fsdp" not in NUMERIC_FIELDS


def _with(row: dict, field: str, value) -> dict:
    target = row
    *keys, last = field.split(".")
    for key in keys:
        target = target[key]
    target[last] = value
    return row


@pytest.mark.parametrize("value, shown", [(True, "got true (a boolean)"), (False, "got false (a boolean)"),
                                          ("12", 'got "12" (a string)')])
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_every_numeric_field_refuses_a_boolean_and_a_string(tmp_path, capsys, field, value, shown):
    """``measured.iteration_s: true`` was read as 1.0 s (error 933.7 %, exit 0) and ``"12.91"`` as 12.91: no
    coercion in any number of the row, through ``estimate --runs`` and ``evidence import runs``; nothing written."""
    row = gpt_row(model__moe=dict(MOE), model__mla=dict(MLA))
    path = _write_runs(tmp_path, [_with(row, field, value)])
    out = tmp_path / "out.json"
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", out)
    one_error_line(status, err, f"{path}: rows.0.{field}: ", shown)
    assert not out.exists()
    corpus = tmp_path / "corpus.jsonl"
    status, _, err = run_cli(capsys, "evidence", "import", "runs", path, "--gpu", "h100_sxm_80g", "--output", corpus)
    one_error_line(status, err, f"{path}: rows.0.{field}: ", shown)
    assert not corpus.exists()


def test_a_json_integer_is_a_number_where_a_number_is_due(tmp_path):
    """The documented format's numbers include JSON integers (one shared row's iteration_s is an integer): 20 is
    20.0 s, and a capacity factor of 1 is 1.0."""
    path = _write_runs(tmp_path, [gpt_row(measured__iteration_s=20, model__moe={**MOE, "capacity_factor": 1})])
    (run,) = read_runs(path)
    assert run.measured.iteration_s == 20.0 and type(run.measured.iteration_s) is float
    assert run.model.moe.capacity_factor == 1.0 and type(run.model.moe.capacity_factor) is float


@pytest.mark.parametrize("name", [" ", "\t\n", "\u3000"])
def test_a_blank_model_name_is_one_error_line_and_nothing_written(tmp_path, capsys, name):
    """A whitespace-only name crashed the summary (``name.split()[0]``: internal error IndexError, exit 3) after
    the output was written; it is the row's field now, before anything is estimated or written (an existing
    output is left as it was)."""
    path = _write_runs(tmp_path, [gpt_row(model__name=name)])
    out = tmp_path / "out.json"
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", out)
    one_error_line(status, err, f"{path}: rows.0.model.name: must hold a word", f"got {len(name)} blank character")
    assert not out.exists()
    out.write_text("old\n")
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", out)
    one_error_line(status, err, "rows.0.model.name")
    assert out.read_text() == "old\n"


def test_the_family_is_total():
    """The first word up to its first ``-``; a word starting with ``-`` is its own family, never an empty label;
    a name without a word (the schema refuses it: a copy skips validation) is no IndexError."""
    def named(name):
        return run_of(gpt_row(model__name=name))
    assert [family(named(n)) for n in ("Nemotron-4 15B", "-x y", "  Llama 3")] == ["Nemotron", "-x", "Llama"]
    run = named("GPT")
    blank = run.model_copy(update={"model": run.model.model_copy(update={"name": " "})})
    assert blank.model.name == " " and family(blank) == ""
    dash = run.model_copy(update={"model": run.model.model_copy(update={"name": "-"})})
    assert family(dash) == "-"


@pytest.mark.parametrize("name, message", [
    ("-", "'-' holds no letter or digit"),  # the summary's family was '-'
    ("-- ~", "'-- ~' holds no letter or digit"),
    ("\x1b[31mLlama", "must be text the summary can print: '\\x1b' at character 0 (category Cc)"),  # reached the
    ("Llama\u2028 3", "must be text the summary can print: '\\u2028' at character 5 (category Zl)"),  # terminal
    ("Llama\u202e 3", "must be text the summary can print: '\\u202e' at character 5 (category Cf)"),  # raw
])
def test_a_model_name_the_summary_cannot_show_as_a_family_is_one_error_line(tmp_path, capsys, name, message):
    path = _write_runs(tmp_path, [gpt_row(model__name=name)])
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", tmp_path / "o.json")
    one_error_line(status, err, f"{path}: rows.0.model.name: {message}")
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("name, family_name", [
    ("Llama\u00a03 8B", "Llama"),  # a no-break space, as tables copied from the web have it
    ("\u901a\u4e49\u5343\u95ee\u30007B", "\u901a\u4e49\u5343\u95ee"),  # an ideographic space splits words
    ("\U0001f999 Llama 3", "\U0001f999"), ("3B-Instruct", "3B"),
])
def test_real_model_names_are_accepted(name, family_name):
    """Review: the printable-text rule refused a no-break space and an ideographic space, and a first word without
    a letter (an emoji); each is a name a table prints."""
    assert family(run_of(gpt_row(model__name=name))) == family_name


@pytest.mark.parametrize("moe, message", [
    ({**MOE, "top_k": 9}, "top_k 9 exceeds experts 8"),  # was 'unsupported' (exit 0): no case, not a missing one
    ({**MOE, "shared_expert_ffn_hidden": 4096}, "shared_expert_ffn_hidden 4096 without shared experts"),
])
def test_an_impossible_mixture_of_experts_is_a_malformed_row(tmp_path, capsys, moe, message):
    path = _write_runs(tmp_path, [gpt_row(model__moe=moe)])
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", tmp_path / "o.json")
    one_error_line(status, err, f"{path}: rows.0.model.moe: {message}")
    assert read_runs_ok(_write_runs(tmp_path, [gpt_row(model__moe={**MOE, "top_k": 8, "shared_experts": 1,
                                                                    "shared_expert_ffn_hidden": 4096})]))


def read_runs_ok(path) -> bool:
    (run,) = read_runs(path)
    return run.model.moe.top_k == run.model.moe.experts == 8


def test_a_summary_that_fails_writes_no_output(plain_stack, tmp_path, capsys, monkeypatch):
    """The summary is computed before the output is written: when it fails, no output file is created."""
    from harness.errors import InputError
    from harness.measurements import runs_estimate

    def failing(results):
        assert [r.status for r in results] == ["ok"]
        raise InputError("runs.json", "rows.0.model.name", "the summary failed")

    monkeypatch.setattr(runs_estimate, "summary", failing)
    out = tmp_path / "out.json"
    status, _, err = run_cli(capsys, "estimate", "--runs", _write_runs(tmp_path, [gpt_row()]), "--system",
                             "h100_sxm_80g", "--output", out)
    one_error_line(status, err, "runs.json: rows.0.model.name: the summary failed")
    assert not out.exists()


@pytest.mark.parametrize("system, message", [("nope", "no evidence profile named 'nope'"),
                                             ("../x", "'../x' is not an evidence profile name")])
def test_an_unknown_system_is_refused_up_front_as_for_cases(tmp_path, capsys, system, message):
    """``--runs --system nope`` exited 0 with every row unsupported (``system.gpu: no evidence profile``); it is the
    case path's error now, the same line, and nothing is written."""
    path = _write_runs(tmp_path, [gpt_row()])
    out = tmp_path / "out.json"
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", system, "--output", out)
    one_error_line(status, err, f"error: --system: system: {message}")
    assert not out.exists()
    status, _, case_err = run_cli(capsys, "estimate", "megatron-22B_full", "--system", system)
    assert (status, case_err) == (2, err)


def test_an_invalid_row_makes_the_exit_status_1_and_the_rest_are_estimated(plain_stack, tmp_path, capsys):
    """The batch's rule: an invalid row (5 key/value heads of 96) is its entry, the other rows are estimated, the
    list is written and the exit status is 1 (it was 0); unsupported rows alone exit 0."""
    out = tmp_path / "out.json"
    rows = _write_runs(tmp_path, [gpt_row(), gpt_row(id="kv", model__kv_heads=5, model__attention="gqa")])
    status, printed, err = run_cli(capsys, "estimate", "--runs", rows, "--system", "h100_sxm_80g", "--output", out)
    assert status == 1, err
    ok, invalid = json.loads(out.read_text())
    assert (ok["status"], ok["reason"], invalid["id"], invalid["status"]) == ("ok", None, "kv", "invalid")
    assert invalid["reason"].startswith("model.kv_heads: 5 does not divide attention_heads=96")
    assert invalid["total_s"] is None and ok["total_s"] > 0
    assert "2 rows: 1 ok, 0 infeasible, 0 unsupported, 1 invalid" in printed and "Traceback" not in err
    rows = _write_runs(tmp_path, [gpt_row(), gpt_row(id="mtp", model__mtp_layers=1)])
    status, printed, err = run_cli(capsys, "estimate", "--runs", rows, "--system", "h100_sxm_80g", "--output", out)
    assert status == 0, err
    assert "2 rows: 1 ok, 0 infeasible, 1 unsupported, 0 invalid" in printed


@pytest.mark.parametrize("factor, message", [(0, "Input should be greater than 0, got 0 (an integer)"),
                                             (-0.0, "Input should be greater than 0, got -0.0 (a number)"),
                                             (65536.5, "Input should be less than or equal to 65536")])
def test_the_capacity_factor_has_the_case_formats_bounds(tmp_path, capsys, factor, message):
    """``capacity_factor: 0`` passed the row schema (``ge=0``) and came back as an invalid row from the case
    format (> 0, <= 2^16); it is the row file's field error now, nothing written. The bounds themselves are
    rows."""
    out = tmp_path / "out.json"
    path = _write_runs(tmp_path, [gpt_row(model__moe={**MOE, "capacity_factor": factor})])
    status, _, err = run_cli(capsys, "estimate", "--runs", path, "--system", "auto", "--output", out)
    one_error_line(status, err, f"{path}: rows.0.model.moe.capacity_factor: {message}")
    assert not out.exists()
    for bound in (1e-3, 65536):
        (run,) = read_runs(_write_runs(tmp_path, [gpt_row(model__moe={**MOE, "capacity_factor": bound})]))
        assert run.model.moe.capacity_factor == bound


@pytest.mark.parametrize("gpu", ["../x", "H100_SXM_80G", "h100"])
def test_evidence_import_runs_names_a_bad_gpu_as_the_gpu_option(tmp_path, capsys, gpu):
    """``--gpu ../x`` was reported as ``--name: 'runs-../x' is not a profile name`` (a --name nobody gave, built
    from --gpu); --gpu is checked first against the schema's system.gpu values; nothing written."""
    out = tmp_path / "corpus.jsonl"
    status, _, err = run_cli(capsys, "evidence", "import", "runs", _write_runs(tmp_path, [gpt_row()]), "--gpu", gpu,
                             "--output", out)
    one_error_line(status, err, f"error: <command line>: --gpu: {gpu!r} is not a system.gpu of the measured-runs "
                                "schema (a100_sxm_80g, h100_sxm_80g, b200, b300, gb200, gb300)")
    assert "--name" not in err and not out.exists()


def test_a_not_modelled_reason_names_its_field_once():
    """A row under CP 2 (a flash-attention stack) with a 64-token window: a flash window under CP is not modelled
    yet, refused by the case check on the row's own field; the reason said 'model.sliding_window:
    model.sliding_window: ...' (hostile-input probe)."""
    if not case_has_field("model.sliding_window"):
        pytest.skip("the case format lacks sliding windows")
    row = gpt_row(parallel__cp=2, parallel__dp=1, batch__gradient_accumulation=256, parallel__tp_comm_overlap=False,
                  source__where="NVIDIA/dgxc-benchmarking@35a9 nemo_megatron/README_175b.md", model__sliding_window=64)
    case = run_case(run_of(row), "h100_80g_nvl8")
    why = dict(case.unsupported)["model.sliding_window"]
    assert case.input is None and "not modelled yet" in why and not why.startswith("model.sliding_window")
