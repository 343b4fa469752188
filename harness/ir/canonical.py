"""Compiled canonical-JSON writers: ``Artifact.canonical()`` without ``model_dump``.

The canonical form of an artifact is, by definition, ``canonical_json`` (see
:mod:`harness.digest`) of ``artifact.to_data()``: ``model_dump(mode="json")``
plus ``schema_name`` and ``schema_version``, keys sorted, no whitespace.
Building that dict and encoding it was most of the cost of lowering, so for a
model class whose fields are all of the kinds below this module builds, once
per class, a writer of the same text: one format template of the constant text
(keys, punctuation) and one converter per field (no ``exec``, no ``eval``). The
writer is derived code of the class and stored on it (``vars(cls)``), for the
class's lifetime, as :mod:`dataclasses` stores the ``__init__`` it generates.

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
  memoized per instance in the current session's ``texts``
  (:class:`harness.session.IdentityMemo`: keyed by ``id`` with the instance
  held, bounded);
- a non-finite number (in a float or an int field) would be written ``nan`` /
  ``inf`` by ``repr``: the writer checks its numbers instead (one ``sum`` of a
  class's number fields, finite or not, per instance written; each optional or
  listed number by itself) and :func:`write` returns None so that the reference
  path decides (it raises for a real NaN or infinity). A string holding those
  letters is written as it is (the same text as the reference's).

The compiled text is byte-identical to the reference; ``tests/test_canonical.py``
checks it on every IR of the cases and of the differential corpus.
"""

from __future__ import annotations

import json
import math
import operator
import types
import typing
from json.encoder import encode_basestring_ascii
from typing import Any, Callable

from pydantic import BaseModel

from harness import session

Writer = Callable[[Any], str]
#: The class attribute that holds a class's writer: ``(extra, writer or None)``.
WRITER_ATTRIBUTE = "_harness_canonical_writer"


class _Unsupported(Exception):
    """A field kind (or a value's class) the compiled writers do not cover."""


