"""System evidence profiles: peaks, efficiency curves, networks.

A profile is target-wide: peak matrix/vector FLOP/s per datatype with
operation-size efficiency curves, memory tiers with transfer-size efficiency
curves, a processing mode, and network tiers with their collective volume
models. It never names a model or a case.

Rules:
- a step curve is a list of ``(threshold, efficiency)`` points with strictly
  decreasing thresholds; a request of size ``x`` takes the first point whose
  threshold is ``<= x``; a size below every threshold is an error, not a guess;
  a curve may instead be a smooth saturating curve
  (:class:`~harness.evidence.families.SaturatingCurve`);
- the families fitted to measurements (:mod:`harness.evidence.families`) are
  optional; an absent one is not part of the canonical content, so a profile
  that uses none keeps its revision;
- the profile's *revision* is the SHA-256 of its canonical content;
- a profile is found by name: ``<directory>/<name>.yaml`` when a directory is
  given, else the project's ``evidence/`` then the packaged profiles
  (:mod:`harness.locations`).

Physical bounds (every estimate priced with a valid profile is finite and
non-negative; see :mod:`harness.ir.model` for the input sizes):

- every number is finite (``NaN`` and infinities are refused when read and
  when validated);
- efficiencies are in [:data:`MIN_EFFICIENCY`, 1]: 1e-4 is far below any
  measured efficiency (the shipped profiles' smallest is 0.1), and keeps a
  division by a denormal (``1e-320``) out of every price;
- peaks are in [:data:`MIN_PEAK_FLOPS_PER_S`, :data:`MAX_PEAK_FLOPS_PER_S`]
  = [1e6, 1e24] operations per second, bandwidths in
  [:data:`MIN_BANDWIDTH_BYTES_PER_S`, :data:`MAX_BANDWIDTH_BYTES_PER_S`] =
  [1e3, 1e18] bytes per second: a megaflop processor and a kilobyte-per-second
  link are the slowest anything is modelled on (an A100 is 3e14 FLOP/s and
  2e12 B/s), and a 1e-300 peak would send every time past the float range;
- request sizes (curve thresholds, saturating ``half_size``, measured
  collective points) are at most :data:`~harness.evidence.families.MAX_SIZE`
  = 1e18 operations or bytes (sizes become time through a curve's fixed
  cost: the bound keeps every price within sense, not just finite);
- latencies are in [0, 3600] s, capacities in [1, 2^80] bytes (``a100_80e``,
  Calculon's unconstrained-memory system, has 8.6e19);
- a collective's volume model ``adjusted = bytes x m x (1 + offset /
  participants)`` never yields negative bytes: a plan message has at least 2
  participants (``Message.participants >= 2``), so ``1 + offset / p >= 0`` for
  every ``p >= 2`` exactly when ``offset >= -2`` (:data:`MIN_PARTICIPANT_OFFSET`;
  the tightest case is ``p = 2``). In floating point, ``adjusted / p x offset``
  rounds to at most ``adjusted`` in magnitude when ``offset >= -2`` (rounding
  is monotone and ``adjusted`` is representable), so the sum stays ``>= 0``.
  The multiplier is in [1e-3, 1e3] and the offset at most 1e3 (Calculon's
  systems use 1, 1.5 and 2, and -1, 0 and 1).

Loading: ``system`` names a profile (:data:`~harness.names.PROFILE_NAME_PATTERN`),
never a path. The file is read by :mod:`harness.inputs` and cached by
*content*: a cached profile is reused only when the file's identity (device,
inode, size, mtime, ctime) is unchanged and its timestamps are older than the
moment its bytes were read by more than :data:`RACY_NS` (timestamps are
coarse, so a file rewritten within that window would keep its stamps); else
the bytes are read and their SHA-256 decides.
"""


import dataclasses
import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

import yaml
from pydantic import ConfigDict, Field, Strict, field_validator, model_validator

