"""Compiled canonical-JSON writers: ``Artifact.canonical()`` without ``model_dump``.

The canonical form of an artifact is, by definition, ``canonical_json`` (see
:mod:`harness.digest`) of ``artifact.to_data()``: ``model_dump(mode="json")``
plus ``schema_name`` and ``schema_version``, keys sorted, no whitespace.
Building that dict and encoding it was most of the cost of lowering, so for a
model class whose fields are all of the kinds below this module compiles, once
per class and with ``exec`` (as :mod:`dataclasses` compiles ``__init__``), one
f-string that writes the same text directly.

Rules (what the reference path does, field kind by field kind):

- keys in sorted order, ``"key":value``, no whitespace;
- ``float``: ``repr(float(value))`` (an int stored in a float field is written
  as a float, as ``model_dump(mode="json")`` does); ``int``: ``repr(value)``;
  ``bool``: ``true`` / ``false``; ``str`` and string ``Literal``: the JSON string
  (ASCII-escaped); ``X | None``: ``null`` or ``X``; a model: its own writer; a
  union of models: the writer of the value's class; ``tuple[X, ...]``: an array;
- a field of the class's ``ABSENT_IF_NONE`` (:class:`~harness.ir.base.Frozen`)
  is left out while it is None (key and value), as ``to_data`` leaves it out;
  one that sorts before the first other key is written ``"key":value,``, the
  others ``,"key":value``;
- a class with any other field kind (dicts, ``Any``, aliases, custom
  serializers, computed fields) gets no compiled writer: :func:`write` returns
  None and the caller uses the reference path;
- a class that sets ``CANONICAL_MEMO`` or ``INTERNED`` (value classes whose
  instances the passes share: constants, interned values, memoized facts) has its text
  memoized per instance, keyed by ``id`` with the instance held alive by the
  memo so that the id cannot be reused; the memo is bounded;
- a non-finite float is written ``nan`` / ``inf`` by ``repr``: whenever the
  text contains either, :func:`write` returns None so that the reference path
  decides (it raises for a real NaN or infinity, and writes the identical text
  when the letters came from a string).

The compiled text is byte-identical to the reference; ``tests/test_canonical.py``
checks it on every IR of the cases and of the differential corpus.
"""

from __future__ import annotations

import json
import types
import typing
from json.encoder import encode_basestring_ascii
from typing import Any, Callable

from pydantic import BaseModel

Writer = Callable[[Any], str]


class _Unsupported(Exception):
    """A field kind (or a value's class) the compiled writers do not cover."""


_WRITERS: dict[type, Writer | None] = {}
_MEMO: dict[int, str] = {}  # id(instance) -> its text
_HELD: dict[int, Any] = {}  # id(instance) -> the instance, alive while its text is memoized
MEMO_LIMIT = 1 << 16


def _remember(obj: Any, text: str) -> None:
    if len(_MEMO) >= MEMO_LIMIT:
        clear_memo()
    _HELD[id(obj)] = obj
    _MEMO[id(obj)] = text


def clear_memo() -> None:
    """Forget the memoized texts (results never depend on them)."""
    _MEMO.clear()
    _HELD.clear()
_COMPILING: set[type] = set()


