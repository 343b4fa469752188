"""The one strict input layer: every file the harness reads goes through here.

Whatever is wrong with a file becomes one :class:`~harness.errors.InputError`
naming the file, the field (a dotted path, or ``<file>`` / ``line N``) and,
where known, the line. Nothing here raises anything else on bad input.

Rules:

- **Files**: regular files only. Missing, a directory, unreadable
  (permissions), or not a regular file (a FIFO would block, ``/dev/zero``
  never ends) are refused before anything is read. A whole document is at most
  :data:`MAX_DOCUMENT_BYTES` (after gzip decompression: no decompression
  bomb); one line of a line stream at most :data:`MAX_LINE_BYTES`. A name
  ending in ``.gz`` is read through gzip; a truncated or corrupt stream is
  refused (documents) or ends a line stream with a truncation line (every
  complete line before it is kept).
- **Text**: strict UTF-8 (a leading byte-order mark is dropped). An
  undecodable byte (a binary file, Latin-1 text) is refused with its line.
- **Nesting**: at most :data:`MAX_DEPTH` levels of mappings and sequences,
  checked *before* any recursive code runs: YAML is built from the parser's
  event stream (the parser is a state machine) with an explicit stack; JSON
  text is bracket-scanned before ``json`` parses it. So a 100 000-deep
  document is an error line, never a RecursionError.
- **Numbers**: finite only (``NaN``, ``Infinity``, ``.inf``, ``1e999`` are
  refused); integers within the float range (:data:`MAX_ABS_INT`, so every
  integer read converts to a finite float; their digits are counted before
  any conversion). Models bound their own fields far tighter (see
  :mod:`harness.ir.model`, :mod:`harness.evidence.profile`).
- **Keys**: unique in every mapping (YAML and JSON); YAML keys are scalars.
- **YAML**: one document per file; anchors and aliases are refused (an alias
  bomb expands exponentially); only the standard tags (``!!str``, ``!!int``,
  ``!!float``, ``!!bool``, ``!!null``, ``!!map``, ``!!seq``) are allowed;
  plain scalars resolve by the YAML 1.2 core schema only
  (:func:`core_schema_tag`): null is ``null``/``~``/empty, a boolean is
  ``true``/``false`` (or ``True``/``TRUE``...), an integer is decimal
  ``[-+]?[0-9]+`` without a leading zero, a float is ``1.5``, ``.5``, ``1e-5``,
  ``.inf``/``.nan`` (then refused as non-finite). Everything else is a string:
  YAML 1.1's ``yes``/``no``/``on``/``off``, ``0x8``, ``0o10``, ``010``,
  ``1:42:24``, ``1_000`` and timestamps are text, which a typed field refuses.
- **Types** are strict when a document is validated (:func:`validate`): the
  input models use pydantic's strict mode, so ``true`` is not 1, ``"12288"``
  is not 12288 and ``"yes"`` is not a boolean.

Entry points: :func:`read_yaml`, :func:`read_json` (documents, with the line
of each field where the format gives it), :func:`parse_json_text`,
:func:`iter_lines` and :func:`read_jsonl` (streams, line by line, bounded
memory), :func:`read_csv_rows`, :func:`finite_number`, :func:`validate`.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import math
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.errors import InputError

MAX_DEPTH = 64  # nesting levels; our deepest document (a record file) has 7
MAX_DOCUMENT_BYTES = 64 * 2**20  # one YAML/JSON document (the largest vendored one is 7.1 MB decompressed)
MAX_LINE_BYTES = 2**20  # one JSONL/CSV line (a batch line is under 1 kB)
MAX_ABS_INT = 2**1024 - 1  # integers must convert to a finite float (below 2^1024, at most 309 digits)
#: The shortest training iteration a measured input (a case's paper value, a measured run, an iteration record)
#: may state: 100 microseconds (one iteration runs the forward and backward passes of every block and the
#: optimizer step: hundreds of kernels of microseconds each at least). A shorter one is a typo, and a reference
#: that small (5e-324) made the relative error of any estimate against it overflow to infinity.
MIN_ITERATION_S = 1e-4
CHUNK_BYTES = 1 << 16

Source = str | Path
M = TypeVar("M", bound=BaseModel)


# ----------------------------------------------------------------------------------------------- documents


@dataclasses.dataclass(frozen=True)
class Document:
    """A parsed document: its data and, where the format gives it, the line of each field.

    ``lines`` maps a path (a tuple of keys and indices, as in pydantic's error
    locations) to its 1-based line; :meth:`line_of` finds the nearest known one.
    """

    source: str
    data: Any
    lines: dict[tuple[Any, ...], int] = dataclasses.field(default_factory=dict)

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        loc = tuple(loc)
        while True:
            line = self.lines.get(loc)
            if line is not None or not loc:
                return line
            loc = loc[:-1]


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """A location as the dotted field path errors print (``execution.network_tiers.data``, ``networks.1``);
    a very deep one is shortened to its first three and last two parts."""
    parts = [str(part) if len(str(part)) <= 64 else str(part)[:61] + "..." for part in loc]
    if len(parts) > 8:
        parts = parts[:3] + [f"...({len(parts) - 5} more)..."] + parts[-2:]
    return ".".join(parts) or "<root>"


# ------------------------------------------------------------------------------------------------- files


def real_path(path: Source) -> Path:
    """``path`` absolute, with symbolic links resolved as far as they go; never raises (``Path.resolve``
    raises RuntimeError on a symbolic-link loop in Python 3.11: a looping path then reaches the reader,
    which names it)."""
    return Path(os.path.realpath(os.fspath(path)))


def _open_binary(path: Path, what: str):
    """Open a regular file for reading; every refusal is an InputError naming it."""
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(source, what, "no such file") from None
    except IsADirectoryError:
        raise InputError(source, what, "is a directory, not a file") from None
    except PermissionError:
        raise InputError(source, what, "permission denied (cannot read the file)") from None
    except OSError as error:
        raise InputError(source, what, f"cannot open: {error.strerror or error}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as error:  # pragma: no cover - fstat of an open descriptor
        os.close(fd)
        raise InputError(source, what, f"cannot stat: {error.strerror or error}") from None
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise InputError(source, what, "is a directory, not a file")
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(source, what, "not a regular file (a pipe, socket or device is not read)")
    return os.fdopen(fd, "rb")


def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def read_bytes(path: Source, *, what: str = "<file>", limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The file's bytes (decompressed for ``.gz``), at most ``limit`` of them."""
    path = Path(path)
    with _open_binary(path, what) as raw:
        try:
            if _is_gzip(path):
                with gzip.GzipFile(fileobj=raw) as stream:
                    data = stream.read(limit + 1)
            else:
                data = raw.read(limit + 1)
        except EOFError:
            raise InputError(str(path), what, "truncated gzip stream (the file ends before the compressed data "
                                              "does)") from None
        except (gzip.BadGzipFile, zlib.error) as error:
            raise InputError(str(path), what, f"not a valid gzip file: {error}") from None
        except OSError as error:
            raise InputError(str(path), what, f"cannot read: {error.strerror or error}") from None
    if len(data) > limit:
        raise InputError(str(path), what, f"larger than {limit} bytes (the limit for one document)")
    return data


