"""The independent FLOP oracle: PyTorch's FLOP counter on a ``transformers`` decoder layer (issue 20.8).

``harness oracle record --flops --config config.json --microbatch B --sequence-length S --id NAME`` builds
one decoder layer of the Hugging Face ``transformers`` library from ``config.json`` on the ``meta`` device
(no weights, no GPU, no data), runs it forward and backward under
``torch.utils.flop_counter.FlopCounterMode`` and vendors the counts per ATen operation into
``vendor/flops/NAME.json`` with the versions that counted them.

Rules of a count:

- the layer class is the one of the config's ``model_type`` (:data:`LAYERS`); attention runs in its eager
  implementation (``attn_implementation="eager"``), so the score products are ``aten.bmm`` and not a fused
  scaled-dot-product kernel the counter would price by its own rule; any counted operation other than the
  four below is refused rather than recorded under a guess;
- the layer is called alone, with ``attention_mask=None`` (the whole model's mask helpers call ``.item()``,
  which a meta tensor cannot answer): every score of the ``s x s`` matrix is computed, the convention of
  ``workload.matrix_flops_per_block``; the rotary position embeddings (cos, sin) are computed *outside* the
  counter by the model's own rotary module (its one small matmul is not layer work);
- the input hidden states require a gradient, as a middle layer's do, so the backward pass computes every
  activation gradient and every weight gradient; no recomputation;
- ``linear`` = ``aten.mm`` + ``aten.addmm`` (forward + backward), ``attention`` = ``aten.bmm`` +
  ``aten.baddbmm``; the counter counts a product of ``m x k`` and ``k x n`` as ``2 m k n`` and ignores
  bias additions, softmax, norms and activations (the matrix work only).

torch and transformers are the optional extra ``flops`` (``tox -e flop-oracle``); they are imported only
when a count runs, never by the default suite, which reads the vendored records (:func:`load_flop_record`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import platform
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from harness.errors import InputError
from harness.inputs import decode, read_bytes, validate
from harness.ir.base import Frozen
from harness.names import PROFILE_NAME, PROFILE_NAME_PATTERN, PROFILE_NAME_RULE

FLOP_RECORD_SCHEMA = "blueprinting.flop-record.v0"
FLOPS_SUBDIR = Path("vendor") / "flops"
LINEAR_OPS = ("aten.mm", "aten.addmm")
ATTENTION_OPS = ("aten.bmm", "aten.baddbmm")

#: model_type -> (transformers module, decoder layer class, rotary embedding class or None: learned positions).
LAYERS: dict[str, tuple[str, str, str | None]] = {
    "llama": ("transformers.models.llama.modeling_llama", "LlamaDecoderLayer", "LlamaRotaryEmbedding"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "MistralDecoderLayer", "MistralRotaryEmbedding"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2DecoderLayer", "Qwen2RotaryEmbedding"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", "Qwen3DecoderLayer", "Qwen3RotaryEmbedding"),
    "gpt_neox": ("transformers.models.gpt_neox.modeling_gpt_neox", "GPTNeoXLayer", "GPTNeoXRotaryEmbedding"),
    "gpt2": ("transformers.models.gpt2.modeling_gpt2", "GPT2Block", None),
    "mixtral": ("transformers.models.mixtral.modeling_mixtral", "MixtralDecoderLayer", "MixtralRotaryEmbedding"),
    "qwen2_moe": ("transformers.models.qwen2_moe.modeling_qwen2_moe", "Qwen2MoeDecoderLayer",
                  "Qwen2MoeRotaryEmbedding"),
    "qwen3_moe": ("transformers.models.qwen3_moe.modeling_qwen3_moe", "Qwen3MoeDecoderLayer",
                  "Qwen3MoeRotaryEmbedding"),
    "deepseek_v3": ("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3DecoderLayer",
                    "DeepseekV3RotaryEmbedding"),
}
#: How a mixture-of-experts layer's tokens reach its experts in a count (the only routing it records).
BALANCED_ROUTING = "balanced_by_construction"


class FlopProvenance(Frozen):
    """What counted the FLOPs."""

    counter: Literal["torch.utils.flop_counter.FlopCounterMode"] = Field(description="The counting tool.")
    torch: str = Field(description="torch version.")
    transformers: str = Field(description="transformers version.")
    python: str = Field(description="Python version.")
    device: Literal["meta"] = Field(description="Tensors carry shapes only.")
    attention_implementation: Literal["eager"] = Field(description="transformers attention implementation.")
    layer_class: str = Field(description="The transformers decoder layer class counted.")
    routing: Literal["balanced_by_construction"] | None = Field(None, description=(
        "A mixture-of-experts layer's routing: its block replaced by the construction of "
        ":func:`balanced_experts` (the router a linear on every token, each expert a SwiGLU MLP on tokens x top_k "
        "/ experts tokens, the shared experts on every token). Absent: a dense layer, counted as transformers "
        "runs it."))

    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"routing"})  # dense records keep their bytes


class FlopRecord(Frozen):
    """One decoder layer's matrix FLOPs, forward and backward, by ATen operation."""

    schema_name: Literal["blueprinting.flop-record.v0"] = Field(alias="schema", description="Record schema.")
    id: str = Field(pattern=PROFILE_NAME_PATTERN, description="Record name, the file stem (the profile-name rule: "
                                                              "a file stem, never a path).")
    config: dict = Field(description="The Hugging Face config.json the layer was built from.")
    config_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the config file's bytes.")
    microbatch: int = Field(ge=1, description="Samples per call.")
    sequence_length: int = Field(ge=1, description="Tokens per sample.")
    forward: dict[str, int] = Field(description="FLOPs per ATen operation in the forward pass.")
    backward: dict[str, int] = Field(description="FLOPs per ATen operation in the backward pass.")
    linear_flops: int = Field(ge=0, description="aten.mm + aten.addmm, forward + backward.")
    attention_flops: int = Field(ge=0, description="aten.bmm + aten.baddbmm, forward + backward.")
    provenance: FlopProvenance = Field(description="What counted them.")


