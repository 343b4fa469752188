"""A measured run (``blueprinting.measured-runs.v0`` row) as the case that describes it: one table-driven mapping.

:data:`ROW_FIELDS` names every field of a row (:mod:`harness.measurements.runs_schema`) with the rule
that turns it into case fields, in a fixed order; :func:`run_case` applies them all. A test checks that
the table covers exactly the schema's fields: nothing of a row is silently dropped.

Rules (each one an entry of the table):

- **Plain facts** (:func:`to`): the row value is the case field (``model.hidden -> model.hidden``).
- **Features** (:func:`feature`): the value that is today's behaviour (``mlp: gelu``, ``norm: layernorm``,
  ``cp: 1``, ...) sets nothing, so the case and its digests are those of today; any other value sets the
  agreed case field (docs: /work/BRIEF.md's agreed names, docs/modern-runs.md) when the case format has
  it, else the row is ``unsupported`` naming the row field. Supporting a new case field therefore needs
  no change here when its name is the agreed one; a new row value needs one entry of its translation.
- **Refusals**: a value no case field can hold (a partial rotary embedding without the fused kernel, recompute
  of whole submodules) makes the row ``unsupported`` naming the field, never approximated.
- **Display only**: ``id``, ``model.name``, ``source``, ``software``, ``notes``, ``extra`` (but the recipe facts
  below),
  ``consistency``, ``measured`` (compared with, after estimating), ``batch.gradient_accumulation`` (checked
  by the schema) and ``model.truncated_from`` (the run ran ``layers`` blocks) never
  reach the case.
- **The stack** (:data:`STACKS`, chosen by the repository of ``source.where``): what every row of that
  software runs without the row saying so (the fused attention kernel; the data-parallel gradient
  reduction overlapped with the backward pass), each with the source line that says so; and whether the
  stack's mixture-of-experts rows may be fitted (``stack.moe_execution``: Megatron-Bridge's are estimated but
  never fitted, :attr:`RunCase.unfitted`: its MoE execution changes by release in ways the case does not
  state).
- **The recipe** (:data:`RECIPES`, chosen by the file ``extra.model_cite`` names): the attention dropout,
  which rows do not state; 0 sets ``model.attention_dropout: 0`` (no dropout primitive), a nonzero
  probability is today's behaviour; a recipe not in the table refuses the row (``model.attention_dropout``).
  Whether it runs Transformer Engine's fused rotary kernel: a partial rotary embedding
  (``rope (50% of head dim)``) is then ``position: rope`` (the kernel copies the unrotated part, so it moves
  the whole of Q and K; only its arithmetic is on the rotated part, see :data:`FUSED_PARTIAL_ROPE`).
- **Recipe facts of** ``extra``: ``extra.moe_a2a_overlap: true`` on a MoE row is ``execution.expert_overlap``
  (:data:`EXPERT_OVERLAP_FACT`; where it is not modelled yet with the row's layout, the row is priced without
  it, an upper bound, and says so); every other key of ``extra`` is display only.
- **Placement** (:func:`network_tiers`): Megatron-Core's rank order puts TP fastest, then CP, then DP,
  then PP (``tp-cp-ep-dp-pp``); a group whose span (the ranks from its first to its last member) fits
  in one NVLink domain (``system.gpus_per_nvlink_domain``) is on tier 0, else on tier 1. The TP group
  spans TP ranks, the CP group TP x CP, the DP group TP x CP x DP, the PP group all GPUs.

Model names never reach the case: the result is an :class:`~harness.cases.EstimateInput` (shape,
layout, profile name) and nothing else.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from harness.cases import EstimateInput, case_has_field, validate_input
from harness.errors import InputError, UnsupportedFeatureError
from harness.measurements.runs_schema import MeasuredRun

#: Row ``precision`` -> case ``execution.datatype`` for the recipes whose every work runs in one datatype.
PLAIN_DATATYPES = {"bf16": "bfloat16", "fp16": "float16"}
#: Row ``model.position_embedding`` -> case ``model.position``.
POSITIONS = {"learned_absolute": "learned", "rope": "rope"}
#: Row ``recompute.granularity`` -> case ``execution.recompute`` (Megatron's selective = core attention).
RECOMPUTE = {"none": "none", "selective": "attn_only", "full": "full"}


#: How :mod:`harness.ir.checks` words a layout rule that refuses a valid layout it does not price yet (CP with
#: flash attention, TP overlap with an fp8 recipe): such a row is ``unsupported``, not ``invalid`` (a test
#: checks the wording against the real rule).
NOT_MODELLED = "not modelled yet"


@dataclasses.dataclass(frozen=True)
class Stack:
    """What a software stack runs for every row of its source (facts of the software, not of the row)."""

    attention_kernel: str
    dp_overlap: bool
    citation: str
    #: Why the stack's mixture-of-experts rows are estimated but never fitted (None: they are fitted): its MoE
    #: execution depends on facts of the release that the case does not state, so the same case measures
    #: differently from release to release; the estimate prices the case, a fit would learn the release.
    moe_unfitted: str | None = None
    #: The stack overlaps the data-parallel sync only with the distributed optimizer (NeMo 2.0's
    #: MegatronCommOverlapCallback returns without it): a row without one runs its sync exposed.
    dp_overlap_needs_distributed_optimizer: bool = False
    #: Megatron-Core's ``recompute_method`` the stack sets with ``recompute_num_layers`` (the row's
    #: ``recompute.layers``): ``block`` (the first N layers of each chunk recomputed: ``execution.recompute_blocks``);
    #: None: not known, a row stating layers is refused (``uniform`` with N recomputes every layer).
    recompute_layers_method: str | None = None


STACKS = {
    "NVIDIA/dgxc-benchmarking": Stack("flash", True, (
        "NeMo 24.05/24.09 with Transformer Engine: fused (flash) attention; dgxc-benchmarking llama3.1_8b.yaml "
        "etc.: optim distributed_fused_adam with overlap_grad_sync true")),
    "MooreThreads/SimuMax": Stack("flash", False, (
        "SimuMax simu_tools/megatron_scripts/scripts/run_pretrain_llama3.sh: --use-flash-attn, "
        "--use-distributed-optimizer without --overlap-grad-reduce"),
        # its launcher (run_megatron_perf_real_pipeline.py) passes --recompute-method block
        recompute_layers_method="block"),
    "NVIDIA-NeMo/Megatron-Bridge": Stack("flash", True, (
        "Megatron-Bridge performance recipes: Transformer Engine fused attention; CommOverlapConfig enables "
        "the data-parallel gradient overlap with the distributed optimizer when DP > 1"),
        moe_unfitted=(
            "its MoE execution changes by release in ways the case does not state (the token dispatcher backend: "
            "alltoall, DeepEP or HybridEP; dropless dispatch with host-synchronised token counts or token dropping "
            "padded to capacity; the CUDA-graph scope; fp8 attention; the all-to-all overlap is stated only where "
            "extra.moe_a2a_overlap says so): the "
            "same Qwen3-30B-A3B layout measures 14.5 s (25.09) and 28.2 s (25.11) on 8 B200 at micro batch 1, "
            "12.5 s and 24.9 s on 16 H100, where the case is the same (docs/modern-evidence.md)"),
        # scripts/performance/utils/overrides.py set_recompute_overrides: recompute_num_layers sets method block
        recompute_layers_method="block"),
    # no shared row: the stack of NeMo's own performance tables, read in its code
    "NVIDIA/NeMo": Stack("flash", True, (
        "NeMo 2.0 (NVIDIA/NeMo@03ec896 nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py "
        "MegatronCommOverlapCallback: overlap_grad_reduce and overlap_param_gather when DP > 1, only with the "
        "distributed optimizer; Megatron-Core GPT with Transformer Engine's fused attention)"),
        dp_overlap_needs_distributed_optimizer=True,
        # scripts/performance/helpers.py set_recompute_overrides: recompute_num_layers sets method block
        recompute_layers_method="block"),
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Facts of the model recipe a row ran (``extra.model_cite``'s file) that the row schema does not hold."""

    attention_dropout: float
    citation: str
    #: The recipe applies Transformer Engine's fused rotary kernel (``apply_rope_fusion``): for a partial rotary
    #: embedding it rotates the first part of each head and copies the rest (TE fused_rope.cu, "copy the rest"),
    #: so it reads and writes the whole of Q and K, as a full rotary embedding does.
    fused_rope: bool = False


