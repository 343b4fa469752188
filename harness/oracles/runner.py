"""Run a local Calculon 0.1.0 checkout in-process (live oracle / recorder).

Rules: the checkout is imported only here, only after it is named
explicitly, and only from the comparison side. Its source digest is checked
against the expected one before any number is used.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any

from harness.digest import source_tree_sha256
from harness.errors import HarnessError

CALCULON_VERSION = "0.1.0"
DIGEST_RULE = 'sha256 of lines "<sha256(file)>  <relpath>\\n" over calculon/**/*.py sorted by path'


class CalculonRunner:
    """A Calculon checkout, imported on first use."""

    def __init__(self, source: Path | str, expected_digest: str | None = None) -> None:
        self.source = Path(source).resolve()
        if not (self.source / "calculon" / "llm" / "llm.py").is_file():
            raise HarnessError(f"{self.source}: not a Calculon source checkout (no calculon/llm/llm.py)")
        self.source_digest = source_tree_sha256(self.source)
        if expected_digest and self.source_digest != expected_digest:
            raise HarnessError(f"{self.source}: Calculon source digest {self.source_digest} does not match the "
                               f"vendored records' {expected_digest}")
        self._llm = None
        self._system = None

    def _load(self) -> None:
        if self._llm is not None:
            return
        if str(self.source) not in sys.path:
            sys.path.insert(0, str(self.source))
        try:
            self._llm = importlib.import_module("calculon.llm").Llm
            self._system = importlib.import_module("calculon").System
        except ImportError as error:
            raise HarnessError(f"{self.source}: cannot import Calculon ({error}); Calculon imports pandas and psutil") from None

    def run(self, model: dict[str, Any], execution: dict[str, Any], system: dict[str, Any]) -> dict[str, Any]:
        """Calculon's stats with per-layer figures and flags, or ``{"error": ...}``."""
        self._load()
        Llm, System = self._llm, self._system
        log = logging.getLogger("calculon")
        log.setLevel(logging.WARNING)
        try:
            llm = Llm(Llm.Application(model), log)
            llm.compile(System(system), Llm.Execution.from_json(execution))
            llm.run(llm.sys)
        except Llm.Error as error:
            return {"error": str(error)}
        stats = llm.get_stats_json(True)
        for layer, obj in zip(stats["layers"], llm._llm_block):
            layer["flags"] = {"needs_recompute": obj.needs_recompute, "needs_recomm": obj.needs_recomm,
                              "activation_reused": obj.activation_reused, "activation_stored": obj.activation_stored,
                              "output_stored": obj.output_stored, "class": type(obj).__name__}
        return stats
