"""A Hugging Face ``config.json`` (Llama, Mistral, Qwen2, Qwen3; the mixtures of experts Mixtral, Qwen2-MoE,
Qwen3-MoE, DeepSeek-V3) as the case's model section: one table.

:data:`CONFIG_FIELDS` names every field the importer knows, with its type and rule; a field it does not
know is refused by name (never dropped), and so is a ``model_type`` outside :data:`ARCHITECTURES`. A
mixture of experts writes ``model.moe`` (routed experts, top-k, expert width, shared experts, leading dense
blocks, MoE-block frequency, router), DeepSeek-V3 also ``model.mla`` (multi-head latent attention, with
``head_size`` its query/key head width); each needs its case field (:func:`harness.cases.case_has_field`).

Rules (each field is one of):

- **priced**: it sets a case field (``hidden_size -> model.hidden``); ``num_key_value_heads`` equal to
  the heads (or absent) is multi-head and sets nothing; ``head_dim`` absent is hidden / heads;
- **a feature** of the model that the harness prices only with an optional case field (``kv_heads``,
  ``mlp``, ``norm``, ``position``, ``qkv_bias``, ``qk_norm``, ``attention_dropout``, ``sliding_window``,
  ``tied_embeddings``; names agreed in the brief): set when the case format has the field
  (:func:`harness.cases.case_has_field`), else refused naming the config field and the case field.
  Implied by the architecture: gated MLP (``hidden_act`` silu -> ``swiglu``, gelu -> ``geglu``),
  RMSNorm, RoPE, Qwen2's QKV bias, Qwen3's QK-norm;
- **noted**: accepted, affecting nothing the harness prices, each said in one note line
  (``rope_scaling`` rescales rotary frequencies; a ``sliding_window`` not shorter than the sequence
  has no effect; a sequence longer than ``max_position_embeddings``);
- **ignored**: token ids, initialisation, numerics (``rms_norm_eps``, ``rope_theta``), storage dtype
  (the precision is the execution section's), library versions: listed once in a note;
- **not read by the family** (:data:`READ_BY`): a field of another family's model (a shared expert, leading
  dense blocks or latent attention in a Llama config, a window in a Llama or DeepSeek-V3 one, a bias flag
  Mistral's attention has no place for) prices nothing, as transformers' class of that family never reads
  it; one note line each (a null, false, zero or empty value says nothing and is not noted). Never
  priced as if it were that other family's, and never refused as a feature the model does not have;
- **refused**: a value no case field holds (``mlp_bias`` or Llama/Qwen3 ``attention_bias`` true: the
  output projection's bias; Qwen ``use_sliding_window`` true: windows on some layers only; a sliding
  window under context parallelism; Qwen-MoE ``decoder_sparse_step`` > 1 or ``mlp_only_layers``: MoE on
  other blocks than ``moe.layer_frequency`` puts it; multi-token prediction layers without their case field).

A case-format error in a model field is reported by the config field it came from (:meth:`Draft.config_field`:
``vocab_size``, not ``vocabulary``); a mixture of experts' three expert fields and DeepSeek-V3's latent widths
are required (:func:`required`).

Mixture-of-experts fields that steer the routing but add no priced work (the router's top-k rule, its
normalisation and scaling, group-limited routing, the auxiliary losses, jitter) are noted, one line each.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from harness.cases import case_has_field
from harness.errors import InputError
from harness.inputs import describe, quoted


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A dense decoder family: its ``architectures`` name and what it implies beyond its config fields."""

    architecture: str
    implied: tuple[tuple[str, Any], ...] = ()  # case fields every model of the family has
    windowed_by_flag: bool = False  # sliding_window applies only with use_sliding_window (Qwen)
    #: tie_word_embeddings when the config leaves it out: the family's transformers default (LlamaConfig,
    #: MistralConfig, Qwen2Config, Qwen3Config: False)
    tied_by_default: bool = False
    #: the routed experts' fields (their presence makes a block a MoE block): (experts, top-k, expert width)
    experts: tuple[str, str, str] | None = None


