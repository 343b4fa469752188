"""Pass infrastructure: typed passes, checkpoints, textual pipelines.

After xDSL's ``ModulePass`` / ``PassPipeline`` and torch.fx's ``PassBase``:

- a pass is a small frozen dataclass with a ``name`` and *typed options*
  (its dataclass fields: ``bool``, ``int``, ``float``, ``str``, a
  ``Literal`` of those or a tuple of them, each with a default), checked when
  the pass is built;
- it states what it *requires* of its input and what it *ensures* of its
  output; both are checked around ``apply`` and a failure raises
  :class:`PassError` naming the pass;
- every run emits a :class:`PassCheckpoint` (schema, pass, options, input and
  output digests) so a profiler or checker can consume the exact lowering
  boundary;
- a pipeline is written as text, passes by name with their options
  (``transformer-distribute{block=attention,mlp},transformer-plan-work``:
  options separated by spaces, tuple values by commas, option names with
  ``-`` or ``_``), parsed by :func:`parse_pipeline` against a registry of pass
  classes; consecutive passes must chain (one's output IR type is the next
  one's input type).

Options in a checkpoint and in :meth:`ModulePass.spec` are those that differ
from the pass's defaults (xDSL's pipeline-spec convention), so
``parse_pipeline(pass_.spec())`` rebuilds the same pass and a pass at its
defaults records ``{}``.
"""


import dataclasses
import re
import types
import typing
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, Mapping, TypeVar

from pydantic import Field

from harness import session
from harness.errors import PassError
from harness.ir.base import Artifact

In = TypeVar("In", bound=Artifact)
Out = TypeVar("Out", bound=Artifact)
P = TypeVar("P", bound="ModulePass")

_SCALARS = (bool, int, float, str)


class PassCheckpoint(Artifact):
    """The immutable record of one pass application."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.pass-checkpoint"
    SCHEMA_VERSION: ClassVar[int] = 0

    pass_name: str = Field(description="Name of the pass that ran.")
    pass_options: dict[str, Any] = Field(description="The pass's options that differ from its defaults "
                                                     "({}: every option at its default).")
    input_schema: str = Field(description="Schema name of the input IR.")
    input_digest: str = Field(description="SHA-256 of the input IR's canonical form.")
    output_schema: str = Field(description="Schema name of the output IR.")
    output_digest: str = Field(description="SHA-256 of the output IR's canonical form.")


def _hints(cls: type) -> dict[str, Any]:
    """A pass class's resolved field annotations (``typing.get_type_hints`` evaluates the string annotations each
    call: a pass built per estimate, like ``transformer-concretize``, paid it every time), derived once and
    stored on the class (:func:`harness.session.derived`)."""
    return session.derived(cls, "_harness_type_hints", typing.get_type_hints)


@dataclasses.dataclass(frozen=True)
class ModulePass(ABC, Generic[In, Out]):
    """A typed transformation from one IR to the next; its dataclass fields are its options."""

    name: ClassVar[str]

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not _is_option(value, hints[field.name]):
                raise self.fail(f"option {field.name}: {value!r} is not a {_describe(hints[field.name])}")
        self.check_options()

    def check_options(self) -> None:
        """Raise (via :meth:`fail`) when the options' values are not usable (types are already checked)."""

    def fail(self, message: str) -> PassError:
        return PassError(self.name, message)

    def requires(self, ir: In) -> None:
        """Raise (via :meth:`fail`) when the input does not meet the pass's needs."""

    def ensures(self, ir: Out) -> None:
        """Raise (via :meth:`fail`) when the output breaks an invariant."""

    @abstractmethod
    def apply(self, ir: In) -> Out:
        """The transformation itself; pure."""

    def options(self, include_defaults: bool = False) -> dict[str, Any]:
        """The options by name (only those that differ from the defaults unless ``include_defaults``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if include_defaults or getattr(self, f.name) != f.default}

    def spec(self) -> str:
        """The pass in the textual pipeline syntax, e.g. ``transformer-distribute{block=attention,mlp}``."""
        options = " ".join(f"{k.replace('_', '-')}={_format(v)}" for k, v in self.options().items())
        return f"{self.name}{{{options}}}" if options else self.name

    @classmethod
    def from_options(cls: type[P], options: Mapping[str, str]) -> P:
        """The pass with textual option values converted to their field types (unknown options refused)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = _hints(cls)
        values = {}
        for raw, text in options.items():
            key = raw.replace("-", "_")
            if key not in fields:
                raise PassError(cls.name, f"unknown option {raw!r} (options: {', '.join(fields) or 'none'})")
            values[key] = _parse(text, hints[key], cls.name, raw)
        return cls(**values)

    @classmethod
    def ir_types(cls) -> tuple[type[Artifact], type[Artifact]]:
        """The (input, output) IR classes of the pass, from its ``ModulePass[In, Out]`` base."""
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is ModulePass:
                return typing.get_args(base)
        return next(b for b in cls.__mro__[1:] if issubclass(b, ModulePass) and b is not ModulePass).ir_types()

    def run(self, ir: In) -> tuple[Out, PassCheckpoint]:
        self.requires(ir)
        out = self.apply(ir)
        self.ensures(out)
        return out, self.checkpoint(ir, out)

    def checkpoint(self, ir: In, out: Out) -> PassCheckpoint:
        """The record of this pass having turned ``ir`` into ``out``."""
        return PassCheckpoint(
            pass_name=self.name,
            pass_options=self.options(),
            input_schema=ir.SCHEMA_NAME,
            input_digest=ir.digest(),
            output_schema=out.SCHEMA_NAME,
            output_digest=out.digest(),
        )