#: Model recipes by the file ``extra.model_cite`` names first (after ``repo@commit``), each fact read in it (the
#: commit the rows cite). A recipe absent here leaves the fact unknown: the row is refused
#: (``model.attention_dropout``), never given a guessed value. Every recipe file the shared rows cite is here.
RECIPES = {
    "nemo_megatron/gpt3_175b_hydra.yaml": Recipe(0.1, "dgxc-benchmarking gpt3_175b_hydra.yaml: hidden/attention "
                                                      "dropout 0.1 (the row's extra.model_cite)"),
    "grok1/grok1_314b.yaml": Recipe(0.0, "dgxc-benchmarking@35a9aec grok1/grok1_314b.yaml: attention_dropout 0.0"),
    "nemotron/nemotron4-15b-synth.yaml": Recipe(0.0, "dgxc-benchmarking@35a9aec nemotron/nemotron4-15b-synth.yaml: "
                                                     "attention_dropout 0.0 (line 83); rotary_percentage 0.5, "
                                                     "apply_rope_fusion true (lines 102-103)", fused_rope=True),
    "llama3.1/llama3.1_8b.yaml": Recipe(0.0, "dgxc-benchmarking@35a9aec llama3.1/llama3.1_8b.yaml: attention_dropout "
                                             "0.0 (line 66), apply_rope_fusion true (line 85)", fused_rope=True),
    "llama3.1/llama3.1_70b.yaml": Recipe(0.0, "dgxc-benchmarking@35a9aec llama3.1/llama3.1_70b.yaml: attention_dropout "
                                              "0.0 (line 66), apply_rope_fusion true (line 85)", fused_rope=True),
    "simu_tools/megatron_scripts/scripts/run_pretrain_llama3.sh": Recipe(0.0, "SimuMax run_pretrain_llama3.sh: "
                                                                              "--attention-dropout 0.0"),
    "run_pretrain_llama3.sh": Recipe(0.0, "SimuMax run_pretrain_llama3.sh: --attention-dropout 0.0"),
    "src/megatron/bridge/models/llama/llama_provider.py": Recipe(0.0, "Megatron-Bridge llama_provider.py "
                                                                      "Llama3ModelProvider: attention_dropout 0.0"),
    "src/megatron/bridge/models/qwen/qwen_provider.py": Recipe(0.0, "Megatron-Bridge qwen_provider.py "
                                                                    "Qwen3MoEModelProvider: attention_dropout 0.0 (and "
                                                                    "every other provider of the file: Qwen2, Qwen3, "
                                                                    "Qwen3-MoE, Qwen3-Next, at 07d0d14)"),
    # recipe files no shared row cites, read in the stack's own code for the rows of other models (facts of the
    # recipe, never of a row)
    "src/megatron/bridge/models/deepseek/deepseek_provider.py": Recipe(0.0, (
        "Megatron-Bridge@066adea deepseek_provider.py DeepSeekModelProvider, the base of DeepSeek-V2, V2-Lite, V3 "
        "and Moonlight: attention_dropout 0.0, apply_rope_fusion False")),
    "nemo/collections/llm/gpt/model/llama.py": Recipe(0.0, (
        "NeMo@008df61 llama.py LlamaConfig (the base of every Llama 2, 3, 3.1 and 3.2 config) and Llama3Config: "
        "attention_dropout 0.0, apply_rope_fusion True"), fused_rope=True),
    "nemotron/nemotron4-340b-synth.yaml": Recipe(0.0, (
        "dgxc-benchmarking@8f5cbb3 nemotron/nemotron4-340b-synth.yaml: attention_dropout 0.0, rotary_percentage "
        "0.5, apply_rope_fusion true"), fused_rope=True),
    # dgxc-benchmarking's Llama 3.1 recipes are the NeMo Framework Launcher's training configs (dgxc's 70B file
    # states what the launcher's llama3_1_70b.yaml states: attention_dropout 0.0, apply_rope_fusion true);
    # dgxc's 405B file is not in the index, the launcher's is
    "llama3.1/llama3.1_405b.yaml": Recipe(0.0, (
        "NeMo-Framework-Launcher@072ecc4 launcher_scripts/conf/training/llama/llama3_1_405b.yaml (the config "
        "dgxc-benchmarking's llama3.1 recipes copy): attention_dropout 0.0, apply_rope_fusion true"), fused_rope=True),
    "simu_tools/megatron_scripts/scripts/run_pretrain_deepseekv2.sh": Recipe(0.0, "SimuMax@4dcaae5 "
                                                                                  "run_pretrain_deepseekv2.sh: "
                                                                                  "--attention-dropout 0.0 (line 181)"),
    "run_pretrain_deepseekv2.sh": Recipe(0.0, "SimuMax@4dcaae5 run_pretrain_deepseekv2.sh: --attention-dropout 0.0 "
                                              "(line 181)"),
}

