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


def test_the_results_the_readme_and_manual_quote_are_what_calibrate_reports():
    """Issue 23.9: every figure the front page states comes from a command anyone can rerun. The README's 3.65 %
    and the manual's Table 5 rows are the calibration's (`harness calibrate` prints the same table)."""
    from harness.experiment.run import run_experiment
    from harness.vocabulary import PEAK_ONLY, SYSTEM_EVIDENCE

    report = run_experiment(ROOT / "cases")
    mape = f"{report.summary.evidence_vs_paper_mape_pct:.2f} %"
    assert f"within {mape} MAPE" in README.replace("\n", " ")
    manual = (ROOT / "docs" / "manual.md").read_text()
    rows = {}
    for line in manual.split("## Results", 1)[1].split("\n\n", 2)[1].splitlines()[2:]:
        name, peak, evidence, calculon, paper, error = [cell.strip() for cell in line.strip("|").split("|")]
        rows[name] = (peak, evidence, calculon, paper, error)
    shown = {}
    for r in report.cases:
        if r.paper is not None:
            family, variant = r.id.split("/")
            label = {"gpt3-175B": "GPT-175B", "megatron-22B": "Megatron-22B", "megatron-1T": "Megatron-1T",
                     "turing-530B": "Turing-530B"}[family] + f" / {variant}"
            shown[label] = (f"{r.views[PEAK_ONLY]['total_s']:.4f}", f"{r.views[SYSTEM_EVIDENCE]['total_s']:.4f}",
                            f"{r.calculon[SYSTEM_EVIDENCE]['total_s']:.4f}", f"{r.paper.iteration_s:.2f}",
                            f"{r.paper.system_evidence_error_pct:+.2f}%")
    assert rows == shown
    assert f"MAPE {mape}, max {report.summary.evidence_vs_paper_max_abs_pct:.2f} %" in manual.replace("\n", " ")
