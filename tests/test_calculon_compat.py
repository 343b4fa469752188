"""Every Calculon 0.1.0 compatibility rule (harness.calculon_compat) matters: switched off, parity breaks as named.

With every rule on, each compared metric of the records below is bit-equal to
Calculon's. Switching one rule off must break exactly the named metrics of
exactly the named records:

- the arithmetic-form rules (order of summation, grouping of products) move
  the last bits of a pinned set of records (PIN: measured with
  ``harness.calculon_compat.switched_off`` on these records; the full
  vendored corpus counts are in ``test_full_corpus_counts``), and stay within
  the 1e-9 % budget: they are about bit-identity, not accuracy;
- the accounting rules move every record of a kind stated independently
  (training, no full recompute, inference with PP > 1), by an amount computed
  here by hand from the Calculon-format shape and layout.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

import pytest

from harness import calculon_compat as compat
from harness.estimate import switched_off
from harness.evidence.profile import load_profile
from harness.oracles.calculon import check_record, estimate_record, estimate_values
from harness.oracles.records import OracleRecord, RecordIndex

# The 16 case records plus differential records that exercise the rare forms (interleaving with remainder
# microbatches, uneven stages, TP on the DP tier, PP with interleaving).
EXTRA = ("differential/0048/megatron-40B", "differential/0321/megatron-40B", "differential/0295/megatron-40B",
         "differential/1076/megatron-5B", "differential/0011/palm-540B", "differential/0052/anthropic-52B")
TOTALS = {"total_s", "system_efficiency", "total_efficiency", "sample_rate_per_s"}
GRADIENT_TRAFFIC = {"workload.activation_grad_bytes", "components_s.backward", "components_s.pipeline_bubble",
                    "compute_efficiency"} | TOTALS


@pytest.fixture(scope="module")
def records() -> list[OracleRecord]:
    index = RecordIndex(("records/cases.json", "records/differential.json.gz"))
    return [index.get(i) for i in index.by_id if not i.startswith("differential/")] + [index.get(i) for i in EXTRA]


def _training(r: OracleRecord) -> bool:
    return r.calculon_execution["training"]


# rule -> (the metrics it breaks, the (record id, view) it breaks: a PIN, or a predicate on the record)
Affected = frozenset | Callable[[OracleRecord], bool]
EXPECTED: dict[str, tuple[set[str], Affected]] = {
    "total-in-calculon-order": (TOTALS, frozenset({
        "differential/0011/palm-540B [system_evidence]", "differential/0048/megatron-40B [peak_only]",
        "differential/1076/megatron-5B [system_evidence]", "gpt3-175B/full [peak_only]",
        "gpt3-175B/seqsel [system_evidence]", "inference/gpt3-175B/ar [peak_only]",
        "inference/gpt3-175B/seqpar [system_evidence]", "turing-530B/full [peak_only]"})),
    "backward-as-two-products": ({"components_s.backward", "compute_efficiency"} | TOTALS, frozenset({
        "differential/0048/megatron-40B [peak_only]", "gpt3-175B/seqsel [peak_only]",
        "megatron-22B/full [peak_only]"})),
    "tensor-parallel-by-direction": ({"components_s.tensor_parallel"}, frozenset({
        "differential/0048/megatron-40B [peak_only]", "differential/0321/megatron-40B [peak_only]",
        "differential/0321/megatron-40B [system_evidence]"})),
    "pipeline-parallel-by-direction": ({"components_s.pipeline_parallel"}, frozenset({
        "differential/0295/megatron-40B [system_evidence]", "differential/1076/megatron-5B [system_evidence]"})),
    "bubble-grouping": ({"components_s.pipeline_bubble"}, frozenset({
        "differential/0011/palm-540B [system_evidence]", "differential/0052/anthropic-52B [system_evidence]"})),
    "block-backward-in-calculon-order": ({"components_s.pipeline_bubble"} | TOTALS, frozenset({
        "differential/0048/megatron-40B [peak_only]", "gpt3-175B/full [system_evidence]",
        "megatron-1T/full [system_evidence]", "megatron-1T/seqsel [system_evidence]"})),
    "stored-activations-minus-working-block": (
        {"memory_bytes.activation", "memory_bytes.tier1_total"},
        lambda r: _training(r) and r.calculon_execution["activation_recompute"] != "full"),
    "one-fp32-gradient-plus-sharded": ({"memory_bytes.weight_grad", "memory_bytes.tier1_total"}, _training),
    "dropout-gradient-at-mask-size": (  # float8 masks and gradients are both one byte per element
        {"memory_bytes.activation_grad", "memory_bytes.tier1_total", "workload.block_activation_grad_bytes"},
        lambda r: _training(r) and r.calculon_execution["datatype"] != "float8"),
    "pointwise-gradient-traffic-as-forward": (GRADIENT_TRAFFIC, _training),
    "batch-matmul-gradient-reads-output-gradient": (GRADIENT_TRAFFIC, _training),
    "layer-norm-gradient-reads-one-tensor": (GRADIENT_TRAFFIC, _training),
    # Calculon's records state no vocabulary: the rule keeps the cases that do (and no tied_embeddings) as they were
    # (tests/test_embedding.py shows its alternative)
    "vocabulary-weights-uncounted": (set(), lambda r: False),
    # Calculon prices no work outside the blocks (its records state no vocabulary, its profiles no output layer or
    # host time): the rule is about the harness's own estimates (tests/test_schedule.py shows its alternative)
    "portable-total-summed-again": (set(), lambda r: False),
    "inference-backward-p2p-slot": (
        {"components_s.pipeline_bubble"} | TOTALS,
        lambda r: not _training(r) and r.calculon_execution["pipeline_par"] > 1),
}
ARITHMETIC = {name for name, (_, affected) in EXPECTED.items() if isinstance(affected, frozenset)}


def broken(records: list[OracleRecord]) -> dict[str, set[str]]:
    """``"<record> [<view>]"`` -> the metrics not bit-equal to Calculon's ("verdict" if the verdicts differ)."""
    out = {}
    for record in records:
        for parity in check_record(record):
            bits = {"verdict"} if not parity.verdict_match else {
                c.metric for c in parity.comparisons if c.estimate != c.oracle}
            if bits:
                out[f"{record.id} [{parity.view}]"] = bits
    return out