#: The recipe fact of ``extra`` (the facts found beside the table) that a MoE row's recipe overlaps its expert
#: all-to-alls with compute (Megatron-Bridge's ``moe_a2a_overlap``: overlap_moe_expert_parallel_comm with
#: delay_wgrad_compute): ``true`` sets ``execution.expert_overlap``; where the case's rules say it is not modelled
#: yet with the row's layout (full recomputation, TP overlap, CP, offload), the row is priced with its
#: all-to-alls exposed, an upper bound, and said so (never fitted, :attr:`RunCase.unfitted`; the reason names the
#: first such rule); a layout the overlap is invalid for (EP 1, the allgather dispatcher, PP > 1 without virtual
#: stages, which Megatron-Core refuses) makes the row invalid. Absent or anything else sets nothing.
EXPERT_OVERLAP_FACT = "moe_a2a_overlap"

#: Row ``model.position_embedding`` values of a partial rotary embedding that the case prices as ``rope``
#: where the recipe runs the fused kernel (:attr:`Recipe.fused_rope`): its memory traffic is the whole of Q and
#: K. The kernel's arithmetic is on the rotated part only; the case counts it on every element (3 vector
#: operations per element of Q and K, which a memory-bound kernel hides under a roofline profile: the rotation
#: reads and writes 4 bytes per element in bf16).
FUSED_PARTIAL_ROPE = frozenset({"rope (50% of head dim)"})
#: Row ``model.position_embedding`` of a latent-attention row: the rotary parts of its queries and shared key,
#: ``qk_pos_emb_head_dim`` wide (``model.mla.qk_rope_head_dim``), which the latent-attention core rotates.
MLA_ROPE = re.compile(r"rope \(MLA decoupled rope dim (\d+)\)")


