"""Compiled canonical-JSON writers: ``Artifact.canonical()`` without ``model_dump``.

The canonical form of an artifact is, by definition, ``canonical_json`` (see
:mod:`harness.digest`) of ``artifact.to_data()``: ``model_dump(mode="json")``
plus ``schema_name`` and ``schema_version``, keys sorted, no whitespace.
Building that dict and encoding it was most of the cost of lowering, so for a
model class whose fields are all of the kinds below this module builds, once
per class, a writer of the same text: the constant text (keys, punctuation) in
pieces and one converter per field (no ``exec``, no ``eval``), joined by
``str.join`` (see :func:`_assemble` for why not ``str.format``). The writer is
derived code of the class and stored on it (``vars(cls)``), for the class's
lifetime, as :mod:`dataclasses` stores the ``__init__`` it generates.

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
  held, bounded), fetched once per :func:`write` and handed down to the
  writers of the models inside;
- a non-finite number (in a float or an int field) is written ``nan`` /
  ``inf`` / ``-inf`` by ``repr``: the writer checks the texts of a class's
  numbers (one ``frozenset.isdisjoint`` per instance written; each optional or
  listed number by itself) and :func:`write` returns None so that the reference
  path decides (it raises for a real NaN or infinity). A string holding those
  letters is written as it is (the same text as the reference's).

The compiled text is byte-identical to the reference; ``tests/test_canonical.py``
checks it on every IR of the cases and of the differential corpus.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import types
import typing
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, NamedTuple

from pydantic import BaseModel

from harness import session

#: The writer of a model class, or of a field value that holds models: ``(value, texts) -> JSON text``, where
#: ``texts`` is the current session's memo of texts (:attr:`harness.session.Session.texts`).
Writer = Callable[[Any, Any], str]
#: The writer of a field value that holds no model: ``value -> JSON text``.
Scalar = Callable[[Any], str]
#: The class attribute that holds a class's writer: ``(extra, writer or None)``.
WRITER_ATTRIBUTE = "_harness_canonical_writer"


class _Unsupported(Exception):
    """A field kind (or a value's class) the compiled writers do not cover, or a non-finite number."""


def write(obj: BaseModel, extra: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The canonical JSON of ``obj`` with ``extra`` top-level ``(key, json)`` pairs, or None.

    None means "use the reference path" (see the module rules).
    """
    writer = _writer(type(obj), extra)
    if writer is None:
        return None
    try:
        return writer(obj, session.current().texts)
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


class _Field(NamedTuple):
    """How one field's value is written: ``kind`` ``float`` (``repr(float(value))``), ``int`` (``repr(+value)``),
    ``scalar`` (``function(value)``, a :data:`Scalar`), ``model`` (``function(value, texts)``, a :data:`Writer`)
    or ``memo``: an instance of a class whose texts are memoized (or of a union of such classes), looked up in
    ``texts`` first, ``function(value, texts)`` writing (and remembering) the text of one that is not there."""

    kind: str
    function: Callable[..., str] | None = None


_FLOAT, _INT = _Field("float"), _Field("int")
#: What ``repr`` writes for a number that is not finite (and for no finite one).
_NON_FINITE = frozenset({"nan", "inf", "-inf"})


def _finite(value: Any) -> bool:
    """Whether ``value`` (a number, or the sum of a class's numbers) is finite: False for NaN, an infinity, an
    overflow (the sum of finite numbers can overflow: then the reference decides) or a value that is no number."""
    try:
        return math.isfinite(value)
    except (OverflowError, TypeError):
        return False


def _write_float(value: Any) -> str:
    if not _finite(value):
        raise _Unsupported("a non-finite number")
    return repr(float(value))


def _write_int(value: Any) -> str:
    if not _finite(value):  # a float stored in an int field
        raise _Unsupported("a non-finite number")
    return repr(+value)


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _function(field: _Field) -> tuple[bool, Callable[..., str]]:
    """``(holds models, its function)``: the field's writer as one function (for optional values, sequences,
    absent fields)."""
    if field.kind == "float":
        return False, _write_float
    if field.kind == "int":
        return False, _write_int
    if field.kind == "memo":
        return True, _memoized(field.function)
    return field.kind == "model", field.function


def _memoized(fresh: Writer) -> Writer:
    def write_memoized(value: Any, texts: Any) -> str:
        text = texts.get(value)
        return fresh(value, texts) if text is None else text
    return write_memoized


def _optional(inner: _Field) -> _Field:
    if inner.kind == "memo":
        fresh = inner.function

        def write_optional_memoized(value: Any, texts: Any) -> str:
            if value is None:
                return "null"
            text = texts.get(value)
            return fresh(value, texts) if text is None else text
        return _Field("model", write_optional_memoized)
    models, function = _function(inner)
    if models:
        def write_optional_model(value: Any, texts: Any) -> str:
            return "null" if value is None else function(value, texts)
        return _Field("model", write_optional_model)

    def write_optional(value: Any) -> str:
        return "null" if value is None else function(value)
    return _Field("scalar", write_optional)


def _sequence(inner: _Field) -> _Field:
    if inner.kind == "float":
        def write_floats(items: Any) -> str:
            if not _finite(sum(items)):
                raise _Unsupported("a non-finite number")
            return "[" + ",".join(map(repr, map(float, items))) + "]"
        return _Field("scalar", write_floats)
    if inner.kind == "memo":
        fresh = inner.function

        def write_memoized_items(items: Any, texts: Any) -> str:
            found = list(map(texts.get, items))
            if None in found:  # items not remembered
                for at, text in enumerate(found):
                    if text is None:
                        found[at] = fresh(items[at], texts)
            return "[" + ",".join(found) + "]"
        return _Field("model", write_memoized_items)
    models, function = _function(inner)
    if models:
        repeat = itertools.repeat

        def write_models(items: Any, texts: Any) -> str:
            return "[" + ",".join(map(function, items, repeat(texts))) + "]"
        return _Field("model", write_models)

    def write_scalars(items: Any) -> str:
        return "[" + ",".join(map(function, items)) + "]"
    return _Field("scalar", write_scalars)


def _union(classes: tuple[type, ...], compiling: frozenset[type]) -> _Field:
    writers = {cls: _required_writer(cls, compiling) for cls in classes}
    if all(map(_memoizes, classes)):
        writers = {cls: writer.fresh for cls, writer in writers.items()}

    def write_member(value: Any, texts: Any) -> str:
        writer = writers.get(type(value))
        if writer is None:
            raise _Unsupported(type(value).__name__)
        return writer(value, texts)

    return _Field("memo" if all(map(_memoizes, classes)) else "model", write_member)


def _memoizes(cls: type) -> bool:
    """Whether the texts of ``cls`` are memoized per instance (see the module rules)."""
    return bool(getattr(cls, "CANONICAL_MEMO", False) or getattr(cls, "INTERNED", False))


def _required_writer(cls: type, compiling: frozenset[type]) -> Writer:
    if cls in compiling:
        raise _Unsupported(f"recursive model {cls.__name__}")
    writer = _writer(cls, (), compiling)
    if writer is None:
        raise _Unsupported(cls.__name__)
    return writer


def _field(annotation: Any, compiling: frozenset[type]) -> _Field:
    """How a value of this annotation is written as JSON text."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _field(args[0], compiling)
    if annotation is float:
        return _FLOAT
    if annotation is int:
        return _INT
    if annotation is bool:
        return _Field("scalar", _bool)
    if annotation is str or (origin is typing.Literal and all(isinstance(a, str) for a in args)):
        return _Field("scalar", encode_basestring_ascii)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        writer = _required_writer(annotation, compiling)
        return _Field("memo", writer.fresh) if _memoizes(annotation) else _Field("model", writer)
    if origin in (typing.Union, types.UnionType):
        members = tuple(a for a in args if a is not type(None))
        if len(members) == 1:
            inner = _field(members[0], compiling)
        elif all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            inner = _union(members, compiling)
        else:
            raise _Unsupported(str(annotation))
        return _optional(inner) if type(None) in args else inner
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _sequence(_field(args[0], compiling))
    raise _Unsupported(str(annotation))


def _absent(key_text: str, inner: _Field, before: bool) -> _Field:
    """An absent-if-None field: nothing while None, else ``"key":value,`` (``before`` the first present key)
    or ``,"key":value``."""
    models, function = _function(inner)
    if models:
        if before:
            def write_leading_model(value: Any, texts: Any) -> str:
                return "" if value is None else key_text + function(value, texts) + ","
            return _Field("model", write_leading_model)

        def write_following_model(value: Any, texts: Any) -> str:
            return "" if value is None else key_text + function(value, texts)
        return _Field("model", write_following_model)
    if before:
        def write_leading(value: Any) -> str:
            return "" if value is None else key_text + function(value) + ","
        return _Field("scalar", write_leading)

    def write_following(value: Any) -> str:
        return "" if value is None else key_text + function(value)
    return _Field("scalar", write_following)


def _compile(cls: type, extra: tuple[tuple[str, str], ...], compiling: frozenset[type]) -> Writer:
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise _Unsupported(str(cls))
    decorators = cls.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or cls.model_computed_fields:
        raise _Unsupported(f"{cls.__name__} has custom serialization")
    absent = frozenset(getattr(cls, "ABSENT_IF_NONE", frozenset()))
    constants = dict(extra)  # key -> its constant JSON text
    fields: dict[str, _Field] = {}  # key -> how its value is written
    for name, field in cls.model_fields.items():
        if field.alias or field.serialization_alias or field.exclude or not name.isidentifier():
            raise _Unsupported(f"{cls.__name__}.{name} is aliased, excluded or not an identifier")
        if name in constants:
            raise _Unsupported(f"{cls.__name__}.{name} collides with an extra key")
        fields[name] = _field(field.annotation, compiling)
    present = sorted(k for k in (*constants, *fields) if k not in absent)
    if not present:
        raise _Unsupported(f"{cls.__name__}: only absent-if-None fields")
    absent_names = tuple(sorted(absent & set(fields)))
    full = _layout(sorted((*constants, *fields)), constants, fields, absent, present[0])
    if not absent_names:
        return _assemble(cls, full, None, None)
    # the layout without the absent fields, for an instance whose absent fields are all None (the usual case)
    base = _layout(present, constants, fields, frozenset(), present[0])
    getter = operator.itemgetter(*absent_names) if len(absent_names) > 1 else operator.itemgetter(*absent_names * 2)
    return _assemble(cls, base, (getter, (None,) * max(2, len(absent_names))), full)


class _Layout(NamedTuple):
    """A class's text as ``pieces[0] + value[0] + pieces[1] + ... + value[n-1] + pieces[n]``, the values in key
    order. The values are read in stream order (``names``: floats, ints, scalars, models) and each stream is
    converted in one ``map``; ``order`` puts them back in key order (None: already)."""

    pieces: tuple[str, ...]
    names: tuple[str, ...]
    floats: int  # names[:floats] are written repr(float(value))
    numbers: int  # names[floats:numbers] are written repr(+value)
    scalars: tuple[Scalar, ...]  # the next ones, each by its Scalar
    models: tuple[Writer, ...]  # the rest, each by its Writer
    order: Callable[[Any], tuple] | None


_STREAMS = ("float", "int", "scalar", "model")


def _layout(keys: list[str], constants: dict[str, str], fields: dict[str, _Field], absent: frozenset[str],
            first: str) -> _Layout:
    pieces, keyed = ["{"], []  # keyed: (key, field) in key order
    for key in keys:
        if key in absent:
            keyed.append((key, _absent(json.dumps(key) + ":" if key < first else "," + json.dumps(key) + ":",
                                       fields[key], key < first)))
            pieces.append("")
            continue
        text = ("" if key == first else ",") + json.dumps(key) + ":"
        if key in constants:
            pieces[-1] += text + constants[key]
        else:
            pieces[-1] += text
            keyed.append((key, fields[key]))
            pieces.append("")
    pieces[-1] += "}"
    # a memoized value: looked up in texts by its Writer (a lookup in a ``map`` of its own measured no cheaper)
    keyed = [(key, _Field("model", _function(f)[1]) if f.kind == "memo" else f) for key, f in keyed]
    ordered = sorted(range(len(keyed)), key=lambda i: (_STREAMS.index(keyed[i][1].kind), i))
    by_stream = [keyed[i][1] for i in ordered]
    position = {i: at for at, i in enumerate(ordered)}  # key-order index -> its index in stream order
    order = tuple(position[i] for i in range(len(keyed)))
    kinds = [f.kind for f in by_stream]
    floats, numbers = kinds.count("float"), kinds.count("float") + kinds.count("int")
    return _Layout(tuple(pieces), tuple(keyed[i][0] for i in ordered), floats, numbers,
                   tuple(f.function for f in by_stream if f.kind == "scalar"),
                   tuple(f.function for f in by_stream if f.kind == "model"),
                   None if order == tuple(range(len(order))) else
                   operator.itemgetter(*order) if len(order) > 1 else None)


def _assemble(cls: type, base: _Layout, absent: tuple[Callable[[Any], tuple], tuple] | None,
              full: _Layout | None) -> Writer:
    """The writer of one class: ``writer(o, texts)``, with ``writer.fresh`` writing an instance not looked up in
    ``texts`` (and remembering its text there, for the classes that memoize theirs).

    ``str.join`` of the pieces and the values rather than ``str.format`` of a template: format parses its
    template on every call (most of the cost of a text). ``absent``: ``(getter, Nones)``, the absent-if-None
    fields' values and what they are while all None (then ``base`` is the layout, else ``full``).
    """
    memo = _memoizes(cls)
    call, pos, repeat, non_finite = operator.call, operator.pos, itertools.repeat, _NON_FINITE
    if not base.names and absent is None:
        text = base.pieces[0]

        def write_constant(o: Any, texts: Any) -> str:
            return text
        write_constant.fresh = write_constant
        return write_constant

    def layout_of(layout: _Layout) -> tuple:
        names = layout.names
        getter = (operator.itemgetter(*names) if len(names) > 1 else
                  (lambda fields, _n=names[0]: (fields[_n],)) if names else (lambda fields: ()))
        scalars_end = layout.numbers + len(layout.scalars)
        slots = [None] * (2 * len(layout.pieces) - 1)  # the pieces at the even places, the values between them
        slots[0::2] = layout.pieces
        return (getter, layout.floats, layout.numbers, scalars_end, layout.scalars, layout.models, layout.order,
                tuple(slots))

    plain, other = layout_of(base), layout_of(full) if full is not None else None
    absent_values, nones = absent if absent is not None else (None, None)

    def write_fresh(o: Any, texts: Any) -> str:
        fields = o.__dict__
        if absent_values is None or absent_values(fields) == nones:
            getter, floats, numbers, scalars_end, scalars, models, order, slots = plain
        else:
            getter, floats, numbers, scalars_end, scalars, models, order, slots = other
        values = getter(fields)
        if floats:
            texts_of = list(map(repr, map(float, values[:floats])))
            if floats < numbers:
                texts_of += map(repr, map(pos, values[floats:numbers]))
        elif numbers:
            texts_of = list(map(repr, map(pos, values[:numbers])))
        else:
            texts_of = []
        if numbers and not non_finite.isdisjoint(texts_of):  # the texts so far are the numbers' reprs
            raise _Unsupported("a non-finite number")
        if scalars:
            texts_of += map(call, scalars, values[numbers:scalars_end])
        if models:
            texts_of += map(call, models, values[scalars_end:], repeat(texts))
        parts = list(slots)
        parts[1::2] = texts_of if order is None else order(texts_of)
        text = "".join(parts)
        return texts.put(text, o) if memo else text

    if not memo:
        write_fresh.fresh = write_fresh
        return write_fresh

    def write_memoized(o: Any, texts: Any) -> str:
        text = texts.get(o)
        return write_fresh(o, texts) if text is None else text
    write_memoized.fresh = write_fresh
    return write_memoized
