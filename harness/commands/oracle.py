"""``harness oracle record --calculon-src PATH [--cases DIR | --batch IN.jsonl | --search ...] [--output REL]`` and
``harness oracle import-reference REFERENCE.json --output REL [--no-layers] [--replace]``.

``record`` runs a local Calculon checkout on every case, or on every line of a
Calculon-format batch (see :mod:`harness.interop.calculon_batch`; every line
must be valid and supported), and writes the project's own record file under
``vendor/calculon-0.1.0/`` plus its manifest. ``--views`` chooses the recorded
views (default both); ``--no-layers`` drops per-layer figures (the explicit
recompute sums are kept).

``--search --model M --system S --procs N --max-batch B --datatype DT [--top K]
[--mbs-break] [--fused-activation true|false|all] [--no-tp-overlap]
[--no-dp-overlap] [--cpus C]`` records Calculon's optimal-execution search
instead (its stock search command, in-process, debug logging off; see
:mod:`harness.oracles.search_record`) into ``search/*.json``. A search in
which Calculon finds no feasible execution is said first and exits 1 (the
record, Calculon's verdict, is still written). Recording cases or a batch
prices nothing of the harness: Calculon's refusals are recorded facts (the
differential batch holds them by design), counted in the line it prints,
and the exit status is 0.

``--flops --config config.json --microbatch B --sequence-length S --id NAME`` counts one decoder layer of
a Hugging Face config instead, with PyTorch's FLOP counter (the independent FLOP oracle,
:mod:`harness.oracles.flops`; needs the optional extra ``flops``), into ``vendor/flops/NAME.json``; no
Calculon is involved.

``import-reference`` converts a shared reference record file
(:mod:`harness.oracles.reference`) into the same format, numbers unchanged,
after checking that it comes from the manifest's Calculon (source digest), so
that the tests that use it run wherever the project is checked out. An existing
vendored file (a record file, the differential batch, a search record) is
replaced only with ``--replace``; the manifest is never an ``--output``.
"""

from __future__ import annotations

from pathlib import Path

from harness.cases import case_paths, load_case_files
from harness.commands.case_arguments import INFEASIBLE_STATUS
from harness.errors import HarnessError, InputError
from harness.interop.calculon_batch import require_valid
from harness.interop.calculon_format import calculon_from_input
from harness.oracles.records import load_manifest
from harness.oracles.record import RECORD_VIEWS, check_record_name, record_inputs, runner_identity, write_record_file
from harness import locations
from harness.oracles.runner import CalculonRunner
from harness.oracles.search_record import record_search
from harness.oracles.flops import FLOPS_SUBDIR, check_record_id, record_flops, record_text
from harness.search.request import check_workers, search_problem
from harness.search.space import FUSED_CHOICES, SpaceOptions
from harness.outputs import check_output, write_text


def view_list(text: str) -> tuple[str, ...]:
    views = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = sorted(set(views) - set(RECORD_VIEWS))
    if unknown or not views:
        raise ValueError(text)
    return views


