"""Identifiers and profile names (harness.names): the one definition of what they may hold (issue 12)."""

from __future__ import annotations

import pytest

from harness.cases import load_case
from harness.names import PROFILE_NAME, identifier_problem

from conftest import CASES_DIR, ROOT


@pytest.mark.parametrize("text", ["megatron-22B/full", "gpt3 175B · seqsel", "模型/1", "a" * 256, "x\u00e9\u0301"])
def test_identifiers(text):
    assert identifier_problem(text) is None


@pytest.mark.parametrize("text,message", [
    ("", "1 to 256 characters, got 0"), ("a" * 257, "got 257"), (7, "must be a string"),
    ("a\nb", "control character: U+000A (category Cc)"), ("a\x1bb", "U+001B"), ("a\x7f", "U+007F"),
    ("a\x9bb", "U+009B (category Cc)"),
    ("ab\u202ec", "format (invisible or bidi) character: U+202E (category Cf)"), ("a\u2067", "U+2067"),
    ("a\u200db", "U+200D"), ("\ufeffa", "U+FEFF"), ("a\u00adb", "U+00AD"), ("a\U000e0041", "U+E0041"),
    # hostile-input probe: U+2028 split the estimate's first output line; a batch id "\ud800" was ok while
    # import hf --id refused it (UTF-8 cannot encode it)
    ("a\u2028b", "line separator character: U+2028 (category Zl)"),
    ("a\u2029b", "paragraph separator character: U+2029 (category Zp)"),
    ("\ud800", "must be UTF-8 text: U+D800 is a lone surrogate"),
    ("a\udcffb", "U+DCFF is a lone surrogate (a byte that is not UTF-8, or half a UTF-16 pair)"),
])
def test_not_identifiers(text, message):
    problem = identifier_problem(text)
    assert problem is not None and message in problem, problem


def test_every_shipped_case_id_and_profile_name_is_valid():
    cases = sorted(CASES_DIR.rglob("*.yaml"))
    assert cases
    for path in cases:
        case = load_case(path)
        assert identifier_problem(case.id) is None and PROFILE_NAME.fullmatch(case.system), path
    profiles = sorted(p.stem for p in (ROOT / "evidence").glob("*.yaml"))
    assert profiles and all(PROFILE_NAME.fullmatch(name) for name in profiles), profiles


@pytest.mark.parametrize("name", ["A100_80G", "NaN", "a100_80G", "../x", "/abs", "", "-x", "a" * 65])
def test_not_profile_names(name):
    assert PROFILE_NAME.fullmatch(name) is None
