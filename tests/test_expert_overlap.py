"""The expert all-to-all overlap (``execution.expert_overlap``, Megatron-Core's overlap_moe_expert_parallel_comm).

The merged schedule's expected times are worked out by hand below from the order of Megatron-Core's
``TransformerLayerSchedulePlan.run`` (two in-order streams; each node waits for its stream and its inputs),
not by running the code's recurrence; the rules' messages are the ones harness/ir/checks.py states."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cases import EstimateInput
from harness.errors import UnsupportedFeatureError
from harness.estimate import estimate
from harness.ir.checks import layout_problems
from harness.measurements.runs import run_case
from harness.measurements.runs_schema import MeasuredRun
from harness.pipeline import lower
from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.schedule.block import (ExpertNodes, expert_nodes, expert_overlap_hidden_s, merged_layers_s,
                                    merged_steps)
from harness.schedule.physical import physical_schedule
from harness.schedule.projection import _expert_pass_s, _recompute_s

def nodes(attention: tuple, dispatch: tuple, experts: tuple, combine: tuple, exchange: tuple) -> ExpertNodes:
    """Nodes from (forward, backward[, weight gradient]) times; ``exchange``: the all-to-alls' own (forward,
    backward)."""
    return ExpertNodes(*map(float, (*attention, *dispatch, *experts, *combine, *exchange)))


# attention forward 2, backward 3, weight gradient 1; dispatch 4 / 4; experts 2 / 2 / 1; combine 3 / 3
NODES = nodes((2, 3, 1), (4, 4), (2, 2, 1), (3, 3), (6, 6))


def test_one_merged_layer_pair_follows_megatrons_two_streams():
    # communication: combine backward 0-3; compute: attention forward 0-2; experts backward waits for the combine
    # backward: 3-5; dispatch waits for the attention: 3-7; experts weight gradient 5-6; dispatch backward waits
    # for the dispatch (stream) and the experts backward: 7-11; experts forward waits for the dispatch: 7-9;
    # combine forward waits for the dispatch backward (stream): 11-14; attention backward waits for the dispatch
    # backward: 11-14; its weight gradient 14-15. The pair ends at 15 (serial: 25).
    assert merged_layers_s(NODES, 1) == 15.0
    assert NODES.serial_s == 25.0


def test_the_next_pair_starts_where_its_inputs_and_streams_allow():
    # second pair: combine backward waits for the attention backward (14) and its stream (14): 14-17; attention
    # forward waits for the combine forward (14) and its stream (15): 15-17; experts backward 17-19; dispatch
    # 17-21; experts weight gradient 19-20; dispatch backward 21-25; experts forward 21-23; combine forward
    # 25-28; attention backward 25-28; weight gradient 28-29: two pairs in 29, 14.5 each
    assert merged_layers_s(NODES, 2) == 14.5


def test_a_long_dispatch_and_a_long_attention_backward_hold_the_streams_back():
    # attention 1 / 5 / 1, dispatch 6 / 1, experts 2 / 1 / 1, combine 1 / 3. First pair: combine backward 0-3,
    # attention 0-1, experts backward 3-4, dispatch 3-9, weight gradient 4-5, dispatch backward 9-10, experts
    # forward waits for the dispatch: 9-11, combine 11-12, attention backward 11-16, weight gradient 16-17.
    # Second pair: combine backward waits for that attention backward: 16-19; attention 17-18; experts backward
    # 19-20; dispatch 19-25; weight gradient 20-21; dispatch backward 25-26; experts 25-27; combine 27-28;
    # attention backward 27-32; weight gradient 32-33.
    slow = nodes((1, 5, 1), (6, 1), (2, 1, 1), (1, 3), (7, 4))
    assert merged_layers_s(slow, 1) == 17.0
    assert merged_layers_s(slow, 2) == 16.5


def test_a_long_combine_ends_the_pair_on_the_communication_stream():
    # attention 1 / 1 / 0, dispatch 1 / 1, experts 4 / 1 / 0, combine 5 / 1: combine backward 0-1, attention
    # 0-1, experts backward 1-2, dispatch 1-2, dispatch backward 2-3, experts forward 2-6, the combine waits for
    # it: 6-11, attention backward 6-7. The compute stream is done at 7, the pair at 11.
    long = nodes((1, 1, 0), (1, 1), (4, 1, 0), (5, 1), (6, 2))
    assert merged_layers_s(long, 1) == 11.0


def test_the_next_forward_waits_for_the_combine_it_follows():
    # attention 5 / 1, dispatch 1 / 1, experts 1 / 1, combine 8 / 1. First pair: combine backward 0-1, attention
    # 0-5, experts backward 5-6, dispatch 5-6, dispatch backward 6-7, experts 6-7, combine 7-15, attention
    # backward 7-8. Second pair: combine backward 15-16, the attention forward waits for the combine (15), not
    # for its stream (8): 15-20; experts backward 20-21, dispatch 20-21, dispatch backward 21-22, experts 21-22,
    # combine 22-30, attention backward 22-23: two pairs in 30.
    assert merged_layers_s(nodes((5, 1, 0), (1, 1), (1, 1, 0), (8, 1), (9, 2)), 2) == 15.0


def test_the_combine_waits_for_the_dispatch_backward_on_its_stream():
    # attention 1 / 1, dispatch 1 / 5, experts 1 / 1, combine 5 / 1: combine backward 0-1, attention 0-1, experts
    # backward 1-2, dispatch 1-2, dispatch backward 2-7, experts 2-3; the combine follows the dispatch backward
    # on the communication stream: 7-12 (not 3-8); attention backward 7-8.
    assert merged_layers_s(nodes((1, 1, 0), (1, 5), (1, 1, 0), (5, 1), (6, 6)), 1) == 12.0


def test_the_dispatch_backward_does_not_wait_for_the_delayed_weight_gradient():
    # attention 1 / 1, dispatch 1 / 4, experts 1 / 1 / 5, combine 1 / 1: combine backward 0-1, attention 0-1,
    # experts backward 1-2, dispatch 1-2; the dispatch backward needs the experts' activation gradient only
    # (delay_wgrad_compute): 2-6 while the weight gradient runs 2-7; experts 7-8, combine 8-9, attention
    # backward 8-9.
    assert merged_layers_s(nodes((1, 1, 0), (1, 4), (1, 1, 5), (1, 1), (2, 5)), 1) == 9.0


def test_the_hidden_time_is_the_merged_steps_saving_capped_by_the_all_to_alls():
    # 3 of 4 steps merged; each hides 25 - 15 = 10, under the all-to-alls' 12
    assert expert_overlap_hidden_s(NODES, 1, 3, 4) == 7.5
    # all-to-alls of 3 (forward) and 1 (backward): the saving is capped at 4
    capped = dataclasses.replace(NODES, exchange_forward_s=3.0, exchange_backward_s=1.0)
    assert expert_overlap_hidden_s(capped, 1, 3, 4) == 3.0
    # no merged step: nothing hidden
    assert expert_overlap_hidden_s(NODES, 1, 0, 1) == 0.0


@pytest.mark.parametrize("microbatches, chunks, stages, merged, steps", [
    (16, 1, 1, 15, 16),  # no pipelining: the first forward alone, then 15 merged, then the last backward
    (1, 1, 1, 0, 1),
    # interleaved, first stage: 2 (PP - 1) + (chunks - 1) PP warm-up forwards, one more with the overlap
    (128, 12, 2, 128 * 12 - (2 + 11 * 2 + 1), 128 * 12),  # the H100 26.02 Qwen3 row: PP 2, VP 12
    (8, 4, 8, 8 * 4 - (14 + 24 + 1), 8 * 4),  # a warm-up longer than the steps merges nothing
])
def test_the_merged_steps_are_megatrons_interleaved_warm_up(microbatches, chunks, stages, merged, steps):
    assert merged_steps(microbatches, chunks, stages) == (max(0, merged), steps)


def test_without_communication_nothing_is_hidden():
    quiet = dataclasses.replace(NODES, dispatch_forward_s=0.0, dispatch_backward_s=0.0, combine_forward_s=0.0,
                                combine_backward_s=0.0, exchange_forward_s=0.0, exchange_backward_s=0.0)
    assert merged_layers_s(quiet, 3) == 11.0  # the compute stream's own work: 2 + 3 + 1 + 2 + 2 + 1
    assert expert_overlap_hidden_s(quiet, 3, 7, 8) == 0.0


# --- a MoE case ----------------------------------------------------------------------------------------------------

QWEN3_30B_A3B = dict(hidden=2048, feedforward=6144, sequence_length=4096, attention_heads=32, head_size=128,
                     blocks=48, vocabulary=151936, kv_heads=4, mlp="swiglu", norm="rmsnorm", position="rope",
                     attention_dropout=0.0, moe=dict(experts=128, top_k=8, expert_ffn=768))
# the measured rows' GB200 layout (mb-26.08/qwen3_30b_a3b/gb200): 8 GPUs, EP 8, DP 8, micro batch 4
LAYOUT = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, global_batch=512, microbatch=4,
              datatype="bfloat16", precision="mxfp8", attention_kernel="flash", optimizer_sharding=True,
              dp_overlap=True, expert_parallel=8, network_tiers=dict(tensor=0, pipeline=0, data=0, expert=0))


def case(**execution) -> EstimateInput:
    return EstimateInput.model_validate({"model": QWEN3_30B_A3B, "execution": {**LAYOUT, **execution},
                                         "system": "gb200_measured"})


def _names_by_node(forward, **recomputed) -> dict[str, set[str]]:
    """Which node holds each task: every task's forward time a distinct power of two, so a node's sum names its
    tasks; a recomputed task's recomputation (``recomputed``: name -> True) likewise in the backward."""
    names = [t.name for t in forward]
    weight = {n: 2.0 ** i for i, n in enumerate(names)}
    found = expert_nodes(forward, lambda t: (weight[t.name], 0.0, 0.0),
                         lambda t: weight[t.name] if recomputed.get(t.name) else 0.0)

    def decode(total: float) -> set[str]:
        return {n for n in names if int(total) & int(weight[n])}
    return {"attention": decode(found.attention_forward_s), "dispatch": decode(found.dispatch_forward_s),
            "experts": decode(found.experts_forward_s), "combine": decode(found.combine_forward_s),
            "attention redo": decode(found.attention_backward_s), "experts redo": decode(found.experts_backward_s)}


