"""Transferred revisions: a GPU that no measured run covers, priced with a sibling's fitted megatron-core values.

``harness evidence transfer --from b200_measured --base b300 --output evidence/b300_transferred.yaml``: B300
(Blackwell Ultra) and GB300 have no shared measured run (their rows are withheld), but each has a sibling with
fitted values on the same SM generation, NVLink generation and software stack (B200, GB200). The transferred
revision is the best evidence the project holds for such a GPU, and it says what it is.

Rules:

- the source is a megatron-core revision (``harness evidence fit --structure megatron-core``: its ``fit``
  block's objective names the structure); a profile fitted another way, or never fitted, is refused;
- the base is a data-sheet profile (no ``fit``, no ``derived`` block) with a bfloat16 matrix engine and the
  source's network structure: as many tiers, and an NVLink domain (tier 0) of the same size, since the
  fitted link efficiencies are those of a domain of that size. That the two GPUs are siblings (the same SM
  generation and stack) is the caller's claim, stated in the provenance; the command checks the structure;
- the values are the structure's parameters (:data:`harness.measurements.runs_fit.PARAMETERS`) as the source
  prices them (:func:`source_values`): its fitted values and those it took from its own sibling (GB200's bf16
  and NVLink values are B200's), read from the profile itself, so a transfer from a transfer-free revision
  and from one with taken values are the same rule;
- the transferred profile is :func:`~harness.measurements.runs_fit.template` of the base (the structure's
  fixed choices) with those values (:func:`~harness.measurements.runs_fit.with_values`): the base's peaks,
  capacities, bandwidths and scale-out tier, the source's efficiencies. A datatype the source leaves at its
  base's curve (float4: no shared run uses it) keeps the target base's curve;
- it was fitted on nothing: no ``fit`` block; its description and provenance say "transferred", name the
  source and base revisions and list every value taken;
- deterministic: the same source and base give the same bytes (``tests/test_transferred_revisions.py`` pins
  the shipped files to their inputs).

Errors are :class:`~harness.errors.InputError` naming ``<command line>`` and the option (``--from``,
``--base``).
"""

from __future__ import annotations

from harness.errors import InputError
from harness.evidence.profile import EvidenceProfile
from harness.measurements.runs_fit import PARAMETERS, STRUCTURE, all_to_all_curve, template, with_values

SOURCE = "<command line>"
#: The shipped transferred revisions: name -> (source revision, data-sheet base).
TRANSFERRED = {"b300_transferred": ("b200_measured", "b300"), "gb300_transferred": ("gb200_measured", "gb300_nvl72")}


def _saturating_max(profile: EvidenceProfile, datatype: str) -> float | None:
    engine = profile.matrix.get(datatype)
    curve = None if engine is None else engine.operation_size_efficiency.saturating
    return None if curve is None else curve.max_efficiency


def _all_to_all(profile: EvidenceProfile) -> float | None:
    """The fitted all-to-all efficiency: tier 0's all_to_all curves when they are the structure's flat curve
    (:func:`~harness.measurements.runs_fit.all_to_all_curve`), else None (measured curves of the source's own
    system are not a parameter of the structure)."""
    curves = (profile.networks[0].measured_collectives or {}).get("all_to_all") if profile.networks else None
    if not curves:
        return None
    efficiency = curves[0].points[0].efficiency
    return efficiency if tuple(curves) == all_to_all_curve(efficiency) else None


def source_values(source: EvidenceProfile) -> dict[str, float]:
    """The structure's parameters as ``source`` prices them (module rules), in :data:`PARAMETERS` order; a
    parameter the source does not set (no saturating bf16/fp8 curve, no grouped-GEMM family, no all-to-all
    curve) is left out."""
    read = {
        "matrix_max_efficiency": _saturating_max(source, "bfloat16"),
        "matrix_float8_max_efficiency": _saturating_max(source, "float8"),
        "nvlink_efficiency": source.networks[0].efficiency if source.networks else None,
        "grouped_gemm_half_size": None if source.grouped_gemm is None else source.grouped_gemm.half_size_operations,
        "nvlink_all_to_all_efficiency": _all_to_all(source),
    }
    return {p.name: read[p.name] for p in PARAMETERS if read[p.name] is not None}


def is_megatron_core_revision(profile: EvidenceProfile) -> bool:
    """Whether ``profile`` was fitted by the megatron-core structure (its ``fit`` objective names it)."""
    return profile.fit is not None and f"structure {STRUCTURE}" in profile.fit.objective


def unfitted_gemm_engine(profile: EvidenceProfile, datatype: str) -> bool:
    """Whether a megatron-core revision (fitted, or a shipped transferred one) prices ``datatype`` GEMMs with the
    data sheet's curve: the structure fits a saturating curve only for a datatype some training row uses (no
    shared row runs nvfp4, so every revision's float4 engine is the data sheet's)."""
    if not (is_megatron_core_revision(profile) or profile.name in TRANSFERRED):
        return False
    engine = profile.matrix.get(datatype)
    return engine is not None and engine.operation_size_efficiency.saturating is None


def check_transfer(source: EvidenceProfile, base: EvidenceProfile) -> None:
    """The module's rules on the source and the base, or an InputError naming the option."""
    if not is_megatron_core_revision(source):
        raise InputError(SOURCE, "--from", f"{source.name} is not a {STRUCTURE} revision (harness evidence fit "
                                           f"--structure {STRUCTURE}): there are no fitted values to transfer")
    if base.fit is not None or base.derived is not None:
        raise InputError(SOURCE, "--base", f"{base.name} is a fitted or derived revision, not a data-sheet profile "
                                           "(transfer onto the GPU's data sheet)")
    if "bfloat16" not in base.matrix:
        raise InputError(SOURCE, "--base", f"{base.name} has no bfloat16 matrix engine")
    if len(base.networks) != len(source.networks):
        raise InputError(SOURCE, "--base", f"{base.name} has {len(base.networks)} network tiers, {source.name} "
                                           f"{len(source.networks)}: the tier-0 values would not be the same link's")
    if base.networks and base.networks[0].size_processors != source.networks[0].size_processors:
        raise InputError(SOURCE, "--base", f"{base.name}'s NVLink domain (tier 0) holds "
                                           f"{base.networks[0].size_processors} GPUs, {source.name}'s "
                                           f"{source.networks[0].size_processors}: its fitted link efficiencies are "
                                           "of another domain (transfer from a sibling of the same domain size)")


def transferred_revision(source: EvidenceProfile, base: EvidenceProfile, name: str) -> EvidenceProfile:
    """The revision ``name``: ``base`` under the structure's fixed choices with ``source``'s values (module
    rules)."""
    check_transfer(source, base)
    values = source_values(source)
    taken = "; ".join(f"{key} = {value:g}" for key, value in values.items())
    return with_values(template(base, name), values).model_copy(update={
        "description": f"{name}: {base.name} with {source.name}'s fitted values (transferred: no measured run of "
                       "this GPU)",
        "provenance": (
            f"Transferred by 'harness evidence transfer' from {source.name} (revision {source.revision()[:12]}) onto "
            f"the data sheet {base.name} (revision {base.revision()[:12]}); fitted to no run of this GPU. The "
            f"{STRUCTURE} structure's fixed choices on {base.name}'s peaks, capacities, bandwidths and scale-out "
            f"tier, with the values {source.name} prices: {taken}. Assumed, not measured: the sibling GPU's "
            "efficiencies hold on this one (the same SM and NVLink generation and software stack); a datatype "
            f"{source.name} leaves at its data sheet's curve keeps {base.name}'s. See docs/modern-evidence.md."),
    })
