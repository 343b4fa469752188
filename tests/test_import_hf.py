"""``harness import hf``: Hugging Face configs (modelled on the public Llama-3-8B, Mistral-7B-v0.1, Qwen2-7B
and Qwen3-8B config.json files) as case model sections; every expected value is read off the config by hand.

The end-to-end checks hold in both states of the case format: a feature whose case field exists is in the
written case, one that does not exist yet is the one error line naming the config field.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from harness.cases import case_has_field
from harness.errors import InputError
from harness.interop.case_document import printable
from harness.interop.hf_config import translate_config
from conftest import one_error_line, run_cli

LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
             "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
             "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
             "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
             "use_cache": True, "vocab_size": 128256}
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
              "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
              "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000}
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
            "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
            "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
            "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.37.2", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 152064}
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
            "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
            "use_sliding_window": False, "vocab_size": 151936}

COMMON = {"model.norm": "rmsnorm", "model.position": "rope", "model.mlp": "swiglu", "model.tied_embeddings": False}
EXPECTED = {
    "llama3-8b": (LLAMA3_8B, 8192, {**COMMON, "model.hidden": 4096, "model.feedforward": 14336, "model.blocks": 32,
                                    "model.attention_heads": 32, "model.kv_heads": 8, "model.head_size": 128,
                                    "model.vocabulary": 128256, "model.attention_dropout": 0.0}),
    # sliding_window 4096 < S = 8192: windowed attention
    "mistral-7b": (MISTRAL_7B, 8192, {**COMMON, "model.hidden": 4096, "model.feedforward": 14336, "model.blocks": 32,
                                      "model.attention_heads": 32, "model.kv_heads": 8, "model.head_size": 128,
                                      "model.vocabulary": 32000, "model.sliding_window": 4096}),
    # head size 3584 / 28 = 128; QKV bias implied; sliding_window inactive (use_sliding_window false)
    "qwen2-7b": (QWEN2_7B, 4096, {**COMMON, "model.hidden": 3584, "model.feedforward": 18944, "model.blocks": 28,
                                  "model.attention_heads": 28, "model.kv_heads": 4, "model.head_size": 128,
                                  "model.vocabulary": 152064, "model.qkv_bias": True, "model.attention_dropout": 0.0}),
    # head_dim 128 != hidden / heads (4096 / 32 = 128 here too, given explicitly); QK-norm implied
    "qwen3-8b": (QWEN3_8B, 4096, {**COMMON, "model.hidden": 4096, "model.feedforward": 12288, "model.blocks": 36,
                                  "model.attention_heads": 32, "model.kv_heads": 8, "model.head_size": 128,
                                  "model.vocabulary": 151936, "model.qk_norm": True, "model.attention_dropout": 0.0}),
}

EXEC = {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 8, "global_batch": 128, "microbatch": 1,
        "datatype": "float16", "network_tiers": {"tensor": 0, "pipeline": 0, "data": 0}}


#: docs/examples/hf/h100_dp8.yaml: Llama-3-8B at S = 8192 fits on b200 (estimate exits 0).
FEASIBLE_EXEC = {**EXEC, "datatype": "bfloat16", "attention_kernel": "flash", "optimizer_sharding": True}


def fields(config, sequence_length, **kw) -> dict:
    return {path: value for path, (value, _) in translate_config(config, "c.json", sequence_length, **kw).fields.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_architecture_translates_to_the_hand_read_fields(name):
    config, sequence_length, expected = EXPECTED[name]
    draft = translate_config(config, "c.json", sequence_length)
    assert fields(config, sequence_length) == expected and draft.refusals == []


def test_head_dim_independent_of_hidden_over_heads():
    """Qwen3-0.6B-like: hidden 1024, 16 heads, head_dim 128 (not 1024 / 16 = 64)."""
    config = {**QWEN3_8B, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8}
    assert fields(config, 4096)["model.head_size"] == 128
    del config["head_dim"]
    assert fields(config, 4096)["model.head_size"] == 64


def test_multi_head_sets_no_kv_heads_and_multi_query_is_todays_attention_or_kv_heads():
    assert "model.kv_heads" not in fields({**LLAMA3_8B, "num_key_value_heads": 32}, 8192)
    assert "model.kv_heads" not in fields({k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}, 8192)
    # null (transformers: the heads) is multi-head too; it was an internal error (None in a modulo)
    null = translate_config({**LLAMA3_8B, "num_key_value_heads": None}, "c.json", 8192)
    assert "model.kv_heads" not in fields({**LLAMA3_8B, "num_key_value_heads": None}, 8192) and null.refusals == []
    one = fields({**LLAMA3_8B, "num_key_value_heads": 1}, 8192)
    assert one.get("model.kv_heads") == 1 or one.get("execution.attention") == "multiquery"


def test_notes_say_what_is_accepted_without_effect():
    draft = translate_config({**LLAMA3_8B, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "c.json", 16384)
    notes = "\n".join(draft.notes)
    assert "rope_scaling: 'llama3' rescales the rotary frequencies" in notes
    assert "max_position_embeddings: the sequence length 16384 exceeds the model's 8192 positions" in notes
    assert "rope_theta" in notes and "torch_dtype" in notes
    mistral = translate_config(MISTRAL_7B, "c.json", 4096)
    assert "sliding_window: 4096 >= the sequence length 4096: no effect" in mistral.notes
    assert "model.sliding_window" not in fields(MISTRAL_7B, 4096)


@pytest.mark.parametrize("config, field", [
    ({**QWEN2_7B, "use_sliding_window": True}, "use_sliding_window"),
    ({**LLAMA3_8B, "attention_bias": True}, "attention_bias"),
    ({**LLAMA3_8B, "mlp_bias": True}, "mlp_bias"),
    ({**LLAMA3_8B, "hidden_act": "relu"}, "hidden_act"),
    ({**QWEN3_8B, "layer_types": ["sliding_attention"] * 36}, "layer_types"),
    ({**LLAMA3_8B, "architectures": ["MistralForCausalLM"]}, "architectures"),
])
def test_values_no_case_field_holds_are_refused(config, field):
    assert field in dict(translate_config(config, "c.json", 8192).refusals)


def test_a_window_under_context_parallelism_is_refused():
    assert "sliding_window" in dict(translate_config(MISTRAL_7B, "c.json", 8192, context_parallel=2).refusals)


def _files(tmp_path, config, execution=EXEC):
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "exec.yaml").write_text(yaml.safe_dump(execution))
    return tmp_path / "config.json", tmp_path / "exec.yaml"


def _import(capsys, tmp_path, config, sequence_length=8192, execution=EXEC):
    cfg, exe = _files(tmp_path, config, execution)
    out = tmp_path / "case.yaml"
    status, _, err = run_cli(capsys, "import", "hf", "--config", cfg, "--execution", exe, "--sequence-length",
                             sequence_length, "--system", "h100_80g_nvl8", "-o", out)
    return status, err, out, cfg


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_import_writes_the_case_or_names_the_first_missing_field(capsys, tmp_path, name):
    config, sequence_length, expected = EXPECTED[name]
    status, err, out, cfg = _import(capsys, tmp_path, config, sequence_length)
    missing = [path for path in expected if not case_has_field(path)]
    if missing:
        one_error_line(status, err, cfg, "needs case field")
        assert not out.exists()
    else:
        assert status == 0, err
        case = yaml.safe_load(out.read_text())
        for path, value in expected.items():
            section, key = path.split(".")
            assert case[section][key] == value, path
        assert case["model"]["sequence_length"] == sequence_length and case["id"].startswith("hf/")


@pytest.mark.parametrize("config, field, needle", [
    ({**{k: v for k, v in LLAMA3_8B.items() if k != "architectures"}, "model_type": "mixtral",
      "num_local_experts": 8, "num_experts_per_tok": 2, "new_router": 1}, "new_router", "unknown field"),
    ({**QWEN3_8B, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128,
      "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 0}, "decoder_sparse_step",
     "must be a positive integer"),
    ({"model_type": "gpt2"}, "model_type", '"gpt2" is not an architecture'),
    ({**LLAMA3_8B, "new_thing": 1}, "new_thing", "unknown field"),
    ({**LLAMA3_8B, "hidden_size": "4096"}, "hidden_size", "must be int"),
    ({**LLAMA3_8B, "num_hidden_layers": True}, "num_hidden_layers", "must be int"),
    ({**LLAMA3_8B, "attention_dropout": 1.5}, "attention_dropout", "probability"),
    ({k: v for k, v in LLAMA3_8B.items() if k != "vocab_size"}, "vocab_size", "missing"),
    # a model_type that is not a string is refused as one before it is looked up (a list or a mapping is
    # unhashable: it was an internal error)
    ({**LLAMA3_8B, "model_type": ["llama"]}, "model_type", "must be str, got a list of 1"),
    ({**LLAMA3_8B, "model_type": {"a": 1}}, "model_type", "must be str, got a mapping"),
    ({**LLAMA3_8B, "model_type": None}, "model_type", "must not be null"),
    ({k: v for k, v in LLAMA3_8B.items() if k != "model_type"}, "model_type", "required field is missing"),
    ({**LLAMA3_8B, "hidden_act": ["silu"]}, "hidden_act", "must be str, got a list of 1"),
    ({**LLAMA3_8B, "architectures": {"LlamaForCausalLM": 1}}, "architectures", "must be list, got a mapping"),
    # a positive value over the bound says the bound (it said "must be a positive integer, got 10000000000")
    ({**LLAMA3_8B, "num_attention_heads": 10**10}, "num_attention_heads",
     "must be a positive integer of at most 2^31, got 10000000000 (an integer)"),
    ({**LLAMA3_8B, "max_position_embeddings": -1}, "max_position_embeddings",
     "must be a positive integer of at most 2^31, got -1 (an integer)"),
])
def test_bad_or_unpriced_configs_are_one_line_naming_the_field(capsys, tmp_path, config, field, needle):
    status, err, out, cfg = _import(capsys, tmp_path, config)
    one_error_line(status, err, f"error: {cfg}: {field}: ", needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "exec.yaml"]  # nothing written


def test_a_huge_bad_value_is_shown_shortened():
    with pytest.raises(InputError) as raised:
        translate_config({**LLAMA3_8B, "model_type": "x" * 100_000}, "c.json", 8192)
    # the input rules' way of showing a value (harness.inputs.quoted, describe): 37 characters and "..."
    assert str(raised.value) == (f"c.json: model_type: \"{'x' * 37}...\" is not an architecture "
                                 "the importer knows (llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
                                 "deepseek_v3)")
    with pytest.raises(InputError) as raised:
        translate_config({**LLAMA3_8B, "hidden_size": [0] * 100_000}, "c.json", 8192)
    assert str(raised.value) == "c.json: hidden_size: must be int, got a list of 100000"


def test_a_bad_execution_section_names_its_file_and_field(capsys, tmp_path):
    status, err, out, _ = _import(capsys, tmp_path, LLAMA3_8B, execution={**EXEC, "tensor_parallel": "2"})
    one_error_line(status, err, "exec.yaml", "tensor_parallel")
    assert not out.exists()


@pytest.mark.parametrize("system", ["h100_sxm_80g", "b200", "gb200_nvl72"])
def test_the_llama3_8b_example_imports_and_estimates_on_each_modern_profile(capsys, tmp_path, system):
    """docs/examples/hf: the Llama-3-8B config imported and estimated. Matrix work of one block by hand:
    linear 2 x 3 x 8192 tokens x (4096 x 4096 (Q) + 2 x 4096 x 1024 (K, V) + 4096 x 4096 (O) + 3 x 4096 x
    14336 (SwiGLU)) = 1.0720238370816e13; attention 3 x 2 products x 2 x 8192^2 x 128 x 32 = 3.298534883328e12."""
    if not all(case_has_field(p) for p in EXPECTED["llama3-8b"][2]):
        pytest.skip("the case format lacks a modern-dense field")
    from conftest import ROOT

    out = tmp_path / "case.yaml"
    status, _, err = run_cli(capsys, "import", "hf", "--config", ROOT / "docs/examples/hf/llama3-8b.config.json",
                             "--execution", ROOT / "docs/examples/hf/h100_dp8.yaml", "--sequence-length", 8192,
                             "--system", system, "-o", out)
    assert status == 0, err
    status, printed, err = run_cli(capsys, "estimate", out, "--json")
    assert status == 0, err
    (entry,) = json.loads(printed)
    assert entry["status"] == "ok"
    for view in entry["views"].values():
        assert view["workload"]["matrix_flops_per_block"] == {"linear": 10720238370816.0,
                                                              "attention": 3298534883328.0}


# --- mixtures of experts and latent attention (issue 21 item 5) ---------------------------------------------
# Configs modelled on the public config.json files of Mixtral-8x7B-v0.1, Qwen1.5-MoE-A2.7B (qwen2_moe),
# Qwen3-30B-A3B and DeepSeek-V3 (num_nextn_predict_layers set to 0 where noted: the case format has no
# multi-token-prediction field yet); every expected value read off the config by hand.

MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
                "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
                "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False, "rms_norm_eps": 1e-05,
                "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
                "use_cache": True, "vocab_size": 32000}
QWEN15_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
              "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
              "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
              "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "transformers_version": "4.39.0.dev0", "use_cache": True,
              "use_sliding_window": False, "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
              "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
              "norm_topk_prob": False, "output_router_logits": False, "router_aux_loss_coef": 0.001}
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                 "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
                 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
                 "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
                 "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
                 "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
                 "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                 "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
                 "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
               "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}, "aux_loss_alpha": 0.001,
               "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
               "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
               "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
               "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
               "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
               "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1, "q_lora_rank": 1536,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                       "weight_block_size": [128, 128]},
               "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                                                       "mscale_all_dim": 1.0,
                                                       "original_max_position_embeddings": 4096, "type": "yarn"},
               "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
               "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
               "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280}
NO_MTP = {**DEEPSEEK_V3, "num_nextn_predict_layers": 0}

MOE_EXPECTED = {
    # every block MoE; the experts have the model's intermediate_size; softmax router (absent)
    "mixtral-8x7b": (MIXTRAL_8X7B, {
        **COMMON, "model.hidden": 4096, "model.feedforward": 14336, "model.blocks": 32, "model.attention_heads": 32,
        "model.kv_heads": 8, "model.head_size": 128, "model.vocabulary": 32000, "model.attention_dropout": 0.0,
        "model.moe": {"experts": 8, "top_k": 2, "expert_ffn": 14336}}),
    # 60 experts of 1408, top 4; one shared expert of 5632 (its gate noted); QKV bias (Qwen2); head 2048 / 16
    "qwen1.5-moe": (QWEN15_MOE, {
        **COMMON, "model.hidden": 2048, "model.feedforward": 5632, "model.blocks": 24, "model.attention_heads": 16,
        "model.head_size": 128, "model.vocabulary": 151936, "model.attention_dropout": 0.0, "model.qkv_bias": True,
        "model.moe": {"experts": 60, "top_k": 4, "expert_ffn": 1408, "shared_experts": 1, "shared_expert_ffn": 5632}}),
    # 128 experts of 768, top 8; QK-norm (Qwen3); head_dim 128 given
    "qwen3-30b-a3b": (QWEN3_30B_A3B, {
        **COMMON, "model.hidden": 2048, "model.feedforward": 6144, "model.blocks": 48, "model.attention_heads": 32,
        "model.kv_heads": 4, "model.head_size": 128, "model.vocabulary": 151936, "model.attention_dropout": 0.0,
        "model.qk_norm": True, "model.moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}}),
    # MLA (head_size 128 + 64); 3 leading dense blocks of 18432; 256 experts of 2048, top 8, one shared, sigmoid
    "deepseek-v3": (NO_MTP, {
        **COMMON, "model.hidden": 7168, "model.feedforward": 18432, "model.blocks": 61, "model.attention_heads": 128,
        "model.head_size": 192, "model.vocabulary": 129280, "model.attention_dropout": 0.0,
        "model.mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                      "v_head_dim": 128},
        "model.moe": {"experts": 256, "top_k": 8, "expert_ffn": 2048, "shared_experts": 1, "dense_layers": 3,
                      "router": "sigmoid"}}),
}


@pytest.mark.parametrize("name", sorted(MOE_EXPECTED))
def test_each_mixture_of_experts_translates_to_the_hand_read_fields(name):
    from harness.interop.hf_config import model_section
    from harness.ir.model import TransformerShape

    config, expected = MOE_EXPECTED[name]
    draft = translate_config(config, "c.json", 4096)
    assert fields(config, 4096) == expected and draft.refusals == []
    model, _ = model_section(draft, "c.json")  # the case fields exist: the section validates
    shape = TransformerShape(**model)
    assert shape.moe is not None and shape.moe.experts == expected["model.moe"]["experts"]


def test_every_routing_field_that_adds_no_work_is_named_in_one_note_line():
    notes = translate_config(NO_MTP, "c.json", 4096).notes
    for field in ("aux_loss_alpha", "ep_size", "n_group", "norm_topk_prob", "routed_scaling_factor", "seq_aux",
                  "topk_group", "topk_method"):
        assert sum(note.startswith(f"{field}: ") for note in notes) == 1, field
    assert any(n.startswith("rope_scaling: 'yarn'") for n in notes)
    assert "quantization_config" in notes[-1] and "auto_map" in notes[-1]  # the ignored fields' one line
    shared = translate_config(QWEN15_MOE, "c.json", 4096).notes
    assert any(n.startswith("shared_expert_intermediate_size: ") and "gate" in n for n in shared)


def test_a_deepseek_config_whose_blocks_are_all_dense_has_latent_attention_and_no_moe():
    config = {**NO_MTP, "num_hidden_layers": 3}  # first_k_dense_replace 3: every block dense
    found = fields(config, 4096)
    assert "model.moe" not in found and found["model.mla"]["kv_lora_rank"] == 512
    assert any(n.startswith("first_k_dense_replace: 3 >= num_hidden_layers 3") for n in
               translate_config(config, "c.json", 4096).notes)
    # DeepSeek-V2-Lite: no query compression (q_lora_rank null): the case's mla has none
    assert "q_lora_rank" not in fields({**config, "q_lora_rank": None}, 4096)["model.mla"]


@pytest.mark.parametrize("config, field, needle", [
    ({**QWEN3_30B_A3B, "decoder_sparse_step": 2}, "decoder_sparse_step", "(i + 1) % 2 == 0"),
    ({**QWEN3_30B_A3B, "mlp_only_layers": [0, 5]}, "mlp_only_layers", "dense MLPs on chosen blocks"),
    ({**NO_MTP, "scoring_func": "softplus"}, "scoring_func", "'softplus'"),
    ({**NO_MTP, "attention_bias": True}, "attention_bias", "true"),
])
def test_expert_values_no_case_field_holds_are_refused(config, field, needle):
    refusals = dict(translate_config(config, "c.json", 4096).refusals)
    assert field in refusals and needle in refusals[field]


def test_multi_token_prediction_needs_its_case_field():
    from harness.interop.hf_config import model_section

    draft = translate_config(DEEPSEEK_V3, "c.json", 4096)
    if case_has_field("model.mtp_layers"):
        assert model_section(draft, "c.json")[0]["mtp_layers"] == 1
    else:
        with pytest.raises(Exception, match="c.json: num_nextn_predict_layers: 1: needs case field model.mtp_layers"):
            model_section(draft, "c.json")


# --- file names and --id that are not plain text (hostile-input probe) --------------------------------------

@pytest.mark.parametrize("config_name, exec_name, shown", [
    ("c\x01.json", "exec.yaml", "c\\x01.json + exec.yaml"),  # a control character: YAML refused the comment
    (os.fsdecode(b"c\xff.json"), "exec.yaml", "c\\udcff.json + exec.yaml"),  # not UTF-8: the write failed
    ("c.json", "e\nid: x\u202e\u2028.yaml", "c.json + e\\nid: x\\u202e\\u2028.yaml"),  # one comment line
])
def test_a_file_name_that_is_not_printable_is_escaped_in_the_header_and_the_case_reads_back(
        capsys, tmp_path, config_name, exec_name, shown):
    from harness.cases import load_case

    cfg, exe, out = tmp_path / config_name, tmp_path / exec_name, tmp_path / "case.yaml"
    cfg.write_text(json.dumps(LLAMA3_8B))
    exe.write_text(yaml.safe_dump(FEASIBLE_EXEC))
    status, _, err = run_cli(capsys, "import", "hf", "--config", cfg, "--execution", exe, "--sequence-length",
                             8192, "--system", "b200", "-o", out)
    assert status == 0, err
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"# Imported from the Hugging Face config {shown} by `harness import hf`."
    assert text.splitlines()[2].startswith("schema: ")  # the header is two comment lines (the name's, one note)
    assert f"note: {printable(str(cfg))}: affect nothing priced: " in err and text.isascii()
    case = load_case(out)
    assert case.id == "hf/llama-32x4096/s8192" and case.model.vocabulary == 128256
    status, printed, err = run_cli(capsys, "estimate", out)
    assert status == 0 and printed.startswith("hf/llama-32x4096/s8192\n"), err
    # to standard output: the same text (UTF-8 encodable)
    status, printed, _ = run_cli(capsys, "import", "hf", "--config", cfg, "--execution", exe, "--sequence-length",
                                 8192, "--system", "b200")
    assert status == 0 and printed == text and printed.encode("utf-8")


def test_printable_escapes_exactly_the_characters_that_are_not_printable():
    assert printable("llama3-8b.config.json") == "llama3-8b.config.json"
    assert printable("modèle 模型 ü.json") == "modèle 模型 ü.json"  # printable non-ASCII kept
    assert printable("a\x01\t\x7f\x85\u00a0\u200b\u202e\u2028\ufeff\udcff\U000e0041z") == \
        "a\\x01\\t\\x7f\\x85\\xa0\\u200b\\u202e\\u2028\\ufeff\\udcff\\U000e0041z"


def test_case_text_makes_any_header_printable_comment_lines():
    """The safety net of every command that writes a case (import calculon and search name files too)."""
    from harness.cases import load_case, parse_case
    from harness.interop.case_document import case_text
    from conftest import CASES_DIR

    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    text = case_text("x/1", data, "from a\x01b.json\nnote: c\udcff\u2028d")
    assert text.startswith("# from a\\x01b.json\n# note: c\\udcff\\u2028d\nschema: ")
    assert parse_case(yaml.safe_load(text), "t").estimate_input() == data


@pytest.mark.parametrize("case_id, message", [
    ("a\nb", '"a\\nb" must not contain a control character: U+000A (category Cc)'),
    ("a\u202eb", '"a\\u202eb" must not contain a format (invisible or bidi) character: U+202E (category Cf)'),
    ("a" * 100_000, f'"{"a" * 37}..." must be 1 to 256 characters, got 100000'),
    (os.fsdecode(b"a\xffb"), '"a\\udcffb" must be UTF-8 text: U+DCFF is a lone surrogate (a byte that is not UTF-8, or half a '
                                'UTF-16 pair)'),
])
def test_a_bad_id_is_refused_first_naming_the_option_shortened_and_escaped(capsys, tmp_path, case_id, message):
    """Before the files are read (no note line; the config here is not even there), as the option: it was
    ``case <the whole id>: id`` after the notes, and a surrogate (a non-UTF-8 argument) wrote a case that did not
    read back."""
    cfg, exe = _files(tmp_path, LLAMA3_8B, FEASIBLE_EXEC)
    out = tmp_path / "case.yaml"
    for config in (cfg, tmp_path / "absent.json"):
        status, printed, err = run_cli(capsys, "import", "hf", "--config", config, "--execution", exe,
                                       "--sequence-length", 8192, "--system", "b200", "-o", out, "--id", case_id)
        one_error_line(status, err)
        assert err == f"error: <command line>: --id: {message}\n" and printed == ""
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "exec.yaml"]


def test_a_good_id_is_the_case_id(capsys, tmp_path):
    from harness.cases import load_case

    cfg, exe = _files(tmp_path, LLAMA3_8B, FEASIBLE_EXEC)
    out = tmp_path / "case.yaml"
    status, _, err = run_cli(capsys, "import", "hf", "--config", cfg, "--execution", exe, "--sequence-length", 8192,
                             "--system", "b200", "-o", out, "--id", "mine/模型 8b")
    assert status == 0 and err.endswith(f"wrote case mine/模型 8b to {out}\n"), err
    assert load_case(out).id == "mine/模型 8b"


# --- a case-format error in the model names the config field (the one the user edits) -----------------------

def _without(config, *names):
    return {k: v for k, v in config.items() if k not in names}


@pytest.mark.parametrize("config, field_message", [
    # the case's bounds, in the config's names (were vocabulary, blocks)
    ({**LLAMA3_8B, "vocab_size": 2**31}, "vocab_size: Input should be less than or equal to 16777216, got 2147483648 "
                                         "(an integer)"),
    ({**LLAMA3_8B, "num_hidden_layers": 2**20}, "num_hidden_layers: Input should be less than or equal to 65536, got "
                                                "1048576 (an integer)"),
    ({**MIXTRAL_8X7B, "num_local_experts": 2**17}, "num_local_experts: Input should be less than or equal to 65536, "
                                                   "got 131072 (an integer)"),
    ({**NO_MTP, "kv_lora_rank": 2**21}, "kv_lora_rank: Input should be less than or equal to 1048576, got 2097152 "
                                        "(an integer)"),
    # a derived case field: named by the config fields it is made of (was head_size)
    ({**LLAMA3_8B, "hidden_size": 2**20, "num_attention_heads": 1, "num_key_value_heads": 1},
     "hidden_size / num_attention_heads: Input should be less than or equal to 65536, got 1048576 (an integer)"),
    ({**NO_MTP, "qk_nope_head_dim": 2**16}, "qk_nope_head_dim + qk_rope_head_dim: Input should be less than or equal "
                                            "to 65536, got 65600 (an integer)"),
    # a mixture of experts' or latent attention's missing field by its config name (were moe.top_k, moe.experts,
    # head_size); a Qwen-MoE config without its three expert fields was priced as a dense model
    (_without(MIXTRAL_8X7B, "num_experts_per_tok"), "num_experts_per_tok: required field is missing"),
    (_without(MIXTRAL_8X7B, "num_local_experts"), "num_local_experts: required field is missing"),
    (_without(QWEN3_30B_A3B, "num_experts", "num_experts_per_tok", "moe_intermediate_size"),
     "num_experts: required field is missing"),
    (_without(NO_MTP, "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"),
     "kv_lora_rank: required field is missing"),
    (_without(NO_MTP, "qk_rope_head_dim"), "qk_rope_head_dim: required field is missing"),
    # the case's top_k <= experts rule, in config names (was moe: top_k=9 exceeds experts=8)
    ({**MIXTRAL_8X7B, "num_experts_per_tok": 9}, "num_experts_per_tok: 9 exceeds num_local_experts 8 (a token picks "
                                                 "distinct experts)"),
    # a layout rule on a model field the config set (was exec.yaml: model.moe.dense_layers)
    ({**NO_MTP, "moe_layer_freq": 100}, "first_k_dense_replace and moe_layer_freq: no MoE block among the 61 blocks "
                                        "(dense_layers=3, layer_frequency=100)"),
])
def test_a_case_format_error_names_the_config_field(capsys, tmp_path, config, field_message):
    status, err, out, cfg = _import(capsys, tmp_path, config, execution=FEASIBLE_EXEC)
    one_error_line(status, err)
    assert err == f"error: {cfg}: {field_message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "exec.yaml"]


def test_a_layout_error_no_config_field_caused_still_names_the_execution_file(capsys, tmp_path):
    """DeepSeek's latent attention sets no kv_heads: multiquery is the execution section's choice, and its field."""
    status, err, out, _ = _import(capsys, tmp_path, NO_MTP, execution={**FEASIBLE_EXEC, "attention": "multiquery"})
    one_error_line(status, err, f"error: {tmp_path / 'exec.yaml'}: execution.attention: multi-head latent attention")


def test_an_expert_field_of_a_dense_family_is_noted_not_half_a_moe_section():
    """Llama with num_experts_per_tok (as with num_local_experts): noted, no model.moe (it was a model.moe of
    top_k alone, refused as moe.experts: required field is missing)."""
    draft = translate_config({**LLAMA3_8B, "num_experts_per_tok": 2}, "c.json", 8192)
    assert ("num_experts_per_tok: 2: used by no block of a 'llama' model (LlamaForCausalLM does not read it): "
            "not priced") in draft.notes
    assert "model.moe" not in draft.fields and draft.refusals == []


# --- a field of another family (FLOP-oracle probe: transformers' model of the family never reads it) ----------

LATENT = {"q_lora_rank": 40, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32}


@pytest.mark.parametrize("base, stray", [
    # each was priced as if the model were the family that reads it: the oracle's count of transformers' layer
    # (which ignores the field) was the count without it, the harness's 37-130 % above or below
    (QWEN3_30B_A3B, {"shared_expert_intermediate_size": 96}),  # +37 %: Qwen2-MoE's shared expert
    (MIXTRAL_8X7B, {"n_shared_experts": 1}),  # +39 %: DeepSeek's shared expert
    (NO_MTP, {"shared_expert_intermediate_size": 256}),  # +130 %: it replaced n_shared_experts x expert width
    (QWEN3_30B_A3B, {"first_k_dense_replace": 1}),  # block 0 dense
    (QWEN15_MOE, {"first_k_dense_replace": 2}),
    (MIXTRAL_8X7B, {"moe_layer_freq": 2}),  # every other block dense
    (LLAMA3_8B, LATENT),  # -19 %: latent attention in a Llama
    (QWEN3_30B_A3B, {"num_nextn_predict_layers": 1}),  # a multi-token-prediction head
    (NO_MTP, {"head_dim": 64}),  # overwritten by the latent widths, silently
    (LLAMA3_8B, {"sliding_window": 16}),  # a window LlamaAttention does not apply
    (NO_MTP, {"sliding_window": 16}),
    (QWEN3_30B_A3B, {"scoring_func": "sigmoid"}),
    # refused as a feature the harness does not price, though the family's model does not have it
    (MISTRAL_7B, {"attention_bias": True}),
    (QWEN2_7B, {"attention_bias": True}),  # Qwen2's biases are fixed: QKV with, output without
    (MIXTRAL_8X7B, {"mlp_bias": True}),
    (LLAMA3_8B, {"use_sliding_window": True}),
    (LLAMA3_8B, {"decoder_sparse_step": 2, "mlp_only_layers": [0]}),
    (MISTRAL_7B, {"layer_types": ["sliding_attention"] * 32}),
])
def test_a_field_the_family_does_not_read_is_noted_and_prices_nothing(base, stray):
    draft = translate_config({**base, **stray}, "c.json", 4096)
    assert fields({**base, **stray}, 4096) == fields(base, 4096) and draft.refusals == []
    for name in stray:
        assert any(note.startswith(f"{name}: ") and "used by no block of a" in note and "does not read it" in note
                   for note in draft.notes), name


def test_a_field_the_family_reads_keeps_its_rule_and_a_value_that_says_nothing_is_not_noted():
    """The same fields in the family that reads them still price (or refuse); false, 0, null and [] in another
    family's config are silent (hub configs carry them)."""
    assert fields({**QWEN15_MOE, "shared_expert_intermediate_size": 96}, 4096)["model.moe"]["shared_expert_ffn"] == 96
    assert fields({**NO_MTP, "n_shared_experts": 2}, 4096)["model.moe"]["shared_experts"] == 2
    assert fields({**MISTRAL_7B, "sliding_window": 16}, 4096)["model.sliding_window"] == 16
    assert "mlp_bias" in dict(translate_config({**LLAMA3_8B, "mlp_bias": True}, "c.json", 4096).refusals)
    silent = {"attention_bias": False, "mlp_bias": False, "n_shared_experts": 0, "sliding_window": None,
              "mlp_only_layers": [], "first_k_dense_replace": 0}
    draft = translate_config({**MISTRAL_7B, **silent}, "c.json", 4096)
    assert not [note for note in draft.notes if "used by no block" in note] and draft.refusals == []


