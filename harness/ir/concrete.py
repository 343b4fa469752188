"""ConcretePlanIR: the portable plan bound to queues, with tiles and buffers.

Where the PortablePlanIR says *what* work one block does, the ConcretePlanIR
says *on which resource and after what* it runs, so that TP/DP overlap and
offload are explicit concurrency instead of an overlap ratio:

- **queues**: the processor's ``compute`` queue; one ``network.tierN`` queue
  per network tier a parallel dimension uses (dimensions placed on the same
  tier share one queue, which is where their traffic conflicts); the
  ``memory.tier2`` link when something is offloaded;
- **programs**: the commands of one block for one microbatch, per block kind
  (``base``, and the chunk's ``edge`` block, which differs in its TP
  collectives and sends the pipeline boundary) and direction (``forward``;
  ``backward`` in training: recomputation, recommunication, activation and
  weight gradients), plus the per-block ``optimizer`` program, the per-block
  ``data_parallel`` program and the per-block ``offload`` programs;
- **commands**: a compute command runs one pass of one plan task (or one tile
  of it); a collective or p2p command sends one message (or one tile of it);
  a transfer command moves bytes over the tier-2 link. Each names the
  component its busy time belongs to and the commands it waits for;
- **tiles**: an overlapped GEMM/collective pair (TP overlap) is split into
  ``tiles`` steps: a GEMM tile's flop phase runs while the step's network
  tile is in flight, its memory phase after both (the network tile and the
  memory phase share the memory tier); ``ring`` sends ``tiles - 1`` network
  tiles (the first GEMM tile works on local data), ``pipe`` sends ``tiles``,
  the first one before any GEMM tile;
- **buffers**: every memory figure of the first stage with the bytes resident
  in memory tier 1 and in tier 2 (offloaded figures keep a staging copy in
  tier 1 and the whole figure in tier 2).

The plan's tasks are kept (``tasks``) so that a projection can name the work
a command runs; nothing here holds a duration. Two projections read it:
``calculon-0.1.0`` (:mod:`harness.schedule.projection`, Calculon's closed
forms, what the estimate reports) and ``physical``
(:mod:`harness.schedule.physical`, the list schedule of the commands).
"""


from typing import ClassVar, Literal

from pydantic import Field

from harness.ir.base import Artifact, Frozen
from harness.ir.model import Datatype, Offload
from harness.ir.portable import DataParallelTraffic, Message, PipelineTraffic, PlanTask, Schedule, Work
from harness.vocabulary import COMPONENTS

QueueKind = Literal["compute", "network", "memory_tier2"]
CommandKind = Literal["compute", "collective", "p2p", "transfer"]
PassName = Literal["forward", "activation_grad", "weight_grad", "optimizer"]
#: Timing components a command's busy time belongs to: every one of harness.vocabulary but the bubble (idle
#: time, no command's).
Component = Literal[tuple(name for name in COMPONENTS if COMPONENTS.kind(name) != "bubble")]
ProgramKind = Literal["forward", "backward", "optimizer", "data_parallel", "forward_offload", "backward_offload"]


class Queue(Frozen):
    """A resource that runs one command at a time."""

    INTERNED: ClassVar[bool] = True

    name: str = Field(description="compute, network.tierN or memory.tier2.")
    kind: QueueKind = Field(description="What the queue is.")
    network_tier: int | None = Field(description="Network tier index (network queues).")
    dimensions: tuple[str, ...] = Field(description="Parallel dimensions whose traffic it carries (network queues).")


class Command(Frozen):
    """One unit of work on one queue."""

    name: str = Field(description="Unique within its program, e.g. attn.qkv_ag/forward/tile2.gemm.")
    queue: str = Field(description="Queue name.")
    kind: CommandKind = Field(description="compute, collective, p2p or transfer.")
    task: str = Field(description="Plan task it runs or sends for (pipeline, data_parallel, offload for plan-level traffic).")
    pass_name: PassName = Field(description="Pass of the plan task.")
    component: Component = Field(description="Timing component its busy time belongs to.")
    phase: Literal["whole", "flops", "memory"] = Field(
        description="Compute: the whole pass, or the flop or memory phase of a GEMM tile.")
    tile: int = Field(ge=0, description="Tile index (0 when untiled).")
    tiles: int = Field(gt=0, description="Tiles the pass is split into (1 when untiled); a tile is 1/tiles of it.")
    work: Work | None = Field(description="The whole pass's work (compute commands); a tile runs 1/tiles of it.")
    message: Message | None = Field(description="The whole message (network commands); a tile sends 1/tiles of it.")
    reduction_operations: float = Field(ge=0, description="Local reduction of the whole collective, vector operations.")
    transfer_bytes: float = Field(ge=0, description="Bytes moved over the tier-2 link (transfer commands).")
    depends_on: tuple[str, ...] = Field(description="Commands of the same program it waits for.")


