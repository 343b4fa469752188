"""Evidence families fitted to measured runs (optional parts of a profile).

A profile without any of them prices exactly as before (and keeps its
revision: an absent family is not written into the canonical content). Each
family is target-wide: it describes the processor, its software stack or its
network, never a model or a case. Names are in ``harness.vocabulary``
(``MEASURED_FAMILIES``); the pricing rules are in :mod:`harness.cost.views`,
:mod:`harness.cost.output_layer` and :mod:`harness.cost.accumulation`.

Rules:

- ``SaturatingCurve``: ``efficiency(x) = max_efficiency * x / (x + half_size)``,
  smooth, monotone, saturating. Equivalently, a request of size ``x`` at
  ``peak`` takes ``(x + half_size) / (peak * max_efficiency)``: a fixed cost
  (``half_size`` worth of work: tails, wave quantization, launch latency on
  the device) plus the asymptotic rate. ``half_size = 0`` is a flat curve.
- ``CollectiveCurve``: measured (nccl-tests) efficiency of one collective for
  one participant count by message size: interpolated linearly in
  ``log(size)`` between points; below the smallest point the transfer takes
  the smallest point's time (latency-bound: efficiency proportional to the
  size); above the largest point, the largest point's efficiency.
- ``LaunchOverhead``: every operation (a task's non-empty pass) is issued by
  the host; the device cannot run it before it is issued, so it takes at
  least its issue time (``max(device time, issue time)``, per operation: a
  queue that the host keeps full hides the issue time). The issue time is
  ``issue_s_per_operation``; a matrix-engine operation (a GEMM) takes
  ``issue_s_per_matrix_operation`` instead when it is given: the training
  software issues its GEMMs through its own layers (Megatron's
  tensor-parallel linear layers are Python autograd functions) and its
  pointwise operations as single kernels, so the two cost the host
  differently. Absent, every operation takes ``issue_s_per_operation`` (and
  the profile's revision is what it was without the field). With
  ``issue_s_per_microbatch``, each training microbatch also costs the host
  that time outside its operations (loading and broadcasting the batch, which
  synchronizes the host with the device, and the training engine's
  bookkeeping): once per microbatch, in the ``forward`` component.
- ``GroupedGemm``: the local experts' grouped GEMM (a MoE block's experts, each
  on its own tokens) runs each expert's GEMM of ``g`` operations at the matrix
  engine's efficiency at ``g`` times ``g / (g + half_size_operations)``: a
  saturating curve in one expert's GEMM size, like the GEMM curve's, for the
  fixed cost a grouped kernel pays per expert (its tiles over few tokens, the
  per-expert offsets and the uneven tail) on top of one GEMM of that size.
  It multiplies, so it applies to every datatype's engine alike; a GEMM that
  is not grouped is priced as before.
- ``OutputLayer``: the target's default vocabulary: a model that does not
  state one gets the output (logit) layer and loss of that vocabulary, once
  per microbatch (the tasks and their rules: :mod:`harness.passes.output_layer`,
  their pricing: :mod:`harness.cost.output_layer`).
- ``HierarchicalCollectives``: a collective whose group is larger than its
  tier's island (``size_processors``) runs hierarchically: the collective
  inside one island on that tier, plus the collective across islands on the
  next tier, carrying ``1/island`` of the message per processor.
- ``PartitionedP2P``: with tensor parallelism, the pipeline boundary
  activation (and its gradient) is the same on every TP rank; the training
  software sends each rank's ``1/TP`` slice to its peer and the receiving
  stage all-gathers the slices over its TP group (DeepSpeed's pipeline engine
  partitions its send buffers over the model-parallel group). A transfer
  costs the p2p of ``bytes / TP`` plus an all-gather of ``bytes`` over the TP
  group on the tensor tier.
- ``GradientAccumulation``: the training software accumulates the weight
  gradients of a multi-microbatch iteration without a fused kernel (Megatron-
  DeepSpeed comments out its fused gradient accumulation, so autograd adds
  each new weight gradient in place into ``.grad``): for every microbatch
  after the first, each weight costs one memory-bound vector operation that
  reads two weight-gradient tensors and writes one (the rules:
  :mod:`harness.cost.accumulation`). Counted from the code, nothing fitted.

A profile may instead be *derived* (``DerivedProvenance``, written by ``harness
evidence derive``): another profile with whole measured families removed and
nothing else changed but its name, description and provenance, for a software
stack that does not do what those families price. Its ``fit`` block, if any, is
the source profile's unchanged: it describes how the source's parameters were
fitted, with the removed families part of that fit's fixed structure; the
derived profile was fitted on nothing.
"""


import math
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from harness.errors import EvidenceError
from harness.ir.base import Frozen

