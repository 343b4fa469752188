"""YAML plain scalars resolve by the YAML 1.2 core schema only (issue 12, "a wrong type: no coercion").

PyYAML's own resolution is YAML 1.1: ``yes``/``on``/``no``/``off`` are booleans, ``0x8``/``0o10``/``010`` and
``1:42:24`` (sexagesimal) are integers, ``1_000`` is 1000. In a case file each of those silently gave a number
or a flag the writer may not have meant. Under the core schema they stay strings, so the typed field refuses
them with the usual one error line naming the file and the field, and nothing is written.

Every shipped YAML file must read exactly as before: the reference below is PyYAML's YAML 1.1 loader with the
two rules the input layer always had on top of it (timestamps are text, ``1e-5`` is a float), and each shipped
file must give the same values of the same types under both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness import inputs
from harness.cli import main

from conftest import CASES_DIR, ROOT

BASE_CASE = (CASES_DIR / "megatron-22B_full.yaml").read_text()


class _Yaml11(yaml.SafeLoader):
    """The previous resolution: YAML 1.1 plus timestamps as text plus YAML 1.2 exponent floats."""


_Yaml11.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))
_Yaml11.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def _typed(value):
    """A value with the type of every leaf made explicit (so True is not 1 and 8.0 is not 8)."""
    if isinstance(value, dict):
        return {_typed(k): _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


SHIPPED = sorted(p for d in (ROOT / "cases", ROOT / "evidence") for p in d.rglob("*.y*ml"))


def test_the_reference_is_really_yaml_1_1():
    """The comparison below would prove nothing if the reference already read the core schema."""
    old = yaml.load("a: yes\nb: 0x8\nc: 1:42:24\nd: 1_000\ne: 010\nf: 1e-5\n", Loader=_Yaml11)
    assert old == {"a": True, "b": 8, "c": 6144, "d": 1000, "e": 8, "f": 1e-5}
    new = inputs.parse_yaml("a: yes\nb: 0x8\nc: 1:42:24\nd: 1_000\ne: 010\nf: 1e-5\n", "x").data
    assert new == {"a": "yes", "b": "0x8", "c": "1:42:24", "d": "1_000", "e": "010", "f": 1e-5}


def test_shipped_yaml_files_exist():
    assert len([p for p in SHIPPED if p.parent.name != "evidence"]) >= 10
    assert any(p.parent.name == "evidence" for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_every_shipped_yaml_reads_as_before(path: Path):
    text = path.read_text()
    assert _typed(inputs.read_yaml(path).data) == _typed(yaml.load(text, Loader=_Yaml11))


@pytest.mark.parametrize("text,value", [
    ("~", None), ("null", None), ("NULL", None), ("", None),
    ("true", True), ("True", True), ("TRUE", True), ("false", False), ("FALSE", False),
    ("0", 0), ("-0", 0), ("+12", 12), ("6144", 6144),
    ("1.5", 1.5), ("1.", 1.0), (".5", 0.5), ("-2.5e-3", -2.5e-3), ("1e-5", 1e-5), ("2E9", 2e9), ("1.5e5", 1.5e5),
    ("yes", "yes"), ("No", "No"), ("on", "on"), ("OFF", "OFF"), ("y", "y"),
    ("0x8", "0x8"), ("0o10", "0o10"), ("010", "010"), ("-010", "-010"), ("0b101", "0b101"),
    ("1:42:24", "1:42:24"), ("1_000", "1_000"), ("1_0.5", "1_0.5"), ("2001-12-14", "2001-12-14"), ("<<", "<<"),
    ("'8'", "8"), ('"true"', "true"), ("! 8", "8"), ("!!int 8", 8), ("!!float 8", 8.0), ("!!str 8", "8"),
])
def test_core_schema_values(text, value):
    got = inputs.parse_yaml(f"a: {text}\n", "x.yaml").data["a"]
    assert (type(got), got) == (type(value), value)


@pytest.mark.parametrize("text", [".inf", "-.Inf", "+.INF", ".nan", ".NaN"])
def test_core_schema_non_finite_floats_are_still_refused(text):
    with pytest.raises(inputs.InputError, match="is not a finite number"):
        inputs.parse_yaml(f"a: {text}\n", "x.yaml")


@pytest.mark.parametrize("text", ["!!int 0x8", "!!int 1_000", "!!bool yes", "!!float 1:42", "!!null no"])
def test_an_explicit_tag_needs_its_core_schema_form(text):
    with pytest.raises(inputs.InputError, match="is not a YAML 1.2"):
        inputs.parse_yaml(f"a: {text}\n", "x.yaml")


def test_yaml_1_1_keys_stay_strings():
    assert inputs.parse_yaml("on: 1\nno: 2\n", "x.yaml").data == {"on": 1, "no": 2}


# (id, old line, new line, field, what the typed field says). Under YAML 1.1 every one of these read as the
# value the case already holds (8, 6144, true, 24576, 1.42), so the estimate silently went ahead.
YAML_11_FORMS = [
    ("bool-yes", "training: true", "training: yes", "execution.training", 'valid boolean, got "yes"'),
    ("bool-on", "training: true", "training: on", "execution.training", 'valid boolean, got "on"'),
    ("bool-no", "optimizer_sharding: false", "optimizer_sharding: no", "execution.optimizer_sharding",
     'valid boolean, got "no"'),
    ("bool-off", "fused_activation: false", "fused_activation: off", "execution.fused_activation",
     'valid boolean, got "off"'),
    ("hex", "tensor_parallel: 8", "tensor_parallel: 0x8", "execution.tensor_parallel", 'valid integer, got "0x8"'),
    ("octal-0o", "tensor_parallel: 8", "tensor_parallel: 0o10", "execution.tensor_parallel",
     'valid integer, got "0o10"'),
    ("octal-leading-zero", "tensor_parallel: 8", "tensor_parallel: 010", "execution.tensor_parallel",
     'valid integer, got "010"'),
    ("sexagesimal", "hidden: 6144", "hidden: 1:42:24", "model.hidden", 'valid integer, got "1:42:24"'),
    ("underscore-int", "feedforward: 24576", "feedforward: 24_576", "model.feedforward",
     'valid integer, got "24_576"'),
    ("underscore-float", "iteration_s: 1.42", "iteration_s: 1.4_2", "comparison.paper.iteration_s",
     'got "1.4_2"'),
]


@pytest.mark.parametrize("name,old,new,field,message", YAML_11_FORMS, ids=[f[0] for f in YAML_11_FORMS])
def test_yaml_1_1_forms_are_refused_by_estimate(tmp_path, capsys, name, old, new, field, message):
    assert old in BASE_CASE
    directory = tmp_path / "cases"
    directory.mkdir()
    path = directory / "case.yaml"
    path.write_text(BASE_CASE.replace(old, new, 1))
    out = tmp_path / "out.json"
    status = main(["estimate", str(path), "--output", str(out)])
    stdout, err = capsys.readouterr()
    assert status == 2, (stdout, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{path}: {field}" in err and message in err, err
    assert stdout == "" and sorted(p.name for p in tmp_path.rglob("*")) == ["case.yaml", "cases"]