class Program(Frozen):
    """The commands of one block (or one stage step), in issue order."""

    kind: ProgramKind = Field(description="What the program is.")
    block: Literal["base", "edge", "any"] = Field(description="Block kind it is the program of.")
    commands: tuple[Command, ...] = Field(description="Commands in issue order (dependencies point backwards).")


class Buffer(Frozen):
    """One memory figure of a first-stage processor and where it lives."""

    name: Literal["weight", "activation", "activation_checkpoint", "weight_grad", "activation_grad",
                  "optimizer"] = Field(description="Memory figure.")
    total_bytes: float = Field(ge=0, description="The whole figure (what tier 1 holds without offload).")
    offloaded: bool = Field(description="Lives in memory tier 2, staged through tier 1.")
    tier1_bytes: float = Field(ge=0, description="Bytes resident in memory tier 1.")
    tier2_bytes: float = Field(ge=0, description="Bytes resident in memory tier 2.")


class ConcreteOptions(Frozen):
    """The concurrency the layout asks for."""

    tp_overlap: Literal["none", "ring", "pipe"] = Field(description="TP GEMM/collective tiling.")
    dp_overlap: bool = Field(description="DP gradient sync overlapped with the backward pass.")
    offload: Offload = Field(description="What lives in memory tier 2.")
    expert_overlap: bool | None = Field(None, description=(
        "The expert all-to-alls overlapped with another microbatch's compute (the layout's expert_overlap); "
        "absent: exposed."))

    #: plans without it keep their digests
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset({"expert_overlap"})

    @property
    def concurrent(self) -> bool:
        return (self.tp_overlap != "none" or self.dp_overlap or self.offload.any_offloaded
                or bool(self.expert_overlap))


class ConcretePlanIR(Artifact):
    """The plan bound to queues (see the module rules)."""

    SCHEMA_NAME: ClassVar[str] = "blueprinting.concrete-plan-ir"
    SCHEMA_VERSION: ClassVar[int] = 0

    datatype: Datatype = Field(description="Element datatype.")
    bytes_per_element: int = Field(gt=0, description="Bytes per element.")
    options: ConcreteOptions = Field(description="TP overlap, DP overlap and offload.")
    tp_tiles: int = Field(gt=0, description="Tiles of each overlapped GEMM/collective pair (the TP degree; 1 without overlap).")
    queues: tuple[Queue, ...] = Field(description="Queues of one processor.")
    tasks: tuple[PlanTask, ...] = Field(description="The plan's tasks (commands name them).")
    programs: tuple[Program, ...] = Field(description="Block programs (see the module rules).")
    buffers: tuple[Buffer, ...] = Field(description="Memory figures of a first-stage processor by tier.")
    schedule: Schedule = Field(description="Schedule shape (from the plan).")
    pipeline: PipelineTraffic = Field(description="Pipeline boundary traffic (from the plan).")
    data_parallel: DataParallelTraffic | None = Field(description="DP gradient traffic (from the plan).")
    queue_of: dict[str, str] = Field(description="Queue of each parallel dimension's traffic and of offload.")

    def program(self, kind: str, block: str = "any") -> Program | None:
        for program in self.programs:
            if program.kind == kind and program.block in (block, "any"):
                return program
        return None

    @property
    def tier1_total_bytes(self) -> float:
        return tier_total_bytes(self.buffers, 1)

    @property
    def tier2_total_bytes(self) -> float:
        return tier_total_bytes(self.buffers, 2)


def tier_total_bytes(buffers: tuple[Buffer, ...], tier: int) -> float:
    """Bytes the buffers keep resident in memory ``tier`` (1 or 2), summed in buffer order."""
    total = 0.0
    for b in buffers:
        total += b.tier1_bytes if tier == 1 else b.tier2_bytes
    return total