from harness import locations, session
from harness.errors import EvidenceError, HarnessError, InputError
from harness.evidence.families import (
    CollectiveCurve,
    DerivedProvenance,
    FitProvenance,
    GradientAccumulation,
    GroupedGemm,
    HierarchicalCollectives,
    LaunchOverhead,
    MAX_SIZE,
    OutputLayer,
    PartitionedP2P,
    SaturatingCurve,
)
from harness.inputs import decode, parse_yaml, read_bytes, validate
from harness.ir.base import Artifact, Frozen
from harness.ir.distributed import CollectiveOp
from harness.ir.model import Datatype
from harness.names import PROFILE_NAME, PROFILE_NAME_RULE
from harness.vocabulary import COLLECTIVES, CURVE_FAMILIES

if TYPE_CHECKING:  # the annotations' arrays (the fit's); an estimate imports no numpy
    import numpy as np

MIN_EFFICIENCY = 1e-4
MIN_PEAK_FLOPS_PER_S, MAX_PEAK_FLOPS_PER_S = 1e6, 1e24
MIN_BANDWIDTH_BYTES_PER_S, MAX_BANDWIDTH_BYTES_PER_S = 1e3, 1e18
MAX_LATENCY_S = 3600.0
MAX_CAPACITY_BYTES = 2**80  # a100_80e, Calculon's 'unconstrained memory' system, has 8.6e19
MIN_VOLUME_MULTIPLIER, MAX_VOLUME_MULTIPLIER = 1e-3, 1e3
MIN_PARTICIPANT_OFFSET, MAX_PARTICIPANT_OFFSET = -2.0, 1e3
MAX_THRESHOLD = MAX_SIZE  # the one bound of a request size (harness.evidence.families.MAX_SIZE)
MAX_PROFILE_TEXT = 10_000  # characters of a description or provenance
RACY_NS = 2_000_000_000  # coarser than any file-system timestamp granularity (FAT: 2 s)

#: The datatypes an engine is keyed by: every case datatype (:data:`harness.ir.model.Datatype`) and ``float4``
#: (Blackwell's FP4 Tensor Core rate, for the NVFP4 recipe; a profile may state it before any case prices it).
ENGINE_DATATYPES = (*get_args(Datatype), *(("float4",) if "float4" not in get_args(Datatype) else ()))
EngineDatatype = Literal[ENGINE_DATATYPES]


class StrictEvidence(Frozen):
    """Profile sections: strict types, finite numbers."""

    model_config = ConfigDict(strict=True)


class CurvePoint(StrictEvidence):
    """Efficiency for every request at or above ``threshold``."""

    threshold: float = Field(ge=0, le=MAX_THRESHOLD, allow_inf_nan=False,
                             description="Smallest request size (operations or bytes) this point covers.")
    efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, allow_inf_nan=False, description="Fraction of peak achieved.")


class Curve(StrictEvidence):
    """An efficiency curve: steps (``points``, in strictly decreasing threshold
    order) or a smooth saturating curve (``saturating``); exactly one of them."""

    points: tuple[CurvePoint, ...] | None = Field(None, min_length=1, max_length=1024, strict=False,
                                                  description="Step points, largest threshold first.")
    saturating: SaturatingCurve | None = Field(None, description="A smooth, monotone, saturating curve instead.")

    @field_validator("points")
    @classmethod
    def _decreasing(cls, points: tuple[CurvePoint, ...] | None) -> tuple[CurvePoint, ...] | None:
        for a, b in zip(points or (), (points or ())[1:]):
            if not b.threshold < a.threshold:
                raise ValueError("thresholds must strictly decrease")
        return points

    @model_validator(mode="after")
    def _one_form(self):
        if (self.points is None) == (self.saturating is None):
            raise ValueError("a curve has either points (steps) or saturating, exactly one")
        return self

    def efficiency(self, size: float, source: str, field: str) -> float:
        """The efficiency at ``size`` (an error naming ``source`` and ``field`` below the smallest threshold)."""
        if self.saturating is not None:
            return self.saturating.efficiency(size, source, field)
        for point in self.points:  # the step rule (see _steps), early exit: the hot path of a first pass
            if size >= point.threshold:
                return point.efficiency
        raise EvidenceError(source, field, f"size {size} is below the curve's smallest threshold "
                                           f"{self.points[-1].threshold}")

    def efficiencies(self, sizes: "np.ndarray") -> "np.ndarray | float":
        """:meth:`efficiency` at every size of a numpy array (the fit's design matrix, by the same rules); a
        size of 0 is never priced and its value is unused."""
        if self.saturating is not None:
            return self.saturating.efficiencies(sizes)
        import numpy as np  # the fit's (numpy is loaded: the sizes are an array); an estimate needs none

        out = self._steps(sizes, np.where, np.nan)
        if np.any(np.isnan(out) & (sizes > 0)):
            raise HarnessError(f"a size is below the step curve's smallest threshold {self.points[-1].threshold}")
        return np.where(np.isnan(out), 1.0, out)

    def _steps(self, sizes, where, below):
        """The step rule over an array: the efficiency of the largest threshold not above each size
        (``below`` when every threshold is above it). :meth:`efficiency` is the same rule for one float,
        written as an early-exit loop (a conditional per point costs a first-pass estimate ~2 us a call);
        ``tests/test_pricer_protocol.py`` checks the two agree."""
        out = below
        for point in reversed(self.points):  # smallest threshold first; a larger one that applies wins
            out = where(sizes >= point.threshold, point.efficiency, out)
        return out