def test_the_nodes_split_a_moe_block_as_megatron_core_does():
    """The tasks of the GB200 Qwen3 block, by node: Megatron-Core's attn node runs attention, the pre-MLP norm, the
    router and the permutation (build_transformer_layer_callables); the combine node the unpermutation and the
    residual after the combine."""
    forward = [t for t in lower(case(expert_overlap=True)).concrete().tasks if t.phase == "forward"]
    by_node = _names_by_node(forward)
    assert {"attn.flash", "attn.out_proj", "mlp.layer_norm", "mlp.router", "mlp.top_k", "mlp.permute"} <= \
        by_node["attention"]
    assert by_node["dispatch"] == {"mlp.dispatch"}
    assert by_node["experts"] == {"mlp.experts_fc1.quantize", "mlp.experts_fc1", "mlp.experts_swiglu",
                                  "mlp.experts_fc2.quantize", "mlp.experts_fc2"}
    assert by_node["combine"] == {"mlp.combine", "mlp.unpermute", "mlp.dropout", "mlp.residual"}
    assert expert_nodes([t for t in forward if t.name != "mlp.combine"], lambda t: (1.0, 1.0, 1.0)) is None


def test_the_shared_experts_run_in_the_attention_node():
    """Review: the plan puts the shared experts after the combine; Megatron-Core computes them before the
    dispatch, on the compute stream, in the attention node (the overlap needs moe_shared_expert_overlap off)."""
    shared = {**QWEN3_30B_A3B, "moe": {**QWEN3_30B_A3B["moe"], "shared_experts": 1, "shared_expert_ffn": 1024}}
    data = EstimateInput.model_validate({"model": shared, "execution": {**LAYOUT, "expert_overlap": True},
                                         "system": "gb200_measured"})
    forward = [t for t in lower(data).concrete().tasks if t.phase == "forward"]
    by_node = _names_by_node(forward)
    assert {"mlp.shared_fc1", "mlp.shared_swiglu", "mlp.shared_fc2"} <= by_node["attention"]
    assert not any(n.startswith("mlp.shared_") for n in by_node["combine"] | by_node["experts"])


