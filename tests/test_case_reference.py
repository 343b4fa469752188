"""Issue 23.3: docs/cases.md, the case-format reference, cannot drift from the schema.

Its tables are generated from the pydantic schema (:mod:`harness.case_reference`); this test fails when the
file's tables differ from the schema, and says exactly what to do: which field is new, gone or changed, and
the one command that rewrites the tables. The annotated example must be a valid case equal to the shipped
one it describes.
"""

from __future__ import annotations

import re

from harness import case_reference
from harness.cases import CaseFile, load_case, parse_case
from harness.inputs import parse_yaml

from conftest import CASES_DIR, ROOT

DOC = ROOT / "docs" / "cases.md"


def _table_rows(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", text, re.M)}


def test_every_field_of_the_schema_is_described():
    undescribed = [path for _, path, _, _, _, description in case_reference.rows() if not description]
    assert not undescribed, (f"give these case fields a Field(description=...) stating what they are and their "
                             f"unit (docs/cases.md is generated from it): {undescribed}")


def test_the_reference_tables_are_the_schemas():
    text = DOC.read_text()
    documented = case_reference.generated_part(text)
    assert documented is not None, f"{DOC}: the generated-table markers are missing"
    expected = case_reference.render()
    if documented != expected:
        have, want = _table_rows(documented), _table_rows(expected)
        added = sorted(set(want) - set(have))
        removed = sorted(set(have) - set(want))
        changed = sorted(k for k in set(have) & set(want) if have[k] != want[k])
        raise AssertionError(
            f"docs/cases.md is out of date with the case schema: new fields {added}, removed {removed}, changed "
            f"{changed}. Run `.venv/bin/python -m harness.case_reference --write` and commit docs/cases.md "
            "(and, for a new field, add a line to its prose if users need more than the table says).")


def test_every_schema_field_is_in_the_reference():
    paths = set(_table_rows(case_reference.generated_part(DOC.read_text()) or ""))
    assert {"model.hidden", "execution.network_tiers.tensor", "execution.offload.weights",
            "comparison.paper.iteration_s", "schema", "system"} <= paths
    assert len(paths) == len(case_reference.rows())


def test_the_annotated_example_is_the_shipped_case_it_describes():
    example = re.search(r"## An annotated example\n\n```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    case = parse_case(parse_yaml(example, str(DOC)).data, str(DOC))
    assert isinstance(case, CaseFile)
    assert case == load_case(CASES_DIR / "megatron-22B_full.yaml").model_copy(
        update={"comparison": case.comparison})
    assert case.comparison.paper.iteration_s == 1.42
