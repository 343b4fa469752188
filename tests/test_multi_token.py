"""Multi-token prediction (model.mtp_layers; DeepSeek-V3, Megatron-Core's MTP): extra blocks on the last stage and
each layer's head (harness.ir.blocks, harness.passes.multi_token, harness.estimate's MixedBlocks).

The FLOP oracle's recorder has no MTP module without the heavy extra: the head's FLOPs are computed by hand here
(2 x m x n x k per GEMM pass, Megatron-Core's MultiTokenPredictionLayer shapes)."""

from __future__ import annotations

import pytest

from harness.cost.views import COST_VIEWS, pricer_for
from harness.errors import UnsupportedFeatureError
from harness.estimate import estimate, mixed_lowerings
from harness.ir import blocks
from harness.passes.multi_token import head_messages, head_tasks
from test_moe import QWEN3_30B_A3B, case

PP1 = dict(pipeline_parallel=1, data_parallel=16, global_batch=512)  # the Qwen layout: 32 microbatches


def test_the_mtp_layers_are_blocks_of_the_last_kind_on_the_last_stage():
    data = case(model=dict(mtp_layers=2), execution=dict(pipeline_parallel=2, data_parallel=8, global_batch=256,
                                                         expert_parallel=8,
                                                         network_tiers=dict(tensor=0, pipeline=1, data=1, expert=0)))
    assert blocks.has_stages(data.model) and blocks.stage_blocks(data.model, data.execution) == [(24, 0), (26, 0)]
    dense_first = data.model.model_copy(update={"moe": data.model.moe.model_copy(update={"dense_layers": 3})})
    assert blocks.stage_blocks(dense_first, data.execution) == [(21, 3), (26, 0)]  # block 47 is MoE: MTP too


def test_the_head_is_two_norms_a_2h_to_h_projection_and_a_final_norm_by_hand():
    data = case(model=dict(mtp_layers=1), execution=dict(tensor_parallel=2, tp_communication="rs_ag",
                                                         data_parallel=8, global_batch=256, expert_parallel=8,
                                                         network_tiers=dict(tensor=0, pipeline=1, data=1, expert=1)))
    tasks = {t.name: t for t in head_tasks(data.model, data.execution)}
    assert list(tasks) == ["mtp.enorm", "mtp.hnorm", "mtp.eh_proj", "mtp.final_norm"]
    tokens, h = 1 * 4096, 2048  # microbatch x sequence; TP 2 splits eh_proj's output width
    eh = tasks["mtp.eh_proj"]
    assert eh.forward.operations == 2 * tokens * (2 * h) * (h // 2)  # [4096, 4096] x [4096, 1024]
    assert eh.activation_grad.operations == eh.weight_grad.operations == 2 * tokens * (2 * h) * (h // 2)
    assert eh.forward.engine == "matrix"
    assert tasks["mtp.enorm"].primitive == "rms_norm"
    forward, backward = head_messages(data.model, data.execution)
    b = 2  # bfloat16
    assert [(m.collective, m.message_bytes, m.participants) for m in forward] == [
        ("all_gather", tokens * 2 * h * b, 2), ("all_gather", tokens * h * b, 2)]
    assert [(m.collective, m.message_bytes) for m in backward] == [("all_gather", tokens * h * b),
                                                                   ("reduce_scatter", tokens * 2 * h * b)]
    assert head_messages(case(model=dict(mtp_layers=1)).model, case().execution) == ((), ())  # TP 1: none


def test_one_mtp_layer_adds_a_block_its_head_and_an_output_layer_per_microbatch():
    """PP 1: the stage holds 48 + 1 blocks, the composition counts 48 per stage at (49 / 48) of a block each; the
    head and the output layer come once per microbatch (32 = 512 / DP 16). Forward of peak_only:
    with - without = 32 x (one block's forward + the head's forward + the output layer's forward)."""
    model = dict(mtp_layers=1, vocabulary=151936)
    with_mtp, without = case(model=model, execution=PP1), case(model=dict(vocabulary=151936), execution=PP1)
    view = COST_VIEWS["peak_only"]
    moe, _, mixed = mixed_lowerings(with_mtp)
    assert mixed.stages == ((49, 0),) and mixed.per_stage == 48 and mixed.head.layers == 1
    pricer = pricer_for(load_profile_of(with_mtp), view, "bfloat16")
    plan = moe.plan
    head = sum(pricer.work(t.forward).processing_s for t in mixed.head.tasks)  # TP 1: no head messages
    output = sum(pricer.work(t.forward).processing_s for t in plan.output_tasks)
    base = estimate(without).views["peak_only"].components_s
    block = (base.forward - 32 * output) / (32 * 48)  # one block's forward in the model without MTP
    got = estimate(with_mtp).views["peak_only"].components_s
    assert got.forward - base.forward == pytest.approx(32 * (block + head + output), rel=1e-9)
    assert got.pipeline_parallel == base.pipeline_parallel  # no boundary: PP 1


def load_profile_of(data):
    from harness.evidence.profile import load_profile
    return load_profile(data.system)


def test_mtp_on_a_dense_model_and_in_one_plan_is_refused_by_name():
    dense = {k: v for k, v in QWEN3_30B_A3B.items() if k != "moe"}
    from harness.cases import EstimateInput, validate_input
    data = EstimateInput.model_validate({"model": {**dense, "mtp_layers": 1}, "execution": dict(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, global_batch=512, microbatch=1,
        datatype="bfloat16", network_tiers=dict(tensor=0, pipeline=1, data=1)), "system": "h100_sxm_80g"})
    with pytest.raises(UnsupportedFeatureError) as error:
        validate_input("<t>", data)
    assert error.value.field == "model.mtp_layers"
    from harness.pipeline import lower
    validate_input("<t>", case(model=dict(mtp_layers=1)))  # a MoE model with MTP: the estimate prices it
    with pytest.raises(UnsupportedFeatureError) as refused:
        lower(case(model=dict(mtp_layers=1)), "mtp.yaml")  # one plan: lower, trace, explain refuse it
    assert (refused.value.source, refused.value.field) == ("mtp.yaml", "model.mtp_layers")
    with pytest.raises(UnsupportedFeatureError) as error:  # the offload transfers hold no MTP layer
        validate_input("<t>", case(model=dict(mtp_layers=1), execution=dict(offload=dict(activations=True))))
    assert error.value.field == "model.mtp_layers" and "\n" not in str(error.value)
    validate_input("<t>", case(model=dict(mtp_layers=1), execution=dict(dp_overlap=True)))  # DP overlap: priced


def test_absent_mtp_is_absent_from_the_shape():
    assert "mtp_layers" not in case().model.model_dump() and not blocks.has_stages(case().model)