def test_a_recomputed_task_is_redone_where_megatron_core_hooks_its_recomputation():
    """Review: the pre-MLP norm sits in the attention node, but Megatron-Core hooks its recomputation on the MoE
    output, so it is redone at the start of the experts node's backward; the experts' activation there too; the
    attention sub-block's tasks in the attention node's."""
    forward = [t for t in lower(case(expert_overlap=True)).concrete().tasks if t.phase == "forward"]
    by_node = _names_by_node(forward, **{"mlp.layer_norm": True, "mlp.experts_swiglu": True, "attn.flash": True})
    assert by_node["experts redo"] == {"mlp.layer_norm", "mlp.experts_swiglu"}
    assert by_node["attention redo"] == {"attn.flash"}


def test_the_overlap_takes_hidden_all_to_all_time_off_the_exposed_collectives_only():
    plain = estimate(case()).views["system_evidence"].components_s
    overlapped = estimate(case(expert_overlap=True)).views["system_evidence"].components_s
    # the DP sync overlaps the last backward, which runs alone: its windows are an unmerged step's (review)
    for name in ("forward", "backward", "optimizer", "recompute", "pipeline_bubble", "data_parallel"):
        assert getattr(overlapped, name) == getattr(plain, name)
    saved = plain.tensor_parallel - overlapped.tensor_parallel
    # TP = 1: the exposed collectives are the two all-to-alls, forward and backward; 15 of the 16 microbatches
    # merge, and a merged step hides at most the all-to-alls it holds
    assert 0 < saved <= plain.tensor_parallel * 15 / 16
    assert overlapped.tensor_parallel > 0
    # every one of the 48 blocks, base and edge, in each of the 16 microbatches hides the rule's time
    lowering = lower(case(expert_overlap=True))
    concrete = lowering.concrete()
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    nodes = expert_nodes([t for t in concrete.tasks if t.phase == "forward"], _expert_pass_s(pricer))
    assert saved == pytest.approx(48 * 16 * expert_overlap_hidden_s(nodes, 48, 15, 16), rel=1e-9)


