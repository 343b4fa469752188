"""The time-memory Pareto frontier of a search, and its plot.

Rules:

- time is time per sample (1 / sample rate: comparable across the batch
  sizes of different DP degrees); memory is the per-processor tier-1
  requirement of the first stage;
- an execution is on the frontier when no other feasible execution needs at
  most its memory at a higher sample rate, or less memory at the same rate;
  of equal (rate, memory) pairs the first in search order stays;
- the frontier of a union is the frontier of the union of the parts'
  frontiers, so each group returns its own and the driver merges them (the
  result does not depend on the split);
- the plot shows every feasible evaluated execution (memory in GiB against
  samples per second), the frontier as a step line, the top K as stars, and the
  memory-tier-1 capacity; its title names the model file, processors, batch,
  profile and evidence revision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from harness.outputs import atomic_output
from harness.search.results import Candidate

GIB = 1024**3


def pareto_frontier(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The frontier (see the module rules), by memory ascending."""
    ordered = sorted(candidates, key=lambda c: (c.memory_bytes["tier1_total"], -c.rate, c.group, c.position))
    out: list[Candidate] = []
    for c in ordered:
        if not out or c.rate > out[-1].rate:
            out.append(c)
    return out


def write_plot(path: Path, rates: np.ndarray | None, memory: np.ndarray | None, frontier: list[Candidate],
               best: list[Candidate], capacity_bytes: float, title: str) -> None:
    """The PNG of the evaluated space (see the module rules)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 6), dpi=110)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    if rates is not None and len(rates):
        ax.scatter(memory / GIB, rates, s=3, c="#9ecae1", alpha=0.5, linewidths=0, rasterized=True,
                   label=f"feasible executions ({len(rates):,})")
    if frontier:
        xs = [c.memory_bytes["tier1_total"] / GIB for c in frontier]
        ys = [c.rate for c in frontier]
        ax.step(xs, ys, where="post", color="#e6550d", linewidth=1.5, label=f"Pareto frontier ({len(frontier)})")
        ax.scatter(xs, ys, s=14, color="#e6550d", zorder=3)
    if best:
        ax.scatter([c.memory_bytes["tier1_total"] / GIB for c in best], [c.rate for c in best], marker="*", s=120,
                   color="#31a354", edgecolors="black", linewidths=0.5, zorder=4, label=f"top {len(best)}")
    ax.axvline(capacity_bytes / GIB, color="gray", linestyle="--", linewidth=1, label="memory tier 1 capacity")
    ax.set_xlabel("memory tier 1 per processor (GiB)")
    ax.set_ylabel("sample rate (samples/s)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    with atomic_output(path, "wb", option="--plot") as handle:
        figure.savefig(handle, format="png")