def _is_option(value: Any, annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Literal:
        return any(value == choice and type(value) is type(choice) for choice in typing.get_args(annotation))
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0]
        return isinstance(value, tuple) and all(_is_option(v, item) for v in value)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_option(value, a) for a in typing.get_args(annotation))
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return annotation in _SCALARS and isinstance(value, annotation)


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(annotation)))
    if typing.get_origin(annotation) is tuple:
        return f"tuple of {_describe(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


def _format(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(_format(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parse(text: str, annotation: Any, pass_name: str, option: str) -> Any:
    try:
        if typing.get_origin(annotation) is typing.Literal:
            for choice in typing.get_args(annotation):
                if _format(choice) == text:
                    return choice
            raise ValueError(text)
        if typing.get_origin(annotation) is tuple:
            item = typing.get_args(annotation)[0]
            return tuple(_parse(part, item, pass_name, option) for part in text.split(",") if part)
        if annotation is bool:
            return {"true": True, "false": False}[text.lower()]
        if annotation in (int, float, str):
            return annotation(text)
    except (KeyError, ValueError):
        pass
    raise PassError(pass_name, f"option {option}: {text!r} is not a {_describe(annotation)}")


_PASS_SPEC = re.compile(r"\s*(?P<name>[a-z][a-z0-9-]*)\s*(?:\{(?P<options>[^{}]*)\})?\s*(?:,|$)")


def parse_pipeline(text: str, registry: Mapping[str, type[ModulePass]]) -> tuple[ModulePass, ...]:
    """The passes of a textual pipeline (see the module rules), checked to chain; a bad spec is a PassError."""
    passes: list[ModulePass] = []
    position = 0
    while position < len(text):
        match = _PASS_SPEC.match(text, position)
        if match is None or match.end() == position:
            raise PassError("pipeline", f"cannot parse {text[position:]!r} in {text!r}")
        position = match.end()
        name = match.group("name")
        if name not in registry:
            raise PassError("pipeline", f"unknown pass {name!r} (known: {', '.join(sorted(registry))})")
        options = {}
        for item in (match.group("options") or "").split():
            key, sep, value = item.partition("=")
            if not sep:
                raise PassError(name, f"option {key!r} has no value (write {key}=VALUE)")
            options[key] = value
        passes.append(registry[name].from_options(options))
    if not passes:
        raise PassError("pipeline", "no pass in an empty pipeline")
    for first, second in zip(passes, passes[1:]):
        produced, expected = first.ir_types()[1], second.ir_types()[0]
        if produced is not expected:
            raise PassError("pipeline", f"{first.name} produces {produced.__name__} but {second.name} takes "
                                        f"{expected.__name__}")
    return tuple(passes)
