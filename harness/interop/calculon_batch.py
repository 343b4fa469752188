"""Calculon-format batches: one JSON object per line, ``{"id", "model", "execution", "system"}``.

``model`` and ``execution`` use Calculon 0.1.0's field names; ``system`` is an
evidence profile name (``a100_80g``, ``a100_80e``, ``h100_80g_nvl8``). A file
ending in ``.gz`` is read through gzip.

Rules:
- every non-blank line is classified, none stops the batch: ``valid`` (an
  :class:`EstimateInput`), ``rejected`` (a feature the portable plan cannot
  represent: TP/DP overlap, offload; :class:`UnsupportedFeatureError`) or
  ``invalid`` (bad JSON, a missing or unknown field, an invalid layout, a
  duplicate id, a profile that does not exist or lacks the datatype or a
  network tier);
- an invalid line's reason starts with ``line N:`` and names the field in
  Calculon's terms; blank lines are skipped (line numbers still count them);
- configurations Calculon would refuse for capacity or network-tier reasons
  are *valid* here: the estimate reports them ``infeasible``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Iterator, Literal

from harness.cases import EstimateInput
from harness.errors import EvidenceError, InputError, UnsupportedFeatureError
from harness.estimate import check_tiers
from harness.evidence.profile import load_profile
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
        return f"{prefix}{self.field}: {self.message}"


def _invalid(line: int, record_id: str | None, field: str, message: str) -> BatchLine:
    return BatchLine(line, record_id, "invalid", field=field, message=message)


def parse_line(text: str, line: int, source: str = "<batch>") -> BatchLine:
    """Classify one line's text (see the module rules)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return _invalid(line, None, "<json>", f"not valid JSON: {error.msg} (column {error.colno})")
    if not isinstance(data, dict):
        return _invalid(line, None, "<root>", "a batch line must be a JSON object")
    record_id = data.get("id") if isinstance(data.get("id"), str) and data.get("id") else None
    unknown = sorted(set(data) - set(BATCH_FIELDS))
    if unknown:
        return _invalid(line, record_id, unknown[0], f"unknown field (a line has {', '.join(BATCH_FIELDS)})")
    missing = [name for name in BATCH_FIELDS if name not in data]
    if missing:
        return _invalid(line, record_id, missing[0], "required field is missing")
    if record_id is None:
        return _invalid(line, None, "id", "must be a non-empty string")
    if not isinstance(data["system"], str) or not data["system"]:
        return _invalid(line, record_id, "system", "must be an evidence profile name")
    where = f"{source}:{line}"
    try:
        parsed = input_from_calculon(data["model"], data["execution"], data["system"], where)
        check_tiers(parsed, load_profile(parsed.system), where)
    except UnsupportedFeatureError as error:
        return BatchLine(line, record_id, "rejected", field=error.field, message=error.message)
    except InputError as error:
        error = calculon_error(error)
        return _invalid(line, record_id, error.field, error.message)
    except EvidenceError as error:
        return _invalid(line, record_id, "system", str(error))
    return BatchLine(line, record_id, "valid", input=parsed)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(str(path), "<file>", getattr(error, "strerror", None) or str(error)) from None


def read_batch(path: Path | str) -> list[BatchLine]:
    """Every non-blank line of a batch file, classified; a repeated id is invalid."""
    path = Path(path)
    seen: dict[str, int] = {}
    out = []
    for number, text in _lines(path):
        if not text.strip():
            continue
        entry = parse_line(text, number, str(path))
        if entry.id is not None and entry.status != "invalid":
            if entry.id in seen:
                entry = _invalid(number, entry.id, "id", f"duplicate id {entry.id!r} (also on line {seen[entry.id]})")
            else:
                seen[entry.id] = number
        out.append(entry)
    return out


def require_valid(path: Path | str) -> list[tuple[str, EstimateInput]]:
    """``(id, input)`` of every line; the first rejected or invalid line is an InputError."""
    entries = read_batch(path)
    for entry in entries:
        if entry.status != "valid":
            raise InputError(str(path), f"line {entry.line}: {entry.field}", f"{entry.message} ({entry.status})")
    return [(entry.id, entry.input) for entry in entries]


def batch_line_json(record_id: str, model: dict, execution: dict, system: str) -> str:
    """One batch line (sorted keys, no spaces): the inverse of :func:`parse_line`."""
    return json.dumps({"id": record_id, "model": model, "execution": execution, "system": system},
                      sort_keys=True, separators=(",", ":"))