class ComputeEngine(StrictEvidence):
    """Peak and operation-size efficiency of one engine for one datatype."""

    peak_flops_per_s: float = Field(ge=MIN_PEAK_FLOPS_PER_S, le=MAX_PEAK_FLOPS_PER_S, allow_inf_nan=False,
                                    description="Peak operations per second.")
    operation_size_efficiency: Curve = Field(
        description="Efficiency by operations per task: steps (threshold in operations) or a saturating curve.")


class MemoryTier(StrictEvidence):
    """A memory tier with its transfer-size efficiency curve."""

    capacity_bytes: int = Field(gt=0, le=MAX_CAPACITY_BYTES, description="Capacity per processor, bytes.")
    bandwidth_bytes_per_s: float = Field(ge=MIN_BANDWIDTH_BYTES_PER_S, le=MAX_BANDWIDTH_BYTES_PER_S,
                                         allow_inf_nan=False, description="Peak bandwidth.")
    transfer_size_efficiency: Curve = Field(
        description="Efficiency by bytes per access: steps (threshold in bytes) or a saturating curve.")


class VolumeModel(StrictEvidence):
    """Collective volume model: ``adjusted = bytes x multiplier x (1 + offset / participants)`` (never negative)."""

    volume_multiplier: float = Field(ge=MIN_VOLUME_MULTIPLIER, le=MAX_VOLUME_MULTIPLIER, allow_inf_nan=False,
                                     description="Scales the logical message bytes.")
    participant_offset: float = Field(ge=MIN_PARTICIPANT_OFFSET, le=MAX_PARTICIPANT_OFFSET, allow_inf_nan=False,
                                      description="Adds (adjusted bytes / participants) x offset; >= -2 so that no "
                                                  "participant count >= 2 gives negative bytes.")


#: An optional collective a tier need not state -> the required one whose volume model it takes: an all-to-all
#: sends (P - 1) / P of each rank's buffer (the slice it keeps does not travel;
#: harness.ir.experts.all_to_all_bytes_sent_per_rank), as an all-gather moves (P - 1) / P of its buffer to each
#: rank (the profiles' ``bytes x 1 x (1 - 1 / P)``).
VOLUME_FALLBACK: dict[str, str] = {"all_to_all": "all_gather"}


