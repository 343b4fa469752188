"""Read the shared reference records (outside the project) as our record type.

The reference files (``../shared/reference/oracle-records/*.json``) are
``{"meta": {...}, "records": [{"case", "model", "execution", "system",
"system_evidence", "peak_only"?, ...}]}``; each view is Calculon's stats or
``{"error": ...}``. They are read-only material: this module converts them
in memory into :class:`OracleRecord` so that one comparison path
(:mod:`harness.oracles.calculon`) serves both them and the vendored records.

Rule: a missing reference file is an :class:`OracleRecordError`, a malformed
one (any record) an :class:`InputError` naming the file and the field
(:func:`read_reference`); nothing is vendored from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.names import identifier_problem
from harness.errors import InputError, OracleRecordError, UnsupportedFeatureError
from harness.evidence.profile import check_profile_name
from harness.inputs import describe
from harness.interop.calculon_format import input_from_calculon
from harness.oracles.records import OracleRecord, ViewRecord, check_stats, read_json
from harness.vocabulary import SYSTEM_EVIDENCE, VIEWS




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


def required_stats() -> tuple[str, ...]:
    """The Calculon stats figures a comparison reads (:data:`harness.oracles.calculon.METRIC_GROUPS`): a view's
    stats without one of them would fail later, in ``calibrate``, far from the file."""
    from harness.oracles.calculon import METRIC_GROUPS

    return tuple(dict.fromkeys(f for group in METRIC_GROUPS.values() for f in group.values() if f is not None))


@dataclasses.dataclass(frozen=True)
class ReferenceFile:
    """A reference record file: its oracle source digest and records."""

    path: Path
    source_tree_sha256: str
    records: tuple[OracleRecord, ...]


#: The keys of a reference record; ``model_name`` is a label, not carried over.
RECORD_KEYS = ("case", "model_name", "model", "execution", "system", *VIEWS)
REQUIRED_KEYS = ("case", "model", "execution", "system", SYSTEM_EVIDENCE)


def _check_record(r: object, where: str, source: str) -> OracleRecord:
    """One reference record (at ``where``, ``records[i]``) checked whole: see :func:`read_reference`."""
    if not isinstance(r, dict):
        raise InputError(source, where, f"a record must be a mapping, got {describe(r)}")
    unknown = sorted(set(r) - set(RECORD_KEYS))
    if unknown:
        raise InputError(source, f"{where}.{unknown[0][:64]}", f"unknown record key (a record has "
                                                              f"{', '.join(RECORD_KEYS)})")
    missing = [key for key in REQUIRED_KEYS if key not in r]
    if missing:
        raise InputError(source, f"{where}.{missing[0]}", "required record key is missing")
    problem = identifier_problem(r["case"])
    if problem is not None:
        raise InputError(source, f"{where}.case", problem)
    check_profile_name(r["system"], source, f"{where}.system")
    try:  # Calculon's model and execution under the batch rules; overlap and offload are fine here
        input_from_calculon(r["model"], r["execution"], r["system"], source)
    except UnsupportedFeatureError:
        pass
    except InputError as error:
        raise InputError(source, f"{where}.{error.field}", error.message) from None
    views = {}
    for name in VIEWS:
        if name not in r:
            continue
        view = r[name]
        if isinstance(view, dict) and set(view) == {"error"}:
            if not isinstance(view["error"], str):
                raise InputError(source, f"{where}.{name}.error", f"must be a string, got {describe(view['error'])}")
            views[name] = ViewRecord(error=view["error"])
        else:
            stats = check_stats(view, source, f"{where}.{name}")
            missing = [f for f in required_stats() if f not in stats]
            if missing:
                raise InputError(source, f"{where}.{name}.{missing[0]}", "required Calculon figure is missing (a "
                                                                        "comparison reads it)")
            views[name] = ViewRecord(stats=stats)
    return OracleRecord(id=r["case"], system=r["system"], calculon_model=r["model"],
                        calculon_execution=r["execution"], views=views)


def read_reference(path: Path | str) -> ReferenceFile:
    """Load one reference file, every record checked before anything is returned; records keep their ``case``
    as id.

    Rules (an :class:`InputError` naming the file and the field, ``records[i].execution.tensor_par``):
    the root is a mapping of ``meta`` (with the oracle's ``source_tree_sha256``) and ``records`` (a list);
    a record has exactly the keys of :data:`RECORD_KEYS` (``peak_only`` and ``model_name`` optional); its
    ``case`` is a unique id; its ``system`` a profile name, never a path; its ``model`` and ``execution``
    pass Calculon-format input validation (:func:`~harness.interop.calculon_format.input_from_calculon`,
    the batch rules; overlap and offload are recorded too); each view is ``{"error": str}`` or Calculon's
    stats (:func:`~harness.oracles.records.check_stats`: finite non-negative numbers).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise OracleRecordError(f"{path}: missing (the shared reference records are not installed)")
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(source, "<root>", f"a reference file must be a mapping of meta and records, got "
                                           f"{describe(data)}")
    unknown = sorted(set(data) - {"meta", "records"})
    if unknown:
        raise InputError(source, unknown[0][:64], "unknown key (a reference file has meta and records)")
    meta, records = data.get("meta"), data.get("records")
    if not isinstance(meta, dict) or not isinstance(meta.get("source_tree_sha256"), str):
        raise InputError(source, "meta.source_tree_sha256", "required: the oracle's source digest (a string)")
    if not isinstance(records, list):
        raise InputError(source, "records", f"must be a list of records, got {describe(records)}")
    checked, seen = [], {}
    for i, r in enumerate(records):
        record = _check_record(r, f"records[{i}]", source)
        if record.id in seen:
            raise InputError(source, f"records[{i}].case",
                             f"duplicate id {record.id!r} (also records[{seen[record.id]}])")
        seen[record.id] = i
        checked.append(record)
    return ReferenceFile(path, meta["source_tree_sha256"], tuple(checked))
