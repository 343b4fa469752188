"""harness.inputs: every hostile file becomes one InputError naming file, field and line; nothing else escapes."""

from __future__ import annotations

import gzip
import os
import sys
import zlib

import pytest
import yaml

from harness import inputs
from harness.errors import InputError


def _shallow_recursion_limit() -> int:
    """A recursion limit 150 frames above the current depth: a recursive parser of a deep document fails under it."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth + 150


def _error(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return info.value


def _yaml(tmp_path, text: str | bytes, name: str = "doc.yaml"):
    path = tmp_path / name
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# ---------------------------------------------------------------------------------------------- YAML


def test_yaml_values_and_lines(tmp_path):
    doc = inputs.read_yaml(_yaml(tmp_path, "a: 1\nb:\n  c: [1, 2.5, 1e9, 2E-5]\n  d: yes\n  t: 2001-12-14\n"
                                           "  s: '1e9'\n  n: ~\n"))
    assert doc.data == {"a": 1, "b": {"c": [1, 2.5, 1e9, 2e-5], "d": "yes", "t": "2001-12-14", "s": "1e9",
                                      "n": None}}
    assert type(doc.data["a"]) is int and type(doc.data["b"]["c"][2]) is float
    assert doc.lines[("a",)] == 1 and doc.lines[("b",)] == 2 and doc.lines[("b", "d")] == 4
    assert doc.line_of(("b", "c", 3)) == 3 and doc.line_of(("b", "nope", "deeper")) == 2


@pytest.mark.parametrize("text,field,message,line", [
    ("a: 1\nb:\n  c: 1\n  c: 2\n", "b.c", "duplicate key (first at line 3)", 4),
    ("a:\n  b: .inf\n", "a.b", ".inf is not a finite number", 2),
    ("a: -.Inf\n", "a", "is not a finite number", 1),
    ("a: .nan\n", "a", "is not a finite number", 1),
    ("a: 1e999\n", "a", "1e999 is not a finite number", 1),
    ("a: 1.0e+400\n", "a", "is not a finite number", 1),
    ("a: " + "9" * 400 + "\n", "a", "is beyond the float range", 1),
    ("a: %d\n" % 2**1024, "a", "is beyond the float range", 1),
    ("a: &x [1]\nb: *x\n", "a", "anchors and aliases are not supported", 1),
    ("a: !!python/object:os.system x\n", "a", "unsupported YAML tag", 1),
    ("a: !!binary aGVsbG8=\n", "a", "unsupported YAML tag", 1),
    ("? [k]\n: v\n", "<root>", "a mapping key must be a plain value", 1),
    ("a: 1\n---\nb: 2\n", "<yaml>", "more than one YAML document", 2),
])
def test_yaml_refusals_name_field_and_line(tmp_path, text, field, message, line):
    path = _yaml(tmp_path, text)
    error = _error(inputs.read_yaml, path)
    assert (error.source, error.field, error.line) == (str(path), field, line)
    assert message in error.message


def test_yaml_syntax_error_names_the_line(tmp_path):
    error = _error(inputs.read_yaml, _yaml(tmp_path, "a: [1\nb: 2\n"))
    assert error.field.startswith("line ") and "not valid YAML" in error.message


@pytest.mark.parametrize("text", [
    "a: " + "[" * 100_000 + "]" * 100_000 + "\n",  # flow nesting (libyaml's own limit, or ours)
    "".join("  " * i + "a:\n" for i in range(5_000)),  # block nesting
    "a: " + "{b: " * 70 + "1" + "}" * 70 + "\n",
])
def test_deep_yaml_is_refused_without_recursion(tmp_path, text):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_shallow_recursion_limit())  # a recursive builder would fail here: the layer must not recurse
    try:
        error = _error(inputs.read_yaml, _yaml(tmp_path, text))
    finally:
        sys.setrecursionlimit(limit)
    assert "nest" in error.message


def test_yaml_at_the_depth_limit_is_read(tmp_path):
    depth = inputs.MAX_DEPTH
    doc = inputs.read_yaml(_yaml(tmp_path, "[" * depth + "]" * depth + "\n"))
    value, levels = doc.data, 0
    while isinstance(value, list):
        levels += 1
        value = value[0] if value else None
    assert levels == depth


@pytest.mark.parametrize("data,where", [
    (b"a: 1\n\x89PNG\r\n\x1a\n\x00\x00", 2),
    ("a: caf\u00e9\n".encode("latin-1"), 1),
])
def test_undecodable_bytes_name_the_line(tmp_path, data, where):
    error = _error(inputs.read_yaml, _yaml(tmp_path, data))
    assert error.field == "<file>" and "not UTF-8 text" in error.message and error.line == where


@pytest.mark.parametrize("loader", ["libyaml", "pure"])
@pytest.mark.parametrize("text,where,character", [
    ("a: 1\nb: 61\x0044\n", 2, "U+0000"),
    ("caf\u00e9: 1\nna\u00efve: \u00e9t\u00e9\n\n\nb: 6\x07\n", 5, "U+0007"),  # multi-byte text before it
])
def test_a_control_character_is_named_with_its_line(tmp_path, monkeypatch, loader, text, where, character):
    """A character YAML refuses was reported as libyaml's offset ('in "<unicode string>", position 138'); the
    line is counted from it, a byte offset for libyaml's loader, a character offset for PyYAML's own."""
    if loader == "pure":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML without libyaml")
    error = _error(inputs.read_yaml, _yaml(tmp_path, text.encode("utf-8")))
    assert error.field == "<yaml>" and error.line == where
    assert error.message == (f"not valid YAML: character {character} is not printable "
                             "(YAML allows tab, line breaks and printable characters)")


def test_utf8_bom_is_dropped(tmp_path):
    assert inputs.read_yaml(_yaml(tmp_path, "\ufeffa: 1\n".encode("utf-8"))).data == {"a": 1}


# ---------------------------------------------------------------------------------------------- files


def test_unreadable_files(tmp_path, monkeypatch):
    assert _error(inputs.read_yaml, tmp_path / "missing.yaml").message == "no such file"
    (tmp_path / "dir.yaml").mkdir()
    assert _error(inputs.read_yaml, tmp_path / "dir.yaml").message == "is a directory, not a file"
    os.mkfifo(tmp_path / "fifo.yaml")
    assert "not a regular file" in _error(inputs.read_yaml, tmp_path / "fifo.yaml").message  # and no hang
    assert "not a regular file" in _error(inputs.read_bytes, "/dev/zero").message  # and no endless read
    locked = _yaml(tmp_path, "a: 1\n", "locked.yaml")
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make the system call fail as it does for other users
        real_open = os.open

        def refuse(path, *args, **kwargs):
            if os.fspath(path) == str(locked):
                raise PermissionError(13, "Permission denied", str(locked))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(inputs.os, "open", refuse)
    assert "permission denied" in _error(inputs.read_yaml, locked).message


def test_document_size_limit_and_decompression_bomb(tmp_path):
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    assert "larger than 1000 bytes" in _error(inputs.read_bytes, big, limit=1000).message
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 5_000_000))  # 5 MB of blanks in a few kB
    assert bomb.stat().st_size < 20_000
    assert "larger than 100000 bytes" in _error(inputs.read_bytes, bomb, limit=100_000).message


def test_truncated_and_corrupt_gzip_documents(tmp_path):
    data = gzip.compress(b'{"a": [' + b"1," * 10_000 + b"1]}")
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    assert "truncated gzip stream" in _error(inputs.read_json, cut).message
    fake = tmp_path / "fake.json.gz"
    fake.write_text('{"a": 1}')
    assert "not a valid gzip file" in _error(inputs.read_json, fake).message


# ---------------------------------------------------------------------------------------------- JSON


def test_json_values():
    assert inputs.parse_json_text('{"a": [1, 2.5, {"b": null, "c": true}], "d": -0.0}', "x") == \
        {"a": [1, 2.5, {"b": None, "c": True}], "d": -0.0}


@pytest.mark.parametrize("text,field,message", [
    ('{"a": [1, NaN]}', "a.1", "NaN is not a finite number"),
    ('{"a": {"b": Infinity}}', "a.b", "Infinity is not a finite number"),
    ('{"a": -Infinity}', "a", "-Infinity is not a finite number"),
    ('{"a": {"b": 1e999}}', "a.b", "1e999 is not a finite number"),
    ('{"a": {"b": %s}}' % ("9" * 10_000), "a.b", "is beyond the float range"),
    ('{"a": [{"b": 1, "b": 2}]}', "a.0.b", "duplicate key"),
    ('{"a": 1, "a": 1}', "a", "duplicate key"),
    ("[" * 100_000 + "]" * 100_000, "<json>", "nested deeper than 64 levels"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "<json>", "nested deeper than 64 levels"),
])
def test_json_refusals_name_the_field(text, field, message):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_shallow_recursion_limit())
    try:
        error = _error(inputs.parse_json_text, text, "x.json")
    finally:
        sys.setrecursionlimit(limit)
    assert (error.field, error.source) == (field, "x.json") and message in error.message


def test_json_depth_scan_ignores_brackets_in_strings():
    assert not inputs.json_depth_exceeds('{"a": "' + "[" * 500 + '"}')
    assert inputs.json_depth_exceeds("[" * 65 + "]" * 65)
    assert not inputs.json_depth_exceeds("[" * 64 + "]" * 64)
    assert inputs.parse_json_text("[" * 64 + "]" * 64, "x") is not None
    assert inputs.json_depth_exceeds("[[]," * 10 + "[" * 65 + "]" * 65 + "]" * 10)


def test_json_syntax_errors_name_the_line():
    error = _error(inputs.parse_json_text, '{\n "a": 1,\n}', "m.json")
    assert error.field == "line 3" and error.message.startswith("not valid JSON") and str(error).count("line 3") == 1
    error = _error(inputs.parse_json_text, '{"a": }', "b.jsonl", line=7)
    assert (error.field, error.line) == ("<json>", 7) and str(error).endswith("(line 7)")


# ---------------------------------------------------------------------------------------------- streams


def test_jsonl_stream_keeps_going_after_bad_lines(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'{"a": 1}\n\xff\xfe\n\n{"b":\n' + b"x" * (inputs.MAX_LINE_BYTES + 10) + b'\n{"c": NaN}\n{"d": 4}')
    items = list(inputs.read_jsonl(path))
    assert [i.number for i in items] == [1, 2, 4, 5, 6, 7]
    assert items[0].data == {"a": 1} and items[-1].data == {"d": 4}
    assert "not UTF-8" in items[1].error.message
    assert "not valid JSON" in items[2].error.message
    assert "longer than" in items[3].error.message
    assert items[4].error.field == "c" and "NaN" in items[4].error.message


def test_truncated_gzip_stream_keeps_every_complete_line(tmp_path):
    lines = [f'{{"i": {i}, "pad": "{"x" * 40}"}}\n' for i in range(5_000)]
    data = gzip.compress("".join(lines).encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    items = list(inputs.read_jsonl(path))
    *complete, last = items
    assert last.truncated and last.error is not None and "truncated" in last.error.message
    assert [i.data["i"] for i in complete] == list(range(len(complete)))
    assert len(complete) > 1_000
    # every line whose bytes (with the newline) were inside the decompressible part is kept
    readable = zlib.decompressobj(31).decompress(data[: len(data) // 2])
    assert len(complete) == readable.count(b"\n")


def test_line_stream_memory_does_not_hold_a_huge_line(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as handle:
        handle.write(b"[" + b"1," * (8 * inputs.MAX_LINE_BYTES) + b"1]\n{}\n")
    items = list(inputs.iter_lines(path))
    assert [i.number for i in items] == [1, 2] and items[0].text is None and items[1].text == "{}"


# ---------------------------------------------------------------------------------------------- CSV


def test_csv_rows(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text('name,value\r\na,1.5\r\n"b\nc",2\r\n\r\nd,3\n')
    rows = list(inputs.read_csv_rows(path, required=("value",)))
    assert [(r.line, r.values) for r in rows] == [(2, {"name": "a", "value": "1.5"}),
                                                  (3, {"name": "b\nc", "value": "2"}),
                                                  (6, {"name": "d", "value": "3"})]
    assert [inputs.finite_number(r.values["value"], str(path), "value", line=r.line) for r in rows] == [1.5, 2.0, 3.0]


@pytest.mark.parametrize("text,field,message", [
    ("a,b\n1,2,3\n", "line 2", "3 fields, the header has 2"),
    ("a,a\n1,2\n", "a", "repeated column name"),
    ("a,\n1,2\n", "column 2", "empty column name"),
    ("a,b\n1,2\n", "c", "required column is missing"),
    ("", "<file>", "no header row"),
    ('a,b\n"1,2\n', "line 2", "never closed"),
])
def test_csv_refusals(tmp_path, text, field, message):
    path = tmp_path / "m.csv"
    path.write_text(text)
    error = _error(lambda: list(inputs.read_csv_rows(path, required=("a", "c") if field == "c" else ())))
    assert error.field == field and message in error.message


@pytest.mark.parametrize("cell", ["nan", "inf", "-Infinity", "1e999", "", "abc", "1_000", True])
def test_finite_number_refuses(cell):
    _error(inputs.finite_number, cell, "m.csv", "value", line=3)


def test_finite_number_bounds():
    assert inputs.finite_number(" 2.5e3 ", "m.csv", "v") == 2500.0
    assert "must be >= 0" in _error(inputs.finite_number, "-1", "m.csv", "v", minimum=0).message