class NetworkTier(StrictEvidence):
    """One network tier."""

    bandwidth_bytes_per_s: float = Field(ge=MIN_BANDWIDTH_BYTES_PER_S, le=MAX_BANDWIDTH_BYTES_PER_S,
                                         allow_inf_nan=False, description="Peak link bandwidth.")
    efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, allow_inf_nan=False,
                              description="Achievable fraction of the bandwidth.")
    size_processors: int = Field(ge=0, le=2**30, description="Processors the tier connects.")
    latency_s: float = Field(ge=0, le=MAX_LATENCY_S, allow_inf_nan=False, description="Per-operation latency.")
    must_be_filled: bool = Field(description="Groups on this tier must tile its size exactly.")
    processor_usage: float = Field(ge=0, lt=1, allow_inf_nan=False,
                                   description="Fraction of the processor a transfer occupies.")
    collectives: dict[CollectiveOp, VolumeModel] = Field(description="Volume model per operation.")
    measured_collectives: dict[CollectiveOp, Annotated[tuple[CollectiveCurve, ...], Strict(False)]] | None = Field(
        None, description="Measured efficiency by message size per collective and participant count "
                          "(family collective_curves); replaces 'efficiency' for those collectives.")

    def volume_model(self, collective: str) -> VolumeModel:
        """The tier's volume model of ``collective``, or for an optional collective it does not state
        (:data:`harness.vocabulary.COLLECTIVES`) that of its :data:`VOLUME_FALLBACK` (one rule for the pricer and
        the measured curves)."""
        model = self.collectives.get(collective)
        return model if model is not None else self.collectives[VOLUME_FALLBACK[collective]]

    @field_validator("collectives")
    @classmethod
    def _all_ops(cls, value: dict[str, VolumeModel]) -> dict[str, VolumeModel]:
        missing = set(COLLECTIVES.of_kind("required")) - set(value)
        if missing:
            raise ValueError(f"missing volume model for {sorted(missing)}")
        return value

    @field_validator("measured_collectives")
    @classmethod
    def _distinct_participants(cls, value):
        for op, curves in (value or {}).items():
            counts = [c.participants for c in curves]
            if not counts or len(set(counts)) != len(counts):
                raise ValueError(f"{op}: one curve per participant count, at least one")
        return value


class EvidenceProfile(Artifact):
    """A versioned, target-wide system evidence profile."""

    model_config = ConfigDict(strict=True)

    SCHEMA_NAME: ClassVar[str] = "blueprinting.evidence-profile"
    SCHEMA_VERSION: ClassVar[int] = 0

    name: str = Field(pattern=PROFILE_NAME.pattern, description="Profile name (the file stem).")
    description: str = Field(max_length=MAX_PROFILE_TEXT, description="What system this describes.")
    provenance: str = Field(max_length=MAX_PROFILE_TEXT, description="Where the numbers come from.")
    processing_mode: Literal["no_overlap", "roofline"] = Field(
        description="no_overlap sums compute and memory time of a task; roofline takes the max.")
    matrix: dict[EngineDatatype, ComputeEngine] = Field(description="Matrix engine per datatype.")
    vector: dict[EngineDatatype, ComputeEngine] = Field(description="Vector engine per datatype.")
    memory_tier1: MemoryTier = Field(description="Processor memory (HBM).")
    memory_tier2: MemoryTier = Field(description="Offload memory.")
    networks: tuple[NetworkTier, ...] = Field(min_length=1, max_length=64, strict=False,
                                              description="Network tiers, index = tier.")
    launch: LaunchOverhead | None = Field(None, description="Host issue time per operation (family launch).")
    output_layer: OutputLayer | None = Field(None, description="Embedding, output layer and loss work "
                                                               "(family output_layer).")
    hierarchical_collectives: HierarchicalCollectives | None = Field(
        None, description="Groups larger than a tier's island run hierarchically (family hierarchical).")
    partitioned_p2p: PartitionedP2P | None = Field(
        None, description="Pipeline boundary transfers split over the TP group (family partitioned_p2p).")
    gradient_accumulation: GradientAccumulation | None = Field(
        None, description="Unfused in-place weight-gradient accumulation per microbatch after the first (family "
                          "gradient_accumulation).")
    grouped_gemm: GroupedGemm | None = Field(
        None, description="The local experts' grouped GEMM's efficiency by one expert's GEMM size (family "
                          "grouped_gemm).")
    fit: FitProvenance | None = Field(None, description="How the revision was fitted to measurements.")
    derived: DerivedProvenance | None = Field(
        None, description="Derived from another profile by removing measured families (harness evidence derive); "
                          "a 'fit' block is then the source's.")

    @model_validator(mode="after")
    def _derived_without(self):
        if self.derived is not None:
            if self.derived.source_profile == self.name:
                raise ValueError("derived.source_profile: a profile is not derived from itself")
            for family in self.derived.without:
                if family not in MEASURED_FAMILY_NAMES:
                    raise ValueError(f"derived.without: {family!r} is not a measured family "
                                     f"({', '.join(MEASURED_FAMILY_NAMES)})")
                if defines_family(self, family):
                    raise ValueError(f"derived.without names {family!r}, which the profile defines")
        return self

    @model_validator(mode="after")
    def _fit_is_the_body(self):
        """A fitted parameter states what the profile prices: its value within its bounds, a standard error
        that is not negative, and its ``path`` naming the body's number of that value (a flat curve: the value
        of each of its points). Without it ``evidence fit --fixed-from`` (which reads the parameters) and
        ``evidence transfer`` (which reads the body) took different values from one file. A derived profile's
        fit block is its source's: a path into a family it removed is not checked."""
        if self.fit is None:
            return self
        body = self.model_dump(mode="python", by_alias=True, exclude_none=True)
        for at, p in enumerate(self.fit.parameters):
            where = f"fit.parameters.{at} ({p.name})"
            if not p.lower <= p.value <= p.upper:
                raise ValueError(f"{where}: value {p.value!r} outside its bounds [{p.lower!r}, {p.upper!r}]")
            if p.standard_error is not None and p.standard_error < 0:
                raise ValueError(f"{where}: standard_error {p.standard_error!r} is negative")
            found = _at_path(body, p.path)
            if found is _NOWHERE:
                if self.derived is not None:
                    continue
                raise ValueError(f"{where}: path {p.path!r} names no field of the profile")
            numbers = _efficiencies(found) if isinstance(found, (list, tuple, dict)) else [found]
            if not numbers or any(number != p.value for number in numbers):
                raise ValueError(f"{where}: value {p.value!r} is not what the profile prices at {p.path!r} "
                                 f"({numbers[0] if len(set(numbers)) == 1 else numbers!r})")
        return self

    def to_data(self) -> dict:
        """As :meth:`Artifact.to_data`, without the absent optional families (they are not content)."""
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["schema_name"] = self.SCHEMA_NAME
        data["schema_version"] = self.SCHEMA_VERSION
        return data

    def revision(self) -> str:
        return self.digest()


