"""``harness calibrate [--cases DIR] [--output PATH] [--oracle recorded|live] [--calculon-src PATH] [--plots DIR]``.

Runs the Table 5 experiment (estimates first, then oracles), prints the
results and parity tables, writes the JSON report, and exits 1 when a budget
is violated. An infeasible case (in the experiment, or on a ``--compare``
profile) is said first, before the tables, and makes the exit status 1
(:mod:`harness.commands.case_arguments`): its row's figures are what the
layout would take, not a result. A case directory that is missing, not a directory or holds no
case is an error (exit 2), never "all met" on zero cases. The report and the
plots are checked before the experiment runs and written atomically
(:mod:`harness.outputs`).
"""

from __future__ import annotations

from pathlib import Path

from harness import locations
from harness.commands.case_arguments import report_infeasible
from harness.errors import HarnessError, InputError

#: The profiles ``--compare`` reports by default: the measured revision (fitted on Megatron-DeepSpeed runs) and its
#: variant for a stack that fuses the weight-gradient accumulation (Megatron-LM, whose runs Table 5 is).
DEFAULT_COMPARE = ("a100_measured", "a100_measured_fused_accumulation")


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="run the calibration experiment and write its report")
    p.add_argument("--cases", type=Path, help="case directory (default: the project's cases/, else the packaged ones)")
    p.add_argument("--output", type=Path, default=Path("out/calibration/report.json"),
                   help="JSON report path (default: out/calibration/report.json)")
    p.add_argument("--oracle", choices=("recorded", "live"), default="recorded",
                   help="Calculon oracle: vendored records (default) or a live checkout")
    p.add_argument("--calculon-src", type=Path, help="Calculon 0.1.0 checkout (with --oracle live)")
    p.add_argument("--plots", type=Path, help="also write PNG plots into this directory")
    p.add_argument("--compare", nargs="*", default=list(DEFAULT_COMPARE), metavar="PROFILE",
                   help="also report the paper cases on these evidence profiles, next to the paper (a comparison, "
                        f"not a budget; default: {' '.join(DEFAULT_COMPARE)}; none with a bare --compare)")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.cases import case_paths, load_case_files
    from harness.evidence.profile import check_profile_name, load_profile
    from harness.experiment.run import run_experiment
    from harness.experiment.tables import print_report
    from harness.oracles.calculon_oracle import LiveCalculon, RecordedCalculon
    from harness.outputs import check_output, check_output_dir, committed_together, data_files, write_text
    from harness.report.plots import PLOT_FILES

    cases = args.cases or locations.current().cases_dir()
    inputs = [*case_paths(cases), *data_files()]
    plot_paths = [args.plots / name for name in PLOT_FILES] if args.plots else []
    check_output(args.output, inputs=inputs, others=plot_paths)
    if args.plots:
        check_output_dir(args.plots, option="--plots", inputs=inputs)
    load_case_files(cases)  # a bad case fails here, before the oracle's records are loaded

    if args.oracle == "live":
        if args.calculon_src is None:
            raise HarnessError("--oracle live needs --calculon-src PATH (a Calculon 0.1.0 checkout)")
        oracle = LiveCalculon(args.calculon_src)
    else:
        if args.calculon_src is not None:  # it would be ignored: the recorded oracle reads the vendored records
            raise InputError("<command line>", "--calculon-src", "is for --oracle live (the default, --oracle "
                                                                 "recorded, reads the vendored records)")
        oracle = RecordedCalculon()
    compare = tuple(check_profile_name(name, "<command line>", "--compare") for name in args.compare)
    for name in compare:
        load_profile(name, referrer="<command line>", field="--compare")  # fails here, before the experiment
    report = run_experiment(cases, oracle, compare=compare)
    plots = []
    with committed_together():  # the report and every plot, or none (harness.outputs)
        write_text(args.output, report.to_json() + "\n")
        if args.plots:
            from harness.experiment.plots import write_report_plots

            plots = write_report_plots(report, args.plots)
    infeasible = infeasible_lines(report)
    for line in infeasible:
        print(line)
    print_report(report)
    print(f"report: {args.output}")
    for path in plots:
        print(f"plot: {path}")
    if infeasible:
        return report_infeasible(len(infeasible), len(report.cases) + sum(len(c.cases) for c in report.comparisons))
    return 1 if report.violations else 0


def infeasible_lines(report) -> list[str]:
    """The line said first for every infeasible case of the experiment and of each compared profile."""
    from harness.commands.case_arguments import infeasible_line

    lines = [infeasible_line(r.id, r.system, r.reason) for r in report.cases if r.status != "ok"]
    for comparison in report.comparisons:
        lines += [infeasible_line(r.id, f"{comparison.profile} (--compare)", r.reason)
                  for r in comparison.cases if r.status != "ok"]
    return lines
