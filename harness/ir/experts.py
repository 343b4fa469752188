"""Mixture-of-experts arithmetic (issue 21): the rules the MoE block, the layout checks and the search share.

Rules (Megatron-Core MoE semantics: megatron/core/transformer/moe/moe_layer.py, token_dispatcher.py,
experts.py; parallel folding: attention on TP x CP x DP, experts on ETP x EP x expert-DP over the same GPUs):

- an **all-to-all** of a ``buffer_bytes`` buffer over ``participants`` ranks sends (P-1)/P of it from each rank
  (the 1/P destined for itself stays local);
- the local experts' **grouped GEMM** runs each expert on tokens x top_k / experts tokens when balanced; the
  busiest expert (which prices the slowest rank) holds ``load_imbalance`` times that mean;
- **folding constraints** (Megatron-Core's parallel_state): the expert-data-parallel degree is
  processors / (PP x ETP x EP) and must be a whole number, i.e. ETP x EP divides TP x CP x DP; EP divides the
  number of experts (each EP rank holds experts / EP whole experts); ETP divides expert_ffn;
- **layout constraints** (:func:`expert_layout_problems`, the folding ones and Megatron-LM's argument checks):
  EP > 1 with TP > 1 needs sequence parallelism (megatron/core/transformer/transformer_config.py: "When using
  expert parallelism and tensor parallelism, sequence parallelism must be used"); EP > 1 is not supported with
  fp16 training (megatron/training/arguments.py: "Expert parallelism is not supported with fp16 training").
"""

from __future__ import annotations

Problem = tuple[str, str]


def all_to_all_bytes_sent_per_rank(buffer_bytes: float, participants: int) -> float:
    """Bytes one rank sends in an all-to-all of its ``buffer_bytes`` buffer over ``participants`` ranks."""
    if participants < 1:
        raise ValueError(f"participants must be >= 1, got {participants}")
    return buffer_bytes * (participants - 1) / participants


def tokens_per_expert(tokens: int, top_k: int, experts: int, busiest_over_mean: float = 1.0) -> float:
    """Tokens the busiest expert's GEMM processes: tokens x top_k / experts x ``busiest_over_mean``
    (:attr:`harness.ir.model.MixtureOfExperts.imbalance`: the load imbalance, at least 1, capped by the capacity
    factor, which may be below 1: then every expert is capped under the mean and drops the rest)."""
    if not (1 <= top_k <= experts) or not busiest_over_mean > 0.0:
        raise ValueError(f"need 1 <= top_k <= experts and busiest_over_mean > 0, got top_k={top_k}, "
                         f"experts={experts}, busiest_over_mean={busiest_over_mean}")
    return tokens * top_k / experts * busiest_over_mean


def expert_parameters_per_rank(hidden: int, expert_ffn: int, experts: int, expert_parallel: int,
                               expert_tensor_parallel: int) -> int:
    """Parameters of the routed experts (SwiGLU: three hidden x expert_ffn matrices each) one rank holds:
    experts / EP whole experts, each split over ETP."""
    return 3 * hidden * expert_ffn * (experts // expert_parallel) // expert_tensor_parallel


def folding_problems(*, tensor: int, context: int, data: int, experts: int, expert_ffn: int,
                     expert_parallel: int, expert_tensor_parallel: int) -> list[Problem]:
    """Megatron-Core's constraints on the expert layout (module rules); empty when valid."""
    problems: list[Problem] = []
    ep, etp = expert_parallel, expert_tensor_parallel
    if experts % ep:
        problems.append(("execution.expert_parallel", f"EP={ep} does not divide model.moe.experts={experts}"))
    if expert_ffn % etp:
        problems.append(("execution.expert_tensor_parallel",
                         f"ETP={etp} does not divide model.moe.expert_ffn={expert_ffn}"))
    if (tensor * context * data) % (ep * etp):
        problems.append(("execution.expert_parallel", f"ETP x EP = {etp * ep} does not divide TP x CP x DP = "
                                                      f"{tensor * context * data} (no whole expert-data-parallel group)"))
    return problems


def expert_layout_problems(*, tensor: int, context: int, data: int, experts: int, expert_ffn: int,
                           expert_parallel: int, expert_tensor_parallel: int, sequence_parallel: bool,
                           datatype: str | None) -> list[Problem]:
    """Every constraint Megatron-Core puts on an expert layout (module rules; the estimate's and the search's one
    definition); ``datatype`` None: the fp16 rule is not checked. Empty when valid."""
    problems = folding_problems(tensor=tensor, context=context, data=data, experts=experts, expert_ffn=expert_ffn,
                                expert_parallel=expert_parallel, expert_tensor_parallel=expert_tensor_parallel)
    ep = expert_parallel
    if ep > 1 and tensor > 1 and not sequence_parallel:
        problems.append(("execution.tp_communication", f"expert_parallel={ep} with tensor_parallel={tensor} needs "
                                                       "sequence parallelism (tp_communication: rs_ag), as "
                                                       "Megatron-Core requires"))
    if ep > 1 and datatype == "float16":
        problems.append(("execution.datatype", f"expert_parallel={ep} in float16: Megatron-LM does not support "
                                               "expert parallelism with fp16 training (use bfloat16)"))
    return problems