#: The smallest efficiency any family may hold (as :data:`harness.evidence.profile.MIN_EFFICIENCY`).
MIN_EFFICIENCY = 1e-4
#: The largest request size (operations or bytes) a curve may name: 1e18 is an exa-operation GEMM or an
#: exabyte transfer, far past any kernel (the shipped curves stop at 1.3e11). Sizes turn into time (a
#: saturating curve's fixed cost ``half_size / peak``, a collective curve's smallest point): 1e300 let a
#: profile give a finite but meaningless 6e288 s iteration.
MAX_SIZE = 1e18


class _Strict(Frozen):
    """Profile sections: strict types, finite numbers (as the rest of a profile)."""

    model_config = ConfigDict(strict=True)


class SaturatingCurve(_Strict):
    """A smooth, monotone, saturating efficiency curve (see the module rules)."""

    max_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, allow_inf_nan=False,
                                  description="Efficiency approached by large requests.")
    half_size: float = Field(ge=0, le=MAX_SIZE, allow_inf_nan=False,
                             description="Request size (operations or bytes) at half the maximum efficiency.")

    def efficiency(self, size: float, source: str, field: str) -> float:
        if self.half_size == 0:
            return self.max_efficiency
        if not size > 0:
            raise EvidenceError(source, field, f"a saturating curve has no efficiency at size {size}")
        return self.at(size)

    def efficiencies(self, sizes):
        """:meth:`efficiency` at every size of a numpy array (the fit's design matrix); the value at size 0
        is not a number (never priced)."""
        if self.half_size == 0:
            return self.max_efficiency
        import numpy as np  # the fit's (numpy is loaded: the sizes are an array); an estimate needs none

        with np.errstate(divide="ignore", invalid="ignore"):
            return self.at(sizes)

    def at(self, size):
        """``max_efficiency x size / (size + half_size)``: the one form, for a float or a numpy array."""
        return self.max_efficiency * size / (size + self.half_size)


class GroupedGemm(_Strict):
    """The grouped GEMM's own efficiency by one expert's GEMM size (family ``grouped_gemm``, module rules)."""

    half_size_operations: float = Field(gt=0, le=MAX_SIZE, allow_inf_nan=False,
                                        description="Operations of one expert's GEMM at which a grouped GEMM runs at "
                                                    "half the matrix engine's efficiency at that size.")

    def factor(self, gemm_operations: float) -> float:
        """``g / (g + half_size_operations)`` of one expert's GEMM of ``g`` operations (> 0)."""
        return gemm_operations / (gemm_operations + self.half_size_operations)


class SizePoint(_Strict):
    """One measured point of a collective curve."""

    size_bytes: float = Field(gt=0, le=MAX_SIZE, allow_inf_nan=False,
                              description="Message size (bytes per processor, as nccl-tests 'size').")
    efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, allow_inf_nan=False, description="Fraction of the tier bandwidth that reproduces the measured "
                                                      "time with the tier's latency and volume model.")


class CollectiveCurve(_Strict):
    """Measured efficiency of one collective for one participant count."""

    participants: int = Field(ge=2, le=2**30, description="Processors taking part in the measurement.")
    points: tuple[SizePoint, ...] = Field(min_length=1, max_length=4096, strict=False,
                                          description="Points in strictly increasing size.")
    source: str = Field(min_length=1, max_length=10_000, description="Where the measurement comes from.")

    @field_validator("points")
    @classmethod
    def _increasing(cls, points: tuple[SizePoint, ...]) -> tuple[SizePoint, ...]:
        for a, b in zip(points, points[1:]):
            if not a.size_bytes < b.size_bytes:
                raise ValueError("sizes must strictly increase")
        return points

    def efficiency(self, size_bytes: float) -> float:
        points = self.points
        first, last = points[0], points[-1]
        if size_bytes <= first.size_bytes:
            return first.efficiency * size_bytes / first.size_bytes
        if size_bytes >= last.size_bytes:
            return last.efficiency
        lo, hi = 0, len(points) - 1
        while hi - lo > 1:  # bisection: points[lo].size < size < points[hi].size
            mid = (lo + hi) // 2
            if points[mid].size_bytes <= size_bytes:
                lo = mid
            else:
                hi = mid
        a, b = points[lo], points[hi]
        t = math.log(size_bytes / a.size_bytes) / math.log(b.size_bytes / a.size_bytes)
        return a.efficiency + t * (b.efficiency - a.efficiency)


def curve_for(curves: tuple[CollectiveCurve, ...], participants: int) -> CollectiveCurve:
    """The curve measured with the most participants not above ``participants`` (the fewest if none is)."""
    best = None
    for curve in curves:
        if curve.participants <= participants and (best is None or curve.participants > best.participants):
            best = curve
    return best or min(curves, key=lambda c: c.participants)


