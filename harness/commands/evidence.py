"""``harness evidence import|fit|report``: evidence revisions from measured runs.

- ``evidence import vtrain CSV... --output CORPUS.jsonl``: the vTrain CSVs as
  a measurement corpus (iteration records);
- ``evidence import runs ROWS.json --gpu GPU --output CORPUS.jsonl``: the rows of one GPU of a
  measured-runs file as iteration records (:mod:`harness.measurements.runs_corpus`);
- ``evidence import korthikanti --table4 JSON [--cases DIR] --output
  CORPUS.jsonl``: Korthikanti et al. Table 4 (layer passes) and Table 5 (the
  cases' paper values, iteration records);
- ``evidence import nccl-tests FILE... --tier N [--collective OP] --output
  CORPUS.jsonl [--apply BASE --profile-output evidence/NAME.yaml]``: nccl-tests
  tables as collective sweeps, and optionally a profile with their curves;
- ``evidence fit --base NAME --measurements CORPUS... --output
  evidence/NAME.yaml [--replace]``: fit a revision (robust least squares,
  bounded, deterministic), with a progress display; ``--structure megatron-core [--parameters NAME...]
  [--fixed-from PROFILE --fixed NAME...]`` fits a Hopper/Blackwell revision to a runs corpus instead
  (:mod:`harness.measurements.runs_fit`);
- ``evidence modern-report --profiles NAME... --corpora DIR [--output JSON] [--plots DIR]``: the
  megatron-core revisions refitted, in sample and held out (leave one model / scale / release out), with
  their budgets (:mod:`harness.measurements.runs_report`); exit 1 when a budget is broken;
- ``evidence derive --from NAME --without FAMILY... --reason TEXT --output
  evidence/NAME.yaml [--replace]``: the profile NAME without whole measured
  families, for a software stack that does not do what they price (e.g.
  ``a100_measured_fused_accumulation``, :mod:`harness.evidence.derive`);
- ``evidence report --profile NAME --base NAME --measurements CORPUS...
  [--output JSON] [--plots DIR]``: the measured-evidence report (refit,
  cross-validation, attribution); exit 1 when a budget is broken.

Every output is checked before the work and written atomically; a bad input
is one line naming its file, line and field. A fit is a claim: ``fit`` prints
its residuals per class and any parameter on a bound, and refuses (exit 1,
nothing written) when a class is reproduced worse than the stated tolerance or
a parameter sits on a bound (``report`` refuses the same refit). Repeated
collective sweeps (same collective, tier and participant count) are an error
unless ``--combine-sweeps`` says how to combine them. A profile output
(``fit --output``, ``derive --output``, ``nccl-tests --profile-output``) that already exists is
refused unless ``--replace`` is given (refitting a shipped revision, e.g.
``evidence/a100_measured.yaml``, is a deliberate replacement).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.errors import HarnessError, InputError

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")  # the collectives nccl-tests tables are read for


def register(sub) -> None:
    p = sub.add_parser("evidence", help="import measurements, fit an evidence revision, report its generalization")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    imp = verbs.add_parser("import", help="import measurements into a corpus")
    kinds = imp.add_subparsers(dest="kind", required=True, metavar="KIND")
    v = kinds.add_parser("vtrain", help="vTrain CSVs (single-node-train.csv, multi-node-train.csv)")
    v.add_argument("files", nargs="+", type=Path, metavar="CSV", help="vTrain result CSV files")
    v.add_argument("--output", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="measurement corpus to write (JSON lines)")
    v.set_defaults(func=run_import_vtrain)
    k = kinds.add_parser("korthikanti", help="Korthikanti et al. 2022 Table 4 (JSON) and Table 5 (the cases)")
    k.add_argument("--table4", type=Path, required=True, metavar="JSON",
                   help="Table 4 rows (per-layer forward/backward times) as JSON")
    k.add_argument("--cases", type=Path, metavar="DIR", help="case directory whose paper values are Table 5")
    k.add_argument("--output", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="measurement corpus to write (JSON lines)")
    k.set_defaults(func=run_import_korthikanti)
    r = kinds.add_parser("runs", help="measured runs (blueprinting.measured-runs.v0) of one GPU as iteration records")
    r.add_argument("runs", type=Path, metavar="ROWS.json", help="the measured-runs file (blueprinting.measured-runs.v0)")
    r.add_argument("--gpu", required=True, help="the rows of this system.gpu (one of the schema's: h100_sxm_80g, b200, "
                                                "gb200, ...)")
    r.add_argument("--name", help="corpus name (default: runs-<gpu>)")
    r.add_argument("--output", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="measurement corpus to write (JSON lines)")
    r.set_defaults(func=run_import_runs)
    n = kinds.add_parser("nccl-tests", help="nccl-tests *_perf tables -> collective sweeps (network curves)")
    n.add_argument("files", nargs="+", type=Path, metavar="FILE", help="nccl-tests output files (*_perf tables)")
    n.add_argument("--tier", type=int, required=True, metavar="N", help="network tier the processors share")
    n.add_argument("--collective", choices=OPS, help="check the benchmark (default: what the table's columns say; "
                                                     "needed only for a CSV reduce_scatter/all_gather table)")
    n.add_argument("--participants", type=int, metavar="N", help="check the table's participant count")
    n.add_argument("--output", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="measurement corpus to write (JSON lines)")
    n.add_argument("--name", default="nccl-tests", help="corpus name")
    n.add_argument("--citation", default="nccl-tests output", help="where the tables come from")
    n.add_argument("--licence", default="as the input files", help="licence of the numbers")
    n.add_argument("--hardware", default="as measured", help="what they were measured on")
    n.add_argument("--apply", metavar="BASE", help="also write BASE with these curves (family collective_curves)")
    n.add_argument("--profile-output", type=Path, metavar="evidence/NAME.yaml", help="where --apply writes")
    n.add_argument("--replace", action="store_true", help="replace an existing --profile-output profile")
    _combine_option(n)
    n.set_defaults(func=run_import_nccl)

    f = verbs.add_parser("fit", help="fit an evidence revision to measurement corpora")
    f.add_argument("--base", required=True, metavar="NAME", help="base evidence profile (e.g. a100_80g)")
    f.add_argument("--measurements", nargs="+", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="measurement corpora to fit (from `evidence import`)")
    _profile_output_options(f, "the fitted evidence profile to write")
    f.add_argument("--layer-weight", type=float, default=0.0,
                   help="weight of layer_pass records relative to one node class (default 0: a check, not fitted)")
    f.add_argument("--benchmark-weight", type=float, default=1.0,
                   help="weight of gemm/memory_transfer records relative to one node class (default 1)")
    _combine_option(f)
    f.add_argument("--structure", choices=STRUCTURES, default=STRUCTURES[0],
                   help="the fitted structure: megatron-deepspeed (a100_measured's: vTrain's stack, default) or "
                        "megatron-core (Hopper/Blackwell measured runs of Megatron-Core + Transformer Engine, "
                        "docs/modern-evidence.md)")
    f.add_argument("--parameters", nargs="+", metavar="NAME",
                   help="megatron-core: the parameters to fit (default: every one the records exercise)")
    f.add_argument("--fixed-from", metavar="PROFILE",
                   help="megatron-core: a fitted revision whose values of --fixed parameters are taken")
    f.add_argument("--fixed", nargs="+", default=[], metavar="NAME",
                   help="megatron-core: parameters taken from --fixed-from instead of fitted")
    f.set_defaults(func=run_fit)

    m = verbs.add_parser("modern-report", help="in-sample and held-out report of the megatron-core revisions "
                                               "(leave one model / scale / release out), with plots")
    m.add_argument("--profiles", nargs="+", required=True, metavar="NAME",
                   help="the shipped megatron-core revisions (evidence/NAME.yaml)")
    m.add_argument("--corpora", type=Path, required=True, metavar="DIR",
                   help="directory of the corpora the revisions name (fit.corpora, checked by SHA-256)")
    m.add_argument("--output", type=Path, default=Path("out/measured/modern.json"), metavar="JSON",
                   help="where the report is written")
    m.add_argument("--plots", type=Path, metavar="DIR", help="also write PNG plots here")
    m.set_defaults(func=run_modern_report)

    d = verbs.add_parser("derive", help="a profile without some of its measured families (another software stack)")
    d.add_argument("--from", dest="source", required=True, metavar="NAME", help="the source evidence profile")
    d.add_argument("--without", nargs="+", required=True, metavar="FAMILY",
                   help="measured families to remove (e.g. gradient_accumulation)")
    d.add_argument("--reason", required=True, metavar="TEXT",
                   help="why: the software stack the derived profile describes (one line, kept in its provenance)")
    _profile_output_options(d, "the derived evidence profile to write")
    d.set_defaults(func=run_derive)

    t = verbs.add_parser("transfer", help="a revision for a GPU no measured run covers: a sibling's fitted "
                                          "megatron-core values on its data sheet (docs/modern-evidence.md)")
    t.add_argument("--from", dest="source", required=True, metavar="NAME",
                   help="the fitted megatron-core revision whose values are taken (e.g. b200_measured)")
    t.add_argument("--base", required=True, metavar="NAME", help="the GPU's data-sheet profile (e.g. b300)")
    _profile_output_options(t, "the transferred evidence profile to write")
    t.set_defaults(func=run_transfer)

    r = verbs.add_parser("report", help="cross-validated report of a fitted revision; exit 1 on a broken budget")
    r.add_argument("--profile", required=True, metavar="NAME", help="the shipped revision (evidence/NAME.yaml)")
    r.add_argument("--base", required=True, metavar="NAME",
                   help="the base evidence profile the revision was fitted from (e.g. a100_80g)")
    r.add_argument("--measurements", nargs="+", type=Path, required=True, metavar="CORPUS.jsonl",
                   help="the corpora the revision was fitted on")
    r.add_argument("--check", nargs="+", type=Path, default=[], metavar="CORPUS.jsonl",
                   help="corpora compared but never fitted (component-level truth, other targets)")
    r.add_argument("--output", type=Path, default=Path("out/measured/report.json"), metavar="JSON",
                   help="report JSON to write (default: out/measured/report.json)")
    r.add_argument("--plots", type=Path, metavar="DIR", help="also write PNG plots here")
    _combine_option(r)
    r.set_defaults(func=run_report)


#: ``--combine-sweeps`` choices (:data:`harness.measurements.nccl_tests.COMBINE`, which checks them again; named
#: here so that building the command line imports no measurement code).
COMBINE_CHOICES = ("fastest",)
STRUCTURES = ("megatron-deepspeed", "megatron-core")


def _profile_output_options(parser, what: str) -> None:
    """``--output evidence/NAME.yaml`` (``what``: its help), ``--name`` and ``--replace`` of a command that writes an
    evidence profile (:func:`_profile_name`, :func:`_check_new_profile` read them)."""
    parser.add_argument("--output", type=Path, required=True, metavar="evidence/NAME.yaml", help=what)
    parser.add_argument("--name", help="profile name (default: the output file's stem)")
    parser.add_argument("--replace", action="store_true",
                        help="replace an existing --output profile (without it an existing file is refused)")


def _combine_option(parser) -> None:
    parser.add_argument("--combine-sweeps", choices=COMBINE_CHOICES, metavar="HOW",
                        help="combine sweeps of the same collective, tier and participant count (fastest: the "
                             "faster time at each size); without it such sweeps are an error")


def _profile_name(args) -> str:
    """The profile name a command writing ``args.output`` (a profile file) uses: ``--name``, else the output file's
    stem; either way the file is named ``NAME.yaml`` (an error names the option the name came from)."""
    if args.name:
        name = _name(args.name, "--name")
    else:
        name = _name(args.output.stem, "--output", "the output file (a profile is NAME.yaml): ")
    if args.output.stem != name or args.output.suffix != ".yaml":
        raise InputError(str(args.output), "--output", f"a profile file is named after its profile: {name}.yaml")
    return name


def _name(value: str, option: str, what: str = "") -> str:
    """``value`` if it is a profile name, else an error naming ``option`` (``what``: where the value came from,
    such as the output file's stem when ``--name`` is not given)."""
    from harness.evidence.profile import PROFILE_NAME
    from harness.names import PROFILE_NAME_RULE

    if not PROFILE_NAME.fullmatch(value):
        raise InputError("<command line>", option, f"{what}{value!r} is not a profile name ({PROFILE_NAME_RULE})")
    return value


def _profile_input(name: str, option: str) -> Path:
    """The file of the profile ``name`` (an input: no output may replace it); ``name`` is a name, never a path."""
    from harness.evidence.profile import check_profile_name, profile_path

    return profile_path(check_profile_name(name, "<command line>", option))


def _check_new_profile(path: Path, option: str, replace: bool) -> None:
    """An evidence profile output may replace an existing file only with ``--replace``: a fit or an import
    must not silently overwrite another profile."""
    if not replace and (path.exists() or path.is_symlink()):
        raise InputError(str(path), option, "exists: give --replace to replace this evidence profile")


def run_import_vtrain(args) -> int:
    from harness.measurements.corpus import write_corpus
    from harness.measurements.vtrain import header, import_vtrain
    from harness.outputs import check_output

    check_output(args.output, inputs=args.files)
    records = import_vtrain(args.files)
    write_corpus(args.output, header(), records)
    print(f"{len(records)} iteration records -> {args.output}")
    return 0


def run_import_korthikanti(args) -> int:
    from harness.measurements.corpus import write_corpus
    from harness.measurements.korthikanti import header, import_table4, import_table5
    from harness.outputs import check_output

    check_output(args.output, inputs=[args.table4])
    records = import_table4(args.table4) + (import_table5(args.cases) if args.cases else [])
    write_corpus(args.output, header(), records)
    print(f"{len(records)} records -> {args.output}")
    return 0


def run_import_runs(args) -> int:
    from harness.measurements.corpus import write_corpus
    from harness.measurements.runs_corpus import header, import_runs
    from harness.measurements.runs_schema import GPUS, read_runs
    from harness.outputs import check_output, data_files

    if args.gpu not in GPUS:  # first: the default --name is built from it, and would be blamed for it
        raise InputError("<command line>", "--gpu", f"{args.gpu!r} is not a system.gpu of the measured-runs schema "
                                                    f"({', '.join(GPUS)})")
    check_output(args.output, inputs=[args.runs, *data_files()])
    name = _name(args.name or f"runs-{args.gpu}", "--name")
    runs = read_runs(args.runs)
    records, left_out = import_runs(args.runs, runs, args.gpu)
    write_corpus(args.output, header(args.runs, args.gpu, [r for r in runs if r.system.gpu == args.gpu], name),
                 records)
    print(f"{len(records)} iteration records -> {args.output}")
    for reason, count in left_out.most_common():
        print(f"  left out {count}: {reason}")
    return 0


def run_import_nccl(args) -> int:
    from harness.evidence.profile import dump_profile, load_profile
    from harness.inputs import validate
    from harness.measurements.corpus import CorpusHeader, write_corpus
    from harness.measurements.nccl_tests import combined_sweeps, parse_nccl_tests, sweep_curve, sweep_ids, with_sweeps
    from harness.ir.model import MAX_TIER
    from harness.outputs import check_output, committed_together, write_text

    if not 0 <= args.tier <= MAX_TIER:
        raise InputError("<command line>", "--tier", f"must be a network tier index in [0, {MAX_TIER}], got "
                                                     f"{args.tier}")
    if args.participants is not None and not 2 <= args.participants <= 2**30:
        raise InputError("<command line>", "--participants", f"must be in [2, 2^30], got {args.participants}")
    if (args.apply is None) != (args.profile_output is None):
        raise HarnessError("--apply BASE and --profile-output PATH go together")
    protected = list(args.files)
    if args.apply:
        protected.append(_profile_input(args.apply, "--apply"))
    check_output(args.output, inputs=protected, others=[args.profile_output] if args.profile_output else [])
    if args.profile_output:
        check_output(args.profile_output, option="--profile-output", inputs=protected, others=[args.output],
                     replaces_data=("evidence",))
        _check_new_profile(args.profile_output, "--profile-output", args.replace)
    base = load_profile(args.apply) if args.apply else None
    if base is not None and args.tier >= len(base.networks):  # before anything is written
        raise InputError("<command line>", "--tier", f"tier {args.tier} does not exist in evidence profile "
                                                     f"{base.name}")
    if args.profile_output:
        _name(args.profile_output.stem, "--profile-output")
    try:  # every option is checked before a table is read or a file written
        header = validate(CorpusHeader, {
            "kind": "corpus", "schema_name": "blueprinting.measurement-corpus", "schema_version": 0,
            "name": _name(args.name, "--name"), "description": "nccl-tests collective sweeps",
            "source": {"citation": args.citation, "licence": args.licence},
            "environment": {"hardware": args.hardware, "software": "nccl-tests"},
            "placement": f"the processors of each table share network tier {args.tier}"}, "<command line>")
    except InputError as error:
        option = {"source.citation": "--citation", "source.licence": "--licence",
                  "environment.hardware": "--hardware"}.get(error.field, error.field)
        raise InputError("<command line>", option, error.message) from None
    ids = sweep_ids(args.files)  # unique, or the same file twice is refused, before any table is read
    sweeps = [parse_nccl_tests(path, args.collective, args.tier, args.participants, record_id)
              for path, record_id in zip(args.files, ids)]
    collectives = sorted({s.collective for s in sweeps})
    if base is not None:  # every curve is checked against the tier before anything is written
        combined = combined_sweeps(sweeps, args.combine_sweeps, "<command line>")
        files = dict(zip(ids, map(str, args.files)))
        curves = [sweep_curve(sweep, base.networks[args.tier], files.get(sweep.id, "<command line>"))
                  for sweep in combined]
        profile = with_sweeps(base, combined, "<command line>").model_copy(update={
            "name": args.profile_output.stem,
            "description": f"{base.name} with measured {', '.join(collectives)} curves on tier {args.tier}",
            "provenance": f"{base.provenance}; tier {args.tier} {', '.join(collectives)} curves from nccl-tests "
                          f"tables ({', '.join(s.id for s in combined)}) by 'harness evidence import nccl-tests'"})
    with committed_together():  # the corpus and the profile, or neither (harness.outputs)
        write_corpus(args.output, header, sweeps)  # as measured (repeated runs are combined by their users)
        if base is not None:
            write_text(args.profile_output, dump_profile(profile), option="--profile-output",
                       replaces_data=("evidence",), exclusive=not args.replace)
    print(f"{len(sweeps)} collective sweeps -> {args.output}")
    if base is not None:
        for sweep, curve in zip(combined, curves):
            effs = [p.efficiency for p in curve.points]
            print(f"  {sweep.id}: {sweep.collective}, {sweep.participants} participants, {len(curve.points)} points, "
                  f"efficiency {min(effs):.3f} .. {max(effs):.3f} of "
                  f"{base.networks[args.tier].bandwidth_bytes_per_s:g} B/s")
        print(f"profile {profile.name} (revision {profile.revision()[:12]}) -> {args.profile_output}")
    return 0


def _progress(total: int, label: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        transient=True, console=None)
    task = progress.add_task(label, total=total)
    return progress, (lambda count: progress.update(task, completed=min(count, total)))


def run_fit(args) -> int:
    from harness.evidence.profile import dump_profile, load_profile
    from harness.measurements.experiment import fit_revision, load_inputs
    from harness.measurements.fit import MAX_EVALUATIONS, FitRefused, residual_summary
    from harness.outputs import check_output, write_text

    if args.structure == "megatron-core":
        return _fit_megatron_core(args)
    for option, given in (("--parameters", args.parameters), ("--fixed-from", args.fixed_from),
                          ("--fixed", args.fixed)):
        if given:
            raise InputError("<command line>", option, "needs --structure megatron-core")

    name = _profile_name(args)
    for option, weight in (("--layer-weight", args.layer_weight), ("--benchmark-weight", args.benchmark_weight)):
        if not (0 <= weight < math.inf):
            raise InputError("<command line>", option, f"weights must be finite and >= 0, got {weight}")
    check_output(args.output, inputs=[*args.measurements, _profile_input(args.base, "--base")],
                 replaces_data=("evidence",))
    _check_new_profile(args.output, "--output", args.replace)
    base = load_profile(args.base)
    inputs = load_inputs(args.measurements)
    progress, update = _progress(MAX_EVALUATIONS, "fitting (model evaluations)")
    try:
        with progress:
            revision = fit_revision(inputs, base, name, layer_weight=args.layer_weight,
                                    benchmark_weight=args.benchmark_weight, progress=update,
                                    combine=args.combine_sweeps)
    except FitRefused as refused:
        return _refused(refused)
    write_text(args.output, dump_profile(revision.profile), replaces_data=("evidence",), exclusive=not args.replace)
    print(f"{name}: revision {revision.profile.revision()} -> {args.output}")
    print(f"  {revision.result.evaluations} evaluations, {revision.result.status}; evaluator vs estimate path "
          f"{revision.evaluator_rel:.1e}")
    for p in revision.profile.fit.parameters:
        error = "" if p.standard_error is None else f" +- {p.standard_error:g}"
        print(f"  {p.name:24s} {p.value:<12g}{error:14s} {p.unit} (bounds {p.lower:g} .. {p.upper:g})")
    print("residuals (training targets, predicted vs measured):")
    for line in residual_summary(revision.design, revision.result):
        print(line)
    return 0


def _fit_megatron_core(args) -> int:
    from harness.evidence.profile import dump_profile, load_profile
    from harness.measurements.experiment import load_inputs
    from harness.measurements.fit import FitRefused, residual_summary
    from harness.measurements.runs_fit import fit_runs_revision, island_of
    from harness.outputs import check_output, write_text

    name = _profile_name(args)
    if bool(args.fixed) != bool(args.fixed_from):
        raise InputError("<command line>", "--fixed", "--fixed and --fixed-from go together")
    inputs_ = [*args.measurements, _profile_input(args.base, "--base")]
    if args.fixed_from:
        inputs_.append(_profile_input(args.fixed_from, "--fixed-from"))
    check_output(args.output, inputs=inputs_, replaces_data=("evidence",))
    _check_new_profile(args.output, "--output", args.replace)
    base = load_profile(args.base)
    sibling = load_profile(args.fixed_from) if args.fixed_from else None
    inputs = load_inputs(args.measurements)
    records = [r for r in inputs.records if r.kind == "iteration"]
    try:
        revision = fit_runs_revision(inputs.corpora, records, base, name, parameters=args.parameters,
                                     fixed_from=sibling, fixed=args.fixed)
    except FitRefused as refused:
        return _refused(refused)
    write_text(args.output, dump_profile(revision.profile), replaces_data=("evidence",), exclusive=not args.replace)
    print(f"{name}: revision {revision.profile.revision()} -> {args.output}")
    print(f"  {revision.result.evaluations} evaluations, {revision.result.status}")
    for p in revision.profile.fit.parameters:
        error = "" if p.standard_error is None else f" +- {p.standard_error:g}"
        print(f"  {p.name:30s} {p.value:<12g}{error:14s} {p.unit} (bounds {p.lower:g} .. {p.upper:g})")
    print("residuals (training records, predicted vs measured):")
    for line in residual_summary(revision.design, revision.result, revision.parameters, island_of(base)):
        print(line)
    return 0


def run_modern_report(args) -> int:
    from harness.measurements.runs_report import print_modern_report, modern_report, write_modern_plots
    from harness.outputs import check_output, check_output_dir, committed_together, write_text

    for name in args.profiles:
        _profile_input(name, "--profiles")
    corpora = Path(args.corpora)
    if not corpora.is_dir():
        raise InputError(str(corpora), "--corpora", "not a directory (the folder of the runs-<gpu>.jsonl corpora)")
    read = [corpora, *sorted(path for path in corpora.iterdir() if path.is_file())]  # never written over
    check_output(args.output, inputs=read)
    if args.plots:
        check_output_dir(args.plots, option="--plots", inputs=read)
    report = modern_report(args.profiles, args.corpora, progress=lambda m: print(m, flush=True))
    with committed_together():  # the report and the plots, or none (harness.outputs)
        write_text(args.output, json.dumps(report, indent=1, allow_nan=False) + "\n")
        plots = write_modern_plots(report, args.plots) if args.plots else []
    print_modern_report(report)
    print(f"report: {args.output}")
    for path in plots:
        print(f"plot: {path}")
    return 1 if report["violations"] else 0


def _refused(refused) -> int:
    """A fit that is not a claim (:class:`~harness.measurements.fit.FitRefused`): its residuals on stdout, one
    error line, exit 1, nothing written."""
    print("residuals (training targets, predicted vs measured):")
    for line in refused.summary:
        print(line)
    print(f"error: {refused}", file=sys.stderr)
    return 1


def run_derive(args) -> int:
    from harness.evidence.derive import derive_profile
    from harness.evidence.profile import dump_profile, load_profile
    from harness.outputs import check_output, write_text

    name = _profile_name(args)
    if name == args.source:
        raise InputError("<command line>", "--name", f"the derived profile needs a name of its own, not {name}")
    check_output(args.output, inputs=[_profile_input(args.source, "--from")], replaces_data=("evidence",))
    _check_new_profile(args.output, "--output", args.replace)
    source = load_profile(args.source, referrer="<command line>", field="--from")
    profile = derive_profile(source, args.without, name, args.reason)
    write_text(args.output, dump_profile(profile), replaces_data=("evidence",), exclusive=not args.replace)
    print(f"{name}: revision {profile.revision()} -> {args.output}")
    print(f"  {source.name} (revision {source.revision()[:12]}) without {', '.join(args.without)}")
    return 0


def run_transfer(args) -> int:
    from harness.evidence.profile import dump_profile, load_profile
    from harness.measurements.runs_transfer import source_values, transferred_revision
    from harness.outputs import check_output, write_text

    name = _profile_name(args)
    for option, value in (("--from", args.source), ("--base", args.base)):
        if name == value:
            raise InputError("<command line>", "--name", f"the transferred revision needs a name of its own, not "
                                                         f"{name} ({option})")
    check_output(args.output, inputs=[_profile_input(args.source, "--from"), _profile_input(args.base, "--base")],
                 replaces_data=("evidence",))
    _check_new_profile(args.output, "--output", args.replace)
    source = load_profile(args.source, referrer="<command line>", field="--from")
    base = load_profile(args.base, referrer="<command line>", field="--base")
    profile = transferred_revision(source, base, name)
    write_text(args.output, dump_profile(profile), replaces_data=("evidence",), exclusive=not args.replace)
    print(f"{name}: revision {profile.revision()} -> {args.output}")
    print(f"  {base.name} (revision {base.revision()[:12]}) with the values of {source.name} (revision "
          f"{source.revision()[:12]}); fitted to no run of this GPU")
    for key, value in source_values(source).items():
        print(f"  {key:30s} {value:g}")
    return 0


def run_report(args) -> int:
    from harness.evidence.profile import load_profile
    from harness.measurements.experiment import load_inputs, run_report as build
    from harness.measurements.fit import FitRefused
    from harness.measurements.tables import print_measured_report
    from harness.outputs import check_output, check_output_dir, committed_together, write_text

    _profile_input(args.base, "--base")
    _profile_input(args.profile, "--profile")
    check_output(args.output, inputs=[*args.measurements, *args.check])
    if args.plots:
        check_output_dir(args.plots, option="--plots", inputs=args.measurements + args.check)
    base = load_profile(args.base)
    shipped = load_profile(args.profile)
    inputs = load_inputs(args.measurements)
    checks = load_inputs(args.check, fitting=False) if args.check else None
    try:
        report = build(inputs, base, shipped, shipped.name, checks=checks, combine=args.combine_sweeps,
                       progress=lambda m: print(m, flush=True))  # stdout: stderr holds errors only
    except FitRefused as refused:
        return _refused(refused)
    plots = []
    with committed_together():  # the report and the plots, or none (harness.outputs)
        write_text(args.output, json.dumps(report, indent=1, allow_nan=False) + "\n")
        if args.plots:
            from harness.measurements.plots import write_measured_plots

            plots = write_measured_plots(report, args.plots)
    print_measured_report(report)
    print(f"report: {args.output}")
    for path in plots:
        print(f"plot: {path}")
    return 1 if report["violations"] else 0
