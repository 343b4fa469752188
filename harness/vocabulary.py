"""The one definition of the harness's vocabularies.

Every list of cost views, curve families, timing components, memory figures
and statuses in the harness derives from this module: pydantic models are
generated from it (``harness.estimate.Components`` and ``MemoryBytes``),
mappings onto other tools' names are checked against it at import
(:meth:`Vocabulary.require`), and loops iterate over it. Adding a timing
component or a curve family is one entry here plus its rules (the code that
computes it, and its Calculon field in ``harness.oracles.calculon``); an
import-time check names every place that has not followed.

Rules:
- a vocabulary is an ordered tuple of names (it *is* a tuple, so it can be
  iterated, indexed, compared and used in ``Literal[...]``); each name has a
  one-line description, optionally a *kind*, and may be *concrete only*: a
  figure only the ConcretePlanIR path (TP/DP overlap, offload) produces, left
  out of the portable columns (:meth:`Vocabulary.portable`);
- the order is the reporting order (JSON fields, tables, plots);
- names are lower-case identifiers: they are JSON keys and field names.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Literal

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclasses.dataclass(frozen=True)
class Term:
    """One name of a vocabulary."""

    name: str
    description: str
    kind: str | None = None
    concrete_only: bool = False  # only TP/DP overlap or offload (the ConcretePlanIR path) gives it a value


class Vocabulary(tuple):
    """An ordered tuple of names, each with a description (and optionally a kind).

    ``Vocabulary("cost view", Term(...), ...)`` is equal to the tuple of its
    names; :attr:`terms` keeps the descriptions.
    """

    title: str
    terms: tuple[Term, ...]

    def __new__(cls, title: str, *terms: Term) -> "Vocabulary":
        names = [t.name for t in terms]
        bad = [n for n in names if not _NAME.match(n)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"{title}: names must be unique lower-case identifiers, got {names}")
        self = super().__new__(cls, names)
        self.title = title
        self.terms = terms
        return self

    def __reduce__(self):
        return (Vocabulary, (self.title, *self.terms))

    def description(self, name: str) -> str:
        return self._term(name).description

    def kind(self, name: str) -> str | None:
        return self._term(name).kind

    def portable(self) -> tuple[str, ...]:
        """The names every layout has (not :attr:`Term.concrete_only`), in vocabulary order."""
        return tuple(t.name for t in self.terms if not t.concrete_only)

    def of_kind(self, kind: str) -> tuple[str, ...]:
        """The names of one kind, in vocabulary order."""
        return tuple(t.name for t in self.terms if t.kind == kind)

    def literal(self) -> Any:
        """``Literal[name, ...]`` (for pydantic fields that take one of the names)."""
        return Literal[tuple(self)]

    def fields(self, annotation: Any) -> dict[str, tuple[Any, Any]]:
        """``{name: (annotation, Field(description=...))}`` for ``pydantic.create_model``."""
        from pydantic import Field

        return {t.name: (annotation, Field(description=t.description)) for t in self.terms}

    def require(self, names: Iterable[str], where: str, *, ordered: bool = False) -> None:
        """Raise TypeError naming ``where`` unless ``names`` are exactly this vocabulary's.

        Used at import by every module that maps the vocabulary onto something
        else (Calculon's field names, colours, passes), so that a new name
        cannot be forgotten there.
        """
        names = tuple(names)
        missing = [n for n in self if n not in names]
        extra = [n for n in names if n not in self]
        if missing or extra or len(set(names)) != len(names) or (ordered and names != tuple(self)):
            raise TypeError(f"{where}: must name exactly the {self.title}s of harness.vocabulary"
                            f"{' in order' if ordered else ''}: missing {missing}, unknown {extra}, got {list(names)}")

    def _term(self, name: str) -> Term:
        for term in self.terms:
            if term.name == name:
                return term
        raise KeyError(f"{name!r} is not a {self.title} (known: {', '.join(self)})")


# --- cost views -------------------------------------------------------------------------------------------------

VIEWS = Vocabulary(
    "cost view",
    Term("peak_only", "Peaks, latencies and collective volume models only; every efficiency curve at 1.0."),
    Term("system_evidence", "The same plus every evidence family of the profile: operation-size, transfer-size and "
                            "network efficiency curves, and the measured families it defines."),
)
PEAK_ONLY, SYSTEM_EVIDENCE = VIEWS

# --- evidence curve families ---------------------------------------------------------------------------------

# kind: "calculon" = the four families every profile has (Calculon's system evidence);
#       "measured" = optional families fitted to measured runs (harness.evidence.families); a profile
#       without one prices as if the family did not exist, and explain leaves it out.

CURVE_FAMILIES = Vocabulary(
    "curve family",
    Term("matrix", "Matrix-engine operation-size efficiency (operations per task).", "calculon"),
    Term("vector", "Vector-engine operation-size efficiency (operations per task).", "calculon"),
    Term("memory", "Memory tier 1 transfer-size efficiency (bytes per access).", "calculon"),
    Term("network", "Network bandwidth efficiency (per tier).", "calculon"),
    Term("launch", "Host issue time per operation (and per GEMM, per microbatch): an operation takes at least the "
                   "time to issue it.", "measured"),
    Term("output_layer", "The target's default vocabulary: the output layer and loss of a model that states none, "
                         "once per microbatch.", "measured"),
    Term("collective_curves", "Measured (nccl-tests) collective efficiency by message size and participants, per "
                              "tier.", "measured"),
    Term("hierarchical", "Groups larger than a tier's island: the island's collective plus one across islands on "
                         "the next tier.", "measured"),
    Term("partitioned_p2p", "Pipeline boundary transfers split over the tensor-parallel group: each rank sends 1/TP, "
                            "the receiving stage all-gathers it.", "measured"),
    Term("gradient_accumulation", "Weight gradients accumulated by an unfused in-place add for every microbatch "
                                  "after the first (read two gradients, write one, per weight).", "measured"),
    Term("grouped_gemm", "The local experts' grouped GEMM: each expert's GEMM of g operations at the matrix "
                         "efficiency at g times g / (g + half_size_operations).", "measured"),
)

# --- parallel dimensions ---------------------------------------------------------------------------------------
# The named dimensions of a layout's processor mesh (harness.ir.mesh holds each one's rules: the layout field of
# its degree, its network tier, what it splits); processors are the product of the degrees of the dimensions
# that are not folded. kind: "required" = every layout states its degree and tier; "optional" = a layout without
# it has degree 1 and keeps its digests (its fields are absent); "folded" = optional, and a re-partition of the
# same processors (Megatron-Core's MoE parallel folding: the expert layers lay TP x CP x DP out again as
# ETP x EP x expert-DP), so not a factor of the processors. A new dimension is one entry here plus its rules in
# harness.ir.mesh.

PARALLEL_DIMENSIONS = Vocabulary(
    "parallel dimension",
    Term("tensor", "Tensor parallelism: the weights of a block split over the group; activations exchanged by its "
                   "collectives.", "required"),
    Term("pipeline", "Pipeline parallelism: the blocks split into stages; boundary activations sent point to point.",
         "required"),
    Term("data", "Data parallelism: the global batch split over replicas; weight gradients reduced over the group.",
         "required"),
    Term("context", "Context parallelism: each sample's sequence split over the group (2 x CP chunks, causally "
                    "balanced); attention exchanges K/V in a ring (or all-to-all, Ulysses).", "optional"),
    Term("expert", "Expert parallelism: the routed experts of a MoE block split over the group (experts / EP each); "
                   "tokens dispatched to their experts and combined back by all-to-all. Folded over tensor x "
                   "context x data.", "folded"),
    Term("expert_tensor", "Expert tensor parallelism: each routed expert's matrices split over the group. Folded "
                          "over tensor x context x data.", "folded"),
)

# --- collectives ---------------------------------------------------------------------------------------------
# The communication operations a message may use (harness.ir.distributed.CollectiveOp; the profiles' volume models
# per network tier). kind: "required" = every profile tier has its volume model; "optional" = a profile may lack
# it (the pricer's documented fallback, harness.cost.views).

COLLECTIVES = Vocabulary(
    "collective",
    Term("all_reduce", "Every rank ends with the sum of every rank's buffer.", "required"),
    Term("reduce_scatter", "Every rank ends with its 1/P slice of the sum of every rank's buffer.", "required"),
    Term("all_gather", "Every rank ends with the concatenation of every rank's slice.", "required"),
    Term("p2p", "One rank sends its buffer to one other rank.", "required"),
    Term("all_to_all", "Every rank sends a distinct 1/P slice of its buffer to every rank (MoE token dispatch and "
                       "combine; each rank sends (P-1)/P of its buffer).", "optional"),
)

# --- timing components ---------------------------------------------------------------------------------------
# kind: "pipeline" = per-microbatch work the first stage is busy with while the pipeline runs;
#       "step" = once per iteration after the pipeline; "bubble" = the first stage's idle time.

COMPONENTS = Vocabulary(
    "timing component",
    Term("forward", "Forward compute.", "pipeline"),
    Term("backward", "Activation- and weight-gradient compute.", "pipeline"),
    Term("optimizer", "Optimizer step.", "step"),
    Term("recompute", "Recompute clones.", "pipeline"),
    Term("tensor_parallel", "Exposed TP collectives (with their local work).", "pipeline"),
    Term("pipeline_parallel", "Exposed pipeline p2p transfers.", "pipeline"),
    Term("data_parallel", "Exposed data-parallel gradient sync.", "step"),
    Term("recommunication", "Exposed recommunication (all-gather redo, repeated collectives).", "pipeline"),
    Term("pipeline_bubble", "1F1B / interleaved pipeline bubble.", "bubble"),
    Term("forward_offload", "Exposed memory tier-2 (offload) transfer time of the forward pass.", "pipeline",
         concrete_only=True),
    Term("backward_offload", "Exposed memory tier-2 (offload) transfer time of the backward pass.", "pipeline",
         concrete_only=True),
)
#: The components of a layout without TP/DP overlap or offload (the goldens' and the contract's columns).
PORTABLE_COMPONENTS = COMPONENTS.portable()

# --- memory figures -----------------------------------------------------------------------------------------

MEMORY_FIGURES = Vocabulary(
    "memory figure",
    Term("weight", "Weights."),
    Term("activation", "Activations (working and stored)."),
    Term("activation_checkpoint", "Activation checkpoints (full recompute)."),
    Term("weight_grad", "Weight gradients."),
    Term("activation_grad", "Activation gradients."),
    Term("optimizer", "Optimizer state."),
    Term("tier1_total", "Total required in memory tier 1 (an offloaded figure: its staging copies)."),
    Term("tier2_total", "Total required in memory tier 2 (offloaded figures).", concrete_only=True),
)
#: The memory figures of a layout without offload (the goldens' columns).
TIER1_MEMORY_FIGURES = MEMORY_FIGURES.portable()

# --- statuses ---------------------------------------------------------------------------------------------------

ESTIMATE_STATUSES = Vocabulary(
    "estimate status",
    Term("ok", "The configuration runs on the profile's system."),
    Term("infeasible", "It cannot run there (network tier too small or not filled, offload with fewer than 3 "
                       "blocks per processor, memory tier 1 or 2 over capacity); the figures are still given."),
)
BATCH_STATUSES = Vocabulary(
    "batch status",
    *ESTIMATE_STATUSES.terms,
    Term("rejected", "A feature the estimate cannot represent (none since the ConcretePlanIR carries TP/DP "
                     "overlap and offload); no figures."),
    Term("invalid", "A bad line (JSON, field, layout, profile); its reason names the line and field; no figures."),
)
SEARCH_STATUSES = Vocabulary(
    "search status",
    *ESTIMATE_STATUSES.terms,
    Term("invalid", "A layout of the space the estimate refuses (e.g. TP does not divide the feedforward width); "
                    "its reason names the field; no figures."),
)
