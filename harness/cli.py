"""``python -m harness <command>``: the command-line interface.

Each command lives in ``harness/commands/<name>.py`` and exposes
``register(subparsers)``; the command's function returns an exit status.
A :class:`HarnessError` is printed as one line on stderr (exit 2), never as a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import HarnessError

COMMANDS = ("lower", "estimate", "oracle", "trace", "explain", "calibrate", "contract", "import_calculon", "search")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
