"""Vendored Calculon records: the project's own file format and its checks.

Layout of ``vendor/calculon-0.1.0/`` (the project's, else the packaged one:
:meth:`harness.locations.Locations.vendor_dir`):

- ``PROVENANCE.md``: what Calculon is, its commit and license (Apache-2.0),
  the source digest and how it is computed, how the records were made;
- ``MANIFEST.json``: SHA-256 of every record file, the oracle identity;
- ``records/*.json``: ``OracleRecordFile`` documents.

Rule: a record file whose digest differs from the manifest, an oracle digest
that differs from the manifest's, or a requested record that is missing is an
:class:`OracleRecordError` naming the file, never a silent comparison.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness import inputs, locations, outputs
from harness.digest import sha256_file
from harness.errors import InputError, OracleRecordError
from harness.ir.base import Frozen

RECORDS_SCHEMA = "blueprinting.oracle-records.v0"
MANIFEST_SCHEMA = "blueprinting.oracle-manifest.v0"


class OracleIdentity(Frozen):
    """Which oracle produced the records."""

    name: Literal["calculon"] = Field(description="Oracle name.")
    version: str = Field(description="Oracle version.")
    commit: str = Field(description="Git commit of the oracle's source.")
    source_tree_sha256: str = Field(description="Digest of the oracle's Python source tree.")
    digest_rule: str = Field(description="How source_tree_sha256 is computed.")


class ViewRecord(Frozen):
    """Calculon's output for one view: its stats JSON (with layers) or its error."""

    stats: dict[str, Any] | None = Field(None, description="Calculon get_stats_json output (layers carry flags).")
    error: str | None = Field(None, description="Calculon's Llm.Error message when it refused the configuration.")


#: Calculon's stats: every figure is a finite non-negative number (``None`` where Calculon has no figure);
#: ``layers`` a list of per-layer mappings (figures, a ``name`` and ``flags`` of booleans and a ``class``
#: name), ``explicit_recompute`` a mapping of figures.
LAYER_TEXT = ("name",)


def _check_figure(value: object, source: str, field: str, *, none: bool = False) -> None:
    if value is None and none:
        return
    if type(value) not in (int, float):
        raise InputError(source, field, f"must be a number, got {inputs.describe(value)}")
    if not math.isfinite(value) or value < 0:
        raise InputError(source, field, f"must be a finite non-negative number, not {value!r}")


def _check_mapping(value: object, source: str, field: str) -> dict:
    if not isinstance(value, dict):
        raise InputError(source, field, f"must be a mapping, got {inputs.describe(value)}")
    return value


def check_stats(stats: object, source: str, field: str) -> dict[str, Any]:
    """``stats`` if it is Calculon's stats JSON under the rules above, else an InputError naming ``source`` and
    the figure (``field.layers[3].fw_flops``)."""
    for key, value in _check_mapping(stats, source, field).items():
        where = f"{field}.{key}"
        if key == "layers":
            if not isinstance(value, list):
                raise InputError(source, where, f"must be a list of layers, got {inputs.describe(value)}")
            for i, layer in enumerate(value):
                for name, figure in _check_mapping(layer, source, f"{where}[{i}]").items():
                    at = f"{where}[{i}].{name}"
                    if name in LAYER_TEXT:
                        if not isinstance(figure, str):
                            raise InputError(source, at, f"must be a string, got {inputs.describe(figure)}")
                    elif name == "flags":
                        for flag, flag_value in _check_mapping(figure, source, at).items():
                            kind = (str, "a string") if flag == "class" else (bool, "a boolean")
                            if not isinstance(flag_value, kind[0]):
                                raise InputError(source, f"{at}.{flag}",
                                                 f"must be {kind[1]}, got {inputs.describe(flag_value)}")
                    else:
                        _check_figure(figure, source, at)
        elif key == "explicit_recompute":
            for name, figure in _check_mapping(value, source, where).items():
                _check_figure(figure, source, f"{where}.{name}")
        else:
            _check_figure(value, source, where, none=True)
    return stats


class OracleRecord(Frozen):
    """Inputs given to Calculon and what it returned."""

    id: str = Field(description="Record id (a case's comparison.oracle_record).")
    system: str = Field(description="Evidence profile the system JSON was exported from.")
    calculon_model: dict[str, Any] = Field(description="Model JSON given to Calculon.")
    calculon_execution: dict[str, Any] = Field(description="Execution JSON given to Calculon.")
    views: dict[str, ViewRecord] = Field(description="Per cost view (system_evidence, peak_only).")


