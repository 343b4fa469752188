"""Parity with Calculon 0.1.0 over the differential corpus.

Every record: the same verdict (a Calculon Llm.Error <-> our ``infeasible``,
same kind and tier), and when both ran, every metric of
harness.oracles.calculon.METRICS within budget (1e-9 % relative; memory
within 1 byte). The default suite checks a fixed sample of the vendored
corpus, every record of the public differential corpus (the shared
``differential-public.json`` converted by ``harness oracle import-reference``
into ``records/public-differential.json.gz``) and the memory figures of the
paper's memory-figure configurations (``records/memory-figures.json.gz``);
``pytest -m differential --differential-full`` (``tox -e differential``)
checks the whole vendored corpus and that the conversions equal the shared
files.
"""

from __future__ import annotations

import functools
import random

import pytest

from harness.interop.calculon_batch import require_valid
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import (
    MEMORY_FIELDS,
    calculon_verdict,
    check_record,
    compare,
    estimate_record,
    estimate_verdict,
)
from harness.oracles.configspace import feature_counts
from harness.oracles.records import load_manifest, load_record_file, vendor_dir
from harness.oracles.reference import read_reference, record_dicts

from conftest import shared_reference

pytestmark = pytest.mark.differential

CORPUS = "records/differential.json.gz"
INPUTS = vendor_dir() / "differential" / "inputs.jsonl.gz"
PUBLIC = "records/public-differential.json.gz"
MEMORY_FIGURES = "records/memory-figures.json.gz"
SAMPLE_SIZE = 60
SAMPLE_SEED = 20240611


@functools.lru_cache(maxsize=None)
def corpus():
    return load_record_file(CORPUS).records


@functools.lru_cache(maxsize=None)
def public():
    return load_record_file(PUBLIC).records


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "vendored_record" in metafunc.fixturenames:
        records = corpus()
        if not metafunc.config.getoption("--differential-full"):
            indices = sorted(random.Random(SAMPLE_SEED).sample(range(len(records)), SAMPLE_SIZE))
            records = tuple(records[i] for i in indices)
        metafunc.parametrize("vendored_record", records, ids=[r.id for r in records])
    if "public_record" in metafunc.fixturenames:
        records = public()
        metafunc.parametrize("public_record", records, ids=[r.id for r in records])
    if "memory_figure" in metafunc.fixturenames:
        records = load_record_file(MEMORY_FIGURES).records
        metafunc.parametrize("memory_figure", records, ids=[r.id for r in records])


def _assert_parity(record) -> None:
    results = check_record(record)
    assert results, f"{record.id}: no recorded view"
    problems = [p.describe() for p in results if not p.ok]
    assert not problems, "\n".join(problems)


def test_vendored_record(vendored_record):
    _assert_parity(vendored_record)


def test_public_record(public_record):
    _assert_parity(public_record)


def test_public_records_are_the_400_of_the_shared_corpus():
    """PIN: the public corpus's size and Calculon's verdicts (its oracle identity is checked on load)."""
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in public()]
    assert (len(verdicts), verdicts.count(None), verdicts.count("network tier too small (tier 0)"),
            verdicts.count("memory tier capacity (tier 1)"), verdicts.count("network tier not filled (tier 0)")) == (
        400, 281, 79, 35, 5)


def test_memory_figure(memory_figure):
    """The paper's memory-figure configurations (Figures 1 and 7, ``a100_80e``): every memory figure within
    the 1-byte budget, and in fact bit-equal to Calculon's."""
    est = estimate_record(memory_figure)
    view = memory_figure.views["system_evidence"]
    assert view.error is None and estimate_verdict(est) is None
    comparisons = compare(est.views["system_evidence"], view.stats, metrics=MEMORY_FIELDS)
    assert [c.metric for c in comparisons] == list(MEMORY_FIELDS)
    assert all(c.within_budget for c in comparisons), [c.describe() for c in comparisons if not c.within_budget]
    assert [c.estimate for c in comparisons] == [c.oracle for c in comparisons]
    assert view.stats["proc_mem_tier1_cap_req"] > 0


def test_memory_figures_cover_both_figures():
    ids = [r.id for r in load_record_file(MEMORY_FIGURES).records]
    assert len(ids) == 28 and {i.split("/")[0] for i in ids} == {"fig1", "fig7"}
    assert {r.system for r in load_record_file(MEMORY_FIGURES).records} == {"a100_80e"}


@pytest.mark.slow
@pytest.mark.parametrize("shared, vendored", [("differential-public.json", PUBLIC),
                                              ("memory_figs.json", MEMORY_FIGURES)])
def test_vendored_conversions_equal_the_shared_reference(shared, vendored):
    """The vendored files hold the shared files' numbers (layers aside): converting again gives the same."""
    reference = read_reference(shared_reference(f"oracle-records/{shared}"))
    assert reference.source_tree_sha256 == load_manifest().oracle.source_tree_sha256
    converted = record_dicts(reference, keep_layers=False)
    stored = [r.model_dump(exclude_none=True) for r in load_record_file(vendored).records]
    assert converted == stored


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