def decode(data: bytes, source: str, *, line_offset: int = 0, what: str = "<file>") -> str:
    """Strict UTF-8 text (a leading BOM dropped); an undecodable byte is an error with its line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1 + line_offset
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(source, what, f"not UTF-8 text: byte 0x{data[error.start]:02x} at column {column} "
                                       f"(a binary file?)", line=line) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: Source, *, what: str = "<file>", limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The file as strict UTF-8 text (see :func:`read_bytes` and :func:`decode`)."""
    return decode(read_bytes(path, what=what, limit=limit), str(path), what=what)


# -------------------------------------------------------------------------------------------------- YAML

_STANDARD = "tag:yaml.org,2002:"
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), decimal integers only. Nothing of
# YAML 1.1's wider forms (yes/no/on/off, 0x8, 0o10, 010, 1:42:24, 1_000, 1_0.5) is a boolean or number here:
# such a plain scalar stays a string, which a typed field then refuses. A decimal integer with a leading zero
# (010: 8 in YAML 1.1, 10 in YAML 1.2) is ambiguous and also stays a string.
_CORE_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_CORE_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_CORE_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_CORE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_CORE_SPECIAL = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_ALL_DIGITS = re.compile(r"[-+]?[0-9]+")  # in the core schema an int, never a float
_INT_DIGITS = 309  # decimal digits of the largest integer below 2^1024: refuse longer ones before int()


