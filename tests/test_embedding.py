"""The embedding lookup and the vocabulary matrices (harness/passes/output_layer.py, rules.embedding).

Counted when the shape states ``tied_embeddings`` (true or false) next to its vocabulary; absent, Calculon's
convention (rule ``vocabulary-weights-uncounted``). Every figure below is computed here by hand from the module
rules: the vocabulary padded to a multiple of 128 x TP and split over TP, ``V/TP x hidden`` elements per
matrix, a block linear's state per element (weights b, gradient b / shards, fp32 master + two fp32 moments
= 12 / shards bytes)."""

from __future__ import annotations

import pytest

from harness.cases import load_case
from harness.cli import main
from harness.cost.views import COST_VIEWS, Pricer
from harness.estimate import estimate_lowering, switched_off
from harness.evidence.profile import load_profile
from harness.ir.checks import layout_problems
from harness.passes.output_layer import model_plan_tasks
from harness.pipeline import lower
from harness.schedule.memory import block_memory, stage_memory

from conftest import CASES_DIR

PEAK, SYSTEM = COST_VIEWS["peak_only"], COST_VIEWS["system_evidence"]


def small(tied=None, *, tp=2, pp=1, dp=1, sharding=False, training=True, vocabulary=1000):
    """hidden 64, sequence 16, microbatch 2 (32 tokens), vocabulary 1000 (padded to 1024 at TP 2: 512 rows
    per rank; to 2048 at TP 16), float16 (b = 2), 4 blocks."""
    data = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    shape = data.model.model_copy(update={"hidden": 64, "feedforward": 256, "sequence_length": 16,
                                          "attention_heads": 4, "head_size": 16, "blocks": 4,
                                          "vocabulary": vocabulary, "tied_embeddings": tied})
    execution = data.execution.model_copy(update={
        "microbatch": 2, "global_batch": 2 * dp * 4, "tensor_parallel": tp, "pipeline_parallel": pp,
        "data_parallel": dp, "optimizer_sharding": sharding, "training": training, "recompute": "none"})
    return data.model_copy(update={"model": shape, "execution": execution})


def test_the_lookup_gathers_a_row_per_token_and_writes_the_dense_table_gradient():
    data = small(True)
    lookup, logits, loss = model_plan_tasks(data.model, data.execution, 1000)
    assert (lookup.name, lookup.primitive, logits.name, loss.name) == (
        "embedding.lookup", "embedding", "output.logits", "output.loss")
    tokens, hidden, rows = 32, 64, 512  # 2 x 16; 1024 / TP 2
    # forward: mask t x h (2048 operations); reads the 32 rows (32 x 64 x 2 B) and the int64 ids (8 B each)
    assert (lookup.forward.operations, lookup.forward.bytes_read, lookup.forward.bytes_written) == (
        2048, 4096 + 256, 4096) == (tokens * hidden, tokens * hidden * 2 + 8 * tokens, tokens * hidden * 2)
    assert lookup.activation_grad.operations == lookup.activation_grad.bytes_accessed == 0  # ids: no gradient
    # weight gradient: dY's rows added (2048), reads dY and the ids, writes the whole 512 x 64 table
    assert (lookup.weight_grad.operations, lookup.weight_grad.bytes_read, lookup.weight_grad.bytes_written) == (
        2048, 4352, 65536) == (tokens * hidden, tokens * hidden * 2 + 8 * tokens, rows * hidden * 2)
    assert lookup.forward.engine == lookup.weight_grad.engine == "vector"


def test_absent_tied_embeddings_keeps_the_calculon_convention_and_the_plan():
    absent = lower(small(None))
    assert absent.plan.vocabulary_weights is None
    assert [t.name for t in absent.plan.output_tasks] == ["output.logits", "output.loss"]
    assert "vocabulary_weights" not in absent.plan.canonical()
    with switched_off("vocabulary-weights-uncounted"):  # the alternative: counted as tied
        counted = lower(small(None))
        assert counted.plan.vocabulary_weights == lower(small(True)).plan.vocabulary_weights
        assert counted.plan.output_tasks[0].name == "embedding.lookup"
    assert lower(small(None)).plan.vocabulary_weights is None


