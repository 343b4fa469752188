"""Calculon-format batches: one JSON object per line, ``{"id", "model", "execution", "system"}``.

``model`` and ``execution`` use Calculon 0.1.0's field names; ``system`` is an
evidence profile name (``a100_80g``, ``a100_80e``, ``h100_80g_nvl8``). A file
ending in ``.gz`` is read through gzip. The file is streamed line by line
(:func:`harness.inputs.iter_lines`): memory does not grow with the number of
lines, except for one remembered id per line (ids are at most 256 characters).

Rules:
- every non-blank line is classified, none stops the batch: ``valid`` (an
  :class:`EstimateInput`), ``rejected`` (a feature the portable plan cannot
  represent: TP/DP overlap, offload; :class:`UnsupportedFeatureError`) or
  ``invalid`` (bad JSON, a missing or unknown field, an invalid layout, a
  duplicate id, a profile that does not exist or lacks the datatype or a
  network tier);
- an invalid line's reason starts with ``line N:`` and names the field in
  Calculon's terms; blank lines are skipped (line numbers still count them);
- a line is read under the strict input rules of :mod:`harness.inputs`: not
  UTF-8, longer than 1 MiB, nested too deep, a non-finite number, an integer
  beyond 64 bits, a repeated key, a wrong type (``true`` or ``"8"`` for a
  number) are each that line's ``invalid`` reason; an id is an identifier
  (:mod:`harness.names`: 1-256 characters, no control or format character);
- a compressed batch that ends early (a truncated ``.gz``) keeps every
  complete line; one last ``invalid`` entry (id null, field ``<file>``)
  reports the truncation;
- configurations Calculon would refuse for capacity or network-tier reasons
  are *valid* here: the estimate reports them ``infeasible``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterator, Literal

from harness.cases import EstimateInput
from harness.errors import EvidenceError, InputError, UnsupportedFeatureError, one_line
from harness.estimate import check_tiers
from harness.evidence.profile import check_profile_name, load_profile
from harness.inputs import TextLine, iter_lines, parse_json_text
from harness.names import identifier_problem
from harness.interop.calculon_format import calculon_error, input_from_calculon

BATCH_FIELDS = ("id", "model", "execution", "system")
LineStatus = Literal["valid", "rejected", "invalid"]


@dataclasses.dataclass(frozen=True)
class BatchLine:
    """One classified batch line."""

    line: int = dataclasses.field(metadata={"doc": "1-based line number in the file."})
    id: str | None = dataclasses.field(metadata={"doc": "The line's id, when it has a usable one."})
    status: LineStatus = dataclasses.field(metadata={"doc": "valid, rejected or invalid."})
    input: EstimateInput | None = dataclasses.field(default=None, metadata={"doc": "The input (valid lines)."})
    field: str | None = dataclasses.field(default=None, metadata={"doc": "Offending field, Calculon's terms."})
    message: str | None = dataclasses.field(default=None, metadata={"doc": "What is wrong with it."})

    @property
    def reason(self) -> str | None:
        """``line N: field: message`` (invalid), ``field: message`` (rejected), None (valid)."""
        if self.status == "valid":
            return None
        prefix = f"line {self.line}: " if self.status == "invalid" else ""
        return one_line(f"{prefix}{self.field}: {self.message}")


def _invalid(line: int, record_id: str | None, field: str, message: str) -> BatchLine:
    return BatchLine(line, record_id, "invalid", field=field, message=message)




def parse_line(text: str, line: int, source: str = "<batch>") -> BatchLine:
    """Classify one line's text (see the module rules)."""
    try:
        data = parse_json_text(text, source, line=line)
    except InputError as error:
        return _invalid(line, None, error.field, error.message)
    if not isinstance(data, dict):
        return _invalid(line, None, "<root>", "a batch line must be a JSON object")
    raw_id = data.get("id")
    record_id = raw_id if identifier_problem(raw_id) is None else None
    unknown = sorted(set(data) - set(BATCH_FIELDS))
    if unknown:
        return _invalid(line, record_id, unknown[0][:64], f"unknown field (a line has {', '.join(BATCH_FIELDS)})")
    missing = [name for name in BATCH_FIELDS if name not in data]
    if missing:
        return _invalid(line, record_id, missing[0], "required field is missing")
    if record_id is None:
        return _invalid(line, None, "id", identifier_problem(raw_id))
    where = f"{source}:{line}"
    try:
        check_profile_name(data["system"], where, "system")
        parsed = input_from_calculon(data["model"], data["execution"], data["system"], where)
        check_tiers(parsed, load_profile(parsed.system, referrer=where), where)
    except UnsupportedFeatureError as error:
        return BatchLine(line, record_id, "rejected", field=error.field, message=error.message)
    except EvidenceError as error:
        if error.source == where:
            return _invalid(line, record_id, error.field, error.message)
        return _invalid(line, record_id, "system", str(error))
    except InputError as error:
        error = calculon_error(error)
        return _invalid(line, record_id, error.field, error.message)
    return BatchLine(line, record_id, "valid", input=parsed)


def unreadable_line(item: TextLine) -> BatchLine:
    """The invalid entry of a line that could not be read (``item.error``: not UTF-8, too long, truncated)."""
    return _invalid(item.number, None, "<file>" if item.truncated else "<line>", item.error.message)


class DuplicateIds:
    """The batch's duplicate-id rule, applied in file order: the first line that is not invalid keeps its id; a
    later line with the same id is invalid (whatever it holds)."""

    def __init__(self) -> None:
        self._first_line: dict[str, int] = {}  # id -> the line that has it

    def duplicate(self, line: int, record_id: str | None, status: LineStatus) -> BatchLine | None:
        """The invalid entry replacing line ``line`` if an earlier line has its id, else None (the id remembered
        when the line is not invalid)."""
        if record_id is None or status == "invalid":
            return None
        first = self._first_line.setdefault(record_id, line)
        if first == line:
            return None
        return _invalid(line, record_id, "id", f"duplicate id {record_id!r} (also on line {first})")


def iter_batch(path: Path | str) -> Iterator[BatchLine]:
    """Every non-blank line of a batch file, classified, streamed; a repeated id is invalid.

    A file that cannot be read at all is an InputError before the first line.
    """
    path = Path(path)
    source = str(path)
    ids = DuplicateIds()
    for item in iter_lines(path):
        if item.error is not None:
            yield unreadable_line(item)
            continue
        if not item.text.strip():
            continue
        entry = parse_line(item.text, item.number, source)
        yield ids.duplicate(entry.line, entry.id, entry.status) or entry


def read_batch(path: Path | str) -> list[BatchLine]:
    """Every non-blank line of a batch file, classified (:func:`iter_batch` as a list)."""
    return list(iter_batch(path))


def require_valid(path: Path | str) -> list[tuple[str, EstimateInput]]:
    """``(id, input)`` of every line; the first rejected or invalid line is an InputError."""
    out = []
    for entry in iter_batch(path):
        if entry.status != "valid":
            raise InputError(str(path), f"line {entry.line}: {entry.field}", f"{entry.message} ({entry.status})")
        out.append((entry.id, entry.input))
    if not out:
        raise InputError(str(path), "<file>", "no batch lines (the file is empty or blank)")
    return out


def batch_line_json(record_id: str, model: dict, execution: dict, system: str) -> str:
    """One batch line (sorted keys, no spaces): the inverse of :func:`parse_line`."""
    return json.dumps({"id": record_id, "model": model, "execution": execution, "system": system},
                      sort_keys=True, separators=(",", ":"))