def test_the_order_of_the_shared_expert_fields_does_not_matter():
    """Qwen2-MoE with DeepSeek's n_shared_experts too: one shared expert (Qwen2-MoE's), whichever comes first (the
    count was 2 or 1 by the file's key order)."""
    first = {"n_shared_experts": 2, **QWEN15_MOE, "shared_expert_intermediate_size": 128}
    last = {**QWEN15_MOE, "shared_expert_intermediate_size": 128, "n_shared_experts": 2}
    assert list(first)[0] == "n_shared_experts" and list(last)[-1] == "n_shared_experts"
    assert fields(first, 4096) == fields(last, 4096)
    assert fields(last, 4096)["model.moe"]["shared_experts"] == 1


def test_an_error_naming_keys_of_a_section_is_named_by_their_config_fields():
    """``no MoE block among the 4 blocks (dense_layers=1, layer_frequency=99)`` came from two config fields (it
    named the first only); a key is matched whole (``shared_experts=`` is not ``experts=``)."""
    draft = translate_config({**NO_MTP, "moe_layer_freq": 99}, "c.json", 4096)
    message = "no MoE block among the 61 blocks (dense_layers=3, layer_frequency=99)"
    assert draft.config_field("model.moe.dense_layers", message) == "first_k_dense_replace and moe_layer_freq"
    assert draft.config_field("model.moe", message) == "first_k_dense_replace and moe_layer_freq"
    assert draft.config_field("model.moe", "width 7 is not a multiple of shared_experts=2") == "n_shared_experts"
    assert draft.config_field("model.moe.top_k", "too many") == "num_experts_per_tok"
    assert draft.config_field("model.vocabulary") == "vocab_size"


