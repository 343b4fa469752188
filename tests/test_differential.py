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

import pytest

from harness.interop.calculon_batch import require_valid
from harness.oracles.calculon import MEMORY_FIELDS, calculon_verdict, compare, estimate_record, estimate_verdict
from harness.oracles.configspace import feature_counts
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

CORPUS = "records/differential.json.gz"
INPUTS = vendor_dir() / "differential" / "inputs.jsonl.gz"
PUBLIC = "records/public-differential.json.gz"
MEMORY_FIGURES = "records/memory-figures.json.gz"
SAMPLE_SIZE = 60
SAMPLE_SEED = 20240611


def corpus():
    return records(CORPUS)


def public():
    return records(PUBLIC)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize(metafunc, "vendored_record", CORPUS, SAMPLE_SIZE, SAMPLE_SEED)
    parametrize(metafunc, "public_record", PUBLIC)
    parametrize(metafunc, "memory_figure", MEMORY_FIGURES)


def test_vendored_record(vendored_record):
    assert_parity(vendored_record)


def test_public_record(public_record):
    assert_parity(public_record)


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
    ids = [r.id for r in records(MEMORY_FIGURES)]
    assert len(ids) == 28 and {i.split("/")[0] for i in ids} == {"fig1", "fig7"}
    assert {r.system for r in records(MEMORY_FIGURES)} == {"a100_80e"}


@pytest.mark.slow
@pytest.mark.parametrize("shared, vendored", [("differential-public.json", PUBLIC),
                                              ("memory_figs.json", MEMORY_FIGURES)])
def test_vendored_conversions_equal_the_shared_reference(shared, vendored):
    assert_conversion_equals_shared(shared, vendored)


def test_corpus_is_large_covers_the_space_and_matches_its_inputs():
    inputs = require_valid(INPUTS)
    assert len(inputs) == 1500
    assert_records_match_inputs(inputs, corpus())
    counts = feature_counts([data for _, data in inputs])
    assert not [name for name, count in counts.items() if count == 0]
    verdicts = [calculon_verdict(r.views["system_evidence"].error) for r in corpus()]
    assert verdicts.count(None) == 896
    assert verdicts.count("network tier too small (tier 0)") == 250
    assert verdicts.count("network tier not filled (tier 0)") == 21
    assert verdicts.count("memory tier capacity (tier 1)") == 333


def test_sample_is_fixed_and_mixes_verdicts():
    fixed = sample(CORPUS, SAMPLE_SIZE, SAMPLE_SEED)
    assert [r.id for r in fixed[:3]] == ["differential/0006/megatron-126M", "differential/0035/megatron-40B",
                                          "differential/0061/megatron-40B"]
    assert sum(1 for r in fixed if r.views["system_evidence"].error) == 23
