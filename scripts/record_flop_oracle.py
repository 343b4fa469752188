#!/usr/bin/env python3
"""Record every vendored FLOP oracle record (vendor/flops/*.json) from its synthetic config.

Usage (needs the optional extra ``flops``: torch and transformers; ``tox -e flop-oracle`` runs it)::

    python scripts/record_flop_oracle.py [NAME ...]

Each record is ``python -m harness oracle record --flops --config vendor/flops/configs/CONFIG.json
--microbatch B --sequence-length S --id NAME`` (:mod:`harness.oracles.flops`). The table below is the
one list of records; the default suite compares each vendored record with the plan's matrix work
(``tests/test_flop_oracle.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: record id -> (config stem, microbatch, sequence length, what it covers)
RECORDS = {
    "llama_mha_b1_s64": ("llama_mha", 1, 64, "multi-head attention, SwiGLU, RMSNorm, RoPE"),
    "llama_gqa_b1_s64": ("llama_gqa", 1, 64, "grouped-query attention (8 heads, 2 KV heads)"),
    "llama_gqa_b2_s64": ("llama_gqa", 2, 64, "the same layer at a second microbatch size"),
    "llama_mqa_b1_s64": ("llama_mqa", 1, 64, "multi-query attention (1 KV head)"),
    "mistral_gqa_b1_s64": ("mistral_gqa", 1, 64, "Mistral: grouped-query, SwiGLU (no sliding window)"),
    "qwen2_qkv_bias_b1_s64": ("qwen2_qkv_bias", 1, 64, "QKV bias (Qwen2)"),
    "qwen3_head_dim_b1_s128": ("qwen3_head_dim", 1, 128, "head_dim 64 != hidden / heads = 32, QK-norm (Qwen3)"),
    "qwen3_qk_norm_b2_s64": ("qwen3_qk_norm", 2, 64, "QK-norm (Qwen3), head_dim = hidden / heads"),
    "gpt2_gelu_b1_s64": ("gpt2_gelu", 1, 64, "GeLU MLP, LayerNorm, learned positions, biases (GPT-2)"),
    "gpt_neox_gelu_b1_s64": ("gpt_neox_gelu", 1, 64, "GeLU MLP, partial RoPE, parallel residual (GPT-NeoX)"),
    "deepseek_v3_mla_b1_s64": ("deepseek_v3_mla", 1, 64, "multi-head latent attention, a dense SwiGLU MLP (a "
                                                         "DeepSeek-V3 leading dense layer)"),
    "deepseek_v3_moe_b1_s64": ("deepseek_v3_moe", 1, 64, "DeepSeek-V3-like MoE layer: MLA, 256 experts top 8, one "
                                                         "shared expert (routing by construction)"),
    "mixtral_moe_b1_s64": ("mixtral_moe", 1, 64, "Mixtral-8x7B-like: 8 experts top 2, grouped-query attention"),
    "qwen3_moe_b1_s64": ("qwen3_moe", 1, 64, "Qwen3-30B-A3B-like: 128 experts top 8, QK-norm, head_dim 64"),
    "qwen2_moe_shared_b1_s64": ("qwen2_moe_shared", 1, 64, "shared-expert model (Qwen2-MoE): 64 experts top 8, "
                                                           "a shared expert with its sigmoid gate, QKV bias"),
    "llama_stray_fields_b1_s37": ("llama_stray_fields", 1, 37, "Llama with other families' fields it never reads "
                                                               "(latent widths, shared experts, leading dense "
                                                               "blocks, MTP, a window): the plain Llama count"),
    "qwen3_moe_stray_fields_b1_s32": ("qwen3_moe_stray_fields", 1, 32, "Qwen3-MoE with Qwen2-MoE's shared expert "
                                                                       "and DeepSeek's fields, which it never reads"),
}


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(RECORDS))
    if unknown:
        print(f"unknown record {unknown[0]!r} (known: {', '.join(RECORDS)})", file=sys.stderr)
        return 2
    for name in names or RECORDS:
        config, microbatch, sequence, _ = RECORDS[name]
        command = [sys.executable, "-m", "harness", "oracle", "record", "--flops",
                   "--config", str(ROOT / "vendor" / "flops" / "configs" / f"{config}.json"),
                   "--microbatch", str(microbatch), "--sequence-length", str(sequence), "--id", name]
        done = subprocess.run(command, cwd=ROOT)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
