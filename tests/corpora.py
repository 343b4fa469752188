"""The vendored Calculon record corpora, as the parity tests read them (``test_differential``,
``test_concrete_parity``): one loader, one fixed sample rule, one parity assertion, one input check."""

from __future__ import annotations

import functools
import random

import pytest

from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import check_record
from harness.oracles.records import load_manifest, load_record_file
from harness.oracles.reference import read_reference, record_dicts

from conftest import shared_reference


@functools.lru_cache(maxsize=None)
def records(name: str) -> tuple:
    """The records of vendored file ``name`` (``records/....json.gz``), loaded once per process."""
    return load_record_file(name).records


def sample(name: str, size: int, seed: int) -> tuple:
    """A fixed sample of ``name``'s records (in corpus order): what the default suite checks."""
    corpus = records(name)
    return tuple(corpus[i] for i in sorted(random.Random(seed).sample(range(len(corpus)), size)))


def parametrize(metafunc: pytest.Metafunc, fixture: str, name: str, size: int | None = None,
                seed: int | None = None) -> None:
    """Parametrize ``fixture`` with ``name``'s records: all of them, or the fixed sample of ``size`` unless
    ``--differential-full`` is given."""
    if fixture not in metafunc.fixturenames:
        return
    chosen = records(name)
    if size is not None and not metafunc.config.getoption("--differential-full"):
        chosen = sample(name, size, seed)
    metafunc.parametrize(fixture, chosen, ids=[r.id for r in chosen])


def assert_parity(record) -> None:
    """Every recorded view of ``record``: the same verdict as Calculon and every metric within budget."""
    results = check_record(record)
    assert results, f"{record.id}: no recorded view"
    problems = [p.describe() for p in results if not p.ok]
    assert not problems, "\n".join(problems)


def assert_records_match_inputs(inputs: list, corpus: tuple) -> None:
    """Record i was made from input line i (id, profile, Calculon model and execution), in both views, and
    both views agree on whether Calculon ran."""
    assert len(corpus) == len(inputs)
    for (record_id, data), record in zip(inputs, corpus):
        model, execution = calculon_from_input(data)
        assert (record.id, record.system, record.calculon_model, record.calculon_execution) == \
            (record_id, data.system, model, execution)
        assert set(record.views) == {"system_evidence", "peak_only"}
        assert (record.views["system_evidence"].error is None) == (record.views["peak_only"].error is None)


def assert_conversion_equals_shared(shared: str, vendored: str) -> None:
    """The vendored file holds the shared reference file's numbers (layers aside): converting it again
    (``harness oracle import-reference``) gives the same records, from the same oracle source tree."""
    reference = read_reference(shared_reference(f"oracle-records/{shared}"))
    assert reference.source_tree_sha256 == load_manifest().oracle.source_tree_sha256
    assert record_dicts(reference, keep_layers=False) == [r.model_dump(exclude_none=True)
                                                          for r in records(vendored)]