@pytest.mark.parametrize("tied, pp, matrices", [(True, 1, 1), (False, 1, 2), (True, 2, 1), (False, 2, 1)])
def test_the_first_stage_holds_the_embedding_and_untied_at_pp_1_the_output_matrix(tied, pp, matrices):
    """512 x 64 = 32 768 elements per matrix: weights 65 536 B, gradient 65 536 B, Adam state 12 x 32 768 =
    393 216 B; the figures grow by that many matrices and nothing else moves."""
    before, after = (lower(small(t, pp=pp)).plan for t in (None, tied))
    m0, m1 = (stage_memory(p, block_memory(p)) for p in (before, after))
    assert m1.weight - m0.weight == matrices * 65536
    assert m1.weight_grad - m0.weight_grad == matrices * 65536
    assert m1.optimizer - m0.optimizer == matrices * 393216
    assert m1.tier1_total - m0.tier1_total == matrices * (65536 + 65536 + 393216)
    assert (m1.activation, m1.activation_grad, m1.activation_checkpoint) == (
        m0.activation, m0.activation_grad, m0.activation_checkpoint)
    w = after.vocabulary_weights
    assert len(w.optimizer) == matrices and w.optimizer[0].operations == 11 * 32768  # Adam: 11 per element
    assert w.gradient_messages == ()  # no data parallelism
    if tied and pp > 1:  # the last stage's copy: its gradient all-reduced with the first stage's
        assert (w.embedding_group.collective, w.embedding_group.message_bytes, w.embedding_group.participants,
                w.embedding_group.network_tier) == ("all_reduce", 65536, 2, 1)  # the pipeline tier
    else:
        assert w.embedding_group is None


def test_data_parallel_reduces_the_vocabulary_gradients_and_sharding_divides_their_state():
    w = lower(small(False, dp=2)).plan.vocabulary_weights  # PP 1, untied: two matrices, 131 072 B of gradient
    assert [(m.collective, m.message_bytes, m.participants, m.network_tier) for m in w.gradient_messages] == [
        ("all_reduce", 131072, 2, 1)]
    w = lower(small(False, dp=2, sharding=True)).plan.vocabulary_weights
    assert [(m.collective, m.message_bytes) for m in w.gradient_messages] == [
        ("reduce_scatter", 131072), ("all_gather", 131072)]
    c = w.capacity
    assert (c.weight_bytes, c.weight_grad_bytes, c.optimizer_bytes) == (131072, 65536, 393216)  # / 2 shards


def test_the_padding_is_megatron_cores_multiple_of_128_x_tp():
    w = lower(small(True, tp=4, vocabulary=1100)).plan.vocabulary_weights  # 1100 -> 1536 (3 x 512): 384 a rank
    assert w.capacity.weight_bytes == 384 * 64 * 2
    w = lower(small(True, tp=1, vocabulary=1100)).plan.vocabulary_weights  # 1100 -> 1152 (9 x 128)
    assert w.capacity.weight_bytes == 1152 * 64 * 2


def test_inference_holds_the_weights_only():
    data = small(False, training=True)
    data = data.model_copy(update={"execution": data.execution.model_copy(update={"training": False})})
    w = lower(data).plan.vocabulary_weights
    assert (w.capacity.weight_bytes, w.capacity.optimizer_bytes, w.optimizer, w.gradient_messages) == (
        131072, 0, (), ())


