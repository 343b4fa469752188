"""The Calculon oracle, recorded (vendored files) or live (a checkout).

Both return Calculon's view records for one case. The recorded oracle checks
that the vendored record was made from exactly the case's inputs (shape,
layout, system) and fails naming the file otherwise. The live oracle imports
a checkout only when asked, verifies its source digest against the vendored
manifest, and runs it on the case's inputs and evidence profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from harness.cases import EstimateInput
from harness.errors import OracleRecordError
from harness.evidence.calculon_export import calculon_system
from harness.evidence.profile import load_profile
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.records import OracleIdentity, RecordIndex, ViewRecord, load_manifest
from harness.oracles.runner import CalculonRunner
from harness.vocabulary import PEAK_ONLY, VIEWS


class RecordedCalculon:
    """Vendored records."""

    mode: Literal["recorded"] = "recorded"

    def __init__(self, files: tuple[str, ...] = ("records/cases.json",), vendor: Path | None = None) -> None:
        self.index = RecordIndex(files, vendor)
        self.identity: OracleIdentity = self.index.manifest.oracle
        self.files = {f: self.index.manifest.files[f] for f in files}
        self.evidence_revisions = self.index.evidence_revisions

    def views(self, record_id: str, data: EstimateInput) -> dict[str, ViewRecord]:
        record = self.index.get(record_id)
        model, execution = calculon_from_input(data)
        where = self.index.vendor / self.index.by_id[record_id][0]
        if record.calculon_model != model or record.calculon_execution != execution or record.system != data.system:
            raise OracleRecordError(f"{where}: record {record_id!r} was made from other inputs than the case's "
                                    f"(re-record with 'harness oracle record')")
        return dict(record.views)


class LiveCalculon:
    """A local Calculon checkout, digest-checked against the vendored manifest."""

    mode: Literal["live"] = "live"

    def __init__(self, source: Path | str, vendor: Path | None = None) -> None:
        expected = load_manifest(vendor).oracle
        self.runner = CalculonRunner(source, expected.source_tree_sha256)
        self.identity = expected
        self.files: dict[str, str] = {}
        self.evidence_revisions: dict[str, str] = {}

    def views(self, record_id: str, data: EstimateInput) -> dict[str, ViewRecord]:
        profile = load_profile(data.system)
        model, execution = calculon_from_input(data)
        out = {}
        for view in VIEWS:
            result = self.runner.run(model, execution, calculon_system(profile, peak_only=view == PEAK_ONLY))
            out[view] = ViewRecord(error=result["error"]) if "error" in result else ViewRecord(stats=result)
        return out
