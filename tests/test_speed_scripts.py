"""The speed scripts a figure of docs/performance.md comes from, and the parity check of a fresh corpus: they run
what they say (the timings and counts themselves are not tested: they are measurements, docs/performance.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from harness import session

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "reference" / "oracle-records" / "differential-public.json"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not CORPUS.is_file(), reason="no shared reference corpus beside the checkout")
@pytest.mark.parametrize("stage, lowerings", [("translate", 0), ("lower", 4), ("digests", 4), ("estimate", 4)])
def test_the_instruction_counter_lowers_what_its_stage_names_in_a_cleared_session(stage, lowerings):
    """The worker warms up, clears every memo, then lowers the first N configurations (all distinct models)
    only from the ``lower`` stage on: what is left in the session is those N lowerings, none of the warm-up's."""
    counter = _script("first_pass_instructions")
    with session.using(session.Session()) as own:
        counter.worker(stage, 4, CORPUS)
        assert len(own.lowerings) == lowerings


@pytest.mark.skipif(not CORPUS.is_file(), reason="no shared reference corpus beside the checkout")
@pytest.mark.parametrize("stage, lowerings, texts", [("line", 0, 0), ("entry", 4, 0), ("text", 4, 4)])
def test_the_batch_line_counter_runs_what_its_stage_names_in_a_cleared_session(monkeypatch, stage, lowerings,
                                                                               texts):
    """``--batch``: after the warm-up (three lines, every stage) and the cleared memos, the first N lines are
    parsed; estimated as the batch estimates them from ``entry`` on; their entries written from ``text`` on."""
    from harness.commands import estimate as command

    counter = _script("first_pass_instructions")
    written = []
    monkeypatch.setattr(command, "indented_json", lambda entry, indent: written.append((entry, indent)) or "")
    with session.using(session.Session()) as own:
        counter.batch_worker(stage, 4, CORPUS)
        assert len(own.lowerings) == lowerings
    assert len(written) == 3 + texts and {indent for _, indent in written} == {" "}
    assert all(entry["status"] in ("ok", "infeasible") and set(entry["views"]) == {"peak_only", "system_evidence"}
               for entry, _ in written)


@pytest.mark.skipif(not CORPUS.is_file(), reason="no shared reference corpus beside the checkout")
def test_the_instruction_counter_disables_the_collector_only_when_asked(monkeypatch):
    import gc

    counter = _script("first_pass_instructions")
    calls = []
    monkeypatch.setattr(gc, "disable", lambda: calls.append("disabled"))
    with session.using(session.Session()):
        counter.worker("translate", 1, CORPUS)
        assert calls == []
        counter.worker("translate", 1, CORPUS, collector=False)
        assert calls == ["disabled"]


def test_the_instruction_counter_refuses_no_estimates_in_one_line():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "first_pass_instructions.py"), "--estimates",
                             "0"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "--estimates must be at least 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_speed_comparison_rotates_the_order_of_its_contenders():
    """Each contender runs first in turn (two: the order flips), so a machine that slows down or warms up
    during a comparison does not favour one of them; each one's figures stay its own."""
    compare = _script("compare_calculon_speed")
    calls = []
    made = [lambda name=name: calls.append(name) or len(calls) for name in "abc"]
    results = compare.alternated(made, 3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert results == ([1, 6, 8], [2, 4, 9], [3, 5, 7])
    calls.clear()
    compare.alternated(made[:2], 2)
    assert calls == ["a", "b", "b", "a"]


def test_the_parity_check_passes_the_public_corpus_and_fails_on_a_mismatch(capsys, monkeypatch):
    """``scripts/check_parity.py``: every record of a vendored file against the estimate; a record whose views
    do not all match makes the exit status 1 and is listed; a file the manifest lacks is one error line."""
    from harness.oracles.calculon import ViewParity

    check = _script("check_parity")
    assert check.main(["records/public-differential.json.gz"]) == 0
    assert capsys.readouterr().out == ("records/public-differential.json.gz: 400 records (281 that Calculon ran, "
                                       "119 it refused): 0 mismatching\n")
    real = check.check_record
    bad = ViewParity("x", "peak_only", None, "memory tier capacity (tier 1)", ())  # a verdict Calculon did not give

    monkeypatch.setattr(check, "check_record", lambda r: [bad] if r.id.endswith("/0007") else real(r))
    assert check.main(["records/public-differential.json.gz", "--show", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 1 mismatching") and len(out) == 2 and out[1].startswith("  differential-public/0007: ")
    assert check.main(["records/absent.json.gz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent.json.gz" in err and err.count("\n") == 1
