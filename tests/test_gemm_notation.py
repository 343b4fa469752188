"""Issue 23.6: `lower` writes GEMMs in the conventional M x K . K x N (K the reduction width)."""

from __future__ import annotations

from conftest import run_cli


def test_the_qkv_gemm_of_megatron_22B_reads_tokens_x_hidden_dot_hidden_x_local_width(capsys):
    """Megatron-22B, TP 8, microbatch 4 x 2048 tokens: Q = X . W_q with X 8192 x 6144 (tokens x hidden, the
    reduction) and W_q 6144 x 768 (hidden x 6144/8 local query features)."""
    status, out, _ = run_cli(capsys, "lower", "megatron-22B_full", "--stage", "distributed")
    assert status == 0 and "M x K . K x N" in out.splitlines()[0]
    assert "%attn.query = linear[forward](attn.qkv_fork) {8192 x 6144 . 6144 x 768}" in out