def test_every_rule_is_tested_and_every_test_names_a_rule():
    """The overlap/offload rules are measured on the overlap corpora (test_overlap_rules_effects)."""
    assert set(EXPECTED) == set(compat.RULES) - set(compat.OVERLAP_RULES)
    assert set(compat.OVERLAP_RULES) <= set(compat.RULES)


def test_with_every_rule_on_the_records_are_bit_identical_to_calculon(records):
    assert len(records) == 22 and broken(records) == {}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_switching_a_rule_off_breaks_parity_as_named(records, name):
    metrics, affected = EXPECTED[name]
    with switched_off(name):
        result = broken(records)
    if isinstance(affected, frozenset):
        expected = set(affected)
    else:
        expected = {f"{r.id} [{view}]" for r in records if affected(r) for view in r.views}
    assert set(result) == expected
    assert set().union(*result.values()) == metrics
    assert broken(records) == {}, "switched_off must restore the rule and forget what it memoized"


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_arithmetic_form_rules_move_bits_not_figures(records, name):
    """Off, the pinned records move in their last bits only: within the budget, not bit-identical."""
    by_id = {r.id: r for r in records}
    pinned = {key.rsplit(" [", 1)[0] for key in EXPECTED[name][1]}
    on = {i: estimate_record(by_id[i]) for i in pinned}
    with switched_off(name):
        off = {i: estimate_record(by_id[i]) for i in pinned}
    for record_id in pinned:
        for view in on[record_id].views:
            a, b = estimate_values(on[record_id].views[view]), estimate_values(off[record_id].views[view])
            assert all(b[m] == pytest.approx(a[m], rel=1e-14, abs=1e-300) for m in a), (record_id, view)
        assert all(p.ok for p in check_record(by_id[record_id], off[record_id]))  # the 1e-9 % budget holds


