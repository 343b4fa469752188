"""Issue 19 (speed of a whole batch process): start-up loads only what the chosen command needs, and that
parser is the full parser's command. These are checks of which modules a process holds and of the parsers'
texts, not timings (``scripts/compare_calculon_speed.py`` measures the time; docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.cli import COMMANDS, build_parser, chosen_command

from conftest import ROOT


def _subparsers(parser) -> dict:
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices


def test_each_command_alone_is_the_full_parsers_command():
    """``build_parser(name)`` holds that command only (its module's ``register`` adds exactly the name the
    table gives it), with the same help, usage and options as in the full parser."""
    full = _subparsers(build_parser())
    assert list(full) == list(COMMANDS)  # the table names every registered command, in --help's order
    for name in COMMANDS:
        alone = _subparsers(build_parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == full[name].format_help()


@pytest.mark.parametrize("argv, command", [
    (["estimate", "--calculon-batch", "b.jsonl"], "estimate"),
    (["list", "cases"], "list"),
    (["import", "calculon"], "import"),
    (["--project", "estimate", "lower", "x.yaml"], "lower"),  # the project directory is named estimate
    (["--project=somewhere", "search", "--model", "m.yaml"], "search"),
    (["--project"], None),
    (["--help"], None),
    (["-h", "estimate"], None),
    (["--version"], None),
    (["--proj", "d", "estimate"], None),  # an abbreviation argparse accepts: only the full parser knows
    (["import_calculon"], None),  # a module's name is not a command
    (["bogus"], None),
    ([], None),
])
def test_the_chosen_command_is_the_first_word_that_is_no_global_option(argv, command):
    assert chosen_command(argv) == command


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.split())


#: What a batch estimate never runs: the other commands' machinery and the libraries only they use.
NOT_ON_THE_BATCH_PATH = ("harness.search", "harness.measurements", "harness.experiment", "harness.explain",
                         "harness.trace", "harness.oracles", "harness.commands.search", "harness.commands.evidence",
                         "harness.throughput",
                         "numpy", "matplotlib", "scipy", "dask", "rich")


def test_a_batch_process_loads_only_the_estimate_command(tmp_path):
    """``python -m harness estimate --calculon-batch`` (``main`` with no argv, the command process) loads
    neither the other commands nor the search, fitting, reports or plotting, nor numpy (the estimate works on
    Python floats: :mod:`harness.arrays`), and writes the batch."""
    batch, out = tmp_path / "batch.jsonl", tmp_path / "out.json"
    batch.write_text((ROOT / "docs" / "examples" / "calculon-batch.jsonl").read_text())
    loaded = _modules_after(
        f"sys_argv = ['harness', 'estimate', '--calculon-batch', {str(batch)!r}, '--output', {str(out)!r}]\n"
        "import sys; sys.argv = sys_argv\n"
        "from harness.cli import main\n"
        "assert main() == 1  # the example's last line is invalid\n")
    assert len(json.loads(out.read_text())) == 5
    assert "harness.commands.estimate" in loaded
    present = sorted(m for m in loaded if m.split(".")[0] in {p.split(".")[0] for p in NOT_ON_THE_BATCH_PATH}
                     and any(m == p or m.startswith(p + ".") for p in NOT_ON_THE_BATCH_PATH))
    assert not present, present
    assert not [m for m in loaded if m.startswith("harness.commands.") and m not in
                ("harness.commands.estimate", "harness.commands.case_arguments")]


def test_a_batch_process_builds_no_validator_of_the_plans_work_classes(tmp_path):
    """The lowering builds its Work and Capacity values without validation (``Frozen.trusted``), and so do the
    module constants (NO_WORK, NO_CAPACITY): a batch process never builds those classes' validators (a
    deferred build costs ~8 ms of start-up)."""
    batch, out = tmp_path / "batch.jsonl", tmp_path / "out.json"
    batch.write_text((ROOT / "docs" / "examples" / "calculon-batch.jsonl").read_text())
    printed = subprocess.run([sys.executable, "-c",
                              f"import sys; sys.argv = ['harness', 'estimate', '--calculon-batch', {str(batch)!r}, "
                              f"'--output', {str(out)!r}]\n"
                              "from harness.cli import main\n"
                              "main()\n"
                              "from harness.cases import EstimateInput\n"
                              "from harness.ir.portable import Capacity, Work\n"
                              "print(EstimateInput.__pydantic_complete__, Work.__pydantic_complete__, "
                              "Capacity.__pydantic_complete__)\n"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert printed.split() == ["True", "False", "False"]  # the input is validated; the plan's values are not


def test_the_package_imports_its_public_names_on_first_use():
    """``import harness`` (what every submodule's import starts with: ``harness.cli`` for ``--version``) loads
    neither pydantic nor the estimate path; the public names are the modules' own objects once asked for."""
    loaded = _modules_after("import harness")
    assert not [m for m in loaded if m.split(".")[0] == "pydantic" or m in ("harness.cases", "harness.estimate")]
    import harness
    import harness.cases
    import harness.estimate

    assert harness.Estimate is harness.estimate.Estimate and harness.EstimateInput is harness.cases.EstimateInput
    assert harness.estimate_input is harness.estimate.estimate and harness.load_case is harness.cases.load_case
    from harness import Estimate, estimate_input  # noqa: F401 - the from-import form
    assert set(harness.__all__) <= set(dir(harness))
    with pytest.raises(AttributeError, match="no attribute 'estimate_batch'"):
        harness.estimate_batch  # noqa: B018


def test_a_command_process_imports_without_collecting_and_collects_afterwards(tmp_path):
    """:func:`harness.cli.main` with no argv switches the collector off while the command's modules are
    imported, freezes what they built, raises the youngest generation's threshold and switches it on again (also
    when the command then fails)."""
    out = subprocess.run([sys.executable, "-c",
                          "import gc, sys\n"
                          f"sys.argv = ['harness', 'estimate', '--calculon-batch', {str(tmp_path / 'none.jsonl')!r}]\n"
                          "from harness.cli import main\n"
                          "status = main()\n"
                          "print(status, gc.isenabled(), gc.get_freeze_count() > 10000, *gc.get_threshold())\n"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["2", "True", "True", "50000", "10", "10"]  # the young generation's threshold raised


# ---------------------------------------------------------------------------------------------- batch output

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harness.commands.estimate import _plain_json, indented_json  # noqa: E402


def _values(keys, leaves):
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.lists(inner, max_size=3).map(tuple),
                                                        st.dictionaries(keys, inner, max_size=5)),
                        max_leaves=30)


_PLAIN = _values(st.text(max_size=6), st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
    st.sampled_from([0.0, -0.0, 1e300, -5e-324, 2.0**53 + 2, 79.75401632024615])))
