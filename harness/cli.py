"""``harness <command>`` (or ``python -m harness <command>``): the command-line interface.

Each command lives in ``harness/commands/<name>.py`` and exposes
``register(subparsers)``; the command's function returns an exit status.
Every command takes ``--project DIR`` (before or after the command name): the
project directory of :mod:`harness.locations`.

Errors are one line on stderr, never a traceback:

- a :class:`HarnessError` (bad input, a missing record, ...): ``error: ...``,
  exit 2;
- an operating-system error the command did not anticipate (a full disk while
  writing to stdout): ``error: <file>: <reason>``, exit 2;
- out of memory: ``error: out of memory ...``, exit 3;
- anything else is a bug: ``error: internal error ...``, exit 3 (set
  ``HARNESS_DEBUG=1`` to see the traceback);
- an interrupt (Ctrl-C): exit 130; a termination (SIGTERM, as sent by ``kill``,
  ``timeout``, a batch scheduler): exit 143. Both unwind like an error, so every
  output being written (:func:`harness.outputs.atomic_output`) removes its
  temporary file and leaves the target as it was. :func:`main` installs its
  SIGTERM handler for the duration of the command only (in the main thread) and
  restores the previous one.

Start-up imports only the chosen command's module: when the first word of the
command line that is not a global option (``--project DIR``) names a command of
:data:`COMMANDS`, the parser holds that command alone (its arguments, help and
errors are the same as in the full parser); ``--help``, ``--version``, an
unknown word or no command build the full parser. A batch estimate then loads
neither the search, nor the evidence fitting, nor the reports.

Garbage collection of a command process (:func:`main` with no ``argv``: the
console script, ``python -m harness``): the collector is off while the parser is
built (the chosen command's modules imported: classes, functions, pydantic's
field descriptions, hardly any garbage, which collections would walk again and
again); then ``gc.freeze()`` moves the objects alive then to the permanent
generation, so the collections a long command triggers (a batch of estimates
builds millions of objects) no longer walk them; and the youngest generation is
collected after :data:`YOUNG_COLLECTION_OBJECTS` allocations instead of Python's
700 (as mypy does for the same reason): almost every object an estimate builds
dies by reference counting, so a collection every 700 allocations walks
temporaries that would have gone anyway, and each survivor is walked again by
the older generations' collections. (Callgrind of ``python -m harness estimate
--calculon-batch`` over the 400-line public batch: 5,583 -> 5,466 M
instructions; the collector's time under valgrind 1,577 -> 312 ms; garbage in
a cycle waits at most that many allocations longer: docs/performance.md.) A call with an ``argv`` (tests, a library user) leaves the
collector as it is.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import re
import signal
import sys
import threading

from harness import __version__, locations
from harness.errors import HarnessError, one_line

#: Allocations between two collections of the youngest generation in a command process (Python's default: 700).
YOUNG_COLLECTION_OBJECTS = 50_000

#: Each command's name on the command line -> its module in ``harness/commands`` (whose ``register`` adds that one
#: command), in the order ``--help`` lists them.
COMMANDS = {"lower": "lower", "estimate": "estimate", "oracle": "oracle", "trace": "trace", "explain": "explain",
            "calibrate": "calibrate", "contract": "contract", "import": "import_calculon", "evidence": "evidence",
            "search": "search", "list": "list_data"}

#: The global options that take a value (the word after them is not the command).
_GLOBAL_VALUE_OPTIONS = ("--project",)


PROJECT_HELP = (f"project directory with evidence/, cases/, vendor/, goldens/ (default: ${locations.ENV_PROJECT}, else "
                "the working directory or its nearest ancestor with evidence/ or cases/; then the packaged data)")


def _add_project(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--project", type=str, default=default, metavar="DIR", help=PROJECT_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _add_project(subparser, argparse.SUPPRESS)  # a subcommand's default must not hide the global one


#: An integer on the command line: ASCII decimal digits, an optional sign.
DECIMAL = re.compile(r"[+-]?[0-9]+")


class ArgumentParser(argparse.ArgumentParser):
    """argparse under the error rule: a bad command line is one line, ``error: <command>: <message>``, exit 2
    (not argparse's usage block plus a message); an empty value is refused. Subcommand parsers inherit the
    class."""

    def _get_value(self, action, arg_string):
        """An empty value is refused for every option and argument: ``--png ""`` was silently no PNG,
        ``--plots ""`` the working directory, ``Path("")`` is ``.``."""
        if arg_string == "" and action.choices is None:
            raise argparse.ArgumentError(action, "an empty value (give a path, a name or a number)")
        if action.type is int and not DECIMAL.fullmatch(arg_string):  # int() reads '1_6', ' 4 ' and other scripts'
            raise argparse.ArgumentError(action, f"invalid int value: {arg_string!r} (ASCII decimal digits)")  # digits
        return super()._get_value(action, arg_string)

    def error(self, message: str):
        self.exit(2, f"error: {one_line(self.prog)}: {one_line(message)} (see {one_line(self.prog)} --help)\n")


DESCRIPTION = ("Blueprinting's calibration harness: estimate one training or inference iteration of a Transformer "
               "on a GPU cluster, and show where every figure comes from. Docs: README.md and docs/ "
               "(docs/cases.md: the case format).")


def program_name(argv0: str | None = None) -> str:
    """How the user ran the tool: ``harness`` for the installed script, ``python -m harness`` for the module."""
    base = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return "python -m harness" if base in ("__main__.py", "-m", "-c", "") or base.startswith("python") else base


def chosen_command(argv: list[str]) -> str | None:
    """The command a command line names, when it can be told without parsing: the first word that is not a
    global option or its value, if it is a name of :data:`COMMANDS`; None for anything else (``--help``,
    ``--version``, an abbreviated or unknown option, an unknown command, no command), which needs the full
    parser."""
    words = iter(argv)
    for word in words:
        if word in _GLOBAL_VALUE_OPTIONS:
            next(words, None)
        elif any(word.startswith(option + "=") for option in _GLOBAL_VALUE_OPTIONS):
            continue
        elif word.startswith("-"):
            return None
        else:
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser: of every command, or of ``command`` (a name of :data:`COMMANDS`) alone, which
    imports only that command's module."""
    parser = ArgumentParser(prog=program_name(), description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} (blueprinting-harness)",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if command is None or name == command:
            importlib.import_module(f"harness.commands.{module}").register(sub)
    _add_project(parser, None)
    return parser


class Terminated(SystemExit):
    """Raised by the SIGTERM handler of :func:`main`: a SystemExit (exit 143) that unwinds the command, so that
    ``finally`` blocks and context managers (atomic outputs) run; never caught by ``except Exception``."""


def _terminate(signum, frame) -> None:
    raise Terminated(128 + signal.SIGTERM)


@contextlib.contextmanager
def _sigterm_unwinds():
    """SIGTERM raises :class:`Terminated` while the block runs (main thread only: elsewhere Python cannot install
    a handler); the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _error(text: str, status: int) -> int:
    print(f"error: {one_line(text)}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    collecting = argv is None and gc.isenabled()  # a command process (see the module rules)
    if collecting:
        gc.disable()
    try:
        parser = build_parser(chosen_command(sys.argv[1:] if argv is None else argv))
    finally:
        if collecting:
            gc.freeze()
            gc.set_threshold(YOUNG_COLLECTION_OBJECTS, *gc.get_threshold()[1:])
            gc.enable()
    args = parser.parse_args(argv)
    try:
        with _sigterm_unwinds(), locations.configured(args.project):
            return int(args.func(args) or 0)
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except HarnessError as error:
        return _error(str(error), 2)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        return _error("out of memory (the input is too large for this machine)", 3)
    except OSError as error:
        if os.environ.get("HARNESS_DEBUG"):
            raise
        return _error(f"{error.filename or '<output>'}: {error.strerror or error}", 2)
    except Exception as error:  # noqa: BLE001 - the last line of defence: one line, never a traceback
        if os.environ.get("HARNESS_DEBUG"):
            raise
        return _error(f"internal error {type(error).__name__}: {error} (a bug: please report it with the "
                      "command; HARNESS_DEBUG=1 shows the traceback)", 3)