# --- the accounting rules, by hand -------------------------------------------------------------------------

def _shape(r: OracleRecord) -> dict[str, Any]:
    """The per-TP-rank element counts of one block, from the Calculon-format inputs (independent of the passes)."""
    m, e = r.calculon_model, r.calculon_execution
    tp = e["tensor_par"]
    tokens = e["microbatch_size"] * m["seq_size"]
    heads = e["microbatch_size"] * m["attn_heads"] // tp
    sharded = e["tensor_par_comm_type"] == "rs_ag"
    return {"b": {"float16": 2, "bfloat16": 2, "float8": 1, "float32": 4}[e["datatype"]],
            "outside": (tokens // tp if sharded else tokens) * m["hidden"],
            "scores": heads * m["seq_size"] ** 2, "gelu": m["feedforward"] * tokens // tp,
            "qk_inputs": heads * 2 * m["seq_size"] * m["attn_size"],
            "pv_inputs": heads * (m["seq_size"] ** 2 + m["seq_size"] * m["attn_size"])}


def _difference(record: OracleRecord, name: str, metric: str) -> dict[str, float]:
    """``off - on`` of one metric per view."""
    on = estimate_record(record)
    with switched_off(name):
        off = estimate_record(record)
    return {v: estimate_values(off.views[v])[metric] - estimate_values(on.views[v])[metric] for v in on.views}


HAND = {
    # one more stored block activation per block-microbatch factor: exactly the block's storage
    "stored-activations-minus-working-block": ("memory_bytes.activation",
                                               lambda r, s, w: w["block_activation_storage_bytes"]),
    # every block keeps its sharded gradient: exactly one more sharded block gradient
    "one-fp32-gradient-plus-sharded": ("memory_bytes.weight_grad", lambda r, s, w: w["block_weight_grad_bytes"]),
    # the probability dropout and the two block dropouts, at (b - 1) more bytes per element
    "dropout-gradient-at-mask-size": ("memory_bytes.activation_grad",
                                      lambda r, s, w: (s["b"] - 1) * (s["scores"] + 2 * s["outside"])),
    # softmax and GeLU gradients read one more tensor each
    "pointwise-gradient-traffic-as-forward": ("workload.activation_grad_bytes",
                                              lambda r, s, w: s["b"] * (s["scores"] + s["gelu"])),
    # QK^T and PV gradients also read their inputs
    "batch-matmul-gradient-reads-output-gradient": ("workload.activation_grad_bytes",
                                                    lambda r, s, w: s["b"] * (s["qk_inputs"] + s["pv_inputs"])),
    # both layer norms read their input once more
    "layer-norm-gradient-reads-one-tensor": ("workload.activation_grad_bytes",
                                             lambda r, s, w: s["b"] * 2 * s["outside"]),
}


@pytest.mark.parametrize("name", sorted(HAND))
@pytest.mark.parametrize("record_id", ["gpt3-175B/seqsel", "megatron-22B/seqsel", "differential/0052/anthropic-52B"])
def test_accounting_rules_move_the_hand_computed_amount(records, name, record_id):
    record = next(r for r in records if r.id == record_id)
    metric, amount = HAND[name]
    workload = {k: v for k, v in estimate_record(record).views["system_evidence"].workload.model_dump().items()}
    expected = amount(record, _shape(record), workload)
    assert expected > 0
    assert _difference(record, name, metric) == {"peak_only": expected, "system_evidence": expected}


@pytest.mark.parametrize("record_id", ["inference/gpt3-175B/ar", "inference/megatron-1T/seqpar"])
def test_the_inference_p2p_slot_is_one_latency_per_bubble_chunk(records, record_id):
    """Each chunk in the bubble ends with one edge block, whose backward is the zero-byte p2p: one latency."""
    record = next(r for r in records if r.id == record_id)
    e = record.calculon_execution
    pp, chunks = e["pipeline_par"], e["pipeline_interleaving"]
    microbatches = e["batch_size"] // e["data_par"] // e["microbatch_size"]
    extra = (chunks - 1) * (pp - microbatches % pp) if microbatches % pp else 0
    latency = load_profile(record.system).networks[e["pipeline_par_net"]].latency_s
    assert not e["training"] and pp > 1
    for view, moved in _difference(record, "inference-backward-p2p-slot", "components_s.pipeline_bubble").items():
        assert -moved == pytest.approx((pp - 1 + extra) * latency, rel=1e-12), view


def test_every_rule_is_called_where_it_says():
    for rule in compat.RULES.values():
        assert callable(getattr(compat, rule.function)) and rule.reason and rule.alternative
        for module in rule.used_in:
            source = inspect.getsource(importlib.import_module(module))
            assert f"compat.{rule.function}(" in source, (rule.name, module)


def test_unknown_rules_are_refused_and_the_default_is_restored_after_an_error():
    with pytest.raises(KeyError, match="unknown compatibility rule"):
        with switched_off("no-such-rule"):
            pass
    with pytest.raises(RuntimeError):
        with switched_off("total-in-calculon-order", "inference-backward-p2p-slot"):
            assert not compat.applies(compat.iteration_total)
            raise RuntimeError
    assert all(compat.applies(getattr(compat, rule.function)) for rule in compat.RULES.values())


@pytest.mark.slow
@pytest.mark.differential
def test_full_corpus_counts():
    """PIN: view estimates of the whole vendored corpus (cases + differential) each rule breaks when off."""
    index = RecordIndex(("records/cases.json", "records/differential.json.gz"))
    everything = [r for _, r in index.by_id.values()]
    counts = {}
    for name in sorted(EXPECTED):
        with switched_off(name):
            counts[name] = len(broken(everything))
    assert counts == {
        "total-in-calculon-order": 498, "backward-as-two-products": 198, "tensor-parallel-by-direction": 18,
        "pipeline-parallel-by-direction": 2, "bubble-grouping": 67, "block-backward-in-calculon-order": 124,
        "stored-activations-minus-working-block": 776, "one-fp32-gradient-plus-sharded": 1244,
        "dropout-gradient-at-mask-size": 1044, "pointwise-gradient-traffic-as-forward": 1244,
        "batch-matmul-gradient-reads-output-gradient": 1244, "layer-norm-gradient-reads-one-tensor": 1244,
        "inference-backward-p2p-slot": 450, "vocabulary-weights-uncounted": 0,  # the records state no vocabulary
        "portable-total-summed-again": 0}  # nor work outside the blocks


@pytest.mark.slow
@pytest.mark.differential
def test_overlap_rules_effects():
    """PIN (scripts/quirk_effects.py on the public overlap corpus, the table of docs/concurrency.md): view
    estimates each compatibility rule and each schedule difference changes, and the view estimates none applies
    to."""
    from harness.oracles.records import load_record_file

    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "quirk_effects.py"
    spec = importlib.util.spec_from_file_location("quirk_effects", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = {name: (changed, total, largest) for name, changed, total, largest in module.effects(
        load_record_file("records/public-overlap.json.gz").records)}
    assert {name: changed for name, (changed, _, _) in rows.items()} == {
        "doubled-pipe-tile": 35, "edge-block-equals-base-block": 22, "stateful-exposed-time": 12,
        "weight-grad-tiled-against-recommunication": 14, "recommunication-without-reduction": 12,
        "prefix-counter-recompute-windows": 29, "dp-window-microbatches-equal-pp": 10,
        "dp-one-block-always-exposed": 46, "dp-optimizer-credit-twice": 11, "dp-same-tier-as-pp-when-pp-1": 2,
        "p2p-latency-without-pipeline-message": 74, "offload-backward-without-recompute-memory": 51,
        "transfer-of-running-block": 80, "overhead-per-block": 118, "dp-windows": 56, "closed-form-bubble": 27,
        "all (physical vs calculon-0.1.0)": 187, "none applies (the projections agree)": 20}
    assert all(total == 207 for _, total, _ in rows.values())
    assert all(largest > 0 for name, (changed, _, largest) in rows.items() if changed and not name.startswith("none"))
    assert rows["none applies (the projections agree)"][2] < 1e-7  # percent: agreement to 1e-9
