"""The explicit lowering pipeline: import, then the passes of :data:`PIPELINE_SPEC`.

The pipeline is text (:func:`harness.passes.base.parse_pipeline`): passes by
name with their options, looked up in :data:`PASSES`. ``lower`` is pure and
keyed by the ModelIR digest: identical inputs reuse one lowering (the IRs are
frozen, so sharing them is safe), remembered by the current session
(:mod:`harness.session`: its ``lowerings`` and ``concrete`` memos, bounded). The
passes also memoize pure per-shape facts there; results never depend on it.
"""

from __future__ import annotations

import dataclasses

from harness import session
from harness.cases import EstimateInput
from harness.errors import UnsupportedFeatureError
from harness.ir import blocks
from harness.ir.base import Artifact
from harness.ir.concrete import ConcretePlanIR
from harness.ir.distributed import DistributedTaskIR
from harness.ir.model import ModelIR
from harness.ir.portable import PortablePlanIR
from harness.passes.base import ModulePass, PassCheckpoint, parse_pipeline
from harness.passes.concretize import TransformerConcretize
from harness.passes.distribute import TransformerDistribute
from harness.passes.importer import import_model
from harness.passes.plan_work import TransformerPlanWork

#: Every pass a pipeline spec may name.
PASSES: dict[str, type[ModulePass]] = {p.name: p for p in (TransformerDistribute, TransformerPlanWork,
                                                           TransformerConcretize)}
#: The lowering pipeline (ModelIR -> DistributedTaskIR -> PortablePlanIR).
PIPELINE_SPEC = "transformer-distribute,transformer-plan-work"
PIPELINE = parse_pipeline(PIPELINE_SPEC, PASSES)


def pipeline_pass(name: str) -> ModulePass:
    """The pass of :data:`PIPELINE` named ``name`` (with the options the spec gives it); exactly one."""
    found = [p for p in PIPELINE if p.name == name]
    if len(found) != 1:
        raise KeyError(f"{PIPELINE_SPEC!r} runs {len(found)} passes named {name!r} (expected one)")
    return found[0]


#: The two passes :func:`lower_distributed` and :func:`plan_work` run on their own (looked up at import).
_DISTRIBUTE = pipeline_pass(TransformerDistribute.name)
_PLAN_WORK = pipeline_pass(TransformerPlanWork.name)


@dataclasses.dataclass(frozen=True)
class Lowering:
    """Every IR of one input, and the passes between them (their checkpoints on demand)."""

    model: ModelIR
    distributed: DistributedTaskIR
    plan: PortablePlanIR
    #: each pass that ran with its input and output IR, in order (:attr:`checkpoints` is derived from them)
    steps: tuple[tuple[ModulePass, Artifact, Artifact], ...] = dataclasses.field(compare=False, repr=False)

    @classmethod
    def of(cls, passes: tuple[ModulePass, ...], irs: tuple[Artifact, ...]) -> "Lowering":
        """The lowering of a pipeline run: ``passes`` and every IR (the input ModelIR, then each pass's output)."""
        def one(kind: type[Artifact]) -> Artifact:
            found = [ir for ir in irs if isinstance(ir, kind)]
            if len(found) != 1:
                raise TypeError(f"the pipeline produced {len(found)} {kind.__name__} (expected one)")
            return found[0]

        return cls(one(ModelIR), one(DistributedTaskIR), one(PortablePlanIR), tuple(zip(passes, irs, irs[1:])))

    @property
    def checkpoints(self) -> tuple[PassCheckpoint, ...]:
        """One checkpoint per pass (its input and output digests): computed when asked, not by the lowering, so
        a caller that reports no digest (the batch) never writes the IRs' canonical text."""
        return tuple(pass_.checkpoint(ir, out) for pass_, ir, out in self.steps)

    def digests(self, concrete: bool = False) -> dict[str, str]:
        """IR digests; with ``concrete`` the ConcretePlanIR's too (its canonical text is the largest of all, so
        the estimate, which reports the first three, does not compute it)."""
        digests = {"model_ir": self.model.digest(), "distributed_task_ir": self.distributed.digest(),
                   "portable_plan_ir": self.plan.digest()}
        if concrete:
            digests["concrete_plan_ir"] = self.concrete().digest()
        return digests

    @property
    def concurrent(self) -> bool:
        """The layout asks for TP/DP overlap, offload or the expert overlap (``ExecutionLayout.concurrent``)."""
        return self.model.execution.concurrent

    def concrete(self) -> ConcretePlanIR:
        """``transformer-concretize`` of the plan with the layout's options, requires and ensures checked
        (memoized per lowering in the session; the checkpoint, which digests it, only on demand:
        :meth:`concretize`)."""
        memo = session.current().concrete
        cached = memo.get(self)
        if cached is not None:
            return cached
        concretize = TransformerConcretize.for_layout(self.model.execution)
        concretize.requires(self.plan)
        out = concretize.apply(self.plan)
        concretize.ensures(out)
        return memo.put(out, self)

    def concretize(self) -> tuple[ConcretePlanIR, PassCheckpoint]:
        """The ConcretePlanIR and its PassCheckpoint (input and output digests)."""
        out = self.concrete()
        return out, TransformerConcretize.for_layout(self.model.execution).checkpoint(self.plan, out)


