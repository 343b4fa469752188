"""``python -m harness <command>``: the command-line interface.

Each command lives in ``harness/commands/<name>.py`` and exposes
``register(subparsers)``; the command's function returns an exit status.
A :class:`HarnessError` is printed as one line on stderr (exit 2), never as a
traceback. Every command takes ``--project DIR`` (before or after the command
name): the project directory of :mod:`harness.locations`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from harness import locations
from harness.errors import HarnessError

COMMANDS = ("lower", "estimate", "oracle", "trace", "explain", "calibrate", "contract", "import_calculon")


PROJECT_HELP = (f"project directory with evidence/, cases/, vendor/, goldens/ (default: ${locations.ENV_PROJECT}, else "
                "the working directory or its nearest ancestor with evidence/ or cases/; then the packaged data)")


def _add_project(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--project", type=str, default=default, metavar="DIR", help=PROJECT_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _add_project(subparser, argparse.SUPPRESS)  # a subcommand's default must not hide the global one


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"harness.commands.{name}").register(sub)
    _add_project(parser, None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        locations.configure(args.project)
        return int(args.func(args) or 0)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
