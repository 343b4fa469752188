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

import functools
import random

import pytest

from harness.interop.calculon_batch import require_valid
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import calculon_verdict, check_record
from harness.oracles.configspace import OVERLAP_FEATURES, feature_counts
from harness.oracles.records import load_manifest, load_record_file, vendor_dir
from harness.oracles.reference import read_reference, record_dicts

from conftest import shared_reference

pytestmark = pytest.mark.differential

CORPUS = "records/overlap.json.gz"
INPUTS = vendor_dir() / "overlap" / "inputs.jsonl.gz"
PUBLIC = "records/public-overlap.json.gz"
SAMPLE_SIZE = 60
SAMPLE_SEED = 20261130


@functools.lru_cache(maxsize=None)
def corpus():
    return load_record_file(CORPUS).records


@functools.lru_cache(maxsize=None)
def public():
    return load_record_file(PUBLIC).records


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "overlap_record" in metafunc.fixturenames:
        records = corpus()
        if not metafunc.config.getoption("--differential-full"):
            indices = sorted(random.Random(SAMPLE_SEED).sample(range(len(records)), SAMPLE_SIZE))
            records = tuple(records[i] for i in indices)
        metafunc.parametrize("overlap_record", records, ids=[r.id for r in records])
    if "public_overlap_record" in metafunc.fixturenames:
        records = public()
        metafunc.parametrize("public_overlap_record", records, ids=[r.id for r in records])


def _assert_parity(record) -> None:
    results = check_record(record)
    assert results, f"{record.id}: no recorded view"
    problems = [p.describe() for p in results if not p.ok]
    assert not problems, "\n".join(problems)


def test_overlap_record(overlap_record):
    _assert_parity(overlap_record)


def test_public_overlap_record(public_overlap_record):
    _assert_parity(public_overlap_record)


def test_public_overlap_records_are_the_300_of_the_shared_corpus():
    """PIN: the corpus's size and how many Calculon ran (its oracle identity is checked on load)."""
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in public()]
    assert (len(verdicts), verdicts.count(None)) == (300, 207)


@pytest.mark.slow
def test_vendored_conversion_equals_the_shared_reference():
    reference = read_reference(shared_reference("oracle-records/overlap-public.json"))
    assert reference.source_tree_sha256 == load_manifest().oracle.source_tree_sha256
    assert record_dicts(reference, keep_layers=False) == [r.model_dump(exclude_none=True) for r in public()]


def test_overlap_corpus_is_large_covers_the_space_and_matches_its_inputs():
    inputs = require_valid(INPUTS)
    records = corpus()
    assert len(records) == len(inputs) == 3000
    for (record_id, data), record in zip(inputs, records):
        model, execution = calculon_from_input(data)
        assert (record.id, record.system, record.calculon_model, record.calculon_execution) == \
            (record_id, data.system, model, execution)
        assert set(record.views) == {"system_evidence", "peak_only"}
        assert (record.views["system_evidence"].error is None) == (record.views["peak_only"].error is None)
        e = data.execution
        assert e.tp_overlap != "none" or e.dp_overlap or e.offload.weights or e.offload.activations or \
            e.offload.optimizer, f"{record_id}: no overlap or offload option"
    counts = feature_counts([data for _, data in inputs], OVERLAP_FEATURES)
    assert not [name for name, count in counts.items() if count == 0]
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in records]
    assert verdicts.count(None) == 1489
    assert verdicts.count("offload needs 3 blocks per processor") == 482
    assert verdicts.count("memory tier capacity (tier 1)") == 350
    assert verdicts.count("memory tier capacity (tier 2)") == 74
    assert verdicts.count("network tier too small (tier 0)") == 578
    assert verdicts.count("network tier not filled (tier 0)") == 27


def test_overlap_sample_is_fixed_and_mixes_verdicts():
    indices = sorted(random.Random(SAMPLE_SEED).sample(range(len(corpus())), SAMPLE_SIZE))
    sample = [corpus()[i] for i in indices]
    assert [r.id for r in sample[:3]] == ["overlap/0006/megatron-126M", "overlap/0104/anthropic-52B",
                                          "overlap/0172/gpt3-13B"]
    assert sum(1 for r in sample if r.views["system_evidence"].error) == 25
