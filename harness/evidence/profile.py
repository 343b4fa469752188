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
- efficiencies are in (0, 1];
- the families fitted to measurements (:mod:`harness.evidence.families`) are
  optional; an absent one is not part of the canonical content, so a profile
  that uses none keeps its revision;
- the profile's *revision* is the SHA-256 of its canonical content.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import ClassVar, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from harness.errors import EvidenceError
from harness.evidence.families import (
    CollectiveCurve,
    FitProvenance,
    HierarchicalCollectives,
    LaunchOverhead,
    OutputLayer,
    SaturatingCurve,
)
from harness.ir.base import Artifact, Frozen
from harness.ir.distributed import CollectiveOp

EVIDENCE_DIR = Path(__file__).resolve().parents[2] / "evidence"


class CurvePoint(Frozen):
    """Efficiency for every request at or above ``threshold``."""

    threshold: float = Field(ge=0, description="Smallest request size (operations or bytes) this point covers.")
    efficiency: float = Field(gt=0, le=1, description="Fraction of peak achieved.")


class Curve(Frozen):
    """A step curve; points in strictly decreasing threshold order."""

    points: tuple[CurvePoint, ...] = Field(min_length=1, description="Step points, largest threshold first.")

    @field_validator("points")
    @classmethod
    def _decreasing(cls, points: tuple[CurvePoint, ...]) -> tuple[CurvePoint, ...]:
        for a, b in zip(points, points[1:]):
            if not b.threshold < a.threshold:
                raise ValueError("thresholds must strictly decrease")
        return points

    def efficiency(self, size: float, what: str) -> float:
        for point in self.points:
            if size >= point.threshold:
                return point.efficiency
        raise EvidenceError(f"{what}: size {size} is below the curve's smallest threshold {self.points[-1].threshold}")


#: An efficiency curve: steps (Calculon's form) or a smooth saturating curve.
EfficiencyCurve = Curve | SaturatingCurve


class ComputeEngine(Frozen):
    """Peak and operation-size efficiency of one engine for one datatype."""

    peak_flops_per_s: float = Field(gt=0, description="Peak operations per second.")
    operation_size_efficiency: EfficiencyCurve = Field(description="Efficiency by operations per task.")


class MemoryTier(Frozen):
    """A memory tier with its transfer-size efficiency curve."""

    capacity_bytes: int = Field(gt=0, description="Capacity per processor, bytes.")
    bandwidth_bytes_per_s: float = Field(gt=0, description="Peak bandwidth.")
    transfer_size_efficiency: EfficiencyCurve = Field(description="Efficiency by bytes per access.")


class VolumeModel(Frozen):
    """Collective volume model: bytes x multiplier + bytes/participants x offset."""

    volume_multiplier: float = Field(gt=0, description="Scales the logical message bytes.")
    participant_offset: float = Field(description="Adds (adjusted bytes / participants) x offset.")


class NetworkTier(Frozen):
    """One network tier."""

    bandwidth_bytes_per_s: float = Field(gt=0, description="Peak link bandwidth.")
    efficiency: float = Field(gt=0, le=1, description="Achievable fraction of the bandwidth.")
    size_processors: int = Field(ge=0, description="Processors the tier connects.")
    latency_s: float = Field(ge=0, description="Per-operation latency.")
    must_be_filled: bool = Field(description="Groups on this tier must tile its size exactly.")
    processor_usage: float = Field(ge=0, lt=1, description="Fraction of the processor a transfer occupies.")
    collectives: dict[CollectiveOp, VolumeModel] = Field(description="Volume model per operation.")
    measured_collectives: dict[CollectiveOp, tuple[CollectiveCurve, ...]] | None = Field(
        None, description="Measured efficiency by message size per collective and participant count "
                          "(family collective_curves); replaces 'efficiency' for those collectives.")

    @field_validator("collectives")
    @classmethod
    def _all_ops(cls, value: dict[str, VolumeModel]) -> dict[str, VolumeModel]:
        missing = {"p2p", "all_reduce", "reduce_scatter", "all_gather"} - set(value)
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

    SCHEMA_NAME: ClassVar[str] = "blueprinting.evidence-profile"
    SCHEMA_VERSION: ClassVar[int] = 0

    name: str = Field(description="Profile name (the file stem).")
    description: str = Field(description="What system this describes.")
    provenance: str = Field(description="Where the numbers come from.")
    processing_mode: Literal["no_overlap", "roofline"] = Field(
        description="no_overlap sums compute and memory time of a task; roofline takes the max.")
    matrix: dict[str, ComputeEngine] = Field(description="Matrix engine per datatype.")
    vector: dict[str, ComputeEngine] = Field(description="Vector engine per datatype.")
    memory_tier1: MemoryTier = Field(description="Processor memory (HBM).")
    memory_tier2: MemoryTier = Field(description="Offload memory.")
    networks: tuple[NetworkTier, ...] = Field(min_length=1, description="Network tiers, index = tier.")
    launch: LaunchOverhead | None = Field(None, description="Host issue time per operation (family launch).")
    output_layer: OutputLayer | None = Field(None, description="Embedding, output layer and loss work "
                                                               "(family output_layer).")
    hierarchical_collectives: HierarchicalCollectives | None = Field(
        None, description="Groups larger than a tier's island run hierarchically (family hierarchical).")
    fit: FitProvenance | None = Field(None, description="How the revision was fitted to measurements.")

    def to_data(self) -> dict:
        """As :meth:`Artifact.to_data`, without the absent optional families (they are not content)."""
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["schema_name"] = self.SCHEMA_NAME
        data["schema_version"] = self.SCHEMA_VERSION
        return data

    def revision(self) -> str:
        return self.digest()


@functools.lru_cache(maxsize=256)
def profile_path(name: str, directory: Path | None = None) -> Path:
    return (directory or EVIDENCE_DIR) / f"{name}.yaml"


_CACHE: dict[tuple[Path, float], EvidenceProfile] = {}


def load_profile(name: str, directory: Path | None = None) -> EvidenceProfile:
    """Load ``evidence/<name>.yaml``; errors name the file and field."""
    path = profile_path(name, directory)
    try:
        status = os.stat(path)  # one system call per estimate: the cache follows edits to the file
    except OSError:
        status = None
    if status is None or not stat.S_ISREG(status.st_mode):
        raise EvidenceError(f"{path}: no evidence profile named {name!r}")
    key = (path, status.st_mtime)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    try:
        data = yaml.safe_load(path.read_text())
        profile = EvidenceProfile.model_validate({k: v for k, v in data.items() if k not in ("schema_name", "schema_version")})
    except yaml.YAMLError as error:
        raise EvidenceError(f"{path}: not valid YAML: {error}") from None
    except (ValidationError, AttributeError) as error:
        if isinstance(error, ValidationError):
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise EvidenceError(f"{path}: {where}: {first['msg']}") from None
        raise EvidenceError(f"{path}: a profile must be a mapping") from None
    if data.get("schema_name") != EvidenceProfile.SCHEMA_NAME or data.get("schema_version") != EvidenceProfile.SCHEMA_VERSION:
        raise EvidenceError(f"{path}: schema_name/schema_version must be {EvidenceProfile.SCHEMA_NAME} v{EvidenceProfile.SCHEMA_VERSION}")
    if profile.name != name:
        raise EvidenceError(f"{path}: name: {profile.name!r} does not match the file name {name!r}")
    _CACHE[key] = profile
    return profile


def dump_profile(profile: EvidenceProfile) -> str:
    """The profile as YAML (block style, schema header first)."""
    return yaml.safe_dump(profile.to_data(), sort_keys=False, default_flow_style=False, width=100)
