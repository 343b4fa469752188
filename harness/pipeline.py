"""The explicit lowering pipeline: import, then the passes of :data:`PIPELINE_SPEC`.

The pipeline is text (:func:`harness.passes.base.parse_pipeline`): passes by
name with their options, looked up in :data:`PASSES`. ``lower`` is pure and
keyed by the ModelIR digest: identical inputs reuse one lowering (the IRs are
frozen, so sharing them is safe). The passes also memoize pure per-shape
facts; :func:`clear_caches` forgets all of it (to measure cold lowering;
results never depend on it).
"""

from __future__ import annotations

import dataclasses

from harness.cases import EstimateInput
from harness.ir import canonical
from harness.ir.base import Artifact, clear_interned
from harness.ir.concrete import ConcretePlanIR
from harness.ir.distributed import DistributedTaskIR
from harness.ir.model import ModelIR
from harness.ir.portable import PortablePlanIR
from harness.passes.base import ModulePass, PassCheckpoint, parse_pipeline
from harness.passes.concretize import TransformerConcretize
from harness.passes.distribute import TransformerDistribute
from harness.passes.importer import import_model
from harness.passes.plan_work import TransformerPlanWork, clear_memos

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
    """Every IR of one input and the checkpoints between them."""

    model: ModelIR
    distributed: DistributedTaskIR
    plan: PortablePlanIR
    checkpoints: tuple[PassCheckpoint, ...]

    @classmethod
    def of(cls, irs: tuple[Artifact, ...], checkpoints: tuple[PassCheckpoint, ...]) -> "Lowering":
        """The lowering of a pipeline run: its input ModelIR, each IR the passes produced, their checkpoints."""
        def one(kind: type[Artifact]) -> Artifact:
            found = [ir for ir in irs if isinstance(ir, kind)]
            if len(found) != 1:
                raise TypeError(f"the pipeline produced {len(found)} {kind.__name__} (expected one)")
            return found[0]

        return cls(one(ModelIR), one(DistributedTaskIR), one(PortablePlanIR), checkpoints)

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
        """The layout asks for TP/DP overlap or offload."""
        e = self.model.execution
        o = e.offload
        return e.tp_overlap != "none" or e.dp_overlap or o.weights or o.activations or o.optimizer

    def concrete(self) -> ConcretePlanIR:
        """``transformer-concretize`` of the plan with the layout's options, requires and ensures checked
        (memoized per lowering; the checkpoint, which digests it, only on demand: :meth:`concretize`)."""
        cached = _CONCRETE.get(id(self))
        if cached is not None and cached[0] is self:
            return cached[1]
        concretize = TransformerConcretize.for_layout(self.model.execution)
        concretize.requires(self.plan)
        out = concretize.apply(self.plan)
        concretize.ensures(out)
        if len(_CONCRETE) >= LOWERINGS_LIMIT:
            _CONCRETE.clear()
        _CONCRETE[id(self)] = (self, out)
        return out

    def concretize(self) -> tuple[ConcretePlanIR, PassCheckpoint]:
        """The ConcretePlanIR and its PassCheckpoint (input and output digests)."""
        out = self.concrete()
        return out, TransformerConcretize.for_layout(self.model.execution).checkpoint(self.plan, out)


#: Bound of the lowering memos (:data:`_CACHE`, :data:`_CONCRETE`): cleared when full.
LOWERINGS_LIMIT = 4096
_CONCRETE: dict[int, tuple[Lowering, ConcretePlanIR]] = {}


_CACHE: dict[str, Lowering] = {}


def lower_model(model: ModelIR) -> Lowering:
    key = model.digest()
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    lowering = Lowering.of(*run_pipeline(PIPELINE, model))
    if len(_CACHE) >= LOWERINGS_LIMIT:
        _CACHE.clear()
    _CACHE[key] = lowering
    return lowering


def run_pipeline(passes: tuple[ModulePass, ...], ir: Artifact) -> tuple[tuple[Artifact, ...],
                                                                        tuple[PassCheckpoint, ...]]:
    """Every IR from ``ir`` through ``passes`` (input first) and one checkpoint per pass."""
    irs, checkpoints = [ir], []
    for pass_ in passes:
        ir, checkpoint = pass_.run(ir)
        irs.append(ir)
        checkpoints.append(checkpoint)
    return tuple(irs), tuple(checkpoints)


def clear_caches() -> None:
    """Forget every memoized lowering: the ModelIR-keyed lowerings, the passes'
    memos, the interned IR values and their memoized canonical texts."""
    _CACHE.clear()
    _CONCRETE.clear()
    clear_memos()
    clear_interned()
    canonical.clear_memo()


def lower(data: EstimateInput, source: str = "<input>") -> Lowering:
    """Import, validate and lower one anonymous input."""
    return lower_model(import_model(data, source))


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
