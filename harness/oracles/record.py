"""``harness oracle record``: write vendored records by running Calculon.

Each input is translated to Calculon's JSON (the case's own shape and layout)
and run twice: on the evidence profile as is (``system_evidence``) and with
every efficiency at 1.0 (``peak_only``), or only the views asked for. The
manifest is rewritten with the new file's digest.

Every successful view's stats carry ``explicit_recompute`` (``flops``,
``bytes``: the forward work of the layers Calculon flags
``needs_recompute``, training only; see :mod:`harness.oracles.calculon`), so
that per-layer figures can be dropped (``keep_layers=False``) to keep large
corpora small without losing the recompute comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from harness.cases import EstimateInput
from harness.digest import sha256_file
from harness.evidence.calculon_export import calculon_system
from harness.evidence.profile import load_profile
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.calculon import explicit_recompute
from harness.oracles.records import (
    MANIFEST_SCHEMA,
    RECORDS_SCHEMA,
    Manifest,
    OracleIdentity,
    read_json,
    write_json,
)
from harness.oracles.runner import CALCULON_VERSION, DIGEST_RULE, CalculonRunner
from harness.outputs import write_text
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


def write_record_file(identity: OracleIdentity, relative: str, records: list[dict], revisions: dict[str, str],
                      vendor: Path) -> Path:
    """Write one record file under ``vendor`` and its digest into the manifest (a manifest of another oracle
    identity is replaced)."""
    path = vendor / relative
    write_json(path, {"schema": RECORDS_SCHEMA, "oracle": identity.model_dump(), "evidence_revisions": revisions,
                      "records": records})
    update_manifest(identity, relative, path, vendor)
    return path


def update_manifest(identity: OracleIdentity, relative: str, path: Path, vendor: Path) -> None:
    """List ``relative`` (written at ``path``) in the manifest with its SHA-256 (other files kept
    when the oracle identity is unchanged)."""
    manifest_path = vendor / "MANIFEST.json"
    files = {}
    if manifest_path.is_file():
        old = Manifest.model_validate(read_json(manifest_path))
        if old.oracle == identity:
            files = dict(old.files)
    files[relative] = sha256_file(path)
    write_text(manifest_path, json.dumps(
        {"schema": MANIFEST_SCHEMA, "oracle": identity.model_dump(), "files": dict(sorted(files.items()))},
        indent=1, sort_keys=True) + "\n", option="--vendor")