def core_schema_tag(value: str) -> str:
    """The YAML 1.2 core-schema kind of a plain scalar: ``null``, ``bool``, ``int``, ``float`` or ``str``."""
    if value in _CORE_NULL:
        return "null"
    if value in _CORE_BOOL:
        return "bool"
    if _ALL_DIGITS.fullmatch(value):
        return "int" if _CORE_INT.fullmatch(value) else "str"
    if _CORE_FLOAT.fullmatch(value) or _CORE_SPECIAL.fullmatch(value):
        return "float"
    return "str"


def _check_int(value: int, source: str, path: tuple, line: int | None) -> int:
    if not -MAX_ABS_INT - 1 <= value <= MAX_ABS_INT:
        raise InputError(source, field_path(path), f"integer {_short(value)} is beyond the float range", line=line)
    return value


def _check_float(value: float, text: str, source: str, path: tuple, line: int | None) -> float:
    if not math.isfinite(value):
        raise InputError(source, field_path(path), f"{text!s} is not a finite number (NaN and infinities are "
                                                   f"refused)", line=line)
    return value


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text)} digits)"


def _yaml_scalar(event: yaml.ScalarEvent, source: str, path: tuple, line: int) -> Any:
    """A scalar's value under the YAML 1.2 core schema (see :func:`core_schema_tag`).

    A quoted scalar or one tagged ``!`` is a string. An explicit standard tag
    (``!!int 8``) must hold its kind's core-schema form (``!!int 0x8`` is refused).
    """
    text = event.value
    tag = event.tag
    if tag is None:
        kind = core_schema_tag(text) if event.implicit[0] else "str"
    elif tag == "!":
        kind = "str"
    elif tag in (_STANDARD + "str", _STANDARD + "null", _STANDARD + "bool", _STANDARD + "int", _STANDARD + "float"):
        kind = tag[len(_STANDARD):]
        if kind != "str" and core_schema_tag(text) != kind and not (kind == "float" and core_schema_tag(text) == "int"):
            raise InputError(source, field_path(path), f"{_short(text)!r} is not a YAML 1.2 {kind} (tagged {tag})",
                             line=line)
    else:
        raise InputError(source, field_path(path), f"unsupported YAML tag {tag} (only plain scalars, mappings and "
                                                   f"sequences are read)", line=line)
    if kind == "str":
        return text
    if kind == "null":
        return None
    if kind == "bool":
        return _CORE_BOOL[text]
    if kind == "int":
        if len(text.lstrip("+-")) > _INT_DIGITS:
            raise InputError(source, field_path(path), f"integer {_short(text.lstrip('+-'))} is beyond the float "
                                                       f"range", line=line)
        return _check_int(int(text), source, path, line)
    value = float(text.replace(".", "", 1) if _CORE_SPECIAL.fullmatch(text) else text)  # .inf -> inf
    return _check_float(value, text, source, path, line)


class _Frame:
    """One open mapping or sequence while building a YAML document."""

    __slots__ = ("container", "path", "key", "key_lines")

    def __init__(self, container: dict | list, path: tuple) -> None:
        self.container = container
        self.path = path
        self.key: Any = _NO_KEY
        self.key_lines: dict[Any, int] = {}


_NO_KEY = object()


