"""Writing a search's outputs: the top K JSON, the Parquet rows, the frontier.

Rules:

- every output path is checked before the search starts and written
  atomically (:mod:`harness.outputs`): a file appears whole or not at all;
  the Parquet file is streamed group by group into the temporary file of
  :func:`harness.outputs.atomic_output`;
- the JSON entry is ``{"execution", "total_s", "sample_rate_per_s",
  "components_s", "memory_bytes", "evidence"}`` with the execution in
  Calculon's field names and ``evidence`` naming the profile and its revision;
  the Parquet file's metadata names the request, the profile and its
  revision.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterable

from harness import outputs
from harness.search.results import Candidate


def entry_json(candidate: Candidate, evidence: dict[str, str]) -> dict[str, Any]:
    return {**candidate.to_json(), "evidence": evidence}


def entries_json(candidates: Iterable[Candidate], evidence: dict[str, str]) -> str:
    return json.dumps([entry_json(c, evidence) for c in candidates], indent=1) + "\n"


class ParquetRows:
    """Streams row tables into ``path`` (atomically, see the module rules); use as a context manager."""

    def __init__(self, path: Path, metadata: dict[str, str]) -> None:
        self.path = path
        self.metadata = metadata
        self.rows = 0
        self._stack = contextlib.ExitStack()
        self.writer = None

    def __enter__(self) -> "ParquetRows":
        import pyarrow.parquet as pq

        from harness.search.results import row_schema

        handle = self._stack.enter_context(outputs.atomic_output(self.path, "wb", option="--results"))
        self.schema = row_schema().with_metadata({k.encode(): v.encode() for k, v in self.metadata.items()})
        self.writer = pq.ParquetWriter(handle, self.schema, compression="zstd")
        return self

    def write(self, table) -> None:
        self.writer.write_table(table.replace_schema_metadata(self.schema.metadata))
        self.rows += table.num_rows

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            with self._stack:  # the rename happens only if the footer was written
                self.writer.close()
            return False
        with contextlib.suppress(Exception):
            self.writer.close()
        return self._stack.__exit__(*exc)
