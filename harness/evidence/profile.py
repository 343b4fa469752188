"""System evidence profiles: peaks, efficiency curves, networks.

A profile is target-wide: peak matrix/vector FLOP/s per datatype with
operation-size efficiency curves, memory tiers with transfer-size efficiency
curves, a processing mode, and network tiers with their collective volume
models. It never names a model or a case.

Rules:
- a curve is a list of ``(threshold, efficiency)`` points with strictly
  decreasing thresholds; a request of size ``x`` takes the first point whose
  threshold is ``<= x``; a size below every threshold is an error, not a guess;
- efficiencies are in (0, 1];
- the profile's *revision* is the SHA-256 of its canonical content;
- a profile is found by name: ``<directory>/<name>.yaml`` when a directory is
  given, else the project's ``evidence/`` then the packaged profiles
  (:mod:`harness.locations`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import ClassVar, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from harness import locations
from harness.errors import EvidenceError
from harness.ir.base import Artifact, Frozen
from harness.ir.distributed import CollectiveOp


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


class ComputeEngine(Frozen):
    """Peak and operation-size efficiency of one engine for one datatype."""

    peak_flops_per_s: float = Field(gt=0, description="Peak operations per second.")
    operation_size_efficiency: Curve = Field(description="Efficiency by operations per task (threshold in operations).")


class MemoryTier(Frozen):
    """A memory tier with its transfer-size efficiency curve."""

    capacity_bytes: int = Field(gt=0, description="Capacity per processor, bytes.")
    bandwidth_bytes_per_s: float = Field(gt=0, description="Peak bandwidth.")
    transfer_size_efficiency: Curve = Field(description="Efficiency by bytes per access (threshold in bytes).")


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

    @field_validator("collectives")
    @classmethod
    def _all_ops(cls, value: dict[str, VolumeModel]) -> dict[str, VolumeModel]:
        missing = {"p2p", "all_reduce", "reduce_scatter", "all_gather"} - set(value)
        if missing:
            raise ValueError(f"missing volume model for {sorted(missing)}")
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

    def revision(self) -> str:
        return self.digest()


def profile_path(name: str, directory: Path | None = None) -> Path:
    """``<directory>/<name>.yaml``, or the profile ``name`` of the current locations."""
    if directory is not None:
        return Path(directory) / f"{name}.yaml"
    return locations.current().profile_path(name)


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