def parse_yaml(text: str, source: str) -> Document:
    """Build one YAML document under the module rules (see the module docstring)."""
    lines: dict[tuple, int] = {}
    stack: list[_Frame] = []
    root: Any = None
    documents = 0
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    events = yaml.parse(text, Loader=loader)
    try:
        for event in events:
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise InputError(source, "<yaml>", "more than one YAML document (a file holds one)", line=line)
                continue
            if isinstance(event, (yaml.StreamStartEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent)):
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                done = stack.pop()
                _attach(stack, done.container, done.path, lines, line, source)
                if not stack:
                    root = done.container
                continue
            frame = stack[-1] if stack else None
            if frame is not None and isinstance(frame.container, dict) and frame.key is _NO_KEY:
                path = frame.path  # a key is being read
            elif frame is None:
                path = ()
            elif isinstance(frame.container, dict):
                path = frame.path + (frame.key,)
            else:
                path = frame.path + (len(frame.container),)
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise InputError(source, field_path(path), "YAML anchors and aliases are not supported (write the "
                                                           "value out)", line=line)
            if isinstance(event, yaml.ScalarEvent):
                value = _yaml_scalar(event, source, path, line)
                if frame is None:
                    root = value
                else:
                    _attach(stack, value, path, lines, line, source)
                continue
            # a mapping or sequence starts
            is_map = isinstance(event, yaml.MappingStartEvent)
            if event.tag not in (None, "!", _STANDARD + ("map" if is_map else "seq")):
                raise InputError(source, field_path(path), f"unsupported YAML tag {event.tag}", line=line)
            if frame is not None and isinstance(frame.container, dict) and frame.key is _NO_KEY:
                raise InputError(source, field_path(path), "a mapping key must be a plain value, not a "
                                                           f"{'mapping' if is_map else 'sequence'}", line=line)
            if len(stack) >= MAX_DEPTH:
                raise InputError(source, field_path(path), f"nested deeper than {MAX_DEPTH} levels", line=line)
            if frame is not None and isinstance(frame.container, dict):
                line = frame.key_lines.get(frame.key, line)
            lines.setdefault(path, line)
            stack.append(_Frame({} if is_map else [], path))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}" if mark else "<yaml>"
        raise InputError(source, where, f"not valid YAML: {error.problem or error}") from None
    except yaml.reader.ReaderError as error:  # a character YAML refuses (NUL, a C0 or C1 control): its line
        raise InputError(source, "<yaml>", f"not valid YAML: character U+{error.character:04X} is not printable "
                         "(YAML allows tab, line breaks and printable characters)",
                         line=_offset_line(text, error.position, loader is not yaml.SafeLoader)) from None
    except yaml.YAMLError as error:
        raise InputError(source, "<yaml>", f"not valid YAML: {error}") from None
    finally:
        events.close()
    return Document(source, root, lines)


def _offset_line(text: str, position: int, utf8: bool) -> int:
    """The line of ``text`` (from 1) at a reader's ``position``: a byte offset into the UTF-8 text for libyaml's
    loader (``utf8``), a character offset for PyYAML's own."""
    prefix = text.encode("utf-8")[:position] if utf8 else text[:position]
    return prefix.count(b"\n" if utf8 else "\n") + 1


def _attach(stack: list[_Frame], value: Any, path: tuple, lines: dict, line: int | None, source: str) -> None:
    """Put a finished value (or key) into the innermost open container."""
    if not stack:
        return
    frame = stack[-1]
    container = frame.container
    if isinstance(container, list):
        lines.setdefault(path, line)
        container.append(value)
        return
    if frame.key is _NO_KEY:
        try:
            hash(value)
        except TypeError:  # pragma: no cover - collections are refused as keys before this
            raise InputError(source, field_path(frame.path), "a mapping key must be a plain value", line=line) from None
        if value in frame.key_lines:
            raise InputError(source, field_path(frame.path + (value,)),
                             f"duplicate key (first at line {frame.key_lines[value]})", line=line)
        frame.key_lines[value] = line
        frame.key = value
        return
    lines.setdefault(path, frame.key_lines.get(frame.key, line))
    container[frame.key] = value
    frame.key = _NO_KEY


def read_yaml(path: Source, *, what: str = "<file>") -> Document:
    """Read and build one YAML file (see the module rules)."""
    return parse_yaml(read_text(path, what=what), str(path))


# -------------------------------------------------------------------------------------------------- JSON

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
    """True when ``text`` nests brackets deeper than ``limit`` outside strings.

    No recursion: strings and everything but brackets are removed by two
    regular-expression passes, then one loop over the remaining brackets
    counts the depth and stops at the first level past ``limit``.
    (Unbalanced text is left to the JSON parser to refuse.)
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


class _Flagged:
    """A value the JSON hooks refused, left in place so that its path can be found."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Duplicated(dict):
    """A JSON object that repeated a key."""

    __slots__ = ("duplicate",)


