"""Constrained names: the ONE definition of what an identifier and an evidence profile name may hold.

Rules:

- **Identifier** (a case id, an oracle record id, a batch line id): 1 to
  :data:`MAX_IDENTIFIER_CHARS` characters, none of them a Unicode control (Cc:
  line breaks, escape, NUL, C1) or format character (Cf: bidi overrides such as
  U+202E, zero-width spaces and joiners, soft hyphen, byte-order mark), a line or
  paragraph separator (Zl U+2028, Zp U+2029: line breaks to a terminal and to
  JavaScript) or a lone surrogate (Cs: no character; UTF-8 cannot encode it). An
  id is printed in one-line errors, reports and test ids; a format character would
  make it look like another id (U+202E reverses what follows) or hide a part.
- **Profile name** (:data:`PROFILE_NAME_PATTERN`): a file stem in the evidence
  directory, never a path: lower-case letters, digits, ``_ . -``, at most 64,
  starting with a letter or digit. Lower case only: on a case-insensitive file
  system ``A100_80G`` would load ``a100_80g.yaml`` and elsewhere nothing, so a
  case would mean different things on different machines.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

MAX_IDENTIFIER_CHARS = 256
PROFILE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
PROFILE_NAME = re.compile(PROFILE_NAME_PATTERN[1:-1])  # for fullmatch
PROFILE_NAME_RULE = "lower-case letters, digits, '_', '.', '-', at most 64, starting with a letter or digit; never a path"


#: Unicode categories no identifier holds (module rules), with how an error names them.
REFUSED_CATEGORIES = {"Cc": "control", "Cf": "format (invisible or bidi)", "Zl": "line separator",
                      "Zp": "paragraph separator"}  # and Cs, a lone surrogate: not UTF-8 text
#: Every category of :data:`REFUSED_CATEGORIES` and ``Cs``: the characters no printed one-line text holds (an id,
#: a measured row's display name).
UNPRINTED_CATEGORIES = frozenset({*REFUSED_CATEGORIES, "Cs"})


def identifier_problem(text: object) -> str | None:
    """Why ``text`` is not an identifier (see the module rules), or None when it is one."""
    if not isinstance(text, str):
        return "must be a string"
    if not 1 <= len(text) <= MAX_IDENTIFIER_CHARS:
        return f"must be 1 to {MAX_IDENTIFIER_CHARS} characters, got {len(text)}"
    if text.isascii() and text.isprintable():  # printable ASCII holds no control (Cc) and no format (Cf) character
        return None
    for char in text:
        category = unicodedata.category(char)
        if category == "Cs":  # no character: a command-line byte that is not UTF-8 decodes to one (surrogateescape)
            return (f"must be UTF-8 text: U+{ord(char):04X} is a lone surrogate (a byte that is not UTF-8, or half "
                    "a UTF-16 pair)")
        kind = REFUSED_CATEGORIES.get(category)
        if kind is not None:
            return f"must not contain a {kind} character: U+{ord(char):04X} (category {category})"
    return None


def _identifier(text: str) -> str:
    problem = identifier_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


#: A pydantic field type: a string that is an identifier (module rules).
Identifier = Annotated[str, AfterValidator(_identifier)]
#: A pydantic field type: an evidence profile name (module rules).
ProfileName = Annotated[str, StringConstraints(pattern=PROFILE_NAME_PATTERN)]