def test_the_overlap_leaves_the_digests_of_plans_without_it():
    plain, overlapped = lower(case()), lower(case(expert_overlap=True))
    assert "expert_overlap" not in plain.model.canonical() and "expert_overlap" not in plain.concrete().canonical()
    assert '"expert_overlap":true' in overlapped.concrete().canonical()
    # the portable plan is the same: the overlap is the ConcretePlanIR's
    assert overlapped.plan.digest() == plain.plan.digest()


@pytest.mark.parametrize("model, execution, words", [
    ({"moe": None}, dict(expert_parallel=None, network_tiers=dict(tensor=0, pipeline=0, data=0)), "needs model.moe"),
    ({}, dict(expert_parallel=1), "needs expert_parallel > 1"),
    ({}, dict(moe_dispatcher="allgather"), "needs moe_dispatcher: alltoall"),
    ({}, dict(training=False, dp_overlap=False, optimizer_sharding=False), "needs training: true"),
    ({}, dict(pipeline_parallel=2, data_parallel=4), "needs pipeline_interleaving > 1 with pipeline_parallel > 1"),
    ({}, dict(recompute="full"), "with recompute: full is not modelled yet"),
    ({}, dict(tp_overlap="ring", tensor_parallel=2, tp_communication="rs_ag", data_parallel=4,
              network_tiers=dict(tensor=0, pipeline=0, data=0, expert=0)), "with tp_overlap is not modelled yet"),
    ({}, dict(context_parallel=2, data_parallel=4, network_tiers=dict(tensor=0, pipeline=0, data=0, expert=0,
                                                                     context=0)),
     "with context_parallel > 1 is not modelled yet"),
    ({}, dict(offload=dict(activations=True)), "with offload is not modelled yet"),
])
def test_the_overlap_is_refused_where_it_means_nothing_or_is_not_modelled(model, execution, words):
    data = EstimateInput.model_validate({"model": {**QWEN3_30B_A3B, **model},
                                         "execution": {**LAYOUT, "expert_overlap": True, **execution},
                                         "system": "gb200_measured"})
    problems = [m for f, m in layout_problems(data.model, data.execution) if f == "execution.expert_overlap"]
    assert any(words in m for m in problems), problems


