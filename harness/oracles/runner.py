"""Run a local Calculon 0.1.0 checkout in-process (live oracle / recorder).

Rules: the checkout is imported only here, only after it is named
explicitly, and only from the comparison side. Its source digest is checked
against the expected one before any number is used.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.digest import source_tree_sha256
from harness.errors import HarnessError
from harness.inputs import real_path

CALCULON_VERSION = "0.1.0"
DIGEST_RULE = 'sha256 of lines "<sha256(file)>  <relpath>\\n" over calculon/**/*.py sorted by path'


class CalculonRunner:
    """A Calculon checkout, imported on first use."""

    def __init__(self, source: Path | str, expected_digest: str | None = None) -> None:
        self.source = real_path(source)
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

    def optimal_execution(self, model: dict[str, Any], system: dict[str, Any], *, procs: int, max_batch: int,
                          datatype: str, top: int, mbs_break: bool, fused_activation: list[bool],
                          tp_overlap: bool, dp_overlap: bool, cpus: int) -> dict[str, Any]:
        """Calculon's ``llm-optimal-execution`` command, run in-process with its debug logging off.

        Returns ``{"top": [{"execution", "stats"}...], "counts": {"executions", "good", "bad"},
        "elapsed_s"}``. Debug logging is switched off by raising the logging
        threshold (``logging.disable(DEBUG)``) for the duration of the run; its
        worker pool inherits it. Nothing in Calculon is modified; its output is
        otherwise unchanged by this (it only skips building debug records).
        """
        self._load()
        command = importlib.import_module("calculon.llm.optimal_execution").OptimalExecution
        log = logging.getLogger("harness.calculon-search")
        log.propagate = False
        lines: list[str] = []

        class _Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(record.getMessage())

        handler = _Capture(logging.INFO)
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        previous = logging.root.manager.disable
        with tempfile.TemporaryDirectory(prefix="calculon-search-") as tmp:
            paths = {name: Path(tmp) / f"{name}.json" for name in ("model", "system", "output")}
            paths["model"].write_text(json.dumps(model))
            paths["system"].write_text(json.dumps(system))
            args = argparse.Namespace(
                debug=False, application=str(paths["model"]), num_procs=procs, max_batch_size=max_batch,
                datatype=datatype, system=str(paths["system"]), output=str(paths["output"]), cpus=cpus,
                noneok=True, mbs_break=mbs_break, top_n=top, layers=False, fused_activation=list(fused_activation),
                no_tp_overlap=not tp_overlap, no_dp_overlap=not dp_overlap)
            logging.disable(logging.DEBUG)
            try:
                start = time.perf_counter()
                status = command.run_command(log, args)
                elapsed = time.perf_counter() - start
            finally:
                logging.disable(previous)
                log.removeHandler(handler)
            if status != 0:
                raise HarnessError(f"Calculon's optimal-execution search failed (status {status}): {lines[-1:]}")
            output = json.loads(paths["output"].read_text())
        counts = {}
        for key, label in (("executions", "Total executions"), ("good", "Good executions"), ("bad", "Bad executions")):
            found = [int(m.group(1)) for line in lines for m in [re.match(rf"{label}: (\d+)$", line)] if m]
            if len(found) != 1:
                raise HarnessError(f"Calculon's search did not report '{label}'")
            counts[key] = found[0]
        return {"top": [output[k] for k in sorted(output, key=int)], "counts": counts, "elapsed_s": elapsed}