def lower_model(model: ModelIR) -> Lowering:
    """The lowering of ``model`` (remembered by its digest in the session's ``lowerings``)."""
    memo = session.current().lowerings
    key = model.digest()
    cached = memo.get(key)
    if cached is not None:
        return cached
    return memo.put(key, Lowering.of(PIPELINE, lowered_irs(PIPELINE, model)))


def lowered_irs(passes: tuple[ModulePass, ...], ir: Artifact) -> tuple[Artifact, ...]:
    """Every IR from ``ir`` through ``passes`` (input first), each pass's requires and ensures checked."""
    irs = [ir]
    for pass_ in passes:
        ir = _checked(pass_, ir)
        irs.append(ir)
    return tuple(irs)


def run_pipeline(passes: tuple[ModulePass, ...], ir: Artifact) -> tuple[tuple[Artifact, ...],
                                                                        tuple[PassCheckpoint, ...]]:
    """Every IR from ``ir`` through ``passes`` (input first) and one checkpoint per pass."""
    irs = lowered_irs(passes, ir)
    return irs, tuple(pass_.checkpoint(a, b) for pass_, a, b in zip(passes, irs, irs[1:]))


def lower(data: EstimateInput, source: str = "<input>") -> Lowering:
    """Import, validate and lower one anonymous input: one plan, so a model priced stage by stage (dense and MoE
    blocks, MTP layers, some blocks recomputed: :func:`harness.ir.blocks.one_plan_problem`) is an UnsupportedFeatureError naming
    ``source`` (the estimate lowers each kind of its blocks on its own)."""
    model = import_model(data, source)
    problem = blocks.one_plan_problem(data.model, data.execution)
    if problem is not None:
        raise UnsupportedFeatureError(source, *problem)
    return lower_model(model)


def lower_distributed(data: EstimateInput, source: str = "<input>") -> tuple[ModelIR, DistributedTaskIR]:
    """The ModelIR and DistributedTaskIR of ``data``: the import and the first pass of :func:`lower`,
    requires and ensures checked, without the checkpoint (its IR digests) and without the lowering cache.
    For callers that lower many distinct inputs once each and read only the IRs (the execution search)."""
    model = import_model(data, source)
    return model, _checked(_DISTRIBUTE, model)


def plan_work(distributed: DistributedTaskIR) -> PortablePlanIR:
    """The second pass of :func:`lower` (requires and ensures checked, no checkpoint)."""
    return _checked(_PLAN_WORK, distributed)


def _checked(step: ModulePass, ir: Artifact) -> Artifact:
    step.requires(ir)
    out = step.apply(ir)
    step.ensures(out)
    return out