def register(sub) -> None:
    p = sub.add_parser("oracle", help="oracle records (Calculon; the FLOP counter)")
    osub = p.add_subparsers(dest="oracle_command", required=True, metavar="SUBCOMMAND")
    r = osub.add_parser("record", help="run a Calculon checkout on the cases (or a batch) and vendor its outputs")
    r.add_argument("--calculon-src", type=Path, help="Calculon 0.1.0 source checkout (required except with --flops)")
    source = r.add_mutually_exclusive_group()
    source.add_argument("--cases", type=Path, help="case directory (default: the project's cases/)")
    source.add_argument("--batch", type=Path, metavar="IN.jsonl",
                        help='Calculon-format batch, one {"id", "model", "execution", "system"} per line (.gz allowed)')
    source.add_argument("--search", action="store_true",
                        help="record Calculon's optimal-execution search (see the search options)")
    source.add_argument("--flops", action="store_true",
                        help="count one decoder layer of a Hugging Face config with PyTorch's FLOP counter "
                             "(see the FLOP oracle options; needs the 'flops' extra)")
    r.add_argument("--output", default="records/cases.json",
                   help="record file, relative to the vendor directory (.gz: gzip-compressed)")
    r.add_argument("--vendor", type=Path, help=f"vendor directory (default: the project's {locations.VENDOR_SUBDIR})")
    r.add_argument("--views", type=view_list, default=RECORD_VIEWS, metavar="VIEW[,VIEW]",
                   help=f"views to record (default: {','.join(RECORD_VIEWS)})")
    r.add_argument("--no-layers", dest="keep_layers", action="store_false",
                   help="drop per-layer figures (explicit recompute sums are kept)")
    g = r.add_argument_group("search options (with --search)")
    g.add_argument("--model", type=Path, help="Calculon model JSON or case YAML")
    g.add_argument("--system", help="evidence profile name (never a path; see --project)")
    g.add_argument("--procs", type=int, help="processors")
    g.add_argument("--max-batch", type=int, help="maximum global batch")
    g.add_argument("--datatype", default="float16", help="datatype (default: float16)")
    g.add_argument("--top", type=int, default=5, help="Calculon's -t (default: 5)")
    g.add_argument("--mbs-break", action="store_true", help="Calculon's -m")
    g.add_argument("--fused-activation", choices=sorted(FUSED_CHOICES), default="true", help="Calculon's -f")
    g.add_argument("--no-tp-overlap", action="store_true", help="Calculon's --no-tp-overlap")
    g.add_argument("--no-dp-overlap", action="store_true", help="Calculon's --no-dp-overlap")
    g.add_argument("--cpus", type=int, help="Calculon's -c (default: all cores)")
    f = r.add_argument_group("FLOP oracle options (with --flops)")
    f.add_argument("--config", type=Path, metavar="CONFIG.json", help="Hugging Face config.json")
    f.add_argument("--microbatch", type=int, help="samples per call")
    f.add_argument("--sequence-length", type=int, help="tokens per sample")
    f.add_argument("--id", dest="record_id", metavar="NAME",
                   help=f"record name: writes {FLOPS_SUBDIR}/NAME.json in the project (or --vendor DIR/NAME.json)")
    r.set_defaults(func=run_record)
    i = osub.add_parser("import-reference", help="convert a shared reference record file into vendored records")
    i.add_argument("reference", type=Path, metavar="REFERENCE.json", help="reference record file ({meta, records})")
    i.add_argument("--output", required=True, help="record file, relative to the vendor directory (.gz: gzip)")
    i.add_argument("--vendor", type=Path, help=f"vendor directory (default: the project's {locations.VENDOR_SUBDIR})")
    i.add_argument("--no-layers", dest="keep_layers", action="store_false", help="drop per-layer figures")
    i.add_argument("--replace", action="store_true", help="replace an existing vendored record file")
    i.set_defaults(func=run_import_reference)


def _check_vendor_outputs(vendor: Path, output: str, protected: list) -> None:
    """Before Calculon runs: the record file and the manifest are writable outputs that replace no input, and
    an existing manifest is a valid one (else it would refuse the write only after the work)."""
    check_output(vendor / output, option="--output", inputs=protected, replaces_data=("vendor",))
    check_output(vendor / "MANIFEST.json", option="--vendor", inputs=protected, replaces_data=("vendor",))
    if (vendor / "MANIFEST.json").is_file():
        load_manifest(vendor)


def run_search_record(args, vendor: Path) -> int:
    missing = [flag for flag, value in (("--model", args.model), ("--system", args.system), ("--procs", args.procs),
                                        ("--max-batch", args.max_batch)) if value is None]
    if missing:
        raise InputError("<command line>", missing[0], "required with --search")
    check_workers(args.cpus, "--cpus")
    if args.output == "records/cases.json":
        raise InputError("<command line>", "--output", "give the search record's path, e.g. search/NAME.json")
    _check_vendor_outputs(vendor, args.output, [args.model])
    options = SpaceOptions(fused_activation=FUSED_CHOICES[args.fused_activation], tp_overlap=not args.no_tp_overlap,
                           dp_overlap=not args.no_dp_overlap, mbs_break=args.mbs_break)
    problem = search_problem(args.model, args.system, args.procs, args.max_batch, args.datatype, top=args.top,
                             options=options)
    runner = CalculonRunner(args.calculon_src)
    path, data = record_search(runner, problem, args.output, vendor, args.cpus)
    c = data["counts"]
    best = data["top"][0]["stats"]["sample_rate"] if data["top"] else None
    if best is None:  # said first: the record holds Calculon's verdict, no best execution
        print(f"Calculon's search found NO FEASIBLE EXECUTION of {args.model} on {args.system} with {args.procs} "
              f"processors, batch <= {args.max_batch} ({c['bad']} bad of {c['executions']} executions); the record "
              f"is written, empty (exit status {INFEASIBLE_STATUS})")
    print(f"wrote Calculon's search ({c['executions']} executions, {c['good']} good, {c['bad']} bad; best sample rate "
          f"{best}; {data['elapsed_s']} s on {data['cpus']} cpus) to {path} (Calculon source sha256 "
          f"{runner.source_digest})")
    return 0 if best is not None else INFEASIBLE_STATUS


