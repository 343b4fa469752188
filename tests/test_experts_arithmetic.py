"""Hand-computed checks of the MoE arithmetic (harness.ir.experts)."""

import pytest

from harness.ir import experts


def test_all_to_all_sends_all_but_own_share():
    # 8 ranks, 64 MiB buffer: each sends 7/8 of it = 56 MiB
    assert experts.all_to_all_bytes_sent_per_rank(64 * 2**20, 8) == 56 * 2**20
    assert experts.all_to_all_bytes_sent_per_rank(1000.0, 1) == 0.0


def test_tokens_per_expert_mixtral_like():
    # 4096 tokens, top-2 of 8 experts: 1024 tokens per expert; busiest at 1.5x: 1536
    assert experts.tokens_per_expert(4096, 2, 8) == 1024
    assert experts.tokens_per_expert(4096, 2, 8, 1.5) == 1536
    with pytest.raises(ValueError):
        experts.tokens_per_expert(4096, 9, 8)
    # a capacity below the mean: every expert capped at 0.5x, 512 tokens; no factor of 0 or less
    assert experts.tokens_per_expert(4096, 2, 8, 0.5) == 512
    for factor in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            experts.tokens_per_expert(4096, 2, 8, factor)


def test_expert_parameters_per_rank_mixtral_like():
    # Mixtral-8x7B: hidden 4096, expert_ffn 14336, 8 experts; EP=4, ETP=2: 2 experts, each halved
    # 3 x 4096 x 14336 = 176_160_768 per expert; x 2 / 2 = 176_160_768
    assert experts.expert_parameters_per_rank(4096, 14336, 8, 4, 2) == 176_160_768
    assert experts.expert_parameters_per_rank(4096, 14336, 8, 8, 1) == 176_160_768
    assert experts.expert_parameters_per_rank(4096, 14336, 8, 1, 1) == 8 * 176_160_768


def test_folding_constraints():
    ok = dict(tensor=2, context=1, data=4, experts=8, expert_ffn=14336, expert_parallel=4, expert_tensor_parallel=2)
    assert experts.folding_problems(**ok) == []
    fields = [f for f, _ in experts.folding_problems(**{**ok, "expert_parallel": 3})]
    assert fields == ["execution.expert_parallel", "execution.expert_parallel"]  # 8 % 3, 8 % 6
    assert [f for f, _ in experts.folding_problems(**{**ok, "data": 2, "expert_tensor_parallel": 1})] == []
    assert [f for f, _ in experts.folding_problems(**{**ok, "data": 1})] == ["execution.expert_parallel"]