class _JsonHooks:
    """Per-parse hooks: refuse non-finite numbers, oversized integers and repeated keys."""

    __slots__ = ("flagged",)

    def __init__(self) -> None:
        self.flagged = False

    def constant(self, name: str) -> _Flagged:
        self.flagged = True
        return _Flagged(f"{name} is not a finite number (NaN and infinities are refused)")

    def floating(self, text: str) -> float | _Flagged:
        value = float(text)
        if math.isfinite(value):
            return value
        self.flagged = True
        return _Flagged(f"{_short(text)} is not a finite number (beyond the float range)")

    def integer(self, text: str) -> int | _Flagged:
        if len(text) <= 300:  # always within the float range
            return int(text)
        if len(text.lstrip("-")) <= _INT_DIGITS:
            value = int(text)
            if -MAX_ABS_INT - 1 <= value <= MAX_ABS_INT:
                return value
        self.flagged = True
        return _Flagged(f"integer {_short(text)} is beyond the float range")

    def mapping(self, pairs: list[tuple[str, Any]]) -> dict:
        data = dict(pairs)
        if len(data) == len(pairs):
            return data
        self.flagged = True
        seen: set[str] = set()
        duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
        out = _Duplicated(data)
        out.duplicate = duplicate
        return out


def _first_flag(data: Any) -> tuple[tuple, str] | None:
    """The first refused value in document order, with its path (iterative: no recursion)."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Flagged):
            return path, value.message
        if isinstance(value, _Duplicated):
            return path + (value.duplicate,), "duplicate key (a key may appear once)"
        if isinstance(value, dict):
            stack.extend(reversed([(path + (k,), v) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(path + (i,), v) for i, v in enumerate(value)]))
    return None


def parse_json_text(text: str, source: str, *, line: int | None = None) -> Any:
    """Parse one JSON document or line under the module rules.

    ``line`` is the line of ``text`` in its file (a JSONL line); syntax errors
    then name that line, else the line inside ``text``.
    """
    if json_depth_exceeds(text):
        raise InputError(source, "<json>", f"nested deeper than {MAX_DEPTH} levels", line=line)
    hooks = _JsonHooks()
    try:
        data = json.loads(text, object_pairs_hook=hooks.mapping, parse_constant=hooks.constant,
                          parse_float=hooks.floating, parse_int=hooks.integer)
    except json.JSONDecodeError as error:
        if line is None:  # a document: the line is the field, as for YAML syntax errors
            raise InputError(source, f"line {error.lineno}", f"not valid JSON: {error.msg} (column {error.colno})",
                             line=error.lineno) from None
        raise InputError(source, "<json>", f"not valid JSON: {error.msg} (column {error.colno})", line=line) from None
    except RecursionError:  # pragma: no cover - the bracket scan bounds the depth first
        raise InputError(source, "<json>", f"nested deeper than {MAX_DEPTH} levels", line=line) from None
    if hooks.flagged:
        path, message = _first_flag(data)
        raise InputError(source, field_path(path), message, line=line)
    return data


def read_json(path: Source, *, what: str = "<file>") -> Document:
    """Read one JSON file (``.gz`` allowed) under the module rules."""
    return Document(str(path), parse_json_text(read_text(path, what=what), str(path)))


# ----------------------------------------------------------------------------------------- line streams


@dataclasses.dataclass(frozen=True, slots=True)
class TextLine:
    """One line of a line stream: its text, or why it could not be read.

    ``truncated`` marks the last item of a compressed stream that ends early:
    every complete line before it was read, ``text`` is None.
    """

    number: int
    text: str | None
    error: InputError | None = None
    truncated: bool = False


def iter_lines(path: Source, *, limit: int = MAX_LINE_BYTES, what: str = "<file>") -> Iterator[TextLine]:
    """Stream a text file (``.gz`` allowed) line by line in bounded memory.

    A file that cannot be opened is an InputError before the first line; a
    line that is not UTF-8 or longer than ``limit`` bytes is yielded with its
    error (the stream goes on); a gzip stream that ends early or turns corrupt
    yields one last ``truncated`` item after every complete line.
    """
    path = Path(path)
    source = str(path)
    raw = _open_binary(path, what)
    with raw:
        reader = gzip.GzipFile(fileobj=raw) if _is_gzip(path) else raw
        pending = bytearray()
        too_long = False
        number = 0

        def finish(data: bytes | None) -> TextLine:
            if data is None:
                return TextLine(number, None, InputError(source, f"line {number}", f"longer than {limit} bytes "
                                                                                   "(the limit for one line)"))
            try:
                return TextLine(number, decode(data, source, line_offset=number - 1, what=f"line {number}"))
            except InputError as error:
                return TextLine(number, None, error)

        while True:
            try:
                chunk = reader.read1(CHUNK_BYTES) if reader is not raw else raw.read(CHUNK_BYTES)
            except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as error:
                if number == 0 and not pending and not isinstance(error, EOFError):
                    raise InputError(source, what, f"not a valid gzip file: {error}") from None
                kind = "ends early" if isinstance(error, EOFError) else f"is corrupt ({error})"
                yield TextLine(number + 1, None, InputError(
                    source, f"line {number + 1}", f"truncated: the compressed stream {kind}; the {number} complete "
                                                  f"line{'s' if number != 1 else ''} before it were read"),
                    truncated=True)
                return
            if not chunk:
                break
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end < 0:
                    if not too_long:
                        pending += chunk[start:]
                        if len(pending) > limit:
                            too_long = True
                            pending.clear()
                    break
                number += 1
                if too_long or len(pending) + end - start > limit:
                    yield finish(None)
                else:
                    pending += chunk[start:end]
                    yield finish(bytes(pending))
                pending.clear()
                too_long = False
                start = end + 1
        if pending or too_long:
            number += 1
            yield finish(None if too_long else bytes(pending))


@dataclasses.dataclass(frozen=True, slots=True)
class JsonLine:
    """One non-blank JSONL line: its value, or the error that makes it unusable."""

    number: int
    data: Any = None
    error: InputError | None = None
    truncated: bool = False


def read_jsonl(path: Source, *, limit: int = MAX_LINE_BYTES) -> Iterator[JsonLine]:
    """Stream a JSON-lines file (``.gz`` allowed): one item per non-blank line, errors per line."""
    source = str(path)
    for item in iter_lines(path, limit=limit):
        if item.error is not None:
            yield JsonLine(item.number, error=item.error, truncated=item.truncated)
            continue
        if not item.text.strip():
            continue
        try:
            yield JsonLine(item.number, parse_json_text(item.text, source, line=item.number))
        except InputError as error:
            yield JsonLine(item.number, error=error)


# --------------------------------------------------------------------------------------------------- CSV


@dataclasses.dataclass(frozen=True, slots=True)
class CsvRow:
    """One CSV record: its first line and its values by column name (text, as written)."""

    line: int
    values: dict[str, str]


def read_csv_rows(path: Source, *, required: tuple[str, ...] = (), limit: int = MAX_LINE_BYTES) -> Iterator[CsvRow]:
    """Stream a CSV file with a header row (``.gz`` allowed), in bounded memory.

    Refused (InputError naming the file, line and column): an unreadable or
    undecodable file, no header, an empty or repeated column name, a missing
    ``required`` column, a record with more or fewer fields than the header,
    a line longer than ``limit`` bytes, a truncated compressed stream. Blank
    lines are skipped. Values stay text: convert numbers with
    :func:`finite_number`.
    """
    source = str(path)
    header: list[str] | None = None
    buffered: list[str] = []
    first_line = 0
    for item in iter_lines(path, limit=limit):
        if item.error is not None:
            raise item.error
        if not buffered and not item.text.strip():
            continue
        if not buffered:
            first_line = item.number
        buffered.append(item.text[:-1] if item.text.endswith("\r") else item.text)
        try:
            records = list(csv.reader(io.StringIO("\n".join(buffered) + "\n"), strict=True))
        except csv.Error as error:
            if "EOF" in str(error) or "unexpected end" in str(error):  # a quoted field continues on the next line
                if sum(len(t) for t in buffered) > limit:
                    raise InputError(source, f"line {first_line}", f"a quoted field runs past {limit} bytes") from None
                continue
            raise InputError(source, f"line {first_line}", f"not valid CSV: {error}") from None
        buffered = []
        if not records:
            continue
        if len(records) > 1:
            raise InputError(source, f"line {first_line}", "not valid CSV: a carriage return inside a line")
        (fields,) = records
        if header is None:
            header = [name.strip() for name in fields]
            for index, name in enumerate(header):
                if not name:
                    raise InputError(source, f"column {index + 1}", "empty column name in the header", line=first_line)
                if name in header[:index]:
                    raise InputError(source, name, "repeated column name in the header", line=first_line)
            missing = [name for name in required if name not in header]
            if missing:
                raise InputError(source, missing[0], "required column is missing from the header", line=first_line)
            continue
        if len(fields) != len(header):
            raise InputError(source, f"line {first_line}", f"{len(fields)} fields, the header has {len(header)}",
                             line=first_line)
        yield CsvRow(first_line, dict(zip(header, fields)))
    if buffered:
        raise InputError(source, f"line {first_line}", "not valid CSV: a quoted field is never closed")
    if header is None:
        raise InputError(source, "<file>", "no header row (an empty CSV file)")


def finite_number(text: Any, source: str, field: str, *, line: int | None = None, minimum: float | None = None,
                  maximum: float | None = None) -> float:
    """A finite number from a text cell (or a JSON number), optionally bounded; errors name the field."""
    if isinstance(text, bool):
        raise InputError(source, field, f"must be a number, got {describe(text)}", line=line)
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        try:
            value = float(str(text).strip().replace("_", "x"))  # float() would accept 1_000
        except ValueError:
            raise InputError(source, field, f"must be a number, got {describe(text)}", line=line) from None
    if not math.isfinite(value):
        raise InputError(source, field, f"{_short(text)} is not a finite number", line=line)
    if minimum is not None and value < minimum:
        raise InputError(source, field, f"must be >= {minimum:g}, got {value:g}", line=line)
    if maximum is not None and value > maximum:
        raise InputError(source, field, f"must be <= {maximum:g}, got {value:g}", line=line)
    return value


def json_number(value: Any, source: str, field: str, *, minimum: float | None = None,
                maximum: float | None = None) -> float:
    """A finite JSON number (never a string or a boolean: no coercion), optionally bounded; errors name the
    field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(source, field, f"must be a number, got {describe(value)}")
    return finite_number(value, source, field, minimum=minimum, maximum=maximum)


