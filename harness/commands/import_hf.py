"""``harness import hf --config config.json --execution EXEC.yaml --sequence-length S --system NAME [-o CASE.yaml]``.

Turns a Hugging Face ``config.json`` (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3:
:mod:`harness.interop.hf_config`) and an execution section (a YAML mapping in the case format's ``execution``
fields) into a case YAML.

Rules:
- every config field is priced, noted (one ``note:`` line on stderr each, and the case file's header
  comment), or refused: a refusal is one error line naming the config file and field; nothing is
  written;
- the id is ``--id``, else ``hf/<model_type>-<blocks>x<hidden>/s<S>`` (never a model name);
- the execution section is validated as a case's (strict types, the layout rules) and against the
  evidence profile (network tiers, datatype) before anything is written; the output is atomic.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.cases import EstimateInput, validate_input
from harness.errors import InputError
from harness.estimate import check_tiers
from harness.evidence.profile import check_profile_name, load_profile
from harness.inputs import quoted, read_json, read_yaml, validate
from harness.interop.case_document import case_text, emit_case, printable
from harness.interop.hf_config import Draft, model_section, translate_config
from harness.ir.model import MAX_SEQUENCE, ExecutionLayout, TransformerShape
from harness.names import identifier_problem
from harness.outputs import check_output, data_files


def register(isub) -> None:
    h = isub.add_parser("hf", help=("Hugging Face config.json (Llama, Mistral, Qwen2/3, Mixtral, Qwen2/3-MoE, "
                                    "DeepSeek-V3) + execution -> case YAML"))
    h.add_argument("--config", required=True, type=Path, metavar="config.json", help="Hugging Face model config")
    h.add_argument("--execution", required=True, type=Path, metavar="EXEC.yaml",
                   help="the case format's execution section (a YAML mapping)")
    h.add_argument("--sequence-length", required=True, type=int, metavar="S", help="tokens per sample")
    h.add_argument("--system", required=True, metavar="NAME", help="evidence profile name (evidence/NAME.yaml)")
    h.add_argument("-o", "--output", type=Path, metavar="CASE.yaml", help="case file to write (default: stdout)")
    h.add_argument("--id", dest="case_id", help="case id (default: hf/<model_type>-<blocks>x<hidden>/s<S>)")
    h.set_defaults(func=run)


def _in_config_terms(error: InputError, case_path: str, draft: Draft, config_path: Path) -> InputError:
    """A case-format error in a model field the config set, as the config's: its file and its field (the user
    fixes ``vocab_size``, not ``vocabulary``), the message kept; a field no config field set keeps its error."""
    field = draft.config_field(case_path, error.message)
    return error if field is None else type(error)(str(config_path), field, error.message)


def translate(config_path: Path, execution_path: Path, sequence_length: int, system: str):
    """``(input, notes)``: the case input of the two files; an error names the file and field."""
    check_profile_name(system, "<command line>", "--system")
    if not 0 < sequence_length <= MAX_SEQUENCE:
        raise InputError("<command line>", "--sequence-length", f"must be in [1, {MAX_SEQUENCE}], got "
                                                                f"{sequence_length}")
    exec_doc = read_yaml(execution_path)
    source = str(execution_path)
    what = "a mapping (the case format's execution section)"
    stated = validate(ExecutionLayout, exec_doc.data, source, document=exec_doc, what=what)  # before the config
    draft = translate_config(read_json(config_path).data, str(config_path), sequence_length,
                             getattr(stated, "context_parallel", None) or 1)
    model, implied_execution = model_section(draft, str(config_path))
    for name, value in implied_execution.items():
        if name in exec_doc.data and exec_doc.data[name] != value:
            raise InputError(source, name, f"{exec_doc.data[name]!r} contradicts the config ({value!r})")
    execution = validate(ExecutionLayout, {**exec_doc.data, **implied_execution}, source, document=exec_doc,
                         what=what)
    try:
        shape = validate(TransformerShape, model, str(config_path))
    except InputError as error:
        raise _in_config_terms(error, f"model.{error.field}", draft, config_path) from None
    data = EstimateInput(model=shape, execution=execution, system=system)
    try:
        validate_input(source, data)
    except InputError as error:
        if not error.field.startswith("model."):
            raise  # the execution section's
        raise _in_config_terms(error, error.field, draft, config_path) from None
    check_tiers(data, load_profile(system, referrer="<command line>", field="--system"), source)
    return data, draft.notes


def check_case_id(case_id: str | None) -> None:
    """``--id`` (when given) is an identifier (:mod:`harness.names`) that UTF-8 can write; else one error line
    naming ``--id``, the id shown shortened and escaped (never echoed whole: a line break or a bidi override
    in it would garble the error)."""
    if case_id is None:
        return
    problem = identifier_problem(case_id)  # a lone surrogate (a non-UTF-8 byte of the argument) included
    if problem is not None:
        raise InputError("<command line>", "--id", f"{quoted(case_id)} {problem}")


def run(args) -> int:
    check_case_id(args.case_id)  # first: before any note line, the case file's header names no id
    if args.output is not None:
        check_output(args.output, inputs=[args.config, args.execution, *data_files()])
    data, notes = translate(args.config, args.execution, args.sequence_length, args.system)
    config_type = read_json(args.config).data["model_type"]
    case_id = (args.case_id if args.case_id is not None
               else f"hf/{config_type}-{data.model.blocks}x{data.model.hidden}/s{args.sequence_length}")
    for note in notes:
        print(f"note: {printable(str(args.config))}: {printable(note)}", file=sys.stderr)
    header = "\n".join([f"Imported from the Hugging Face config {printable(args.config.name)} + "
                        f"{printable(args.execution.name)} by `harness import hf`.",
                        *(f"note: {printable(note)}" for note in notes)])  # a file name is any bytes
    text = case_text(case_id, data, header)
    return emit_case(case_id, text, args.output)