def source_repository(run: MeasuredRun) -> str:
    """The repository ``source.where`` names (before its ``@commit``): the key of the row's :data:`STACKS` entry."""
    return run.source.where.split("@")[0]


def recipe_file(run: MeasuredRun) -> str | None:
    """The file ``extra.model_cite`` names first (the word after ``repo@commit``), if any."""
    cite = run.extra.get("model_cite")
    words = cite.split() if isinstance(cite, str) else []
    return words[1].rstrip(":;,") if len(words) > 1 else None


class Draft:
    """The case being built from one row: its fields, where each came from, and what cannot be priced."""

    def __init__(self, run: MeasuredRun) -> None:
        self.run = run
        self.case: dict[str, Any] = {"model": {}, "execution": {"network_tiers": {}}}
        self.origin: dict[str, str] = {}  # case path -> row field
        self.features: set[str] = set()  # case paths set by a feature (a value the case format may not hold yet)
        self.unsupported: list[tuple[str, str]] = []  # (row field, why)
        self.unfitted: list[tuple[str, str]] = []  # (row field, why): estimated, never a fit's record

    def set(self, case_path: str, value: Any, row_field: str) -> None:
        section, *rest = case_path.split(".")
        target = self.case[section]
        for key in rest[:-1]:
            target = target.setdefault(key, {})
        target[rest[-1]] = value
        self.origin[case_path] = row_field

    def row_field(self, case_path: str) -> str:
        """The row field a case path (or an element of it, ``execution.recompute_modules.0``) came from; the case
        path itself when none did."""
        parts = case_path.split(".")
        for end in range(len(parts), 0, -1):
            found = self.origin.get(".".join(parts[:end]))
            if found is not None:
                return found
        return case_path

    def refuse(self, row_field: str, why: str) -> None:
        self.unsupported.append((row_field, why))

    def leave_out_of_fit(self, row_field: str, why: str) -> None:
        self.unfitted.append((row_field, why))


def value_of(run: MeasuredRun, row_field: str) -> Any:
    value: Any = run
    for key in row_field.split("."):
        value = getattr(value, key)
    return value


Rule = Callable[[Draft, str, Any], None]


def to(case_path: str, translate: Callable[[Any], Any] = lambda v: v) -> Rule:
    """A plain fact: the row value (translated) is the case field."""
    def rule(draft: Draft, row_field: str, value: Any) -> None:
        draft.set(case_path, translate(value), row_field)
    return rule


def feature(case_path: str, today: Any, values: dict[Any, Any] | None = None) -> Rule:
    """A feature: ``today`` (today's behaviour) sets nothing; another value sets ``case_path`` when the case
    format has it (translated by ``values``, where given: a value outside it is refused), else refuses."""
    def rule(draft: Draft, row_field: str, value: Any) -> None:
        if value == today:
            return
        if values is not None and value not in values:
            draft.refuse(row_field, f"{value!r} has no case equivalent (known: {', '.join(map(repr, values))})")
        elif not case_has_field(case_path):
            draft.refuse(row_field, f"{_shown(value)} needs case field {case_path}, which the harness does not "
                                    f"have yet")
        else:
            draft.set(case_path, values[value] if values is not None else _plain(value), row_field)
            draft.features.add(case_path)
    return rule


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value


def _shown(value: Any) -> str:
    return "set" if isinstance(value, BaseModel) else repr(value)


def display(draft: Draft, row_field: str, value: Any) -> None:
    """Display only: never part of the case."""


def _tied_embeddings(draft: Draft, row_field: str, value: bool) -> None:
    """Stated either way: a stated ``tied_embeddings`` counts the embedding lookup and the vocabulary matrices
    (harness.passes.output_layer), tied or not."""
    draft.set("model.tied_embeddings", value, row_field)
    draft.features.add("model.tied_embeddings")


def _kv_heads(draft: Draft, row_field: str, value: int | None) -> None:
    heads = draft.run.model.heads
    if value is None:
        if draft.run.model.mla is None:
            draft.refuse(row_field, "null without model.mla")
    elif value == heads:
        return
    elif case_has_field("model.kv_heads"):
        draft.set("model.kv_heads", value, row_field)
    elif value == 1:
        draft.set("execution.attention", "multiquery", row_field)
    else:
        draft.refuse(row_field, f"{value} of {heads} heads (grouped-query) needs case field model.kv_heads, which "
                                "the harness does not have yet")


