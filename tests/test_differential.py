"""Parity with Calculon 0.1.0 over the differential corpus.

Every record: the same verdict (a Calculon Llm.Error <-> our ``infeasible``,
same kind and tier), and when both ran, every metric of
harness.oracles.calculon.METRICS within budget (1e-9 % relative; memory
within 1 byte). The default suite checks a fixed sample of the vendored
corpus plus every record of the shared ``differential-public.json`` when it
exists; ``pytest -m differential --differential-full`` (``tox -e
differential``) checks the whole vendored corpus.
"""

from __future__ import annotations

import functools
import random

import pytest

from harness.interop.calculon_batch import require_valid
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import calculon_verdict, check_record
from harness.oracles.configspace import feature_counts
from harness.oracles.records import load_manifest, load_record_file, vendor_dir
from harness.oracles.reference import read_reference

from conftest import REFERENCE_DIR

pytestmark = pytest.mark.differential

CORPUS = "records/differential.json.gz"
INPUTS = vendor_dir() / "differential" / "inputs.jsonl.gz"
PUBLIC = REFERENCE_DIR / "oracle-records" / "differential-public.json"
SAMPLE_SIZE = 60
SAMPLE_SEED = 20240611


@functools.lru_cache(maxsize=None)
def corpus():
    return load_record_file(CORPUS).records


@functools.lru_cache(maxsize=None)
def public():
    return read_reference(PUBLIC)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "vendored_record" in metafunc.fixturenames:
        records = corpus()
        if not metafunc.config.getoption("--differential-full"):
            indices = sorted(random.Random(SAMPLE_SEED).sample(range(len(records)), SAMPLE_SIZE))
            records = tuple(records[i] for i in indices)
        metafunc.parametrize("vendored_record", records, ids=[r.id for r in records])
    if "public_record" in metafunc.fixturenames:
        if PUBLIC.is_file():
            records = public().records
            metafunc.parametrize("public_record", records, ids=[r.id for r in records])
        else:
            metafunc.parametrize("public_record", [pytest.param(None, marks=pytest.mark.skip(
                reason=f"{PUBLIC} not found (the shared reference records are not installed)"))], ids=["missing"])


def _assert_parity(record) -> None:
    results = check_record(record)
    assert results, f"{record.id}: no recorded view"
    problems = [p.describe() for p in results if not p.ok]
    assert not problems, "\n".join(problems)


def test_vendored_record(vendored_record):
    _assert_parity(vendored_record)


def test_public_record(public_record):
    _assert_parity(public_record)


def test_public_records_come_from_the_same_calculon():
    if not PUBLIC.is_file():
        pytest.skip(f"{PUBLIC} not found (the shared reference records are not installed)")
    assert public().source_tree_sha256 == load_manifest().oracle.source_tree_sha256
    assert len(public().records) == 400


def test_corpus_is_large_covers_the_space_and_matches_its_inputs():
    inputs = require_valid(INPUTS)
    records = corpus()
    assert len(records) == len(inputs) == 1500
    for (record_id, data), record in zip(inputs, records):
        model, execution = calculon_from_input(data)
        assert (record.id, record.system, record.calculon_model, record.calculon_execution) == \
            (record_id, data.system, model, execution)
        assert set(record.views) == {"system_evidence", "peak_only"}
        assert (record.views["system_evidence"].error is None) == (record.views["peak_only"].error is None)
    counts = feature_counts([data for _, data in inputs])
    assert not [name for name, count in counts.items() if count == 0]
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in records]
    assert verdicts.count(None) == 896
    assert verdicts.count("network tier too small (tier 0)") == 250
    assert verdicts.count("network tier not filled (tier 0)") == 21
    assert verdicts.count("memory tier capacity (tier 1)") == 333


def test_sample_is_fixed_and_mixes_verdicts():
    indices = sorted(random.Random(SAMPLE_SEED).sample(range(len(corpus())), SAMPLE_SIZE))
    sample = [corpus()[i] for i in indices]
    assert [r.id for r in sample[:3]] == ["differential/0006/megatron-126M", "differential/0035/megatron-40B",
                                          "differential/0061/megatron-40B"]
    assert sum(1 for r in sample if r.views["system_evidence"].error) == 23