def check_record_id(name: str) -> str:
    """``name`` if it can name a record file (the profile-name rule), else an InputError on ``--id``."""
    if PROFILE_NAME.fullmatch(name) is None:
        raise InputError("<command line>", "--id", f"{name!r} is not a record name ({PROFILE_NAME_RULE})")
    return name


def _read_config(path: Path) -> tuple[dict, str]:
    data = read_bytes(path)
    source = str(path)
    try:
        config = json.loads(decode(data, source))
    except json.JSONDecodeError as error:
        raise InputError(source, "<root>", f"not valid JSON: {error.msg} (line {error.lineno})") from None
    if not isinstance(config, dict):
        raise InputError(source, "<root>", "a config.json is a JSON object")
    if config.get("model_type") not in LAYERS:
        raise InputError(source, "model_type", f"{config.get('model_type')!r} has no decoder layer the FLOP oracle "
                                               f"builds ({', '.join(sorted(LAYERS))})")
    return config, hashlib.sha256(data).hexdigest()


def balanced_experts(block, top_k: int, source: str):
    """A forward for a transformers mixture-of-experts block (``block.gate``, ``block.experts`` with its 3-D
    ``gate_up_proj`` [experts, 2 F, hidden] and ``down_proj`` [experts, hidden, F]; optionally DeepSeek's
    ``shared_experts`` or Qwen2-MoE's ``shared_expert`` and ``shared_expert_gate``) that routes by construction.

    transformers' own forward routes data-dependently (one-hot masks, ``nonzero``, ``where``), which a meta
    tensor cannot answer. This one computes what a balanced routing computes: the router, a linear layer on
    every token; each token repeated ``top_k`` times and the copies dealt out in equal slices of ``tokens x top_k
    / experts`` rows, one per expert, through that expert's SwiGLU MLP with its own weights; the outputs weighted
    by the router's probabilities and summed per token; the shared experts (and Qwen2-MoE's sigmoid gate, a
    hidden -> 1 linear) on every token. Its matrix work is the balanced layer's, whatever the routing rule
    (softmax, sigmoid with groups), which is not matrix work."""
    import torch
    import torch.nn.functional as functional

    experts = block.experts
    count = experts.gate_up_proj.shape[0]

    def forward(hidden_states):
        shape = hidden_states.shape
        states = hidden_states.reshape(-1, shape[-1])
        tokens = states.shape[0]
        if tokens * top_k % count:
            raise InputError(source, "num_experts_per_tok", f"{tokens} tokens x top_k {top_k} do not split evenly "
                                                            f"over {count} experts (balanced routing)")
        rows = tokens * top_k // count
        logits = functional.linear(states, block.gate.weight)
        dealt = states.repeat(top_k, 1)
        outputs = []
        for expert in range(count):
            gate, up = functional.linear(dealt[expert * rows:(expert + 1) * rows],
                                         experts.gate_up_proj[expert]).chunk(2, dim=-1)
            outputs.append(functional.linear(experts.act_fn(gate) * up, experts.down_proj[expert]))
        weights = logits.softmax(dim=-1)[:, :top_k].transpose(0, 1).unsqueeze(-1)
        combined = (torch.cat(outputs).view(top_k, tokens, shape[-1]) * weights).sum(dim=0)
        if getattr(block, "shared_experts", None) is not None:
            combined = combined + block.shared_experts(states)
        if getattr(block, "shared_expert", None) is not None:
            combined = combined + torch.sigmoid(block.shared_expert_gate(states)) * block.shared_expert(states)
        return combined.reshape(shape)

    return forward


#: What transformers raises for a config it cannot build (its own checks, a shape that does not split, a null
#: where it computes): an input error of the config, one line naming the file; anything else is a bug.
REFUSALS = (ValueError, TypeError, KeyError, AttributeError, AssertionError, ZeroDivisionError, RuntimeError)