def _row(extra: dict, pp: int = 1, recompute: str = "none") -> MeasuredRun:
    model = dict(name="Qwen3-30B-A3B", layers=48, hidden=2048, ffn_hidden=6144, heads=32, kv_heads=4, head_dim=128,
                 vocab=151936, seq_len=4096, mlp="swiglu", norm="rmsnorm", attention="gqa", sliding_window=None,
                 tied_embeddings=False, position_embedding="rope", mla=None, mtp_layers=None, truncated_from=None,
                 moe=dict(experts=128, top_k=8, expert_ffn_hidden=768, shared_experts=0, shared_expert_ffn_hidden=0,
                          dense_layers=0, layer_freq=1, capacity_factor=None, token_dropping=False))
    return MeasuredRun.model_validate(dict(
        id="t/qwen3",
        source=dict(where="NVIDIA-NeMo/Megatron-Bridge@0 docs/performance-summary.md", row="|", quality="ok"),
        software=None, system=dict(gpu="gb200", num_gpus=8, gpus_per_nvlink_domain=72), model=model,
        parallel=dict(tp=1, pp=pp, vp=None, cp=1, ep=8 // pp, etp=1, dp=8 // pp, fsdp=False, sequence_parallel=False,
                      distributed_optimizer=True, tp_comm_overlap=False),
        batch=dict(global_batch=512, micro_batch=4, gradient_accumulation=16 * pp), precision="mxfp8",
        recompute=dict(granularity=recompute, modules=None, layers=None),
        measured=dict(iteration_s=6.5, derived_from="step_time", as_reported={}), consistency=[], notes="",
        extra={"model_cite": "NVIDIA-NeMo/Megatron-Bridge@0 src/megatron/bridge/models/qwen/qwen_provider.py",
               **extra}))


def test_a_row_whose_recipe_overlaps_the_all_to_alls_states_it_in_its_case():
    stated = run_case(_row({"moe_a2a_overlap": True}), "gb200_measured")
    assert stated.input is not None and stated.input.execution.expert_overlap is True
    for extra in ({}, {"moe_a2a_overlap": False}, {"moe_a2a_overlap": "yes"}):
        assert run_case(_row(extra), "gb200_measured").input.execution.expert_overlap is None
    refused = run_case(_row({"moe_a2a_overlap": True}, pp=2), "gb200_measured")
    assert refused.input is None and refused.unsupported == ()
    assert refused.invalid is not None and refused.invalid[0] == "extra.moe_a2a_overlap"
    assert "needs pipeline_interleaving > 1" in refused.invalid[1]