def only_keys(data: dict, known: Iterable[str], source: str, where: str, why: str = "not read by this importer") -> None:
    """Every key of ``data`` is one of ``known``: an unknown key is one InputError naming it (a key that is
    silently ignored is a setting the user believes was applied)."""
    known = set(known)
    for key in data:
        if key not in known:
            raise InputError(source, f"{where}.{key}" if where else str(key),
                             f"unknown field ({why}; known: {', '.join(sorted(known))})")


# -------------------------------------------------------------------------------------------- validation

_TYPE_ERRORS = {"int_type", "float_type", "bool_type", "string_type", "dict_type", "list_type", "tuple_type",
                "model_type", "int_from_float", "literal_error", "enum", "model_attributes_type"}


_BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "too_short",
                 "string_too_long", "string_too_short"}
_LONG_NUMBER = re.compile(r"(?<![\w.])\d{16,}(?:\.\d+)?(?![\w.])")


def quoted(text: str) -> str:
    """``text`` as a JSON string (every control character escaped), shortened to 40 characters: how an error
    message shows a string the user gave (never a whole huge value, never a raw line break)."""
    return json.dumps(text if len(text) <= 40 else text[:37] + "...")


def describe(value: Any) -> str:
    """A short, JSON-flavoured description of a value for error messages (``true (a boolean)``)."""
    if isinstance(value, bool):
        return f"{'true' if value else 'false'} (a boolean)"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"{quoted(value)} (a string)"
    if isinstance(value, int):
        return f"{_short(value)} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a number)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def validation_error(source: str, error: ValidationError, *, document: Document | None = None,
                     prefix: tuple = ()) -> InputError:
    """The first problem of a pydantic ValidationError as one InputError (field path, line, plain words)."""
    first = error.errors(include_url=False)[0]
    loc = tuple(first["loc"])
    kind = first["type"]
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "required field is missing"
    elif kind in _TYPE_ERRORS and "input" in first:
        message = f"{message}, got {describe(first['input'])}"
    elif kind in _BOUND_ERRORS and "input" in first:
        message = f"{message}, got {describe(first['input'])}"
    message = _LONG_NUMBER.sub(lambda m: f"{float(m.group()):g}", message)  # a bound of 1e300, not 301 digits
    line = document.line_of(loc) if document is not None else None
    return InputError(source, field_path(prefix + loc), message, line=line)


def validate(model: type[M], data: Any, source: str, *, document: Document | None = None, what: str = "a mapping",
             prefix: tuple = ()) -> M:
    """``model.model_validate(data)`` with every failure as one InputError naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise InputError(source, field_path(prefix), f"must be {what}, got {describe(data)}")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise validation_error(source, error, document=document, prefix=prefix) from None
