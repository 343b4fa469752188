"""Issue 23.11: the README is a front page whose examples stay true. Every `harness ...` example parses with
today's command line (an option renamed or removed fails here), the `estimate` output it shows is what the
command prints, and the two commands and the docs it points to exist."""

from __future__ import annotations

import re
import shlex

from harness.cli import build_parser

from conftest import ROOT, run_cli

README = (ROOT / "README.md").read_text()


def _examples() -> list[list[str]]:
    block = README.split("## One example of each command", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")
    return [shlex.split(line.split("#", 1)[0])[1:] for line in joined.splitlines() if line.startswith("harness ")]


def test_every_example_command_parses_with_todays_options():
    examples = _examples()
    commands = {argv[0] for argv in examples}
    assert {"list", "estimate", "explain", "trace", "lower", "calibrate", "search", "import", "evidence", "oracle",
            "contract"} <= commands
    parser = build_parser()
    for argv in examples:
        parser.parse_args(argv)  # argparse exits (status 2) on an unknown or missing option


def test_the_estimate_output_shown_is_what_the_command_prints(capsys):
    shown = README.split("`harness estimate megatron-22B_full` prints:\n\n```\n", 1)[1].split("```", 1)[0]
    status, out, _ = run_cli(capsys, "estimate", "megatron-22B_full")
    assert status == 0 and out == shown


def test_the_front_page_is_short_keeps_the_two_commands_and_its_links_exist():
    assert len(README) < 8000
    assert 'python3 -m tox -e calibration' in README and 'python3 -m tox -e tests' in README
    assert "python3 -m tox -e tests" in (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command
    for link in re.findall(r"\]\((docs/[^)]+)\)", README):
        assert (ROOT / link).is_file(), link
