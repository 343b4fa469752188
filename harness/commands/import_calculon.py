"""``harness import calculon --model M.json --execution E.json --system NAME [-o CASE.yaml]`` (and
``harness import hf``: :mod:`harness.commands.import_hf`).

Turns Calculon 0.1.0 inputs into a case YAML (schema ``blueprinting.case.v0``).

Rules:
- the id is ``--id``, else ``<model stem>/<execution stem>`` with a leading
  ``<model stem>_`` dropped from the execution stem (``gpt3-175B.json`` +
  ``gpt3-175B_full.json`` -> ``gpt3-175B/full``); a bad ``--id`` is refused first, naming ``--id`` (as
  ``import hf`` does: :func:`harness.commands.import_hf.check_case_id`);
- the comparison section is empty, or holds ``--oracle-record`` (not
  checked against the vendored records: a case may be imported before its
  record exists);
- the written YAML is validated by loading it back; the inputs are checked
  against the evidence profile (network tiers, datatype) before writing;
- every field of Calculon's format is carried over (one mapping,
  :data:`harness.interop.calculon_format.CALCULON_FIELDS`): TP/DP overlap and
  the offload switches included, so the case estimates what Calculon and
  ``estimate --calculon-batch`` estimate for the same JSON;
- a bad input is one line naming the file and the field (in Calculon's
  terms).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.cases import EstimateInput
from harness.commands import import_hf
from harness.errors import EvidenceError, InputError
from harness.estimate import check_tiers
from harness.evidence.profile import check_profile_name, load_profile
from harness.inputs import read_json
from harness.interop.calculon_format import calculon_field, input_from_calculon
from harness.interop.case_document import case_text, emit_case
from harness.outputs import check_output, data_files


def register(sub) -> None:
    p = sub.add_parser("import", help="import another tool's inputs as a case YAML")
    isub = p.add_subparsers(dest="import_format", required=True, metavar="FORMAT")
    c = isub.add_parser("calculon", help="Calculon 0.1.0 model + execution JSON -> case YAML")
    c.add_argument("--model", required=True, type=Path, metavar="M.json", help="Calculon model JSON")
    c.add_argument("--execution", required=True, type=Path, metavar="E.json", help="Calculon execution JSON")
    c.add_argument("--system", required=True, metavar="NAME", help="evidence profile name (evidence/NAME.yaml)")
    c.add_argument("-o", "--output", type=Path, metavar="CASE.yaml", help="case file to write (default: stdout)")
    c.add_argument("--id", dest="case_id", help="case id (default: from the file names)")
    c.add_argument("--oracle-record", help="vendored Calculon record id for the comparison section")
    c.set_defaults(func=run)
    import_hf.register(isub)


def _read_json(path: Path) -> Any:
    return read_json(path).data


def default_id(model_path: Path, execution_path: Path) -> str:
    """``<model stem>/<execution stem>``, dropping a repeated ``<model stem>_`` prefix."""
    model, execution = model_path.stem, execution_path.stem
    if execution.startswith(f"{model}_") and len(execution) > len(model) + 1:
        execution = execution[len(model) + 1:]
    return f"{model}/{execution}"


def translate(model_path: Path, execution_path: Path, system: str) -> EstimateInput:
    """Read both files and translate them; an error names the file its field came from."""
    check_profile_name(system, "--system", "system")
    model, execution = _read_json(model_path), _read_json(execution_path)
    try:
        data = input_from_calculon(model, execution, system, "<calculon>")
        check_tiers(data, load_profile(system), "<calculon>")
    except EvidenceError:
        raise
    except InputError as error:
        field = calculon_field(error.field)
        source = {"model": model_path, "execution": execution_path}.get(field.split(".")[0], "--system")
        raise InputError(str(source), field, error.message) from None
    return data


def run(args) -> int:
    import_hf.check_case_id(args.case_id)  # first, as import hf does: an empty or bad --id is --id's error
    if args.output is not None:
        check_output(args.output, inputs=[args.model, args.execution, *data_files()])
    data = translate(args.model, args.execution, args.system)
    case_id = args.case_id if args.case_id is not None else default_id(args.model, args.execution)
    text = case_text(case_id, data, f"Imported from Calculon inputs {args.model.name} + {args.execution.name} "
                                    "by `harness import calculon`.", args.oracle_record)
    return emit_case(case_id, text, args.output)
