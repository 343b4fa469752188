"""The supported configuration space, drawn at random for differential testing.

One drawing procedure serves the seeded corpus generator
(``scripts/generate_differential.py``, with :class:`RandomChooser`) and the
hypothesis property tests (with a chooser backed by ``data.draw``), so both
explore the same space.

Rules of a draw:
- a shape: one of the 13 example shapes (:data:`EXAMPLE_SHAPES`), or a small
  random one (:func:`draw_shape`);
- a profile: one of :data:`PROFILES`; the datatype is one the profile has a
  matrix *and* a vector engine for (``float16`` everywhere, ``float8`` on
  ``h100_80g_nvl8``). No profile has ``bfloat16``, so it is never drawn: on
  our side it is an input error (no engine), and Calculon would fail on a
  missing engine with a KeyError, not with a verdict;
- every draw is valid for the case schema and the layout rules
  (:func:`harness.ir.checks.layout_problems`): TP divides hidden, feedforward
  and heads; microbatches tile the local batch; all-gather redo only with
  rs_ag and without full recompute; recompute only in training; optimizer
  sharding only with DP > 1; interleaving divides the first stage's blocks;
- TP/DP overlap and offload are drawn only with ``overlap=True`` (the
  overlap/offload corpus, :func:`draw_overlap_options`): then at least one of
  the five options is on, each only where Calculon accepts it (TP overlap with
  TP > 1, DP overlap in training with DP > 1, optimizer offload in training);
  without it the random stream, and so every earlier corpus, is unchanged;
- PP is 1, a divisor of the blocks, or any value up to the blocks (so blocks
  not divisible by PP occur); each dimension's network tier is drawn, so some
  draws exceed or under-fill tier 0 and some exceed memory: those are the
  configurations Calculon refuses (and we report infeasible).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Protocol, Sequence, TypeVar

from harness.cases import EstimateInput, validate_input
from harness.evidence.profile import load_profile
from harness.interop.calculon_format import calculon_from_input
from harness.ir.blocks import blocks_per_stage
from harness.ir.model import TransformerShape

T = TypeVar("T")

PROFILES = ("a100_80g", "a100_80e", "h100_80g_nvl8")


def _shape(hidden: int, feedforward: int, sequence_length: int, heads: int, head_size: int,
           blocks: int) -> TransformerShape:
    return TransformerShape(hidden=hidden, feedforward=feedforward, sequence_length=sequence_length,
                            attention_heads=heads, head_size=head_size, blocks=blocks)


# Numbers of Calculon 0.1.0's models/*.json (commit caa4b11f, Apache-2.0), in our field names.
EXAMPLE_SHAPES: dict[str, TransformerShape] = {
    "anthropic-52B": _shape(8192, 32768, 8192, 64, 128, 64),
    "chinchilla": _shape(8192, 32768, 2048, 64, 128, 80),
    "gopher-280B": _shape(16384, 65536, 2048, 128, 128, 80),
    "gpt3-13B": _shape(5140, 20560, 2048, 40, 128, 40),
    "gpt3-175B": _shape(12288, 49152, 2048, 96, 128, 96),
    "lamda": _shape(8192, 65536, 2048, 128, 128, 64),
    "megatron-126M": _shape(768, 3072, 2048, 16, 48, 12),
    "megatron-1T": _shape(25600, 102400, 2048, 160, 160, 128),
    "megatron-22B": _shape(6144, 24576, 2048, 64, 96, 48),
    "megatron-40B": _shape(8192, 32768, 2048, 64, 128, 48),
    "megatron-5B": _shape(4096, 16384, 2048, 32, 128, 24),
    "palm-540B": _shape(18432, 73728, 2048, 48, 256, 118),
    "turing-530B": _shape(20480, 81920, 2048, 128, 160, 105),
}


class Chooser(Protocol):
    """Source of choices: ``random.Random`` for the corpus, hypothesis for property tests."""

    def choice(self, options: Sequence[T]) -> T: ...

    def integer(self, low: int, high: int) -> int: ...


class RandomChooser:
    """A :class:`Chooser` over ``random.Random(seed)`` (reproducible)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One drawn configuration: our input and its Calculon-format JSON."""

    shape_name: str
    input: EstimateInput
    calculon_model: dict[str, Any]
    calculon_execution: dict[str, Any]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def profile_datatypes(system: str) -> list[str]:
    """Datatypes the profile has both a matrix and a vector engine for, sorted."""
    profile = load_profile(system)
    return sorted(set(profile.matrix) & set(profile.vector))


def draw_shape(chooser: Chooser) -> TransformerShape:
    """A small random shape (fast to reason about, still hits every rule)."""
    heads = chooser.choice((1, 2, 4, 8, 12, 16, 32))
    head_size = chooser.choice((16, 32, 64, 128))
    hidden = heads * head_size * chooser.choice((1, 1, 2))
    return _shape(hidden, hidden * chooser.choice((1, 2, 4)), chooser.choice((128, 512, 2048)), heads, head_size,
                  chooser.integer(1, 48))


def _pipeline(chooser: Chooser, blocks: int) -> int:
    mode = chooser.choice(("one", "divisor", "divisor", "any"))
    if mode == "one" or blocks == 1:
        return 1
    if mode == "divisor":
        return chooser.choice(divisors(blocks)[1:])
    return chooser.integer(2, min(blocks, 64))


def draw_overlap_options(chooser: Chooser, execution: dict[str, Any]) -> dict[str, Any]:
    """TP/DP overlap and offload switches for a drawn layout (at least one on).

    Each option is drawn only where Calculon accepts it; when every draw is
    off, one of the accepted options is switched on.
    """
    training, tp, dp = execution["training"], execution["tensor_parallel"], execution["data_parallel"]
    tp_overlap = chooser.choice(("none", "ring", "pipe")) if tp > 1 else "none"
    dp_overlap = chooser.choice((False, True)) if training and dp > 1 else False
    offload = {"weights": chooser.choice((False, True)), "activations": chooser.choice((False, True)),
               "optimizer": chooser.choice((False, True)) if training else False}
    if tp_overlap == "none" and not dp_overlap and not any(offload.values()):
        accepted = ["weights", "activations"] + (["optimizer"] if training else []) + \
            (["ring", "pipe"] if tp > 1 else []) + (["dp"] if training and dp > 1 else [])
        pick = chooser.choice(accepted)
        if pick in ("ring", "pipe"):
            tp_overlap = pick
        elif pick == "dp":
            dp_overlap = True
        else:
            offload[pick] = True
    return {"tp_overlap": tp_overlap, "dp_overlap": dp_overlap, "offload": offload}


def draw_configuration(chooser: Chooser, shape_name: str | None = None, shape: TransformerShape | None = None,
                       systems: Sequence[str] = PROFILES, overlap: bool = False) -> Configuration:
    """Draw one valid configuration (see the module rules).

    Without ``shape`` the shape is ``EXAMPLE_SHAPES[shape_name]`` (drawn when
    ``shape_name`` is None too). ``overlap`` adds :func:`draw_overlap_options`
    after every other draw.
    """
    if shape is None:
        shape_name = shape_name or chooser.choice(sorted(EXAMPLE_SHAPES))
        shape = EXAMPLE_SHAPES[shape_name]
    system = chooser.choice(tuple(systems))
    training = chooser.choice((True, True, True, False))
    tp = chooser.choice([t for t in (1, 1, 2, 4, 8, 8, 16)
                         if not (shape.hidden % t or shape.feedforward % t or shape.attention_heads % t)])
    pp = _pipeline(chooser, shape.blocks)
    dp = chooser.choice((1, 1, 2, 4, 8, 16, 32))
    microbatch = chooser.choice((1, 1, 2, 4))
    microbatches = chooser.choice((1, 2, 3, 4, 8, 16, 32, 64) if training else (1, 2, 4))
    per_stage = blocks_per_stage(shape.blocks, pp)
    interleaving = 1 if pp == 1 else chooser.choice([1, 1, *divisors(per_stage)])
    recompute = chooser.choice(("full", "attn_only", "none")) if training else "none"
    tp_comm = chooser.choice(("ar", "p2p_rs_ag", "rs_ag"))
    redo = chooser.choice((False, True)) if tp_comm == "rs_ag" and recompute != "full" else False
    execution = {
        "tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp,
        "global_batch": dp * microbatch * microbatches, "microbatch": microbatch,
        "pipeline_interleaving": interleaving, "datatype": chooser.choice(profile_datatypes(system)),
        "recompute": recompute, "tp_communication": tp_comm, "seq_par_ag_redo": redo,
        "optimizer_sharding": chooser.choice((False, True)) if dp > 1 else False,
        "fused_activation": chooser.choice((False, True)),
        "attention": chooser.choice(("multihead", "multiquery")),
        "network_tiers": {"tensor": chooser.choice((0, 0, 0, 1) if tp <= 8 else (0, 1, 1, 1)), "pipeline": chooser.choice((0, 1, 1, 1, 1, 1)),
                          "data": chooser.choice((0, 1, 1, 1, 1, 1))},
        "training": training,
    }
    if overlap:
        execution.update(draw_overlap_options(chooser, execution))
    data = EstimateInput.model_validate({"model": shape.model_dump(), "system": system, "execution": execution})
    validate_input(f"configuration draw ({shape_name or 'random shape'})", data)
    model, execution = calculon_from_input(data)
    return Configuration(shape_name or "random", data, model, execution)


FEATURES = {
    "training": lambda d: d.execution.training,
    "inference": lambda d: not d.execution.training,
    "recompute full": lambda d: d.execution.recompute == "full",
    "recompute attn_only": lambda d: d.execution.recompute == "attn_only",
    "recompute none (training)": lambda d: d.execution.training and d.execution.recompute == "none",
    "tp ar": lambda d: d.execution.tensor_parallel > 1 and d.execution.tp_communication == "ar",
    "tp p2p_rs_ag": lambda d: d.execution.tensor_parallel > 1 and d.execution.tp_communication == "p2p_rs_ag",
    "tp rs_ag": lambda d: d.execution.tensor_parallel > 1 and d.execution.tp_communication == "rs_ag",
    "all-gather redo": lambda d: d.execution.seq_par_ag_redo,
    "dp without optimizer sharding": lambda d: d.execution.data_parallel > 1 and not d.execution.optimizer_sharding,
    "dp with optimizer sharding": lambda d: d.execution.optimizer_sharding,
    "multiquery attention": lambda d: d.execution.attention == "multiquery",
    "fused activation": lambda d: d.execution.fused_activation,
    "float8": lambda d: d.execution.datatype == "float8",
    "pp interleaving": lambda d: d.execution.pipeline_interleaving > 1,
    "blocks not divisible by pp": lambda d: d.model.blocks % d.execution.pipeline_parallel != 0,
    "tp on tier 1": lambda d: d.execution.tensor_parallel > 1 and d.execution.network_tiers.tensor == 1,
    "pp on tier 0": lambda d: d.execution.pipeline_parallel > 1 and d.execution.network_tiers.pipeline == 0,
    "dp on tier 0": lambda d: d.execution.data_parallel > 1 and d.execution.network_tiers.data == 0,
}


OVERLAP_FEATURES = {
    **FEATURES,
    "tp overlap ring": lambda d: d.execution.tp_overlap == "ring",
    "tp overlap pipe": lambda d: d.execution.tp_overlap == "pipe",
    **{f"tp overlap with {c}": (lambda c: lambda d: d.execution.tp_overlap != "none"
                                 and d.execution.tp_communication == c)(c) for c in ("ar", "p2p_rs_ag", "rs_ag")},
    "tp overlap multiquery": lambda d: d.execution.tp_overlap != "none" and d.execution.attention == "multiquery",
    "tp overlap all-gather redo": lambda d: d.execution.tp_overlap != "none" and d.execution.seq_par_ag_redo,
    **{f"tp overlap recompute {r}": (lambda r: lambda d: d.execution.tp_overlap != "none" and d.execution.training
                                     and d.execution.recompute == r)(r) for r in ("full", "attn_only", "none")},
    "dp overlap": lambda d: d.execution.dp_overlap,
    "dp overlap with optimizer sharding": lambda d: d.execution.dp_overlap and d.execution.optimizer_sharding,
    "dp overlap without optimizer sharding": lambda d: d.execution.dp_overlap and not d.execution.optimizer_sharding,
    "dp overlap, dp and pp on one tier": lambda d: d.execution.dp_overlap
    and d.execution.network_tiers.data == d.execution.network_tiers.pipeline,
    "dp overlap, dp and pp on one tier, pp = 1": lambda d: d.execution.dp_overlap and d.execution.pipeline_parallel == 1
    and d.execution.network_tiers.data == d.execution.network_tiers.pipeline,
    "dp overlap, dp and tp on one tier": lambda d: d.execution.dp_overlap
    and d.execution.network_tiers.data == d.execution.network_tiers.tensor,
    "dp overlap with interleaving": lambda d: d.execution.dp_overlap and d.execution.pipeline_interleaving > 1,
    **{f"offload {'+'.join(k for k, on in zip(('weights', 'activations', 'optimizer'), combo) if on) or 'none'}":
       (lambda combo: lambda d: (d.execution.offload.weights, d.execution.offload.activations,
                                 d.execution.offload.optimizer) == combo)(combo)
       for combo in ((w, a, o) for w in (False, True) for a in (False, True) for o in (False, True))},
    "activation offload with full recompute": lambda d: d.execution.offload.activations
    and d.execution.recompute == "full",
    "offload in inference": lambda d: not d.execution.training
    and (d.execution.offload.weights or d.execution.offload.activations),
}


def feature_counts(inputs: Sequence[EstimateInput], features: dict = FEATURES) -> dict[str, int]:
    """How many inputs exercise each of ``features`` (default :data:`FEATURES`), each shape and each profile."""
    counts = {name: sum(1 for d in inputs if test(d)) for name, test in features.items()}
    names = {shape: name for name, shape in EXAMPLE_SHAPES.items()}
    for name in EXAMPLE_SHAPES:
        counts[f"shape {name}"] = 0
    for d in inputs:
        if d.model in names:
            counts[f"shape {names[d.model]}"] += 1
    for system in PROFILES:
        counts[f"profile {system}"] = sum(1 for d in inputs if d.system == system)
    return counts
