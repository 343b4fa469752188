"""Hypothesis fuzzing of case files and batch lines (issue 12).

Each example starts from a valid configuration of the supported space
(:func:`harness.oracles.configspace.draw_configuration`), then applies hostile
edits: a field set to a hostile value (huge or non-finite numbers, booleans,
strings, lists, mappings, null), a field dropped or added, a raw YAML/JSON
token (``.inf``, ``NaN``, ``1e999``, a 400-digit integer), a repeated key, a
truncation, stray bytes. Properties:

- only the project's input error escapes (:class:`~harness.errors.InputError`,
  one line), for a case file; for a batch line nothing escapes: the line is
  ``ok``, ``infeasible``, ``rejected`` or ``invalid`` with a one-line reason;
- every ``ok`` / ``infeasible`` figure is finite and non-negative, and the
  nine timing components add up to the total. The check sums them
  independently (``math.fsum``, correctly rounded) and allows for the
  estimate's own left-to-right float sum: n = 9 terms summed in any order
  differ from the exact sum by at most (n - 1) u sum|c_i| (u = 2^-53, the unit
  roundoff; Higham, Accuracy and Stability of Numerical Algorithms, 4.2), and
  fsum adds at most u |sum|; the components are non-negative, so the budget is
  9 u sum(c_i).

The default suite runs a few hundred examples; ``-m slow`` runs many more.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.cases import CASE_SCHEMA, load_case
from harness.errors import InputError
from harness.estimate import estimate
from harness.interop.calculon_batch import parse_line
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.configspace import draw_configuration, draw_shape
from harness.commands.estimate import batch_entry_json

from test_properties import HypothesisChooser as Chooser  # the configspace chooser backed by hypothesis

UNIT_ROUNDOFF = 2.0**-53
COMPONENT_COUNT = 9
DEFAULT = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))

RAW_TOKENS = (".inf", "-.inf", ".nan", ".NaN", "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "9" * 400,
              "1e-320", "true", "yes", "~", "null", "0x10", "1_000", "[]", "{}", '"8"', "&a 1", "*a", "!!binary AA==")


hostile_scalars = st.one_of(
    st.integers(), st.integers(-2**1100, 2**1100), st.integers(2**20, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=1e-320, max_value=1e-300),
    st.booleans(), st.none(), st.text(max_size=12), st.sampled_from(["8", "12288", "yes", "true", "../x", "/etc"]),
)
hostile_values = st.one_of(hostile_scalars, st.lists(hostile_scalars, max_size=3),
                           st.dictionaries(st.text(max_size=6), hostile_scalars, max_size=2))


def _config(data: st.DataObject):
    chooser = Chooser(data)
    if data.draw(st.booleans()):
        return draw_configuration(chooser, shape=draw_shape(chooser))
    return draw_configuration(chooser)


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _paths(value, prefix + (key,))
    return out


def _mutate_tree(data: st.DataObject, tree: dict) -> dict:
    """0-3 edits of a JSON-like tree: set a path to a hostile value, drop it, or add an unknown key."""
    tree = json.loads(json.dumps(tree))
    for _ in range(data.draw(st.integers(0, 3))):
        paths = _paths(tree)
        path = data.draw(st.sampled_from(paths))
        parent = tree
        for key in path[:-1]:
            parent = parent[key] if isinstance(parent, dict) else {}
        if not isinstance(parent, dict):
            continue
        action = data.draw(st.sampled_from(("set", "set", "set", "drop", "add")))
        if action == "set":
            parent[path[-1]] = data.draw(hostile_values)
        elif action == "drop":
            parent.pop(path[-1], None)
        else:
            parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(hostile_values)
    return tree


def _mutate_text(data: st.DataObject, text: str, line_pattern: str) -> str | bytes:
    """0-2 raw edits: a value replaced by a raw token, a repeated line, a truncation, stray bytes."""
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(0, 2))):
        action = data.draw(st.sampled_from(("token", "repeat", "truncate", "bytes")))
        index = data.draw(st.integers(0, max(len(lines) - 1, 0)))
        if action == "token" and line_pattern in lines[index]:
            head = lines[index].rsplit(line_pattern, 1)[0]
            lines[index] = f"{head}{line_pattern}{data.draw(st.sampled_from(RAW_TOKENS))}"
        elif action == "repeat":
            lines.insert(index, lines[index])
        elif action == "truncate":
            lines = lines[:index] + [lines[index][: data.draw(st.integers(0, len(lines[index])))]]
        elif action == "bytes":
            raw = "\n".join(lines).encode("utf-8")
            cut = data.draw(st.integers(0, len(raw)))
            return raw[:cut] + data.draw(st.binary(min_size=1, max_size=4)) + raw[cut:]
    return "\n".join(lines)


def check_view_figures(view: dict[str, Any]) -> None:
    """Every figure finite and non-negative; the components add up to the total (see the module docstring)."""
    workload = dict(view["workload"])
    matrix = workload.pop("matrix_flops_per_block")  # {"linear": L, "attention": A}
    figures = [view["total_s"], *view["components_s"].values(), *view["memory_bytes"].values(),
               *workload.values(), *matrix.values()]
    assert all(isinstance(v, (int, float)) and 0.0 <= v < math.inf for v in figures), view
    components = list(view["components_s"].values())
    assert len(components) >= COMPONENT_COUNT
    exact = math.fsum(components)
    budget = len(components) * UNIT_ROUNDOFF * exact
    assert abs(view["total_s"] - exact) <= budget, (view["total_s"], exact, budget)


def _fuzz_case_file(data: st.DataObject, tmp_path_factory) -> None:
    config = _config(data)
    document = {"schema": CASE_SCHEMA, "id": "fuzz", "system": config.input.system,
                "model": config.input.model.model_dump(),
                "execution": config.input.execution.model_dump(exclude={"tp_overlap", "dp_overlap", "offload"})}
    document = _mutate_tree(data, document)
    content = _mutate_text(data, yaml.safe_dump(document, sort_keys=False), ": ")
    path = tmp_path_factory.mktemp("fuzz") / "case.yaml"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    try:
        case = load_case(path)
        result = estimate(case.estimate_input(), source=str(path))
    except InputError as error:
        assert "\n" not in str(error) and str(error).startswith(str(path))
        event("input error")
        return
    event(result.status)
    assert result.status in ("ok", "infeasible")
    for view in result.views_json().values():
        check_view_figures(view)


def _fuzz_batch_line(data: st.DataObject) -> None:
    config = _config(data)
    model, execution = calculon_from_input(config.input)
    line = _mutate_tree(data, {"id": "fuzz", "model": model, "execution": execution, "system": config.input.system})
    content = _mutate_text(data, json.dumps(line, indent=0), ": ")
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    text = text.replace("\n", " ")  # one line
    entry = batch_entry_json(parse_line(text, 7, "fuzz.jsonl"))
    event(entry["status"])
    assert entry["status"] in ("ok", "infeasible", "rejected", "invalid")
    if entry["status"] in ("ok", "infeasible"):
        assert entry["views"]
        for view in entry["views"].values():
            check_view_figures(view)
    else:
        assert entry["views"] == {} and "\n" not in entry["reason"]
        if entry["status"] == "invalid":
            assert entry["reason"].startswith("line 7: ")
    json.dumps(entry, allow_nan=False)  # strict JSON


@DEFAULT
@given(data=st.data())
def test_fuzzed_case_files(data, tmp_path_factory):
    _fuzz_case_file(data, tmp_path_factory)


@DEFAULT
@given(data=st.data())
def test_fuzzed_batch_lines(data):
    _fuzz_batch_line(data)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_fuzzed_case_files_many(data, tmp_path_factory):
    _fuzz_case_file(data, tmp_path_factory)


@pytest.mark.slow
@MANY
@given(data=st.data())
def test_fuzzed_batch_lines_many(data):
    _fuzz_batch_line(data)