def write(obj: BaseModel, extra: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The canonical JSON of ``obj`` with ``extra`` top-level ``(key, json)`` pairs, or None.

    None means "use the reference path" (see the module rules).
    """
    writer = _writer(type(obj), extra)
    if writer is None:
        return None
    try:
        return writer(obj)
    except _Unsupported:
        return None


def _writer(cls: type, extra: tuple[tuple[str, str], ...] = (), compiling: frozenset[type] = frozenset()
            ) -> Writer | None:
    stored = vars(cls).get(WRITER_ATTRIBUTE)
    if stored is not None and stored[0] == extra:
        return stored[1]
    try:
        writer = _compile(cls, extra, compiling | {cls})
    except _Unsupported:
        writer = None
    if stored is None:  # the first extra a class is written with is its own (an artifact's schema entries)
        type.__setattr__(cls, WRITER_ATTRIBUTE, (extra, writer))
    return writer


def _sequence(writer: Writer) -> Writer:
    def write_sequence(items: Any) -> str:
        return "[" + ",".join(map(writer, items)) + "]"
    return write_sequence


def _union(classes: tuple[type, ...], compiling: frozenset[type]) -> Writer:
    writers = {cls: _required_writer(cls, compiling) for cls in classes}

    def write_member(value: Any) -> str:
        writer = writers.get(type(value))
        if writer is None:
            raise _Unsupported(type(value).__name__)
        return writer(value)

    return write_member


def _required_writer(cls: type, compiling: frozenset[type]) -> Writer:
    if cls in compiling:
        raise _Unsupported(f"recursive model {cls.__name__}")
    writer = _writer(cls, (), compiling)
    if writer is None:
        raise _Unsupported(cls.__name__)
    return writer


def _bool(value: Any) -> str:
    return "true" if value else "false"


#: A field's converter: ``(function, conversion)``; the template writes ``{<conversion>}`` of ``function(value)``.
#: Numbers are written ``!r`` of ``float(value)`` (an int stored in a float field is written as a float) or of
#: ``+value`` (an int as itself): C functions, so the hot path makes no Python call per number.
Converter = tuple[Callable[[Any], Any], str]


def _optional(writer: Writer) -> Writer:
    def write_optional(value: Any) -> str:
        return "null" if value is None else writer(value)
    return write_optional


def _text(converter: Converter) -> Writer:
    """The converter as a function returning the JSON text (for optional values, sequences, absent fields)."""
    function, conversion = converter
    if not conversion:
        return function

    def write_number(value: Any) -> str:
        if not _finite(value):
            raise _Unsupported("a non-finite number")
        return repr(function(value))
    return write_number


def _finite(total: Any) -> bool:
    """Whether ``total`` (a number, or the sum of a class's numbers) is finite: False for NaN, an infinity, an
    overflow (the sum of finite numbers can overflow: then the reference decides) or a value that is no number."""
    try:
        return math.isfinite(total)
    except (OverflowError, TypeError):
        return False


def _converter(annotation: Any, compiling: frozenset[type]) -> Converter:
    """How a value of this annotation is written as JSON text."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converter(args[0], compiling)
    if annotation is float:
        return float, "!r"
    if annotation is int:
        return operator.pos, "!r"
    if annotation is bool:
        return _bool, ""
    if annotation is str or (origin is typing.Literal and all(isinstance(a, str) for a in args)):
        return encode_basestring_ascii, ""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _required_writer(annotation, compiling), ""
    if origin in (typing.Union, types.UnionType):
        members = tuple(a for a in args if a is not type(None))
        if len(members) == 1:
            inner = _text(_converter(members[0], compiling))
        elif all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            inner = _union(members, compiling)
        else:
            raise _Unsupported(str(annotation))
        return (_optional(inner) if type(None) in args else inner), ""
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _sequence(_text(_converter(args[0], compiling))), ""
    raise _Unsupported(str(annotation))


def _absent(key_text: str, inner: Writer, before: bool) -> Writer:
    """An absent-if-None field: nothing while None, else ``"key":value,`` (``before`` the first present key)
    or ``,"key":value``."""
    if before:
        def write_leading(value: Any) -> str:
            return "" if value is None else key_text + inner(value) + ","
        return write_leading

    def write_following(value: Any) -> str:
        return "" if value is None else key_text + inner(value)
    return write_following


def _compile(cls: type, extra: tuple[tuple[str, str], ...], compiling: frozenset[type]) -> Writer:
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise _Unsupported(str(cls))
    decorators = cls.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields:
        raise _Unsupported(f"{cls.__name__} has custom serialization")
    absent = getattr(cls, "ABSENT_IF_NONE", frozenset())
    constants = dict(extra)  # key -> its constant JSON text
    converters: dict[str, Converter] = {}  # key -> how its value is written
    for name, field in cls.model_fields.items():
        if field.alias or field.serialization_alias or field.exclude or not name.isidentifier():
            raise _Unsupported(f"{cls.__name__}.{name} is aliased, excluded or not an identifier")
        if name in constants:
            raise _Unsupported(f"{cls.__name__}.{name} collides with an extra key")
        converters[name] = _converter(field.annotation, compiling)
    present = sorted(k for k in (*constants, *converters) if k not in absent)
    if not present:
        raise _Unsupported(f"{cls.__name__}: only absent-if-None fields")
    template, names, writers, numbers = "", [], [], []  # numbers: the keys written by ``!r`` (checked finite)
    for key in sorted((*constants, *converters)):
        if key in constants:
            template += ("" if key == present[0] else ",") + json.dumps(key) + ":" + _escaped(constants[key])
            continue
        if key in absent:
            writers.append(_absent(json.dumps(key) + ":" if key < present[0] else "," + json.dumps(key) + ":",
                                   _text(converters[key]), key < present[0]))
            template += "{}"
        else:
            function, conversion = converters[key]
            template += ("" if key == present[0] else ",") + json.dumps(key) + ":{" + conversion + "}"
            writers.append(function)
            if conversion:
                numbers.append(key)
        names.append(key)
    return _assemble(cls, "{{" + template + "}}", tuple(names), tuple(writers), tuple(numbers))


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _assemble(cls: type, template: str, names: tuple[str, ...], writers: tuple[Writer, ...],
              numbers: tuple[str, ...]) -> Writer:
    """The writer of one class: the template filled with each field's text, after one check that its
    ``numbers`` are finite (memoized per instance for the classes that share instances)."""
    fill, call, isfinite = template.format, operator.call, math.isfinite
    if not names:
        text = fill()

        def write_constant(o: Any) -> str:
            return text
        plain = write_constant
    elif len(names) == 1:
        (name,), (writer,) = names, writers

        def write_one(o: Any) -> str:
            value = o.__dict__[name]
            if numbers and not _finite(value):
                raise _Unsupported("a non-finite number")
            return fill(writer(value))
        plain = write_one
    else:
        values = operator.itemgetter(*names)
        if not numbers:
            def write_fields(o: Any) -> str:
                return fill(*map(call, writers, values(o.__dict__)))
        else:
            # the sum of the numbers is finite exactly when each is, bar an overflow (then the reference decides)
            total = operator.itemgetter(*numbers) if len(numbers) > 1 else operator.itemgetter(numbers[0], numbers[0])

            def write_fields(o: Any) -> str:
                fields = o.__dict__
                try:
                    finite = isfinite(sum(total(fields)))
                except (OverflowError, TypeError):
                    finite = False
                if not finite:
                    raise _Unsupported("a non-finite number")
                return fill(*map(call, writers, values(fields)))
        plain = write_fields
    if not (getattr(cls, "CANONICAL_MEMO", False) or getattr(cls, "INTERNED", False)):
        return plain

    def write_memoized(o: Any) -> str:
        texts = session.current().texts
        text = texts.get(o)
        return texts.put(plain(o), o) if text is None else text

    return write_memoized
