"""``harness oracle record``: write vendored records by running Calculon.

Each input is translated to Calculon's JSON (the case's own shape and layout)
and run twice: on the evidence profile as is (``system_evidence``) and with
every efficiency at 1.0 (``peak_only``), or only the views asked for. The
manifest is rewritten with the new file's digest.

Writers of one vendor directory (``oracle record``, ``oracle record --search``,
``oracle import-reference``, run at the same time) are serialised by an
exclusive lock on the directory itself (:func:`vendor_lock`; no lock file is
left behind): each reads the manifest, writes its file and rewrites the
manifest while holding it, so no writer's listing is lost and the manifest
always lists the files' current digests. An existing manifest that is not a
valid manifest refuses the write (an OracleRecordError naming it) before any
file is written. ``MANIFEST.json`` and ``PROVENANCE.md`` are never a record
file's name (:data:`RESERVED_NAMES`).

Every successful view's stats carry ``explicit_recompute`` (``flops``,
``bytes``: the forward work of the layers Calculon flags
``needs_recompute``, training only; see :mod:`harness.oracles.calculon`), so
that per-layer figures can be dropped (``keep_layers=False``) to keep large
corpora small without losing the recompute comparison.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterable

from harness.cases import EstimateInput
from harness.errors import InputError
from harness.evidence.calculon_export import calculon_system
from harness.evidence.profile import load_profile
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import explicit_recompute
from harness.oracles.records import (
    MANIFEST_SCHEMA,
    RECORDS_SCHEMA,
    OracleIdentity,
    load_manifest,
    write_json,
)
from harness.oracles.runner import CALCULON_VERSION, DIGEST_RULE, CalculonRunner
from harness.outputs import committed_together, write_text

try:  # POSIX; elsewhere writers are not serialised
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None
from harness.vocabulary import PEAK_ONLY, VIEWS

CALCULON_COMMIT = "caa4b11f8fe1fee3ba57adaacb7590d7deabd053"


#: The views recorded by default: every named view (``harness.vocabulary.VIEWS``).
RECORD_VIEWS = tuple(VIEWS)


def view_record(result: dict, training: bool, keep_layers: bool = True) -> dict:
    """One view's record: ``{"error"}``, or ``{"stats"}`` with explicit_recompute (layers optional)."""
    if "error" in result:
        return {"error": result["error"]}
    recompute = explicit_recompute(result, training)
    stats = {k: v for k, v in result.items() if keep_layers or k != "layers"}
    stats["explicit_recompute"] = {"flops": recompute.flops, "bytes": recompute.bytes}
    return {"stats": stats}


def record_inputs(runner: CalculonRunner, inputs: Iterable[tuple[str, EstimateInput]],
                  views: tuple[str, ...] = RECORD_VIEWS, keep_layers: bool = True) -> tuple[list[dict], dict[str, str]]:
    unknown = sorted(set(views) - set(RECORD_VIEWS))
    if unknown:
        raise ValueError(f"unknown views {unknown} (known: {', '.join(RECORD_VIEWS)})")
    records, revisions = [], {}
    for record_id, data in inputs:
        profile = load_profile(data.system)
        revisions[profile.name] = profile.revision()
        model, execution = calculon_from_input(data, record_id)
        out = {}
        for view in views:
            result = runner.run(model, execution, calculon_system(profile, peak_only=view == PEAK_ONLY))
            out[view] = view_record(result, data.execution.training, keep_layers)
        records.append({"id": record_id, "system": data.system, "calculon_model": model,
                        "calculon_execution": execution, "views": out})
    return records, revisions


def runner_identity(runner: CalculonRunner) -> OracleIdentity:
    """The identity of the records a Calculon checkout produces."""
    return OracleIdentity(name="calculon", version=CALCULON_VERSION, commit=CALCULON_COMMIT,
                          source_tree_sha256=runner.source_digest, digest_rule=DIGEST_RULE)


#: Names in the vendor directory that are never a record file (``--output``).
RESERVED_NAMES = ("MANIFEST.json", "PROVENANCE.md")


def write_record_file(identity: OracleIdentity, relative: str, records: list[dict], revisions: dict[str, str],
                      vendor: Path) -> Path:
    """Write one record file under ``vendor`` and list it in the manifest (:func:`write_vendored`)."""
    return write_vendored(identity, relative, {"schema": RECORDS_SCHEMA, "oracle": identity.model_dump(),
                                               "evidence_revisions": revisions, "records": records}, vendor)


def check_record_name(output: str) -> Path:
    """``output`` (``--output``) as a record file's path inside the vendor directory: relative, without
    ``..``, and not one of the directory's own files (:data:`RESERVED_NAMES`)."""
    relative = Path(output)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise InputError(output, "--output", "must be a path inside the vendor directory (relative, no '..')")
    if relative.parts[0] in RESERVED_NAMES:
        raise InputError(output, "--output", f"is the vendor directory's own {relative.parts[0]}, not a record file")
    return relative


@contextlib.contextmanager
def vendor_lock(vendor: Path):
    """Hold an exclusive lock on the directory ``vendor`` (created if missing); another writer waits for it.

    The lock is ``flock`` on the directory's own descriptor, released when the block ends or the process
    dies, so nothing is left behind in the vendor directory."""
    try:
        vendor.mkdir(parents=True, exist_ok=True)
        fd = os.open(vendor, os.O_RDONLY)
    except OSError as error:
        raise InputError(str(vendor), "--vendor", f"cannot use the vendor directory: {error.strerror or error}") \
            from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_vendored(identity: OracleIdentity, relative: str, data: dict, vendor: Path) -> Path:
    """Write ``data`` (JSON) to ``vendor/relative`` and list it in the manifest with its SHA-256, under the
    vendor lock. Other files stay listed when the manifest's oracle identity is ``identity`` (a manifest of
    another identity is replaced); an invalid manifest is an OracleRecordError before anything is written."""
    path = vendor / check_record_name(relative)
    manifest_path = vendor / "MANIFEST.json"
    with vendor_lock(vendor):
        files = {}
        if manifest_path.is_file():
            old = load_manifest(vendor)
            if old.oracle == identity:
                files = dict(old.files)
        with committed_together():  # the record file and the manifest that lists it, or neither
            files[relative] = write_json(path, data)
            write_text(manifest_path, json.dumps(
                {"schema": MANIFEST_SCHEMA, "oracle": identity.model_dump(), "files": dict(sorted(files.items()))},
                indent=1, sort_keys=True) + "\n", option="--vendor", replaces_data=("vendor",))
    return path