_NOWHERE = object()


def _at_path(data: Any, path: str) -> Any:
    """The value at a dotted ``path`` (``networks.0.efficiency``: a list index as a number), or ``_NOWHERE``."""
    for key in path.split("."):
        if isinstance(data, dict) and key not in data and len(data) == 1:  # a curve's kind (``saturating``),
            (data,) = data.values()  # which the first fitted revisions' paths leave out
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, (list, tuple)) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        else:
            return _NOWHERE
    return data


def _efficiencies(data: Any) -> list:
    """Every ``efficiency`` number inside a curve section (a flat curve's points), in order."""
    if isinstance(data, dict):
        return [v for k, v in data.items() if k == "efficiency"] + [
            x for v in data.values() if isinstance(v, (dict, list, tuple)) for x in _efficiencies(v)]
    if isinstance(data, (list, tuple)):
        return [x for v in data for x in _efficiencies(v)]
    return []


#: The profile section of each measured family (harness.vocabulary.CURVE_FAMILIES, kind "measured") that is one
#: optional section; ``collective_curves`` is the tiers' ``measured_collectives``.
FAMILY_SECTIONS = {"launch": "launch", "output_layer": "output_layer", "hierarchical": "hierarchical_collectives",
                   "partitioned_p2p": "partitioned_p2p", "gradient_accumulation": "gradient_accumulation",
                   "grouped_gemm": "grouped_gemm"}
MEASURED_FAMILY_NAMES = (*FAMILY_SECTIONS, "collective_curves")
CURVE_FAMILIES.require([*CURVE_FAMILIES.of_kind("calculon"), *MEASURED_FAMILY_NAMES],
                       "harness.evidence.profile.MEASURED_FAMILY_NAMES")


def defines_family(profile: EvidenceProfile, family: str) -> bool:
    """Whether ``profile`` defines the measured ``family`` (the Calculon families every profile defines)."""
    if family == "collective_curves":
        return any(t.measured_collectives for t in profile.networks)
    return getattr(profile, FAMILY_SECTIONS[family]) is not None


