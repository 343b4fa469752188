#!/usr/bin/env python3
"""Time the pieces of a batch process's start-up that the first validation pays for, in fresh processes.

Usage (from the repository root)::

    python scripts/startup_pieces.py [--runs 3]

Each run is a new interpreter that imports the batch command's modules, then times, in this order: importing
``importlib.metadata`` (which pydantic's plugin loader imports), pydantic's plugin discovery (``get_plugins``:
every installed distribution's entry points scanned) and the schema build of ``EstimateInput`` (forced, with
the plugins already discovered). Prints the range over the runs in milliseconds (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, time
import harness.commands.estimate
from harness.cases import EstimateInput
t0 = time.perf_counter(); import importlib.metadata; t1 = time.perf_counter()
from pydantic.plugin._loader import get_plugins; list(get_plugins()); t2 = time.perf_counter()
EstimateInput.model_rebuild(force=True); t3 = time.perf_counter()
print(json.dumps({"importlib.metadata import": t1 - t0, "plugin discovery": t2 - t1, "EstimateInput schema": t3 - t2}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (default 3)")
    args = parser.parse_args(argv)
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD], check=True, capture_output=True,
                                      text=True).stdout) for _ in range(max(1, args.runs))]
    for piece in runs[0]:
        values = [run[piece] * 1e3 for run in runs]
        print(f"{piece:28s} {min(values):6.1f} - {max(values):6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