def _attention(draft: Draft, row_field: str, value: str) -> None:
    m = draft.run.model
    expected = "mla" if m.mla is not None else "mha" if m.kv_heads == m.heads else "gqa"
    if value != expected and not (value == "gqa" and m.kv_heads == 1):
        draft.refuse(row_field, f"{value!r} contradicts kv_heads {m.kv_heads} / heads {m.heads} / mla")


def _position(draft: Draft, row_field: str, value: str) -> None:
    """:data:`POSITIONS`; a partial rotary embedding (:data:`FUSED_PARTIAL_ROPE`) is ``rope`` when the recipe runs
    TE's fused kernel (whole Q and K read and written), else refused naming the field."""
    recipe = RECIPES.get(recipe_file(draft.run) or "")
    decoupled = MLA_ROPE.fullmatch(value)
    if decoupled:  # latent attention's rotary parts: the model.mla core prices them (its attn.rope)
        mla = draft.run.model.mla
        if mla is None or int(decoupled.group(1)) != mla.qk_pos_emb_head_dim:
            draft.refuse(row_field, f"{value!r} without model.mla of that qk_pos_emb_head_dim")
            return
        value = "rope"
    if value in FUSED_PARTIAL_ROPE and recipe is not None and recipe.fused_rope:
        value = "rope"
    elif value in FUSED_PARTIAL_ROPE:
        draft.refuse(row_field, f"{value!r}: a partial rotary embedding is priced only where the recipe runs the "
                                "fused rotary kernel (RECIPES: fused_rope), whose traffic is the whole of Q and K")
        return
    feature("model.position", "learned_absolute", POSITIONS)(draft, row_field, value)


def _precision(draft: Draft, row_field: str, value: str) -> None:
    draft.set("execution.datatype", PLAIN_DATATYPES.get(value, "bfloat16"), row_field)
    if value not in PLAIN_DATATYPES:  # the fp8 and fp4 recipes: linear GEMMs in the low datatype, the rest bf16
        feature("execution.precision", None)(draft, row_field, value)


def _recompute(draft: Draft, row_field: str, value: str | None) -> None:
    if value is None:
        draft.refuse(row_field, "not stated by the source")
    else:
        draft.set("execution.recompute", RECOMPUTE[value], row_field)


def _recompute_modules(draft: Draft, row_field: str, value: list[str] | None) -> None:
    """Megatron-Core's ``recompute_modules`` (None: its default, ``[core_attn]``, which ``attn_only`` is): with
    ``granularity: selective``, ``execution.recompute: selective`` and the modules as they are (the case checks
    their names and refuses the ones not modelled)."""
    if value is None:
        return
    if draft.run.recompute.granularity != "selective":
        draft.refuse(row_field, f"{value!r} without granularity selective (Megatron-Core reads the modules only "
                                "under selective recomputation)")
        return
    draft.set("execution.recompute", "selective", row_field)
    draft.set("execution.recompute_modules", list(value), row_field)


def _recompute_layers(draft: Draft, row_field: str, value: int | None) -> None:
    """Megatron-Core's ``recompute_num_layers`` under the ``recompute_method`` the row's stack sets with it
    (:attr:`Stack.recompute_layers_method`; rows do not state it): ``block`` with ``granularity: full`` is the
    blocks of each chunk recomputed (``execution.recompute_blocks``; 0 recomputes none, at least the chunk's
    blocks every one); a stack whose method is not known is refused."""
    if value is None:
        return
    stack = STACKS.get(source_repository(draft.run))
    if stack is None or stack.recompute_layers_method != "block":
        draft.refuse(row_field, f"{value!r}: the stack's recompute_method is not known (block recomputes the first "
                                "layers of each chunk, uniform every layer)")
    elif draft.run.recompute.granularity != "full":
        draft.refuse(row_field, f"{value!r} without granularity full (Megatron-Core's recompute_num_layers counts "
                                "the layers recomputed whole)")
    elif value == 0:
        draft.set("execution.recompute", "none", row_field)
    else:
        draft.set("execution.recompute_blocks", value, row_field)


def _sequence_parallel(draft: Draft, row_field: str, value: bool) -> None:
    draft.set("execution.tp_communication", "rs_ag" if value and draft.run.parallel.tp > 1 else "ar", row_field)


def _distributed_optimizer(draft: Draft, row_field: str, value: bool) -> None:
    # Megatron-Core's distributed optimizer shards over the data x context group (its parameter layout over
    # ``intra_dp_cp_group``: megatron/core/distributed/distributed_data_parallel.py at d98e8a64, lines 208-212
    # and 284-290), so a CP > 1 row with DP 1 shards too
    parallel = draft.run.parallel
    draft.set("execution.optimizer_sharding", value and parallel.dp * (parallel.cp or 1) > 1, row_field)