COMMON_IMPLIED = (("model.norm", "rmsnorm"), ("model.position", "rope"))
ARCHITECTURES = {
    "llama": Architecture("LlamaForCausalLM", COMMON_IMPLIED),
    "mistral": Architecture("MistralForCausalLM", COMMON_IMPLIED),
    "qwen2": Architecture("Qwen2ForCausalLM", (*COMMON_IMPLIED, ("model.qkv_bias", True)), windowed_by_flag=True),
    "qwen3": Architecture("Qwen3ForCausalLM", (*COMMON_IMPLIED, ("model.qk_norm", True)), windowed_by_flag=True),
    # mixtures of experts (Mixtral's experts have the model's intermediate_size; the others their own width)
    "mixtral": Architecture("MixtralForCausalLM", COMMON_IMPLIED,
                            experts=("num_local_experts", "num_experts_per_tok", "intermediate_size")),
    "qwen2_moe": Architecture("Qwen2MoeForCausalLM", (*COMMON_IMPLIED, ("model.qkv_bias", True)),
                              windowed_by_flag=True,
                              experts=("num_experts", "num_experts_per_tok", "moe_intermediate_size")),
    "qwen3_moe": Architecture("Qwen3MoeForCausalLM", (*COMMON_IMPLIED, ("model.qk_norm", True)), windowed_by_flag=True,
                              experts=("num_experts", "num_experts_per_tok", "moe_intermediate_size")),
    "deepseek_v3": Architecture("DeepseekV3ForCausalLM", COMMON_IMPLIED,
                                experts=("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")),
}
#: DeepSeek-V3's multi-head latent attention fields, each a ``model.mla`` field of the same name.
LATENT_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
#: Mixture-of-experts fields that steer the routing and add no work the harness prices: one note line each.
ROUTING_NOTES = {
    "norm_topk_prob": "normalises the top-k router probabilities (a few operations per token)",
    "routed_scaling_factor": "scales the routed experts' output (one multiply per element)",
    "n_group": "group-limited routing (the top-k within the best groups): the same experts' work",
    "topk_group": "group-limited routing (the top-k within the best groups): the same experts' work",
    "topk_method": "the top-k rule of the router: the same experts' work",
    "router_aux_loss_coef": "the load-balancing loss weight (a few operations per token)",
    "aux_loss_alpha": "the load-balancing loss weight (a few operations per token)",
    "seq_aux": "a sequence-wise load-balancing loss (a few operations per token)",
    "output_router_logits": "returns the router logits for the auxiliary loss: no priced work",
    "router_jitter_noise": "multiplicative noise on the router input (one pointwise operation per element)",
    "ep_size": "the checkpoint's expert-parallel size: the layout is the execution section's",
    "moe_layer_freq": None,  # read into moe.layer_frequency
}
#: Family-specific fields -> the families whose transformers model reads them (read in transformers 5.24: the
#: family's config class and its modeling code, which reads ``head_dim`` with ``getattr`` where the config class has
#: no such field, as Qwen2 and the Qwen MoE families; DeepSeek-V3's moe_layer_freq, scoring_func and
#: num_nextn_predict_layers are its hub config's own code's, which transformers' port does not read); any other
#: family's model never reads the field (module rules: noted, not priced). ``head_dim`` is every family's but
#: DeepSeek-V3's (its head widths are the latent fields). Fields absent here are read by every family, or handled
#: by their rule (the routed experts' names: :attr:`Architecture.experts`).
READ_BY: dict[str, frozenset[str]] = {
    "attention_bias": frozenset({"llama", "qwen3", "qwen3_moe", "deepseek_v3"}),
    "mlp_bias": frozenset({"llama"}),
    "head_dim": frozenset({"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe"}),
    "sliding_window": frozenset({"mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}),
    "use_sliding_window": frozenset({"qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}),
    "layer_types": frozenset({"qwen2", "qwen3", "qwen2_moe"}),
    "n_shared_experts": frozenset({"deepseek_v3"}),
    "shared_expert_intermediate_size": frozenset({"qwen2_moe"}),
    "first_k_dense_replace": frozenset({"deepseek_v3"}),
    "moe_layer_freq": frozenset({"deepseek_v3"}),
    "decoder_sparse_step": frozenset({"qwen2_moe", "qwen3_moe"}),
    "mlp_only_layers": frozenset({"qwen2_moe", "qwen3_moe"}),
    "scoring_func": frozenset({"deepseek_v3"}),
    "num_nextn_predict_layers": frozenset({"deepseek_v3"}),
    **{name: frozenset({"deepseek_v3"}) for name in LATENT_FIELDS},
}
#: Gated-MLP activations -> case ``model.mlp`` (the four families' MLPs are gated: three matrices).
GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu", "gelu_new": "geglu"}
#: Fields that affect nothing the harness prices.
IGNORED = frozenset({"bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
                     "torch_dtype", "dtype", "transformers_version", "rms_norm_eps", "rope_theta", "pretraining_tp",
                     "_name_or_path", "max_window_layers", "tokenizer_class", "auto_map", "quantization_config",
                     "rope_interleave"})


class Draft:
    """What a config translates to: case fields (with the config field each came from), notes, refusals."""

    def __init__(self, config: dict[str, Any], sequence_length: int, context_parallel: int) -> None:
        self.config = config
        self.sequence_length = sequence_length
        self.context_parallel = context_parallel
        self.fields: dict[str, tuple[Any, str]] = {}  # case path -> (value, config field)
        #: case path (a section's key too: ``model.moe.top_k``) -> the config field(s) it came from
        self.origins: dict[str, str] = {}
        self.notes: list[str] = []
        self.refusals: list[tuple[str, str]] = []  # (config field, why)

    def set(self, case_path: str, value: Any, field: str) -> None:
        self.fields[case_path] = (value, field)
        self.origins[case_path] = field

    def merge(self, case_path: str, key: str, value: Any, field: str) -> None:
        """One key of a section-valued case field (``model.moe``, ``model.mla``); the first config field names it."""
        section, first = self.fields.get(case_path, ({}, field))
        self.fields[case_path] = ({**section, key: value}, first)
        self.origins[f"{case_path}.{key}"] = field

    def _is_section(self, case_path: str) -> bool:
        """Whether ``case_path`` is a section-valued case field (``model.moe``), whose keys have origins."""
        return any(path.startswith(case_path + ".") for path in self.origins)

    def note(self, field: str, text: str) -> None:
        self.notes.append(f"{field}: {text}")

    def refuse(self, field: str, why: str) -> None:
        self.refusals.append((field, why))

    def config_field(self, case_path: str, message: str = "") -> str | None:
        """The config field(s) a case field (``model.vocabulary``, ``model.moe.top_k``) came from, for an error
        the case format finds in it (the user fixes the config's ``vocab_size``, not ``vocabulary``): its own
        origin, else its section's; None when no config field set it. An error that names keys of the field's
        section as ``key=value`` (``dense_layers=1, layer_frequency=99``) is the config fields of those keys."""
        sections = (case_path, case_path.rsplit(".", 1)[0])  # the field's own keys, or its siblings'
        named = [origin for path, origin in self.origins.items()
                 if path.rsplit(".", 1)[0] in sections
                 and re.search(rf"(?<![\w.]){re.escape(path.rsplit('.', 1)[1])}=", message)]
        if named:  # a field's own origin first (a section's is only the first field that set a key of it)
            own = [self.origins[case_path]] if case_path in self.origins and not self._is_section(case_path) else []
            return " and ".join(dict.fromkeys([*own, *named]))
        path = case_path
        while path not in self.origins and "." in path:
            path = path.rsplit(".", 1)[0]
        return self.origins.get(path)


Rule = Callable[[Draft, str, Any], None]


def _shown(value: Any) -> str:
    """A config value in a note or an error: as Python writes it when that is short (``'silu'``, ``[0, 5]``,
    ``2``), else shortened as input errors show values (a string quoted and cut to 40 characters, a list or
    mapping by its kind, a huge integer by its digits): a megabyte-long value never makes a megabyte note."""
    text = repr(value)
    return text if len(text) <= 40 and text.isprintable() else describe(value)


def to(case_path: str) -> Rule:
    def rule(draft: Draft, field: str, value: Any) -> None:
        draft.set(case_path, value, field)
    return rule


def _ignored(draft: Draft, field: str, value: Any) -> None:
    """Affects nothing priced (listed in one note)."""


def _kv_heads(draft: Draft, field: str, value: int | None) -> None:
    heads = draft.config["num_attention_heads"]
    if value is None or value == heads:  # null: transformers' default, the heads (multi-head)
        return
    if heads % value:
        draft.refuse(field, f"{value} does not divide num_attention_heads {heads}")
    elif value == 1 and not case_has_field("model.kv_heads"):
        draft.set("execution.attention", "multiquery", field)
    else:
        draft.set("model.kv_heads", value, field)


def _head_dim(draft: Draft, field: str, value: int | None) -> None:
    if value is not None:
        draft.set("model.head_size", value, field)


def _hidden_act(draft: Draft, field: str, value: str) -> None:
    if value not in GATED:
        draft.refuse(field, f"{_shown(value)} is not a gated-MLP activation the importer knows ({', '.join(GATED)})")
    else:
        draft.set("model.mlp", GATED[value], field)


def _false_or(why: str) -> Rule:
    def rule(draft: Draft, field: str, value: bool) -> None:
        if value:
            draft.refuse(field, f"true: {why}")
    return rule


def _qkv_bias_flag(draft: Draft, field: str, value: bool) -> None:
    if value:
        draft.refuse(field, "true: the output projection's bias (and QKV's) has no case field (model.qkv_bias is "
                            "the QKV projection's only)")


def _tied(draft: Draft, field: str, value: bool) -> None:
    draft.set("model.tied_embeddings", value, field)  # stated either way: the vocabulary matrices are counted


def _attention_dropout(draft: Draft, field: str, value: float) -> None:
    draft.set("model.attention_dropout", float(value), field)


def _rope_scaling(draft: Draft, field: str, value: Any) -> None:
    if value is not None:
        kind = value.get("rope_type", value.get("type")) if isinstance(value, dict) else value
        draft.note(field, f"{_shown(kind)} rescales the rotary frequencies: accepted, affects nothing priced")


def _max_positions(draft: Draft, field: str, value: int) -> None:
    if draft.sequence_length > value:
        draft.note(field, f"the sequence length {draft.sequence_length} exceeds the model's {value} positions")


def _sliding_window(draft: Draft, field: str, value: int | None) -> None:
    architecture = ARCHITECTURES[draft.config["model_type"]]
    if value is None or (architecture.windowed_by_flag and not draft.config.get("use_sliding_window", False)):
        return
    if value >= draft.sequence_length:
        draft.note(field, f"{value} >= the sequence length {draft.sequence_length}: no effect")
    elif draft.context_parallel > 1:
        draft.refuse(field, f"{value}-token windows under context parallelism (degree {draft.context_parallel}) "
                            "are not priced")
    else:
        draft.set("model.sliding_window", value, field)


def _use_sliding_window(draft: Draft, field: str, value: bool) -> None:
    if value:
        draft.refuse(field, "true: windows on the layers from max_window_layers on only; per-layer attention is "
                            "not priced")


def _layer_types(draft: Draft, field: str, value: list) -> None:
    if any(kind != "full_attention" for kind in value):
        draft.refuse(field, "layers other than full_attention: per-layer attention is not priced")


def _latent(draft: Draft, field: str, value: int | None) -> None:
    if value is not None:  # q_lora_rank null: no query compression (DeepSeek-V2-Lite)
        draft.merge("model.mla", field, value, field)


def _routing_note(draft: Draft, field: str, value: Any) -> None:
    draft.note(field, f"{_shown(value)}: {ROUTING_NOTES[field]}: accepted, not priced")


def _not_read(draft: Draft, field: str, value: Any) -> None:
    """A field the family's model does not read (module rules): one note, unless its value says nothing."""
    if value is not None and value is not False and value != 0 and value != []:
        draft.note(field, f"{_shown(value)}: used by no block of a {draft.config['model_type']!r} model "
                          f"({ARCHITECTURES[draft.config['model_type']].architecture} does not read it): not priced")


def _experts(draft: Draft, field: str, value: int) -> None:
    """A routed-experts field (``model.moe`` is one dict): of the family's three, else not read (a dense family's
    or another family's name; it was a half ``model.moe`` refused as ``moe.experts``)."""
    names = ARCHITECTURES[draft.config["model_type"]].experts
    if names is not None and field == names[0]:
        draft.merge("model.moe", "experts", value, field)
    elif names is not None and field == names[1]:
        draft.merge("model.moe", "top_k", value, field)
    elif names is not None and field == names[2]:
        draft.merge("model.moe", "expert_ffn", value, field)
    else:
        _not_read(draft, field, value)


def _intermediate(draft: Draft, field: str, value: int) -> None:
    draft.set("model.feedforward", value, field)
    names = ARCHITECTURES[draft.config["model_type"]].experts
    if names is not None and names[2] == field:  # Mixtral: the experts have the model's MLP width
        draft.merge("model.moe", "expert_ffn", value, field)


def _sparse_step(draft: Draft, field: str, value: int) -> None:
    if value != 1:  # transformers: block i is MoE when (i + 1) % step == 0; Megatron-Core: when i % freq == 0
        draft.refuse(field, f"{value}: MoE on the blocks i with (i + 1) % {value} == 0, which moe.layer_frequency "
                            "(blocks i with i % frequency == 0) does not hold")


def _mlp_only_layers(draft: Draft, field: str, value: list) -> None:
    if value:
        draft.refuse(field, f"{_shown(value)}: dense MLPs on chosen blocks, which moe.dense_layers (the leading "
                            "blocks) does not hold")


def _layer_freq(draft: Draft, field: str, value: int) -> None:
    if value != 1:
        draft.merge("model.moe", "layer_frequency", value, field)


def _dense_layers(draft: Draft, field: str, value: int) -> None:
    if value:
        draft.merge("model.moe", "dense_layers", value, field)


def _shared_experts(draft: Draft, field: str, value: int) -> None:
    if value:
        draft.merge("model.moe", "shared_experts", value, field)


def _shared_expert_ffn(draft: Draft, field: str, value: int) -> None:
    """Qwen2-MoE: one shared expert of its own width, behind a sigmoid gate (a hidden x 1 GEMM per token)."""
    if value:
        draft.merge("model.moe", "shared_experts", 1, field)
        draft.merge("model.moe", "shared_expert_ffn", value, field)
        draft.note(field, "the shared expert's sigmoid gate (a hidden x 1 GEMM per token and a sigmoid) is not "
                          "priced")


def _scoring(draft: Draft, field: str, value: str) -> None:
    if value not in ("softmax", "sigmoid"):
        draft.refuse(field, f"{_shown(value)}: the router scores the case format holds are softmax and sigmoid")
    elif value == "sigmoid":
        draft.merge("model.moe", "router", "sigmoid", field)


def _mtp(draft: Draft, field: str, value: int) -> None:
    if value:
        draft.set("model.mtp_layers", value, field)


def _architectures(draft: Draft, field: str, value: list) -> None:
    expected = ARCHITECTURES[draft.config["model_type"]].architecture
    if value != [expected]:
        draft.refuse(field, f"{_shown(value)} is not [{expected!r}] for model_type {draft.config['model_type']!r}")


def _nothing(draft: Draft, field: str, value: Any) -> None:
    """Read before the table (model_type)."""


INT, BOOL, FLOAT, STR, LIST, ANY = (int,), (bool,), (int, float), (str,), (list,), (object,)
#: config field -> (accepted types, may be null, rule).
CONFIG_FIELDS: dict[str, tuple[tuple[type, ...], bool, Rule]] = {
    "model_type": (STR, False, _nothing),
    "architectures": (LIST, False, _architectures),
    "hidden_size": (INT, False, to("model.hidden")),
    "intermediate_size": (INT, False, _intermediate),
    "num_hidden_layers": (INT, False, to("model.blocks")),
    "num_attention_heads": (INT, False, to("model.attention_heads")),
    "num_key_value_heads": (INT, True, _kv_heads),
    "head_dim": (INT, True, _head_dim),
    "vocab_size": (INT, False, to("model.vocabulary")),
    "hidden_act": (STR, False, _hidden_act),
    "tie_word_embeddings": (BOOL, False, _tied),
    "attention_dropout": (FLOAT, False, _attention_dropout),
    "attention_bias": (BOOL, False, _qkv_bias_flag),
    "mlp_bias": (BOOL, False, _false_or("the MLP's bias has no case field")),
    "rope_scaling": (ANY, True, _rope_scaling),
    "max_position_embeddings": (INT, False, _max_positions),
    "sliding_window": (INT, True, _sliding_window),
    "use_sliding_window": (BOOL, False, _use_sliding_window),
    "layer_types": (LIST, False, _layer_types),
    # mixtures of experts
    "num_local_experts": (INT, False, _experts),
    "num_experts": (INT, False, _experts),
    "n_routed_experts": (INT, False, _experts),
    "moe_intermediate_size": (INT, False, _experts),
    "num_experts_per_tok": (INT, False, _experts),
    "n_shared_experts": (INT, True, _shared_experts),
    "shared_expert_intermediate_size": (INT, True, _shared_expert_ffn),
    "first_k_dense_replace": (INT, False, _dense_layers),
    "moe_layer_freq": (INT, False, _layer_freq),
    "decoder_sparse_step": (INT, False, _sparse_step),
    "mlp_only_layers": (LIST, False, _mlp_only_layers),
    "scoring_func": (STR, False, _scoring),
    "num_nextn_predict_layers": (INT, False, _mtp),
    **{name: (ANY, True, _routing_note) for name in sorted(ROUTING_NOTES) if ROUTING_NOTES[name]},
    # multi-head latent attention (DeepSeek-V3)
    **{name: (INT, name == "q_lora_rank", _latent) for name in LATENT_FIELDS},
    **{name: (ANY, True, _ignored) for name in sorted(IGNORED)},
}
#: Integer fields that may be 0 (a count of optional parts).
COUNTS = frozenset({"first_k_dense_replace", "num_nextn_predict_layers", "n_shared_experts",
                    "shared_expert_intermediate_size"})
REQUIRED = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "vocab_size", "hidden_act")


def required(model_type: str) -> tuple[str, ...]:
    """The fields a config of ``model_type`` must hold: :data:`REQUIRED`, a mixture of experts' three expert
    fields, DeepSeek-V3's latent widths (all but ``q_lora_rank``, null: no query compression). A missing one is
    refused by its config name (transformers would fill in its class default, which the importer does not guess)."""
    experts = ARCHITECTURES[model_type].experts or ()
    latent = tuple(name for name in LATENT_FIELDS if name != "q_lora_rank") if model_type == "deepseek_v3" else ()
    return tuple(dict.fromkeys((*REQUIRED, *experts, *latent)))


def _check_type(source: str, field: str, value: Any) -> None:
    types, nullable, _ = CONFIG_FIELDS[field]
    if value is None:
        if not nullable:
            raise InputError(source, field, "must not be null")
        return
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types and object not in types)
    if not ok:
        raise InputError(source, field, f"must be {' or '.join(t.__name__ for t in types)}, got {describe(value)}")
    if types == INT and not (0 if field in COUNTS else 1) <= value <= 2**31:
        raise InputError(source, field, f"must be a {'non-negative' if field in COUNTS else 'positive'} integer of "
                                        f"at most 2^31, got {describe(value)}")
    if field == "attention_dropout" and not 0 <= value < 1:
        raise InputError(source, field, f"must be a probability in [0, 1), got {value}")


def translate_config(config: Any, source: str, sequence_length: int, context_parallel: int = 1) -> Draft:
    """The draft of a config (module rules); a malformed config is an InputError naming ``source`` and the field.
    Refusals are collected, not raised (:func:`model_section` raises them)."""
    if not isinstance(config, dict):
        raise InputError(source, "<file>", "must be a JSON object (a Hugging Face config.json)")
    if "model_type" not in config:
        raise InputError(source, "model_type", "required field is missing")
    model_type = config["model_type"]
    _check_type(source, "model_type", model_type)  # a string before it is looked up (a list is unhashable)
    if model_type not in ARCHITECTURES:
        raise InputError(source, "model_type", f"{quoted(model_type)} is not an architecture the importer knows "
                                               f"({', '.join(ARCHITECTURES)})")
    for field in required(model_type):
        if field not in config:
            raise InputError(source, field, "required field is missing")
    for field, value in config.items():
        if field not in CONFIG_FIELDS:
            raise InputError(source, field, f"unknown field for model_type {model_type!r}: the importer does not "
                                            "know what it means (never dropped silently)")
        _check_type(source, field, value)
    draft = Draft(config, sequence_length, context_parallel)
    for case_path, value in ARCHITECTURES[model_type].implied:
        draft.set(case_path, value, "model_type")
    if "tie_word_embeddings" not in config:  # the family's default: the vocabulary matrices are counted
        draft.set("model.tied_embeddings", ARCHITECTURES[model_type].tied_by_default, "model_type")
    for field, value in config.items():
        families = READ_BY.get(field)
        rule = CONFIG_FIELDS[field][2] if families is None or model_type in families else _not_read
        rule(draft, field, value)
    if model_type == "deepseek_v3":  # latent attention: head_size is the query/key head width
        if isinstance(config.get("qk_nope_head_dim"), int) and isinstance(config.get("qk_rope_head_dim"), int):
            draft.set("model.head_size", config["qk_nope_head_dim"] + config["qk_rope_head_dim"],
                      "qk_nope_head_dim + qk_rope_head_dim")
    elif "head_dim" not in config or config["head_dim"] is None:
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        if hidden % heads:
            draft.refuse("num_attention_heads", f"{heads} does not divide hidden_size {hidden} (and no head_dim)")
        else:
            draft.set("model.head_size", hidden // heads, "hidden_size / num_attention_heads")
    moe = draft.fields.get("model.moe")
    names = ARCHITECTURES[model_type].experts
    if moe is not None and names is not None and moe[0]["top_k"] > moe[0]["experts"]:  # the case rule, in config names
        draft.refuse(names[1], f"{moe[0]['top_k']} exceeds {names[0]} {moe[0]['experts']} (a token picks distinct "
                               "experts)")
    if moe is not None and moe[0].get("dense_layers", 0) >= config["num_hidden_layers"]:
        del draft.fields["model.moe"]  # every block dense (DeepSeek's first_k_dense_replace): no MoE section
        draft.note("first_k_dense_replace", f"{moe[0]['dense_layers']} >= num_hidden_layers "
                                            f"{config['num_hidden_layers']}: every block dense, the expert fields "
                                            "describe no block")
    ignored = sorted(field for field in config if field in IGNORED)
    if ignored:
        draft.notes.append(f"affect nothing priced: {', '.join(ignored)}")
    return draft


def model_section(draft: Draft, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(model fields, execution fields)`` of the draft; the first refusal (a config value no case field
    holds, or a feature whose case field the harness does not have yet) is an InputError naming its config
    field, listing the others."""
    refusals = list(draft.refusals)
    model: dict[str, Any] = {"sequence_length": draft.sequence_length}
    execution: dict[str, Any] = {}
    for case_path, (value, field) in draft.fields.items():
        if not case_has_field(case_path):
            what = f"{draft.config['model_type']!r} implies {_shown(value)}" if field == "model_type" else _shown(value)
            refusals.append((field, f"{what}: needs case field {case_path}, which the harness does not have yet"))
            continue
        section, name = case_path.split(".", 1)
        (model if section == "model" else execution)[name] = value
    if refusals:
        (field, why), *others = refusals
        also = f" (also refused: {', '.join(f for f, _ in others)})" if others else ""
        raise InputError(source, field, f"{why}{also}")
    return model, execution