def run_flops_record(args) -> int:
    missing = [flag for flag, value in (("--config", args.config), ("--microbatch", args.microbatch),
                                        ("--sequence-length", args.sequence_length), ("--id", args.record_id))
               if value is None]
    if missing:
        raise InputError("<command line>", missing[0], "required with --flops")
    for flag, value in (("--microbatch", args.microbatch), ("--sequence-length", args.sequence_length)):
        if not 1 <= value <= 2**20:
            raise InputError("<command line>", flag, f"must be 1 to {2**20}, got {value}")
    check_record_id(args.record_id)
    directory = args.vendor or locations.current().writable(FLOPS_SUBDIR, "vendored FLOP records")
    target = directory / f"{args.record_id}.json"
    check_output(target, option="--id", inputs=[args.config])
    try:
        import torch  # noqa: F401  (the optional extra, checked before any work)
        import transformers  # noqa: F401
    except ImportError as error:
        raise HarnessError(f"the FLOP oracle needs torch and transformers ({error.name} is not installed): "
                           "pip install 'blueprinting-harness[flops]', or run tox -e flop-oracle") from None
    record = record_flops(args.config, args.microbatch, args.sequence_length, args.record_id)
    path = write_text(target, record_text(record), option="--id")
    print(f"wrote {path}: linear {record.linear_flops} FLOPs, attention {record.attention_flops} FLOPs per layer "
          f"(forward + backward; torch {record.provenance.torch}, transformers {record.provenance.transformers})")
    return 0


def run_record(args) -> int:
    if args.flops:
        return run_flops_record(args)
    if args.calculon_src is None:
        raise InputError("<command line>", "--calculon-src", "required (except with --flops)")
    check_record_name(args.output)
    vendor = args.vendor or locations.current().writable(locations.VENDOR_SUBDIR, "vendored Calculon records")
    if args.search:
        return run_search_record(args, vendor)
    cases = args.cases or locations.current().cases_dir()
    sources = [args.batch] if args.batch is not None else case_paths(cases)
    _check_vendor_outputs(vendor, args.output, sources)
    if args.batch is not None:  # every input is validated before Calculon is loaded
        inputs = require_valid(args.batch)
    else:
        inputs = []
        for path, case in load_case_files(cases):
            calculon_from_input(case.estimate_input(), str(path))  # refused before Calculon is loaded
            inputs.append((case.comparison.oracle_record or case.id, case.estimate_input()))
    runner = CalculonRunner(args.calculon_src)
    records, revisions = record_inputs(runner, inputs, args.views, args.keep_layers)
    path = write_record_file(runner_identity(runner), args.output, records, revisions, vendor)
    refused = sum(1 for r in records if any("error" in v for v in r["views"].values()))
    print(f"wrote {len(records)} records ({refused} refused by Calculon) to {path} "
          f"(Calculon source sha256 {runner.source_digest})")
    return 0


def run_import_reference(args) -> int:
    from harness.errors import OracleRecordError
    from harness.oracles.reference import read_reference, record_dicts

    check_record_name(args.output)
    vendor = args.vendor or locations.current().writable(locations.VENDOR_SUBDIR, "vendored Calculon records")
    target = vendor / args.output
    _check_vendor_outputs(vendor, args.output, [args.reference])
    if not args.replace and (target.exists() or target.is_symlink()):
        raise InputError(str(target), "--output", "exists: give --replace to replace this vendored record file")
    reference = read_reference(args.reference)
    identity = load_manifest(vendor).oracle
    if reference.source_tree_sha256 != identity.source_tree_sha256:
        raise OracleRecordError(f"{args.reference}: recorded with Calculon source {reference.source_tree_sha256}, "
                                f"not the manifest's {identity.source_tree_sha256}")
    records = record_dicts(reference, args.keep_layers)
    path = write_record_file(identity, args.output, records, {}, vendor)
    print(f"wrote {len(records)} records converted from {args.reference} to {path}")
    return 0