def _tp_comm_overlap(draft: Draft, row_field: str, value: bool | None) -> None:
    if value is None:
        draft.refuse(row_field, "not stated by the source")
    else:  # Transformer Engine's userbuffers: each TP collective tiled against its GEMM in TP - 1 ring steps
        draft.set("execution.tp_overlap", "ring" if value and draft.run.parallel.tp > 1 else "none", row_field)


def _fsdp(draft: Draft, row_field: str, value: bool) -> None:
    if value:  # Megatron-FSDP (optim_grads_params): the case's fsdp, its own overlap in place of the stack's
        feature("execution.fsdp", None)(draft, row_field, True)


def _mtp_layers(draft: Draft, row_field: str, value: int | None) -> None:
    if value:
        draft.set("model.mtp_layers", value, row_field)


#: Row ``model.moe.router`` -> case ``model.moe.router``, by the score function its text starts with. The
#: rows' group-limited routing (DeepSeek's: top groups first, then top-k within them) picks different experts,
#: not different work (the same router GEMM; a top-k over the groups first, vector work of experts elements per
#: token): priced as the plain top-k (docs/modern-runs.md).
ROUTERS = ("softmax", "sigmoid")


def _moe(draft: Draft, row_field: str, value: Any) -> None:
    """The row's MoE section as ``model.moe`` (each subfield translated: docs/modern-runs.md)."""
    if value is None:
        return
    if not case_has_field("model.moe"):
        draft.refuse(row_field, "set needs case field model.moe, which the harness does not have yet")
        return
    moe: dict[str, Any] = {"experts": value.experts, "top_k": value.top_k, "expert_ffn": value.expert_ffn_hidden}
    if value.shared_experts:
        if value.shared_expert_ffn_hidden % value.shared_experts:  # the row's width is all shared experts' together
            draft.refuse(f"{row_field}.shared_expert_ffn_hidden", f"{value.shared_expert_ffn_hidden} is not a "
                                                                  f"multiple of shared_experts={value.shared_experts}")
            return
        moe["shared_experts"] = value.shared_experts
        moe["shared_expert_ffn"] = value.shared_expert_ffn_hidden // value.shared_experts
    elif value.shared_expert_ffn_hidden:
        draft.refuse(f"{row_field}.shared_expert_ffn_hidden", "a width without shared experts")
        return
    if value.dense_layers:
        moe["dense_layers"] = value.dense_layers
    if value.layer_freq != 1:
        moe["layer_frequency"] = value.layer_freq
    if value.token_dropping:
        if value.capacity_factor is None:
            draft.refuse(f"{row_field}.capacity_factor", "token dropping without a capacity factor")
            return
        moe["capacity_factor"] = float(value.capacity_factor)
    if value.router is not None:
        router = next((r for r in ROUTERS if value.router.startswith(r)), None)
        if router is None:
            draft.refuse(f"{row_field}.router", f"{value.router!r} names no score function of {list(ROUTERS)}")
            return
        moe["router"] = router
    draft.set("model.moe", moe, row_field)
    draft.features.add("model.moe")


def _expert_tensor_parallel(draft: Draft, row_field: str, value: int | None) -> None:
    """``etp`` null is Megatron-Core's default, TP (expert_tensor_parallel_size = tensor_model_parallel_size)."""
    tp = draft.run.parallel.tp
    if value is None and draft.run.model.moe is not None and tp > 1:
        value = tp
    feature("execution.expert_tensor_parallel", None)(draft, row_field, value)


def _mla(draft: Draft, row_field: str, value: Any) -> None:
    """The row's latent attention (Megatron-Core's names: ``qk_head_dim`` the part without position encoding,
    ``qk_pos_emb_head_dim`` the rotary part) as ``model.mla``; ``model.head_size`` becomes its query/key head
    width, their sum (the row's ``head_dim`` is Megatron-Core's ``kv_channels``, the no-position part or the
    sum; any other value is refused naming it)."""
    if value is None:
        return
    if not case_has_field("model.mla"):
        draft.refuse(row_field, "set needs case field model.mla, which the harness does not have yet")
        return
    width = value.qk_head_dim + value.qk_pos_emb_head_dim
    if draft.run.model.head_dim not in (value.qk_head_dim, width):
        draft.refuse("model.head_dim", f"{draft.run.model.head_dim} is neither mla.qk_head_dim {value.qk_head_dim} "
                                       f"nor the query/key head width {width}")
        return
    mla = {"kv_lora_rank": value.kv_lora_rank, "qk_nope_head_dim": value.qk_head_dim,
           "qk_rope_head_dim": value.qk_pos_emb_head_dim, "v_head_dim": value.v_head_dim}
    if value.q_lora_rank:  # null or 0: no query compression
        mla["q_lora_rank"] = value.q_lora_rank
    draft.set("model.mla", mla, row_field)
    draft.set("model.head_size", width, row_field)
    draft.features.add("model.mla")


