"""A case YAML written by the tool (``harness import calculon``, ``harness search --emit-case``).

Rules: the document holds every field of the shape and the layout that is not
absent (an optional field that is None is left out, so the digests of a shape
without it stay as they are); it is validated by :func:`harness.cases.parse_case`
before it is returned, so the text always reads back to exactly the input it
was made from (``load_case(path).estimate_input() == data``); its header
comment is :func:`printable` (a file name with a control character or bytes
that are not UTF-8 is escaped, never written raw).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from harness.cases import CASE_SCHEMA, EstimateInput, parse_case
from harness.outputs import write_text


def case_document(case_id: str, data: EstimateInput, oracle_record: str | None = None) -> dict[str, Any]:
    """The case's content in the project's field names (see the module rules)."""
    document = {"schema": CASE_SCHEMA, "id": case_id, "system": data.system,
                "model": data.model.model_dump(mode="json", exclude_none=True),
                "execution": data.execution.model_dump(mode="json", exclude_none=True),
                "comparison": {"oracle_record": oracle_record} if oracle_record else {}}
    parse_case(document, f"case {case_id}")
    return document


def printable(text: str) -> str:
    """``text`` with every character that is not printable (:meth:`str.isprintable`: a control or format
    character, a bidi override, a line or paragraph separator, the lone surrogate a file name that is not UTF-8
    decodes to) escaped as Python writes it (``\\x01``, ``\\u2028``, ``\\udcff``): the text is one line
    that YAML accepts in a comment and UTF-8 can encode."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def case_text(case_id: str, data: EstimateInput, header: str, oracle_record: str | None = None) -> str:
    """The case YAML text: ``header`` (one ``#`` comment line per ``\\n``-separated line, each
    :func:`printable`: a user's file name in it never makes the case unreadable) and the document in field
    order."""
    comment = "".join(f"# {printable(line)}\n" for line in (header.split("\n") if header else ()))
    document = case_document(case_id, data, oracle_record)
    return comment + yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def emit_case(case_id: str, text: str, output: Path | None) -> int:
    """A command's case text to standard output, or written to ``output`` (atomically, through the one
    output guard) with one line on standard error saying so; the command's exit status (0)."""
    if output is None:
        sys.stdout.write(text)
        return 0
    write_text(output, text)
    print(f"wrote case {case_id} to {printable(str(output))}", file=sys.stderr)
    return 0
