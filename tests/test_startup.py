"""Issue 19 (speed of a whole batch process): start-up loads only what the chosen command needs, and that
parser is the full parser's command. These are checks of which modules a process holds and of the parsers'
texts, not timings (``scripts/compare_calculon_speed.py`` measures the time; docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.cli import COMMANDS, build_parser, chosen_command

from conftest import ROOT


def _subparsers(parser) -> dict:
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices


def test_each_command_alone_is_the_full_parsers_command():
    """``build_parser(name)`` holds that command only (its module's ``register`` adds exactly the name the
    table gives it), with the same help, usage and options as in the full parser."""
    full = _subparsers(build_parser())
    assert list(full) == list(COMMANDS)  # the table names every registered command, in --help's order
    for name in COMMANDS:
        alone = _subparsers(build_parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == full[name].format_help()


@pytest.mark.parametrize("argv, command", [
    (["estimate", "--calculon-batch", "b.jsonl"], "estimate"),
    (["list", "cases"], "list"),
    (["import", "calculon"], "import"),
    (["--project", "estimate", "lower", "x.yaml"], "lower"),  # the project directory is named estimate
    (["--project=somewhere", "search", "--model", "m.yaml"], "search"),
    (["--project"], None),
    (["--help"], None),
    (["-h", "estimate"], None),
    (["--version"], None),
    (["--proj", "d", "estimate"], None),  # an abbreviation argparse accepts: only the full parser knows
    (["import_calculon"], None),  # a module's name is not a command
    (["bogus"], None),
    ([], None),
])
def test_the_chosen_command_is_the_first_word_that_is_no_global_option(argv, command):
    assert chosen_command(argv) == command


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.split())


#: What a batch estimate never runs: the other commands' machinery and the libraries only they use.
NOT_ON_THE_BATCH_PATH = ("harness.search", "harness.measurements", "harness.experiment", "harness.explain",
                         "harness.trace", "harness.oracles", "harness.commands.search", "harness.commands.evidence",
                         "matplotlib", "scipy", "dask", "rich")


def test_a_batch_process_loads_only_the_estimate_command(tmp_path):
    """``python -m harness estimate --calculon-batch`` (``main`` with no argv, the command process) loads
    neither the other commands nor the search, fitting, reports or plotting, and writes the batch."""
    batch, out = tmp_path / "batch.jsonl", tmp_path / "out.json"
    batch.write_text((ROOT / "docs" / "examples" / "calculon-batch.jsonl").read_text())
    loaded = _modules_after(
        f"sys_argv = ['harness', 'estimate', '--calculon-batch', {str(batch)!r}, '--output', {str(out)!r}]\n"
        "import sys; sys.argv = sys_argv\n"
        "from harness.cli import main\n"
        "assert main() == 1  # the example's last line is invalid\n")
    assert len(json.loads(out.read_text())) == 5
    assert "harness.commands.estimate" in loaded
    present = sorted(m for m in loaded if m.split(".")[0] in {p.split(".")[0] for p in NOT_ON_THE_BATCH_PATH}
                     and any(m == p or m.startswith(p + ".") for p in NOT_ON_THE_BATCH_PATH))
    assert not present, present
    assert not [m for m in loaded if m.startswith("harness.commands.") and m not in
                ("harness.commands.estimate", "harness.commands.case_arguments")]