def _model_system(draft: Draft, row_field: str, value: Any) -> None:
    """``system.gpu`` picks the profile (``--system auto``) and ``gpus_per_nvlink_domain`` places the groups
    (:func:`network_tiers`); ``num_gpus`` is checked against the layout by the schema."""


#: Every row field, in the order its rule applies (a test checks it covers the schema exactly).
ROW_FIELDS: dict[str, Rule] = {
    "id": display, "software": display, "notes": display, "extra": display, "consistency": display,
    "source.where": display,  # its repository picks the stack (STACKS), after the table
    "source.row": display, "source.quality": display,
    "measured.iteration_s": display, "measured.derived_from": display, "measured.as_reported": display,  # compared
    "system.gpu": _model_system, "system.num_gpus": _model_system, "system.gpus_per_nvlink_domain": _model_system,
    "model.name": display,
    "model.layers": to("model.blocks"),
    "model.hidden": to("model.hidden"),
    "model.ffn_hidden": to("model.feedforward"),
    "model.heads": to("model.attention_heads"),
    "model.kv_heads": _kv_heads,
    "model.head_dim": to("model.head_size"),
    "model.vocab": to("model.vocabulary"),
    "model.seq_len": to("model.sequence_length"),
    "model.mlp": feature("model.mlp", "gelu", {"gelu": "gelu", "swiglu": "swiglu", "geglu": "geglu",
                                              "squared_relu": "squared_relu"}),
    "model.norm": feature("model.norm", "layernorm", {"layernorm": "layernorm", "rmsnorm": "rmsnorm"}),
    "model.attention": _attention,
    "model.sliding_window": feature("model.sliding_window", None),
    "model.tied_embeddings": _tied_embeddings,
    "model.position_embedding": _position,
    "model.moe": _moe,
    "model.mla": _mla,
    "model.mtp_layers": _mtp_layers,
    "model.truncated_from": display,
    "parallel.tp": to("execution.tensor_parallel"),
    "parallel.pp": to("execution.pipeline_parallel"),
    "parallel.vp": to("execution.pipeline_interleaving", lambda v: 1 if v is None else v),
    "parallel.cp": feature("execution.context_parallel", 1),
    "parallel.ep": feature("execution.expert_parallel", 1),
    "parallel.etp": _expert_tensor_parallel,
    "parallel.dp": to("execution.data_parallel"),
    "parallel.fsdp": _fsdp,
    "parallel.sequence_parallel": _sequence_parallel,
    "parallel.distributed_optimizer": _distributed_optimizer,
    "parallel.tp_comm_overlap": _tp_comm_overlap,
    "batch.global_batch": to("execution.global_batch"),
    "batch.micro_batch": to("execution.microbatch"),
    "batch.gradient_accumulation": display,  # = global / (DP x micro), checked by the schema
    "precision": _precision,
    # granularity first: the modules' and the layers' rules replace the recompute mode it sets
    "recompute.granularity": _recompute,
    "recompute.modules": _recompute_modules,
    "recompute.layers": _recompute_layers,
}


def network_tiers(run: MeasuredRun) -> dict[str, int]:
    """Tier 0 for a group whose rank span fits in one NVLink domain, else tier 1 (module rules). The expert
    layers' rank order is ETP fastest, then EP (Megatron-Core's folded expert order ``tp-ep-dp-pp`` over the
    expert degrees): the expert-tensor group spans ETP ranks, the expert group ETP x EP."""
    p, domain = run.parallel, run.system.gpus_per_nvlink_domain
    etp = p.etp if p.etp is not None else p.tp
    spans = {"tensor": p.tp, "context": p.tp * p.cp, "data": p.tp * p.cp * p.dp, "pipeline": run.system.num_gpus,
             "expert": etp * p.ep, "expert_tensor": etp}
    return {dim: 0 if span <= domain else 1 for dim, span in spans.items()}


#: Whether a row has the group of each optional dimension (its tier is set only then: absent otherwise).
OPTIONAL_GROUPS: dict[str, Callable[[MeasuredRun], bool]] = {
    "context": lambda run: run.parallel.cp > 1,
    "expert": lambda run: run.parallel.ep > 1,
    "expert_tensor": lambda run: run.model.moe is not None and (run.parallel.etp or run.parallel.tp) > 1,
}