def _refusals() -> tuple[type[Exception], ...]:
    """:data:`REFUSALS` and huggingface_hub's strict-dataclass validation error (transformers 5's configs check
    their fields with it; it derives from Exception only)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older transformers: its configs raise ValueError
        return REFUSALS
    return (*REFUSALS, StrictDataclassError)


def count_layer(config: dict, microbatch: int, sequence_length: int,
                source: str = "<config>") -> tuple[dict[str, int], dict[str, int], str, str | None]:
    """``(forward, backward, layer class, routing)``: the FLOPs per ATen operation of one decoder layer built from
    ``config`` (a config.json mapping) on the meta device, called on ``microbatch x sequence_length`` tokens; a
    mixture-of-experts layer routed by construction (:func:`balanced_experts`, routing
    :data:`BALANCED_ROUTING`), a dense one as transformers runs it (routing None)."""
    import torch  # the optional extra: only here
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    module_name, layer_name, rotary_name = LAYERS[config["model_type"]]
    settings = {k: v for k, v in config.items() if k != "model_type"}
    module = importlib.import_module(module_name)
    layer_class, rotary_class = getattr(module, layer_name), getattr(module, rotary_name) if rotary_name else None
    try:  # a config transformers refuses (heads that do not divide hidden_size, a field of the wrong kind)
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **settings)
        hf_config._attn_implementation = "eager"
        with torch.device("meta"):
            layer = layer_class(hf_config, layer_idx=0)
            rotary = rotary_class(hf_config) if rotary_class else None
    except _refusals() as error:
        reason = " ".join(str(error).split())[:300]  # one line: transformers' messages span several
        raise InputError(source, "<root>", f"transformers {transformers.__version__} cannot build its layer: "
                                           f"{type(error).__name__}: {reason}") from None
    hidden = hf_config.hidden_size
    layer.train()
    routing = None
    if getattr(layer.mlp, "experts", None) is not None:
        layer.mlp.forward = balanced_experts(layer.mlp, hf_config.num_experts_per_tok, source)
        routing = BALANCED_ROUTING
    states = torch.empty(microbatch, sequence_length, hidden, device="meta", requires_grad=True)
    keywords: dict = {"attention_mask": None}
    if rotary is not None:
        positions = torch.arange(sequence_length, device="meta").unsqueeze(0).expand(microbatch, sequence_length)
        with torch.no_grad():
            keywords["position_embeddings"] = rotary(states, positions)
        keywords["position_ids"] = positions
    with FlopCounterMode(display=False) as forward_counter:
        output = layer(states, **keywords)
    output = output[0] if isinstance(output, tuple) else output
    with FlopCounterMode(display=False) as backward_counter:
        output.sum().backward()

    def counts(counter) -> dict[str, int]:
        return {str(op): int(flops) for op, flops in sorted(counter.get_flop_counts().get("Global", {}).items(),
                                                            key=lambda item: str(item[0]))}

    return counts(forward_counter), counts(backward_counter), f"{module_name}.{layer_name}", routing


def record_flops(config_path: Path, microbatch: int, sequence_length: int, record_id: str) -> FlopRecord:
    """Count one layer of ``config_path`` and return its record (refusing any operation outside the split)."""
    config, digest = _read_config(config_path)
    forward, backward, layer_class, routing = count_layer(config, microbatch, sequence_length, str(config_path))
    known = set(LINEAR_OPS) | set(ATTENTION_OPS)
    other = sorted((set(forward) | set(backward)) - known)
    if other:
        raise InputError(str(config_path), "model_type", f"the counter saw {', '.join(other)}: neither a linear nor an "
                                                         "attention product (eager attention expected)")
    import torch
    import transformers

    def total(ops: tuple[str, ...]) -> int:
        return sum(forward.get(op, 0) + backward.get(op, 0) for op in ops)

    return FlopRecord.model_validate({
        "schema": FLOP_RECORD_SCHEMA, "id": record_id, "config": config, "config_sha256": digest,
        "microbatch": microbatch, "sequence_length": sequence_length, "forward": forward, "backward": backward,
        "linear_flops": total(LINEAR_OPS), "attention_flops": total(ATTENTION_OPS),
        "provenance": {"counter": "torch.utils.flop_counter.FlopCounterMode", "torch": torch.__version__,
                       "transformers": transformers.__version__, "python": platform.python_version(),
                       "device": "meta", "attention_implementation": "eager", "layer_class": layer_class,
                       "routing": routing}})


def record_text(record: FlopRecord) -> str:
    """The vendored file's text: indented JSON, sorted keys, one trailing newline."""
    return json.dumps(record.model_dump(mode="json", by_alias=True), indent=1, sort_keys=True) + "\n"


def load_flop_record(path: Path) -> FlopRecord:
    """A vendored record (no torch needed)."""
    source = str(path)
    try:
        data = json.loads(decode(read_bytes(path), source))
    except json.JSONDecodeError as error:
        raise InputError(source, "<root>", f"not valid JSON: {error.msg} (line {error.lineno})") from None
    return validate(FlopRecord, data, source)
