"""Writing a search's outputs: the top K JSON, the Parquet rows, the frontier.

Rules:

- every output path is checked before the search starts (not a directory,
  its directory exists and is writable, not the model input);
- files appear whole or not at all: each is written to a temporary file in
  its own directory and renamed over the target when complete (the Parquet
  file is streamed group by group into its temporary file);
- the JSON entry is ``{"execution", "total_s", "sample_rate_per_s",
  "components_s", "memory_bytes", "evidence"}`` with the execution in
  Calculon's field names and ``evidence`` naming the profile and its revision;
  the Parquet file's metadata names the request, the profile and its
  revision.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from harness.errors import InputError
from harness.search.results import Candidate


def check_output(path: Path, flag: str, inputs: Iterable[Path] = ()) -> None:
    """Refuse an output path that cannot be written whole (see the module rules)."""
    if path.is_dir():
        raise InputError(str(path), flag, "is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(str(path), flag, f"directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(str(path), flag, f"directory {parent} is not writable")
    for source in inputs:
        if source.exists() and path.exists() and path.resolve() == source.resolve():
            raise InputError(str(path), flag, "would overwrite an input")


def temporary_beside(path: Path) -> Path:
    """A new temporary file in ``path``'s directory (renamed over ``path`` when complete)."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    os.close(handle)
    return Path(name)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = temporary_beside(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def entry_json(candidate: Candidate, evidence: dict[str, str]) -> dict[str, Any]:
    return {**candidate.to_json(), "evidence": evidence}


def entries_json(candidates: Iterable[Candidate], evidence: dict[str, str]) -> str:
    return json.dumps([entry_json(c, evidence) for c in candidates], indent=1) + "\n"


class ParquetRows:
    """Streams row tables into ``path`` (atomically, see the module rules)."""

    def __init__(self, path: Path, metadata: dict[str, str]) -> None:
        import pyarrow.parquet as pq

        from harness.search.results import row_schema

        self.path = path
        self.tmp = temporary_beside(path)
        self.schema = row_schema().with_metadata({k.encode(): v.encode() for k, v in metadata.items()})
        self.writer = pq.ParquetWriter(str(self.tmp), self.schema, compression="zstd")
        self.rows = 0

    def write(self, table) -> None:
        self.writer.write_table(table.replace_schema_metadata(self.schema.metadata))
        self.rows += table.num_rows

    def close(self, keep: bool = True) -> None:
        self.writer.close()
        if keep:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