@dataclasses.dataclass(frozen=True)
class RunCase:
    """A row's case (``input`` None when unsupported or invalid) and why not."""

    input: EstimateInput | None
    unsupported: tuple[tuple[str, str], ...]  # (row field, why), in table order
    invalid: tuple[str, str] | None = None  # (field, message): the row describes no valid case
    #: (row field, why): the case is estimated, but the row is never a record of a fitted corpus (its
    #: measurement depends on software facts the case does not state: :attr:`Stack.moe_unfitted`)
    unfitted: tuple[tuple[str, str], ...] = ()

    @property
    def reason(self) -> str | None:
        if self.invalid is not None:
            return f"{self.invalid[0]}: {self.invalid[1]}"
        return "; ".join(f"{field}: {why}" for field, why in self.unsupported) or None


def run_case(run: MeasuredRun, system: str, source: str = "<runs>") -> RunCase:
    """The case of one row on the profile ``system`` (every rule of :data:`ROW_FIELDS`, then the stack and
    the placement); validated as a case file is."""
    draft = Draft(run)
    for row_field, rule in ROW_FIELDS.items():
        rule(draft, row_field, value_of(run, row_field))
    repository = source_repository(run)
    stack = STACKS.get(repository)
    if stack is None:
        draft.refuse("source.where", f"no stack rule for {repository!r} (known: {', '.join(STACKS)})")
    else:
        feature("execution.attention_kernel", "materialized")(draft, "stack.attention_kernel", stack.attention_kernel)
        # a fully sharded row overlaps its gathers by FSDP's own prefetch (execution.fsdp), not the DP sync's
        optimizer = run.parallel.distributed_optimizer is True or not stack.dp_overlap_needs_distributed_optimizer
        draft.set("execution.dp_overlap", stack.dp_overlap and run.parallel.dp > 1 and not run.parallel.fsdp
                  and optimizer, "stack.dp_overlap")
        if stack.moe_unfitted is not None and run.model.moe is not None:
            draft.leave_out_of_fit("stack.moe_execution", stack.moe_unfitted)
    if run.model.moe is not None and run.extra.get(EXPERT_OVERLAP_FACT) is True:
        draft.set("execution.expert_overlap", True, f"extra.{EXPERT_OVERLAP_FACT}")
    recipe = RECIPES.get(recipe_file(run) or "")
    if recipe is None:
        draft.refuse("model.attention_dropout", f"not stated by the row, and no recipe fact for {recipe_file(run)!r} "
                                                "(RECIPES)")
    elif recipe.attention_dropout == 0:  # nonzero is today's behaviour (the dropout primitive is there)
        feature("model.attention_dropout", None)(draft, "model.attention_dropout", 0.0)
    for dim, tier in network_tiers(run).items():
        if dim not in OPTIONAL_GROUPS:
            draft.set(f"execution.network_tiers.{dim}", tier, "system.gpus_per_nvlink_domain")
        elif OPTIONAL_GROUPS[dim](run) and case_has_field(f"execution.network_tiers.{dim}"):
            draft.set(f"execution.network_tiers.{dim}", tier, "system.gpus_per_nvlink_domain")
            draft.features.add(f"execution.network_tiers.{dim}")
    if draft.unsupported:
        return RunCase(None, tuple(draft.unsupported))
    result = _validated(draft, system, source)
    stated = f"extra.{EXPERT_OVERLAP_FACT}"
    if result.input is None and result.unsupported[:1] and result.unsupported[0][0] == stated:
        # the recipe overlaps its all-to-alls, but not in a way the case prices yet: priced exposed, said so
        del draft.case["execution"]["expert_overlap"]
        why = result.unsupported[0][1]
        draft.leave_out_of_fit(stated, f"priced with its all-to-alls exposed, an upper bound ({why})")
        result = _validated(draft, system, source)
    return result


def _validated(draft: Draft, system: str, source: str) -> RunCase:
    """The draft's case on ``system``, validated as a case file is: the case, or why it is unsupported or
    invalid (a rule's "not modelled yet" is unsupported, any other refusal invalid)."""
    data = {**draft.case, "system": system}
    try:
        case = EstimateInput.model_validate(data)
        validate_input(source, case)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        path = ".".join(str(k) for k in first["loc"])
        row_field = draft.row_field(path)
        if path in draft.features:
            return RunCase(None, ((row_field, f"the case format refuses {path}: {first['msg']}"),))
        return RunCase(None, (), (row_field, f"{path}: {first['msg']}"))
    except UnsupportedFeatureError as error:  # a valid case that no registered pattern prices (yet)
        row_field = draft.row_field(error.field)
        return RunCase(None, ((row_field, f"the harness cannot price {error.field} here: {error.message}"),))
    except InputError as error:
        row_field = draft.row_field(error.field)
        if NOT_MODELLED in error.message:  # a valid layout the harness does not price yet (harness.ir.checks)
            why = error.message if error.field == row_field else f"{error.field}: {error.message}"  # once each
            return RunCase(None, ((row_field, why),))
        return RunCase(None, (), (row_field, error.message))
    return RunCase(case, (), unfitted=tuple(draft.unfitted))