def test_the_estimate_adds_the_lookup_per_microbatch_and_the_state_once_per_iteration():
    """megatron-22B (TP 8, PP 1, DP 1 widened to DP 2) with Llama-2's vocabulary 32 000 (32 768 padded: 4 096
    rows per rank, 4 096 x 6 144 elements per matrix), untied: two matrices on the first stage."""
    base = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    profile = load_profile("a100_80g")

    def case(tied):
        execution = base.execution.model_copy(update={"data_parallel": 2, "global_batch": 8})
        shape = base.model.model_copy(update={"vocabulary": 32000, "tied_embeddings": tied})
        return lower(base.model_copy(update={"model": shape, "execution": execution}))

    absent, untied = case(None), case(False)
    v0, v1 = (estimate_lowering(x, profile).views["peak_only"] for x in (absent, untied))
    pricer = Pricer(profile, PEAK, "float16")
    lookup = untied.plan.output_tasks[0]
    mb = untied.plan.schedule.microbatches  # 8 / 2 / 4 = 1
    c0, c1 = v0.components_s.model_dump(), v1.components_s.model_dump()
    assert c1["forward"] - c0["forward"] == pytest.approx(mb * pricer.work(lookup.forward).processing_s, rel=1e-9)
    assert c1["backward"] - c0["backward"] == pytest.approx(mb * pricer.work(lookup.weight_grad).processing_s,
                                                            rel=1e-9)
    elements = 4096 * 6144
    # Adam on 2 matrices: 11 operations per element on the vector engine (peak_only: operations / peak);
    # the memory time of reading the fp32 master and moments (12 B per element) adds in no_overlap mode
    adam = 2 * pricer.work(untied.plan.vocabulary_weights.optimizer[0], optimizer=True).processing_s
    assert untied.plan.vocabulary_weights.optimizer[0].operations == 11 * elements
    assert untied.plan.vocabulary_weights.optimizer[0].bytes_read == 12 * elements
    assert c1["optimizer"] - c0["optimizer"] == pytest.approx(adam, rel=1e-9)
    # one all-reduce of both gradients (2 x 4096 x 6144 x 2 B) over DP 2 on tier 1, by the volume model
    net = profile.networks[1]
    model = net.collectives["all_reduce"]
    adjusted = 2 * elements * 2 * model.volume_multiplier
    adjusted += adjusted / 2 * model.participant_offset
    assert c1["data_parallel"] - c0["data_parallel"] == pytest.approx(
        net.latency_s + adjusted / net.bandwidth_bytes_per_s, rel=1e-9)
    assert v1.total_s == pytest.approx(sum(c1.values()), rel=1e-12)


def test_the_embedding_group_all_reduce_is_priced_once_with_pp():
    base = load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()  # PP 8, DP 1, pipeline tier 1
    profile = load_profile("a100_80g")
    shape = base.model.model_copy(update={"vocabulary": 51200, "tied_embeddings": True})
    tied = lower(base.model_copy(update={"model": shape}))
    absent = lower(base.model_copy(update={"model": shape.model_copy(update={"tied_embeddings": None})}))
    c1, c0 = (estimate_lowering(x, profile).views["peak_only"].components_s.model_dump() for x in (tied, absent))
    net = profile.networks[1]
    model = net.collectives["all_reduce"]
    adjusted = 6400 * 12288 * 2 * model.volume_multiplier  # 51 200 / TP 8 rows x hidden x 2 B, 2 ranks
    adjusted += adjusted / 2 * model.participant_offset
    assert c1["data_parallel"] - c0["data_parallel"] == pytest.approx(
        net.latency_s + adjusted / net.bandwidth_bytes_per_s, rel=1e-9)


def test_the_search_and_the_overlapped_projection_price_the_same_vocabulary_state():
    """The concrete path (DP overlap) adds the same once-per-iteration seconds as the portable one."""
    base = load_case(CASES_DIR / "megatron-22B_full.yaml").estimate_input()
    profile = load_profile("a100_80g")

    def total(tied, overlap):
        execution = base.execution.model_copy(update={"data_parallel": 2, "global_batch": 8,
                                                      "dp_overlap": overlap})
        shape = base.model.model_copy(update={"vocabulary": 32000, "tied_embeddings": tied})
        view = estimate_lowering(lower(base.model_copy(update={"model": shape, "execution": execution})),
                                 profile).views["peak_only"]
        return view.components_s.model_dump()

    portable = total(False, False)["optimizer"] - total(None, False)["optimizer"]
    concrete = total(False, True)["optimizer"] - total(None, True)["optimizer"]
    assert portable == pytest.approx(concrete, rel=1e-12) and portable > 0


