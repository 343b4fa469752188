"""The one canonical serialization and digest used by every artifact.

Rule: canonical JSON is ``json.dumps`` with sorted keys, no whitespace,
``allow_nan=False`` and floats in Python's shortest round-trip ``repr``.
The digest of an artifact is the SHA-256 of its canonical JSON encoded as
UTF-8, so it is identical across runs, processes and machines.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(data: Any) -> str:
    """Serialize plain JSON data canonically (sorted keys, compact)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest_data(data: Any) -> str:
    """SHA-256 of the canonical JSON of ``data``."""
    return sha256_text(canonical_json(data))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_tree_sha256(root: Path, package: str = "calculon") -> str:
    """Digest of a Python source tree.

    SHA-256 of the lines ``"<sha256 of file>  <relative path>\\n"`` over
    ``<package>/**/*.py`` sorted by POSIX path, relative to ``root``.
    """
    root = Path(root)
    files = sorted(root.joinpath(package).rglob("*.py"), key=lambda p: p.relative_to(root).as_posix())
    lines = "".join(f"{sha256_file(p)}  {p.relative_to(root).as_posix()}\n" for p in files)
    return sha256_text(lines)
