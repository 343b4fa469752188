"""Derived evidence profiles: another profile without some of its measured families.

A fitted revision describes its hardware *and* the software stack it was
fitted on; some measured families price what one stack does and another does
not (``gradient_accumulation``: Megatron-DeepSpeed adds each weight gradient in
place per microbatch, Megatron-LM with ``gradient_accumulation_fusion`` adds it
inside the weight-gradient GEMM). :func:`derive_profile` writes the same
hardware evidence and fitted parameters for the other stack: the source
profile with whole families removed.

Rules:

- only measured families (``harness.vocabulary.CURVE_FAMILIES`` of kind
  ``measured``) that the source defines can be removed, and none that holds a
  fitted parameter (a ``fit.parameters`` path inside it): the remaining
  parameters are then exactly the ones the fit produced;
- a derived profile is not derived again (derive from its source instead), so
  its ``derived`` block names the profile whose numbers it carries;
- everything else is the source's, unchanged, including its ``fit`` block
  (how the source's parameters were fitted; the removed families were part of
  that fit's fixed structure); the name, description and provenance are new,
  and the ``derived`` block records the source's name and revision, the
  removed families and the reason. The derived profile was fitted on nothing:
  it is checked only by what it is compared with;
- the result is a function of its inputs: deriving again from the same source
  gives the same bytes (a test pins the shipped variant to its source).

Errors are :class:`~harness.errors.InputError` naming ``<command line>`` and the
option (``--from``, ``--without``, ``--reason``).
"""

from __future__ import annotations

import unicodedata

from typing import Sequence

from harness.errors import InputError
from harness.evidence.families import DerivedProvenance
from harness.inputs import validate
from harness.evidence.profile import (
    FAMILY_SECTIONS,
    MEASURED_FAMILY_NAMES,
    EvidenceProfile,
    defines_family,
)

SOURCE = "<command line>"
MAX_REASON = 2000  # characters (DerivedProvenance.reason)


def _without(profile: EvidenceProfile, family: str) -> EvidenceProfile:
    if family == "collective_curves":
        return profile.model_copy(update={"networks": tuple(t.model_copy(update={"measured_collectives": None})
                                                            for t in profile.networks)})
    return profile.model_copy(update={FAMILY_SECTIONS[family]: None})


def _check(source: EvidenceProfile, without: Sequence[str], reason: str) -> None:
    if source.derived is not None:
        raise InputError(SOURCE, "--from", f"{source.name} is itself derived from "
                                           f"{source.derived.source_profile}: derive from that profile")
    if len(set(without)) != len(without):
        raise InputError(SOURCE, "--without", f"a family is named twice: {list(without)}")
    fitted = [p.path for p in source.fit.parameters] if source.fit else []
    for family in without:
        if family not in MEASURED_FAMILY_NAMES:
            raise InputError(SOURCE, "--without", f"{family!r} is not a measured family "
                                                  f"({', '.join(MEASURED_FAMILY_NAMES)})")
        if not defines_family(source, family):
            raise InputError(SOURCE, "--without", f"{source.name} does not define family {family}")
        section = FAMILY_SECTIONS.get(family, "networks")
        held = [path for path in fitted if path.split(".")[0] == section]
        if held:
            raise InputError(SOURCE, "--without", f"family {family} holds fitted parameters of {source.name} "
                                                  f"({', '.join(held)}): refit without it instead")
    if not reason.strip() or len(reason) > MAX_REASON or "\n" in reason:
        raise InputError(SOURCE, "--reason", f"must be one non-empty line of at most {MAX_REASON} characters")
    hidden = next((c for c in reason if unicodedata.category(c) in ("Cc", "Cf")), None)
    if hidden is not None:  # a control or format character (U+202E reverses the text a reader sees)
        raise InputError(SOURCE, "--reason", f"holds the invisible character U+{ord(hidden):04X} "
                                             f"({unicodedata.name(hidden, 'control')})")


def derive_profile(source: EvidenceProfile, without: Sequence[str], name: str, reason: str) -> EvidenceProfile:
    """``source`` without the measured families ``without``, named ``name`` (see the module rules)."""
    _check(source, without, reason)
    profile = source
    for family in without:
        profile = _without(profile, family)
    families = ", ".join(without)
    revision = source.revision()
    provenance = (f"Derived by 'harness evidence derive' from {source.name} (revision {revision[:12]}) without "
                  f"family {families}: {reason}. Fitted on nothing itself: every other number is {source.name}'s, "
                  f"whose provenance follows (its fit block is that fit's, with {families} part of its fixed "
                  f"structure). {source.provenance}")
    data = profile.model_copy(update={
        "name": name,
        "description": f"{name}: {source.name} without {families}",
        "provenance": provenance,
        "derived": DerivedProvenance(source_profile=source.name, source_revision=revision, without=tuple(without),
                                     reason=reason),
    }).to_data()
    del data["schema_name"], data["schema_version"]
    return validate(EvidenceProfile, data, f"<{name} derived from {source.name}>")  # as a loaded profile would be