def test_tied_embeddings_without_a_vocabulary_is_one_line_naming_the_field(tmp_path, capsys):
    data = small(True)
    shape = data.model.model_copy(update={"vocabulary": None})
    assert layout_problems(shape, data.execution)[0][0] == "model.tied_embeddings"
    text = (CASES_DIR / "gpt3-175B_full.yaml").read_text()
    path = tmp_path / "case.yaml"
    path.write_text(text.replace("  blocks: 96\n", "  blocks: 96\n  tied_embeddings: false\n"))
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.tied_embeddings" in err and "model.vocabulary" in err, err


def test_lower_prints_the_lookup_and_the_vocabulary_matrices(tmp_path, capsys):
    text = (CASES_DIR / "gpt3-175B_full.yaml").read_text()
    path = tmp_path / "case.yaml"
    path.write_text(text.replace("  blocks: 96\n", "  blocks: 96\n  vocabulary: 51200\n  tied_embeddings: true\n"))
    assert main(["lower", str(path), "--stage", "distributed"]) == 0
    out = capsys.readouterr().out
    assert "%embedding.lookup = embedding[forward](-) {tokens=2048 hidden=12288 vocabulary=6400 participants=8}" in out
    assert main(["lower", str(path), "--stage", "portable"]) == 0
    out = capsys.readouterr().out  # 6400 x 12288 x 2 B = 157 286 400 B; the embedding group's all-reduce
    assert "vocabulary matrices on the first stage: weights=1.57286e+08B" in out
    assert "once per iteration: all_reduce 1.57286e+08B x2 tier 1" in out


def test_every_execution_of_a_small_search_prices_the_vocabulary_state_as_its_own_estimate():
    """All executions of a 2-block model on 2 processors over two network tiers (tier placements, DP overlap,
    PP 2 with the embedding group's all-reduce, DP 2 with the gradient synchronisation, offload refused below
    3 blocks): bit for bit against one estimate per execution."""
    import pyarrow as pa

    from harness.ir.model import TransformerShape
    from harness.search.evaluate import SearchProblem
    from harness.search.reference import reference_search
    from harness.search.run import run_search
    from harness.search.space import SpaceOptions

    shape = TransformerShape(hidden=1024, feedforward=4096, sequence_length=512, attention_heads=16, head_size=64,
                             blocks=2, vocabulary=32000, tied_embeddings=False)
    problem = SearchProblem(shape, 2, 2, "float16", load_profile("a100_80g"), SpaceOptions(tp_overlap=False), 5,
                            prune=False,
                            collect_rows=True)
    counts, best, rows = reference_search(problem)
    tables = []
    result = run_search(problem, workers=1, on_rows=tables.append)
    table = pa.concat_tables(tables)
    columns = ("group", "position", "status", "total_s", "tier1_total_bytes")
    got = list(zip(*(table[c].to_pylist() for c in columns)))
    assert result.counts == counts and len(got) == len(rows) > 50
    assert got == [row[:4] + (row[5],) for row in rows]
    assert {row[2] for row in rows} >= {"ok"}


def test_explain_lists_the_vocabulary_state_and_the_shares_add_up():
    from harness.explain import by_task

    base = load_case(CASES_DIR / "gpt3-175B_full.yaml").estimate_input()  # PP 8: tied, the embedding group
    execution = base.execution.model_copy(update={"data_parallel": 2, "global_batch": 128})
    shape = base.model.model_copy(update={"vocabulary": 51200, "tied_embeddings": True})
    lowering = lower(base.model_copy(update={"model": shape, "execution": execution}))
    tasks = by_task(lowering.plan, load_profile("a100_80g"), PEAK, model=lowering.model)
    components = {c.component: c for c in tasks.components}
    for c in tasks.components:
        assert sum(t.time_s for t in c.tasks) == pytest.approx(c.time_s, rel=1e-9, abs=1e-15)
    names = {t.task for t in components["data_parallel"].tasks}
    assert {"vocabulary.all_reduce", "embedding_group.all_reduce"} <= names
    assert "vocabulary.optimizer/0" in {t.task for t in components["optimizer"].tasks}
