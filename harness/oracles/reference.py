"""Read the shared reference records (outside the project) as our record type.

The reference files (``../shared/reference/oracle-records/*.json``) are
``{"meta": {...}, "records": [{"case", "model", "execution", "system",
"system_evidence", "peak_only"?, ...}]}``; each view is Calculon's stats or
``{"error": ...}``. They are read-only material: this module converts them
in memory into :class:`OracleRecord` so that one comparison path
(:mod:`harness.oracles.calculon`) serves both them and the vendored records.

Rule: a missing or malformed reference file is an :class:`OracleRecordError`
naming the file; nothing is vendored from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import ValidationError

from harness.errors import OracleRecordError
from harness.oracles.records import OracleRecord, ViewRecord, read_json
from harness.vocabulary import VIEWS



def record_dicts(reference: "ReferenceFile", keep_layers: bool = True) -> list[dict]:
    """The records of a reference file in the vendored record format (``harness oracle import-reference``).

    Numbers are carried over unchanged; a view is ``{"stats"}`` or ``{"error"}``;
    without ``keep_layers`` the per-layer figures are dropped (the explicit
    recompute sums, where the reference has them, are kept).
    """
    out = []
    for record in reference.records:
        views = {}
        for name, view in record.views.items():
            if view.stats is None:
                views[name] = {"error": view.error}
            else:
                views[name] = {"stats": {k: v for k, v in view.stats.items() if keep_layers or k != "layers"}}
        out.append({"id": record.id, "system": record.system, "calculon_model": record.calculon_model,
                    "calculon_execution": record.calculon_execution, "views": views})
    return out


@dataclasses.dataclass(frozen=True)
class ReferenceFile:
    """A reference record file: its oracle source digest and records."""

    path: Path
    source_tree_sha256: str
    records: tuple[OracleRecord, ...]


def _view(data: dict) -> ViewRecord:
    if "error" in data:
        return ViewRecord(error=data["error"])
    return ViewRecord(stats=data)


def read_reference(path: Path | str) -> ReferenceFile:
    """Load one reference file; its records keep their ``case`` as id."""
    path = Path(path)
    if not path.is_file():
        raise OracleRecordError(f"{path}: missing (the shared reference records are not installed)")
    try:
        data = read_json(path)
        records = tuple(
            OracleRecord(id=r["case"], system=r["system"], calculon_model=r["model"], calculon_execution=r["execution"],
                         views={name: _view(r[name]) for name in VIEWS if name in r})
            for r in data["records"])
        return ReferenceFile(path, data["meta"]["source_tree_sha256"], records)
    except (ValueError, KeyError, TypeError, ValidationError) as error:
        raise OracleRecordError(f"{path}: not a reference record file: {str(error).splitlines()[0]}") from None