def profile_path(name: str, directory: Path | None = None) -> Path:
    """``<directory>/<name>.yaml``, or the profile ``name`` of the current locations."""
    if directory is not None:
        return Path(directory) / f"{name}.yaml"
    return locations.current().profile_path(name)


def check_profile_name(name: object, source: str = "--system", field: str = "system") -> str:
    """``name`` if it is a profile name (never a path), else an EvidenceError naming ``source`` and ``field``."""
    if not isinstance(name, str) or PROFILE_NAME.fullmatch(name) is None:
        raise EvidenceError(source, field, f"{name!r} is not an evidence profile name ({PROFILE_NAME_RULE})")
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class _Cached:
    identity: tuple[int, ...]  # device, inode, size, mtime_ns, ctime_ns
    sha256: bytes  # of the file's bytes
    read_ns: int  # wall clock just before the bytes were read
    profile: EvidenceProfile


def load_profile(name: str, directory: Path | None = None, *, referrer: str | None = None,
                 field: str = "system") -> EvidenceProfile:
    """Load ``evidence/<name>.yaml``; errors name the file and field (see the module rules on caching).

    ``referrer`` is the input that names the profile (a case file, a batch line, ``<command line>``): a bad
    name or a profile that does not exist is that input's error (its ``field``, ``system`` unless told, e.g.
    ``--system``); a malformed profile is the profile file's.
    """
    check_profile_name(name, *((referrer, field) if referrer else ()))
    if directory is not None:  # one system call per estimate when the profile is cached
        path = str(profile_path(name, directory))
        status = locations.regular_file_status(path)
    else:
        path, status = locations.current().profile_file_text(name)  # text: the memo's key, the errors' file
    if status is None:
        if referrer is not None:
            raise EvidenceError(referrer, field, f"no evidence profile named {name!r} (no {path})")
        raise EvidenceError(str(path), "system", f"no evidence profile named {name!r}")
    identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
    memo = session.current().profiles
    cached = memo.get(path)
    if (cached is not None and cached.identity == identity
            and max(status.st_mtime_ns, status.st_ctime_ns) + RACY_NS < cached.read_ns):
        return cached.profile
    read_ns = time.time_ns()
    data = read_bytes(path)
    digest = hashlib.sha256(data).digest()
    if cached is not None and cached.sha256 == digest:
        profile = cached.profile
    else:
        profile = parse_profile(data, str(path), name)
    memo.put(path, _Cached(identity, digest, read_ns, profile))
    return profile


def parse_profile(data: bytes, source: str, name: str | None = None) -> EvidenceProfile:
    """Validate a profile file's bytes (strict input rules, physical bounds); ``name`` must match."""
    document = parse_yaml(decode(data, source), source)
    content = document.data
    if not isinstance(content, dict):
        raise EvidenceError(source, "<root>", "a profile must be a mapping")
    header = {k: content.get(k) for k in ("schema_name", "schema_version")}
    # the version is an integer: `false` and `0.0` equal 0 in Python, and are refused like any lax type
    if header != {"schema_name": EvidenceProfile.SCHEMA_NAME, "schema_version": EvidenceProfile.SCHEMA_VERSION} \
            or type(header["schema_version"]) is not int:
        raise EvidenceError(source, "schema_name", f"schema_name/schema_version must be {EvidenceProfile.SCHEMA_NAME} "
                                                   f"v{EvidenceProfile.SCHEMA_VERSION}")
    body = {k: v for k, v in content.items() if k not in header}
    try:
        profile = validate(EvidenceProfile, body, source, document=document)
    except EvidenceError:
        raise
    except InputError as error:
        raise EvidenceError(error.source, error.field, error.message, line=error.line) from None
    if name is not None and profile.name != name:
        raise EvidenceError(source, "name", f"{profile.name!r} does not match the file name {name!r}")
    return profile


def dump_profile(profile: EvidenceProfile) -> str:
    """The profile as YAML (block style, schema header first)."""
    return yaml.safe_dump(profile.to_data(), sort_keys=False, default_flow_style=False, width=100)