class OracleRecordFile(Frozen):
    schema_: Literal["blueprinting.oracle-records.v0"] = Field(alias="schema", description="File schema.")
    oracle: OracleIdentity = Field(description="Oracle identity.")
    evidence_revisions: dict[str, str] = Field(description="Revision of each evidence profile used.")
    records: tuple[OracleRecord, ...] = Field(description="The records.")


class Manifest(Frozen):
    schema_: Literal["blueprinting.oracle-manifest.v0"] = Field(alias="schema", description="File schema.")
    oracle: OracleIdentity = Field(description="Oracle identity shared by every record file.")
    files: dict[str, str] = Field(description="Record file (relative path) -> SHA-256.")


def read_json(path: Path) -> Any:
    """A JSON file (``.gz`` allowed) under the strict input rules (:mod:`harness.inputs`); any problem is an
    OracleRecordError naming the file and field."""
    try:
        return inputs.read_json(path).data
    except InputError as error:
        raise OracleRecordError(str(error)) from None


def write_json(path: Path, data: Any) -> str:
    """Write compact, sorted, strict JSON atomically (gzip-compressed with a fixed header for ``.gz``): a
    vendored record file (vendored records are this writer's data, :mod:`harness.outputs`). Returns the SHA-256
    of the written bytes (known before the file is in place: :func:`harness.outputs.committed_together`)."""
    text = json.dumps(data, indent=None, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    blob = outputs.file_bytes(path, text.encode("utf-8"))
    with outputs.atomic_output(path, "wb", option="--output", replaces_data=("vendor",)) as handle:
        handle.write(blob)
    return hashlib.sha256(blob).hexdigest()


def vendor_dir(vendor: Path | None = None) -> Path:
    """``vendor``, or the vendored records of the current locations."""
    return locations.current().vendor_dir() if vendor is None else Path(vendor)


def load_manifest(vendor: Path | None = None) -> Manifest:
    path = vendor_dir(vendor) / "MANIFEST.json"
    if not path.is_file():
        raise OracleRecordError(f"{path}: missing (vendored Calculon records are not installed)")
    try:
        return Manifest.model_validate(read_json(path))
    except (ValidationError, ValueError) as error:
        raise OracleRecordError(f"{path}: not a valid manifest: {str(error).splitlines()[0]}") from None


def load_record_file(relative: str, vendor: Path | None = None) -> OracleRecordFile:
    """Load one record file after checking its digest against the manifest."""
    return load_checked(relative, OracleRecordFile, vendor)


def load_checked(relative: str, kind: type, vendor: Path | None = None):
    """Load one vendored file as ``kind`` (a model with an ``oracle`` identity) after checking
    its digest and its oracle identity against the manifest."""
    vendor = vendor_dir(vendor)
    manifest = load_manifest(vendor)
    path = vendor / relative
    if relative not in manifest.files:
        raise OracleRecordError(f"{path}: not listed in {vendor / 'MANIFEST.json'}")
    if not path.is_file():
        raise OracleRecordError(f"{path}: missing")
    digest = sha256_file(path)
    if digest != manifest.files[relative]:
        raise OracleRecordError(f"{path}: SHA-256 {digest} does not match the manifest's {manifest.files[relative]} "
                                f"(corrupted or edited)")
    try:
        data = kind.model_validate(read_json(path))
    except (ValidationError, ValueError) as error:
        raise OracleRecordError(f"{path}: not a valid record file: {str(error).splitlines()[0]}") from None
    if data.oracle != manifest.oracle:
        raise OracleRecordError(f"{path}: oracle identity differs from the manifest's")
    return data


class RecordIndex:
    """All records of the listed files, by id."""

    def __init__(self, files: tuple[str, ...] = ("records/cases.json",), vendor: Path | None = None) -> None:
        self.vendor = vendor = vendor_dir(vendor)
        self.manifest = load_manifest(vendor)
        self.by_id: dict[str, tuple[str, OracleRecord]] = {}
        self.evidence_revisions: dict[str, str] = {}
        for relative in files:
            content = load_record_file(relative, vendor)
            self.evidence_revisions.update(content.evidence_revisions)
            for record in content.records:
                self.by_id[record.id] = (relative, record)

    def get(self, record_id: str) -> OracleRecord:
        if record_id not in self.by_id:
            raise OracleRecordError(f"{self.vendor / 'records'}: no vendored record {record_id!r}")
        return self.by_id[record_id][1]
