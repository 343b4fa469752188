"""Pass infrastructure.

After xDSL's ``ModulePass`` and torch.fx's ``PassBase``: a pass is a small
frozen dataclass with a ``name`` and typed options. It states what it
*requires* of its input and what it *ensures* of its output; both are checked
around ``apply`` and a failure raises :class:`PassError` naming the pass.
Every run emits a :class:`PassCheckpoint` (schema, pass, input and output
digests) so a profiler or checker can consume the exact lowering boundary.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import Field

from harness.errors import PassError
from harness.ir.base import Artifact

In = TypeVar("In", bound=Artifact)
Out = TypeVar("Out", bound=Artifact)


class PassCheckpoint(Artifact):
    """The immutable record of one pass application."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.pass-checkpoint"
    SCHEMA_VERSION: ClassVar[int] = 0

    pass_name: str = Field(description="Name of the pass that ran.")
    pass_options: dict[str, Any] = Field(description="The pass's options.")
    input_schema: str = Field(description="Schema name of the input IR.")
    input_digest: str = Field(description="SHA-256 of the input IR's canonical form.")
    output_schema: str = Field(description="Schema name of the output IR.")
    output_digest: str = Field(description="SHA-256 of the output IR's canonical form.")


@dataclasses.dataclass(frozen=True)
class ModulePass(ABC, Generic[In, Out]):
    """A typed transformation from one IR to the next."""

    name: ClassVar[str]

    def fail(self, message: str) -> PassError:
        return PassError(self.name, message)

    def requires(self, ir: In) -> None:
        """Raise (via :meth:`fail`) when the input does not meet the pass's needs."""

    def ensures(self, ir: Out) -> None:
        """Raise (via :meth:`fail`) when the output breaks an invariant."""

    @abstractmethod
    def apply(self, ir: In) -> Out:
        """The transformation itself; pure."""

    def run(self, ir: In) -> tuple[Out, PassCheckpoint]:
        self.requires(ir)
        out = self.apply(ir)
        self.ensures(out)
        return out, self.checkpoint(ir, out)

    def checkpoint(self, ir: In, out: Out) -> PassCheckpoint:
        """The record of this pass having turned ``ir`` into ``out``."""
        return PassCheckpoint(
            pass_name=self.name,
            pass_options=dataclasses.asdict(self),
            input_schema=ir.SCHEMA_NAME,
            input_digest=ir.digest(),
            output_schema=out.SCHEMA_NAME,
            output_digest=out.digest(),
        )