def test_the_physical_projection_refuses_the_overlap_naming_the_field():
    concrete = lower(case(expert_overlap=True)).concrete()
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    with pytest.raises(UnsupportedFeatureError) as error:
        physical_schedule(concrete, pricer, source="c.yaml")
    assert str(error.value).startswith("c.yaml: execution.expert_overlap: the physical projection")


def test_a_model_with_dense_blocks_hides_only_its_moe_blocks_all_to_alls():
    """Review: the dense blocks' variant kept the overlap (refused: no experts), and without another overlap its
    plan had no ConcretePlanIR for the stage's averages."""
    model = {**QWEN3_30B_A3B, "moe": {**QWEN3_30B_A3B["moe"], "dense_layers": 2}}

    def mixed(**execution) -> EstimateInput:
        return EstimateInput.model_validate({"model": model, "execution": {**LAYOUT, "dp_overlap": False,
                                                                           **execution},
                                             "system": "gb200_measured"})
    plain = estimate(mixed()).views["system_evidence"].components_s
    overlapped = estimate(mixed(expert_overlap=True)).views["system_evidence"].components_s
    assert overlapped.forward == pytest.approx(plain.forward, rel=1e-12)
    # the stage's 46 MoE blocks hide the rule's time in each of the 16 microbatches, its 2 dense blocks nothing
    uniform = EstimateInput.model_validate({"model": QWEN3_30B_A3B, "system": "gb200_measured",
                                            "execution": {**LAYOUT, "dp_overlap": False, "expert_overlap": True}})
    concrete = lower(uniform).concrete()
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    nodes = expert_nodes([t for t in concrete.tasks if t.phase == "forward"], _expert_pass_s(pricer))
    saved = plain.tensor_parallel - overlapped.tensor_parallel
    assert saved == pytest.approx(46 * 16 * expert_overlap_hidden_s(nodes, 48, 15, 16), rel=1e-9)


def test_the_interleaved_schedule_hides_the_merged_steps_share():
    """PP 2, 2 chunks of 12 blocks, 16 microbatches: the first stage merges 32 - (2 + 2 + 1) = 27 of its 32 steps;
    each of its 24 blocks hides the rule's time in each microbatch."""
    layout = dict(pipeline_parallel=2, pipeline_interleaving=2, data_parallel=8, global_batch=512)
    plain = estimate(case(**layout)).views["system_evidence"].components_s
    overlapped = estimate(case(expert_overlap=True, **layout)).views["system_evidence"].components_s
    concrete = lower(case(expert_overlap=True, **layout)).concrete()
    assert (concrete.schedule.microbatches, concrete.schedule.blocks_per_chunk) == (16, 12)
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    nodes = expert_nodes([t for t in concrete.tasks if t.phase == "forward"], _expert_pass_s(pricer))
    hidden = expert_overlap_hidden_s(nodes, 12, 27, 32)
    assert plain.tensor_parallel - overlapped.tensor_parallel == pytest.approx(24 * 16 * hidden, rel=1e-9)
    # the bubble is the warm-up and cool-down steps, unmerged (review)
    for name in ("forward", "backward", "pipeline_bubble", "pipeline_parallel", "data_parallel"):
        assert getattr(overlapped, name) == getattr(plain, name)