def test_a_huge_value_is_shortened_in_notes_and_refusals():
    """A megabyte-long routing value was echoed whole into its note (and the case file's header: a 1 MB case);
    a short one is shown as Python writes it."""
    huge = "x" * 10**6
    notes = translate_config({**QWEN3_30B_A3B, "norm_topk_prob": huge}, "c.json", 4096).notes
    (note,) = [n for n in notes if n.startswith("norm_topk_prob: ")]
    assert len(note) < 200 and '"xxxxxxxx' in note and "..." in note
    assert "norm_topk_prob: True: normalises the top-k router probabilities (a few operations per token): accepted, " \
           "not priced" in translate_config(QWEN3_30B_A3B, "c.json", 4096).notes
    refusals = dict(translate_config({**LLAMA3_8B, "hidden_act": huge}, "c.json", 4096).refusals)
    assert len(refusals["hidden_act"]) < 200
    assert dict(translate_config({**LLAMA3_8B, "hidden_act": "relu"}, "c.json", 4096).refusals)["hidden_act"].startswith(
        "'relu' is not a gated-MLP activation")


def test_an_error_of_a_field_naming_a_sibling_keeps_the_fields_own_config_name():
    """Review: for a key of the model section (``model.kv_heads``) a sibling named in the message replaced the field's
    own origin: the error named num_attention_heads only."""
    draft = translate_config({**LLAMA3_8B, "num_key_value_heads": 8}, "c.json", 4096)
    assert draft.config_field("model.kv_heads", "8 does not divide attention_heads=40") == (
        "num_key_value_heads and num_attention_heads")