class LaunchOverhead(_Strict):
    """Host issue time per operation (see the module rules)."""

    issue_s_per_operation: float = Field(gt=0, le=1e-3, allow_inf_nan=False,
                                         description="Host time to issue one operation, seconds.")
    issue_s_per_matrix_operation: float | None = Field(
        None, gt=0, le=1e-3, allow_inf_nan=False,
        description="Host time to issue one matrix-engine operation (a GEMM), seconds; absent: "
                    "issue_s_per_operation.")
    issue_s_per_microbatch: float | None = Field(
        None, gt=0, le=1.0, allow_inf_nan=False,
        description="Host time per training microbatch outside its operations (loading the batch, the training "
                    "engine's bookkeeping), seconds, once per microbatch; absent: none.")

    def issue_s(self, engine: str) -> float:
        """The issue time of an operation on ``engine`` (see the module rules)."""
        if engine == "matrix" and self.issue_s_per_matrix_operation is not None:
            return self.issue_s_per_matrix_operation
        return self.issue_s_per_operation


class OutputLayer(_Strict):
    """The target's default vocabulary, for models that state none: the output layer and loss the plan then
    lacks are priced as the tasks of that vocabulary (:mod:`harness.cost.output_layer`)."""

    vocabulary: int = Field(gt=0, le=2**24, description="Token vocabulary of the target's training software "
                                                        "(entries, before padding), for models without one.")


class HierarchicalCollectives(_Strict):
    """Groups larger than their tier's island run hierarchically (see the module rules)."""

    kind: Literal["island_then_next_tier"] = Field(description="The one rule: the collective inside an island on "
                                                               "its tier, then across islands on the next tier.")


class PartitionedP2P(_Strict):
    """Pipeline boundary transfers partitioned over the TP group (see the module rules)."""

    kind: Literal["slice_then_all_gather"] = Field(description="The one rule: p2p of 1/TP of the boundary, then an "
                                                               "all-gather over the TP group.")


class GradientAccumulation(_Strict):
    """Weight gradients accumulated by an unfused in-place add per microbatch after the first (see the module
    rules)."""

    kind: Literal["unfused_in_place_add"] = Field(description="The one rule: per weight and microbatch after the "
                                                              "first, read the stored and the new gradient, write "
                                                              "their sum (harness.cost.accumulation).")


class FittedParameter(_Strict):
    """One parameter of a fitted revision, with its bounds and uncertainty."""

    name: str = Field(description="Parameter name.")
    path: str = Field(description="Where it sits in the profile (dotted path).")
    value: float = Field(allow_inf_nan=False, description="Fitted value (rounded to 5 significant digits).")
    lower: float = Field(allow_inf_nan=False, description="Lower bound of the fit.")
    upper: float = Field(allow_inf_nan=False, description="Upper bound of the fit.")
    standard_error: float | None = Field(None, allow_inf_nan=False, description="Standard error from the fit's Jacobian (2 significant digits), "
                                                     "None where the parameter sits on a bound.")
    unit: str = Field(description="Unit of the value.")
    meaning: str = Field(description="What the parameter is, physically.")


class CorpusDigest(_Strict):
    """One measurement corpus a revision was fitted on (identified by its content, not where it was read)."""

    name: str = Field(description="The corpus's name (its header).")
    file: str = Field(description="The corpus file's name (without its directory).")
    sha256: str = Field(description="SHA-256 of the corpus file's bytes.")
    records: int = Field(ge=0, description="Records of the file the fit used.")


class DerivedProvenance(_Strict):
    """A profile derived from another by removing whole measured families (see the module rules)."""

    source_profile: str = Field(description="Name of the profile it was derived from.")
    source_revision: str = Field(pattern=r"[0-9a-f]{64}", description="Revision (SHA-256) of that profile.")
    without: tuple[str, ...] = Field(min_length=1, strict=False,
                                     description="The measured families removed (harness.vocabulary.CURVE_FAMILIES).")
    reason: str = Field(min_length=1, max_length=2000,
                        description="Why: the software stack this profile describes, and what it does differently.")


class FitProvenance(_Strict):
    """How a revision was fitted: base, corpora, objective, parameters."""

    base_profile: str = Field(description="Name of the base profile.")
    base_revision: str = Field(description="Revision (SHA-256) of the base profile.")
    corpora: tuple[CorpusDigest, ...] = Field(strict=False, description="Measurement corpora, in the order given.")
    objective: str = Field(description="What the fit minimizes.")
    parameters: tuple[FittedParameter, ...] = Field(strict=False, description="Fitted parameters.")
    fixed: tuple[str, ...] = Field(strict=False, description="Numbers set from measurements or documentation, "
                                                             "not fitted.")