def test_a_recomputed_task_is_redone_inside_its_nodes_backward():
    """Selective recomputation (moe_act: the experts' activation) with the overlap: the clone's forward time is
    in the experts node's backward, so the merged step holds it where Megatron-Core recomputes it, and the
    recompute component itself is unchanged."""
    selective = dict(recompute="selective", recompute_modules=["moe_act"])
    concrete = lower(case(expert_overlap=True, **selective)).concrete()
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    forward = [t for t in concrete.tasks if t.phase == "forward"]
    clones = [t for t in concrete.tasks if t.phase == "recompute"]
    assert [t.clone_of for t in clones] == ["mlp.experts_swiglu"]
    redo = pricer.task(clones[0]).passes["forward"].processing_s
    with_redo = expert_nodes(forward, _expert_pass_s(pricer), _recompute_s(pricer, concrete.tasks))
    without = expert_nodes(forward, _expert_pass_s(pricer))
    assert with_redo.experts_backward_s - without.experts_backward_s == pytest.approx(redo, rel=1e-12)
    assert with_redo.attention_backward_s == without.attention_backward_s
    plain = estimate(case(**selective)).views["system_evidence"].components_s
    overlapped = estimate(case(expert_overlap=True, **selective)).views["system_evidence"].components_s
    assert overlapped.recompute == plain.recompute > 0
    hidden = expert_overlap_hidden_s(with_redo, 48, 15, 16)
    assert plain.tensor_parallel - overlapped.tensor_parallel == pytest.approx(48 * 16 * hidden, rel=1e-9)


@pytest.mark.parametrize("mode, field, words", [
    ("gap", "execution.expert_overlap", "the physical projection (trace, explain) does not schedule"),
    ("by_task", "--by-task", "the expert overlap makes block times less than sums over tasks"),
])
def test_explain_refuses_the_overlap_in_either_mode(mode, field, words):
    """Review: --by-task sent a case whose only concurrency is the overlap to plain explain, which refuses it."""
    from harness.errors import InputError
    from harness.explain import explain_input

    with pytest.raises(InputError) as error:
        explain_input(case(expert_overlap=True, dp_overlap=False), mode=mode, source="c.yaml")
    assert error.value.field == field and words in error.value.message


def test_a_stated_overlap_the_case_cannot_price_yet_is_priced_exposed_and_said_so():
    """With full recomputation the overlap is not modelled yet: the row is estimated with its all-to-alls
    exposed (an upper bound: the overlap only hides time), never fitted, the reason naming the fact."""
    row = _row({"moe_a2a_overlap": True}, recompute="full")
    stated = run_case(row, "gb200_measured")
    assert stated.input is not None and stated.input.execution.expert_overlap is None
    assert stated.input.execution.recompute == "full"
    (field, why), = [(f, w) for f, w in stated.unfitted if f == "extra.moe_a2a_overlap"]
    assert "an upper bound" in why and "recompute: full is not modelled yet" in why
    assert stated.input == run_case(_row({}, recompute="full"), "gb200_measured").input


def test_an_mtp_layers_block_hides_its_all_to_alls_like_the_others():
    """Megatron-Core's schedule plan holds the MTP layers with the decoder's (TransformerModelChunkSchedulePlan):
    the stage's 48 + 1 MoE blocks, counted as 48 at 49/48 of a block each, hide the rule's time in each of the 16
    microbatches; the MTP head outside the blocks is unchanged."""
    with_mtp = {**QWEN3_30B_A3B, "mtp_layers": 1}

    def mtp(**execution) -> EstimateInput:
        return EstimateInput.model_validate({"model": with_mtp, "execution": {**LAYOUT, **execution},
                                             "system": "gb200_measured"})
    plain = estimate(mtp()).views["system_evidence"].components_s
    overlapped = estimate(mtp(expert_overlap=True)).views["system_evidence"].components_s
    for name in ("forward", "backward", "optimizer", "pipeline_bubble", "data_parallel"):
        assert getattr(overlapped, name) == getattr(plain, name)
    concrete = lower(case(expert_overlap=True)).concrete()
    pricer = pricer_for(load_profile("gb200_measured"), COST_VIEWS["system_evidence"], concrete.datatype)
    nodes = expert_nodes([t for t in concrete.tasks if t.phase == "forward"], _expert_pass_s(pricer))
    saved = plain.tensor_parallel - overlapped.tensor_parallel
    assert saved == pytest.approx(49 * 16 * expert_overlap_hidden_s(nodes, 48, 15, 16), rel=1e-9)
