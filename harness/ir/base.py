"""Base class of every artifact: frozen, strict, self-describing, digestible.

Rules (after QCElemental's models):
- frozen pydantic models with ``extra="forbid"``; every field is described;
- units are in field names (``_bytes``, ``_flops``, ``_s``);
- every artifact carries ``schema_name`` and ``schema_version``;
- ``canonical()`` is the one canonical printer (see :mod:`harness.digest`) and
  ``digest()`` its SHA-256; the digest is computed once per object.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from harness.digest import canonical_json, sha256_text


class Frozen(BaseModel):
    """A frozen, strict value object."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Artifact(Frozen):
    """A versioned artifact with one canonical serialization and digest."""

    SCHEMA_NAME: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 0

    _digest: str | None = PrivateAttr(default=None)

    def to_data(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        data["schema_name"] = self.SCHEMA_NAME
        data["schema_version"] = self.SCHEMA_VERSION
        return data

    def canonical(self) -> str:
        return canonical_json(self.to_data())

    def digest(self) -> str:
        if self._digest is None:
            self._digest = sha256_text(self.canonical())
        return self._digest