def write(obj: BaseModel, extra: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The canonical JSON of ``obj`` with ``extra`` top-level ``(key, json)`` pairs, or None.

    None means "use the reference path" (see the module rules).
    """
    writer = _writer(type(obj), extra)
    if writer is None:
        return None
    try:
        text = writer(obj)
    except _Unsupported:
        return None
    return None if "nan" in text or "inf" in text else text


def _writer(cls: type, extra: tuple[tuple[str, str], ...] = ()) -> Writer | None:
    key = (cls, extra) if extra else cls
    if key not in _WRITERS:
        try:
            _WRITERS[key] = _compile(cls, extra)
        except _Unsupported:
            _WRITERS[key] = None
    return _WRITERS[key]


def _sequence(items: Any, writer: Writer) -> str:
    return "[" + ",".join([writer(item) for item in items]) + "]"


def _union(classes: tuple[type, ...]) -> Writer:
    writers = {cls: _required_writer(cls) for cls in classes}

    def write_member(value: Any) -> str:
        writer = writers.get(type(value))
        if writer is None:
            raise _Unsupported(type(value).__name__)
        return writer(value)

    return write_member


def _required_writer(cls: type) -> Writer:
    if cls in _COMPILING:
        raise _Unsupported(f"recursive model {cls.__name__}")
    writer = _writer(cls)
    if writer is None:
        raise _Unsupported(cls.__name__)
    return writer


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _expression(annotation: Any, value: str, namespace: dict[str, Any]) -> tuple[str, str]:
    """``(expression, conversion)`` writing ``value`` (Python source) of this annotation.

    The f-string field is ``{expression<conversion>}``; ``conversion`` is ``!r``
    for numbers (inlined: the hot path makes no call per number).
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _expression(args[0], value, namespace)
    if annotation is float:
        return f"float({value})", "!r"
    if annotation is int:
        return value, "!r"
    if annotation is bool:
        return f"_bool({value})", ""
    if annotation is str or (origin is typing.Literal and all(isinstance(a, str) for a in args)):
        return f"_string({value})", ""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"{_bind(namespace, _required_writer(annotation))}({value})", ""
    if origin in (typing.Union, types.UnionType):
        members = tuple(a for a in args if a is not type(None))
        if len(members) == 1:
            inner, conversion = _expression(members[0], value, namespace)
            inner = f"repr({inner})" if conversion else inner
        elif all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            inner = f"{_bind(namespace, _union(members))}({value})"
        else:
            raise _Unsupported(str(annotation))
        return (f"(_null if {value} is None else {inner})" if type(None) in args else inner), ""
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"_sequence({value}, {_bind(namespace, _item_writer(args[0]))})", ""
    raise _Unsupported(str(annotation))


def _bind_constant(namespace: dict[str, Any], text: str) -> str:
    name = f"_c{len(namespace)}"
    namespace[name] = text
    return name


def _bind(namespace: dict[str, Any], writer: Writer) -> str:
    name = f"_w{len(namespace)}"
    namespace[name] = writer
    return name


def _item_writer(annotation: Any) -> Writer:
    namespace: dict[str, Any] = dict(_HELPERS)
    expression, conversion = _expression(annotation, "_x", namespace)
    return eval(f"lambda _x: {'repr(' + expression + ')' if conversion else expression}", namespace)


def _compile(cls: type, extra: tuple[tuple[str, str], ...]) -> Writer:
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise _Unsupported(str(cls))
    decorators = cls.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields:
        raise _Unsupported(f"{cls.__name__} has custom serialization")
    absent = getattr(cls, "ABSENT_IF_NONE", frozenset())
    _COMPILING.add(cls)
    try:
        namespace: dict[str, Any] = dict(_HELPERS)
        entries = {key: text.replace("{", "{{").replace("}", "}}") for key, text in extra}
        leading: list[tuple[str, str]] = []
        for name, field in cls.model_fields.items():
            if field.alias or field.serialization_alias or field.exclude or not name.isidentifier():
                raise _Unsupported(f"{cls.__name__}.{name} is aliased, excluded or not an identifier")
            if name in entries:
                raise _Unsupported(f"{cls.__name__}.{name} collides with an extra key")
            expression, conversion = _expression(field.annotation, f"o.{name}", namespace)
            if name in absent:  # ',"key":value' (before the first present key: '"key":value,'), or nothing
                leading.append((name, f"repr({expression})" if conversion else expression))
            else:
                entries[name] = "{" + expression + conversion + "}"
        present = sorted(entries)
        if leading and not present:
            raise _Unsupported(f"{cls.__name__}: only absent-if-None fields")
        for name, inner in leading:
            before = name < present[0]
            text = json.dumps(name) + ":" if before else "," + json.dumps(name) + ":"
            key_text = _bind_constant(namespace, text)
            entries[name] = ("{(_nothing if o." + name + " is None else " + key_text + " + " + inner
                             + (" + _comma" if before else "") + ")}")
    finally:
        _COMPILING.discard(cls)
    keys = sorted(entries)
    first = present[0] if present else None
    body = "".join(entries[key] if key in absent else ("" if key == first else ",") + json.dumps(key) + ":"
                   + entries[key] for key in keys)
    if "'" in body or "\\" in body:
        raise _Unsupported(f"{cls.__name__}: quote or backslash in constant text")
    text = "f'{{" + body + "}}'"
    if getattr(cls, "CANONICAL_MEMO", False) or getattr(cls, "INTERNED", False):
        source = (f"def write(o):\n    hit = _memo_get(id(o))\n    if hit is not None:\n        return hit\n"
                  f"    text = {text}\n    _remember(o, text)\n    return text\n")
    else:
        source = f"def write(o):\n    return {text}\n"
    exec(source, namespace)  # compiled from field names and annotations only
    writer = namespace["write"]
    writer.__doc__ = f"Canonical JSON of one {cls.__name__}:\n{source}"
    return writer


_HELPERS: dict[str, Any] = {"_bool": _bool, "_string": encode_basestring_ascii, "_sequence": _sequence,
                            "_null": "null", "_nothing": "", "_comma": ",", "_memo_get": _MEMO.get, "_remember": _remember}