_ANY = _values(st.one_of(st.text(max_size=6), st.integers(), st.floats(), st.booleans(), st.none()), st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
    st.sampled_from([float("nan"), float("inf"), -float("inf")])))


def _json_outcome(call):
    try:
        return call()
    except (TypeError, ValueError) as error:
        return type(error), str(error)


def _json_text(value, indent):
    return json.dumps(value, indent=1, allow_nan=False).replace("\n", "\n" + indent)


@settings(max_examples=400, deadline=None)
@given(_PLAIN, st.sampled_from(["", " ", "   "]))
def test_plain_values_are_written_as_json_writes_them(value, indent):
    """The writer's own path (no fallback to json): -0.0, the extreme floats, integers beyond 2**53, unicode and
    control characters in strings and keys, empty and nested containers, tuples."""
    assert _plain_json(value, indent) == _json_text(value, indent)


@settings(max_examples=300, deadline=None)
@given(_ANY, st.sampled_from(["", " "]))
def test_indented_json_is_jsons_text_or_jsons_error(value, indent):
    """Any value: NaN and infinities (json's error), keys that are not strings (json's conversions)."""
    assert _json_outcome(lambda: indented_json(value, indent)) == _json_outcome(lambda: _json_text(value, indent))


def test_indented_json_of_a_batch_entry_and_of_what_is_not_plain():
    entry = {"id": "é\n\"x\"", "status": "ok", "reason": None, "views": {"peak_only": {
        "total_s": 79.75401632024615, "components_s": {"forward": 26.257031305895385, "recompute": 0.0,
                                                        "offload": -0.0}, "count": 3, "flags": [True, False]}}}
    assert indented_json(entry) == json.dumps(entry, indent=1)
    assert indented_json(entry, " ") == json.dumps(entry, indent=1).replace("\n", "\n ")

    class Count(int):
        pass

    from collections import OrderedDict
    for value in ({"n": Count(2)}, OrderedDict(a=1.5), {1: 2.0}, [1.0, (1, 2), []]):
        assert indented_json(value) == json.dumps(value, indent=1)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        indented_json({"total_s": float("nan")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        indented_json({"at": object()})


# ---------------------------------------------------------------------------------------------- numpy only for arrays

def test_is_array_imports_nothing_and_knows_an_array_once_numpy_is_loaded():
    code = ("import sys\nfrom harness.arrays import is_array\n"
            "assert not is_array(1.5) and not is_array([1.0]) and 'numpy' not in sys.modules\n"
            "import numpy as np\n"
            "assert is_array(np.zeros(2)) and is_array(np.float64(1.0) * np.ones(1)) and not is_array(np.float64(1))\n"
            "assert not is_array([1.0]) and not is_array(2)\n")
    assert "numpy" not in _modules_after("from harness.arrays import is_array\nis_array(1.0)")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_holds_array_looks_at_nothing_without_numpy_and_finds_an_array_with_it():
    """:func:`harness.arrays.holds_array` (the composition's choice of scalar or array arithmetic) reads none of
    its values while numpy is not imported, and finds an array among floats once it is, wherever it is."""
    code = ("import sys\nfrom harness.arrays import holds_array\n"
            "def values():\n    raise AssertionError('looked at a value without numpy')\n    yield\n"
            "assert not holds_array(values()) and 'numpy' not in sys.modules\n"
            "import numpy as np\n"
            "assert not holds_array([1.0, 2, np.float64(3.0)]) and not holds_array([])\n"
            "assert holds_array([1.0, np.zeros(3)]) and holds_array([np.ones(1), 2.0]) and holds_array([np.ones(1)])\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_positive_block_time_is_numpys_maximum_bit_for_bit():
    """:func:`harness.schedule.block._positive` writes ``np.maximum(0.0, x)`` for numbers in Python: the same
    bits for -0.0 (numpy keeps it), NaN, infinities, subnormals and ordinary values; arrays stay numpy's."""
    import math
    import struct

    import numpy as np

    from harness.schedule.block import _positive

    values = [0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0, 2.5e-9, -7.25, 1e308, -1e308, float("inf"), -float("inf"),
              np.float64(-0.0), np.float64(3.5), np.array(-2.0), np.array(-0.0), 0, -3, 4]
    for x in values:
        ours, numpys = _positive(x), float(np.maximum(0.0, x))
        assert type(ours) is float and struct.pack("d", ours) == struct.pack("d", numpys), x
    assert math.isnan(_positive(float("nan")))
    array = np.array([-1.0, -0.0, 0.0, 2.0])
    assert np.array_equal(_positive(array), np.maximum(0.0, array)) and _positive(array).dtype == np.float64


# ---------------------------------------------------------------------------------------------- batch input

from harness.names import identifier_problem  # noqa: E402


@given(st.text(max_size=12))
def test_an_identifiers_fast_path_is_the_category_rule(text):
    """Printable ASCII is accepted without looking at each character's category; the rule is still the
    categories' (Cc, Cf, Zl, Zp and Cs refused: written out here, not read from harness.names)."""
    import unicodedata

    refused = ("Cc", "Cf", "Zl", "Zp", "Cs")
    expected = not text or len(text) > 256 or any(unicodedata.category(c) in refused for c in text)
    assert (identifier_problem(text) is not None) == expected
    for char in ("\x7f", "\x00", "\t", " ", "~", "\u202e", "\u00ad", "é", "\u2028", "\u2029", "\ud800", "\u00a0"):
        assert (identifier_problem("a" + char) is None) == (unicodedata.category(char) not in refused)
