"""Parity with Calculon 0.1.0 on TP/DP overlap and offload (the ConcretePlanIR path).

Every record: the same verdict (a Calculon Llm.Error <-> our ``infeasible``,
same kind and tier, offload's "at least 3 blocks" included), and when both
ran every metric of harness.oracles.calculon.METRICS (the nine components,
forward and backward offload, the total, memory tiers 1 and 2, workload,
capacity, efficiency) within budget (1e-9 %; memory 1 byte). The default
suite checks a fixed sample of the vendored overlap corpus (both views) and
every record of the public overlap corpus (the shared ``overlap-public.json``
converted by ``harness oracle import-reference`` into
``records/public-overlap.json.gz``); ``--differential-full`` (``tox -e
differential``) checks the whole vendored corpus and that the conversion
equals the shared file.
"""

from __future__ import annotations

import pytest

from harness.interop.calculon_batch import require_valid
from harness.oracles.calculon import calculon_verdict
from harness.oracles.configspace import OVERLAP_FEATURES, feature_counts
from harness.oracles.records import vendor_dir

from corpora import (
    assert_conversion_equals_shared,
    assert_parity,
    assert_records_match_inputs,
    parametrize,
    records,
    sample,
)

pytestmark = pytest.mark.differential

CORPUS = "records/overlap.json.gz"
INPUTS = vendor_dir() / "overlap" / "inputs.jsonl.gz"
PUBLIC = "records/public-overlap.json.gz"
SAMPLE_SIZE = 60
SAMPLE_SEED = 20261130


def corpus():
    return records(CORPUS)


def public():
    return records(PUBLIC)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc, "overlap_record", CORPUS, SAMPLE_SIZE, SAMPLE_SEED)
    parametrize(metafunc, "public_overlap_record", PUBLIC)


def test_overlap_record(overlap_record):
    assert_parity(overlap_record)


def test_public_overlap_record(public_overlap_record):
    assert_parity(public_overlap_record)


def test_public_overlap_records_are_the_300_of_the_shared_corpus():
    """PIN: the corpus's size and how many Calculon ran (its oracle identity is checked on load)."""
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in public()]
    assert (len(verdicts), verdicts.count(None)) == (300, 207)


@pytest.mark.slow
def test_vendored_conversion_equals_the_shared_reference():
    assert_conversion_equals_shared("overlap-public.json", PUBLIC)


def test_overlap_corpus_is_large_covers_the_space_and_matches_its_inputs():
    inputs = require_valid(INPUTS)
    assert len(inputs) == 3000
    assert_records_match_inputs(inputs, corpus())
    for record_id, data in inputs:
        e = data.execution
        assert e.tp_overlap != "none" or e.dp_overlap or e.offload.weights or e.offload.activations or \
            e.offload.optimizer, f"{record_id}: no overlap or offload option"
    counts = feature_counts([data for _, data in inputs], OVERLAP_FEATURES)
    assert not [name for name, count in counts.items() if count == 0]
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in corpus()]
    assert verdicts.count(None) == 1489
    assert verdicts.count("offload needs 3 blocks per processor") == 482
    assert verdicts.count("memory tier capacity (tier 1)") == 350
    assert verdicts.count("memory tier capacity (tier 2)") == 74
    assert verdicts.count("network tier too small (tier 0)") == 578
    assert verdicts.count("network tier not filled (tier 0)") == 27


def test_overlap_sample_is_fixed_and_mixes_verdicts():
    fixed = sample(CORPUS, SAMPLE_SIZE, SAMPLE_SEED)
    assert [r.id for r in fixed[:3]] == ["overlap/0006/megatron-126M", "overlap/0104/anthropic-52B",
                                          "overlap/0172/gpt3-13B"]
    assert sum(1 for r in fixed if r.views["system_evidence"].error) == 25
