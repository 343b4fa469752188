"""Importer: nccl-tests ``*_perf`` output as collective sweeps, and sweeps as network curves.

Two input forms are read (one table per file):

- nccl-tests' own output (``all_reduce_perf -b 1M -e 1G ...``): comment lines
  start with ``#``; a data line is ``size count type redop root time algbw
  busbw #wrong time algbw busbw #wrong`` (out-of-place then in-place; times in
  microseconds; ``redop``/``root`` are absent for all_gather);
- the comma-separated form vTrain publishes (``AR_GPU8_1M_1024M_LUT``):
  header ``size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)``.

Rules:

- the measured time of a size is the faster of the out-of-place and in-place
  runs; sizes must strictly increase;
- the participant count is read from the table itself: nccl-tests defines
  ``busbw = algbw x factor`` with ``algbw = size / time`` and, for
  all_reduce, ``factor = 2 (n - 1) / n`` (reduce_scatter and all_gather:
  ``(n - 1) / n``), so every line gives ``n``; all lines must agree, and an
  explicit ``participants`` must match;
- a line that cannot be read is one InputError naming the file, line and
  column.

Curves (family ``collective_curves``): for a tier of a base profile with
latency ``L``, bandwidth ``B`` and the collective's volume model ``adjusted =
size x m x (1 + offset / n)``, the efficiency that reproduces a measured
time ``t`` is ``adjusted / ((t - L) x B)``. The curve keeps the physics
monotone: the efficiency is made non-decreasing in the size (pool adjacent
violators, least squares; a larger message never gets a smaller share of the
bandwidth), capped at 1, then thinned to points a quarter octave apart
(interpolated in log size, :class:`~harness.evidence.families.CollectiveCurve`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from harness.errors import InputError
from harness.evidence.families import MIN_EFFICIENCY, CollectiveCurve, SizePoint
from harness.evidence.profile import NetworkTier
from harness.inputs import finite_number, iter_lines
from harness.measurements.corpus import CollectiveSweepRecord

FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
           "all_gather": lambda n: (n - 1) / n}
CSV_HEADER = re.compile(r"^size\(B\),count,type,time\(ns\),busbw\(GB/s\),time\(ns\),busbw\(GB/s\)\s*$")
POINTS_PER_OCTAVE = 4


def _participants(collective: str, size: float, time_s: float, busbw_gb_s: float) -> float:
    """``n`` from ``busbw / algbw`` (see the module rules)."""
    ratio = busbw_gb_s * 1e9 * time_s / size
    if collective == "all_reduce":
        return 2 / (2 - ratio) if ratio < 2 else math.inf
    return 1 / (1 - ratio) if ratio < 1 else math.inf


def sweep_ids(paths: list[Path]) -> list[str]:
    """The record ids of the sweeps of ``paths``, unique: each file's name, or, when two names are the same,
    each file's path relative to the files' common parent directory (``d1/ar.txt``, ``d2/ar.txt``). The same
    file given twice is an InputError naming both arguments."""
    resolved = [Path(os.path.realpath(p)) for p in paths]
    seen: dict[Path, Path] = {}
    for given, real in zip(paths, resolved):
        if real in seen:
            raise InputError(str(given), "FILE", f"the same file as {seen[real]} (given twice: each table is one "
                                                 "sweep with a unique id)")
        seen[real] = given
    names = [p.name for p in resolved]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([p.parent for p in resolved]))
    return [p.relative_to(common).as_posix() for p in resolved]


def parse_nccl_tests(path: Path | str, collective: str, network_tier: int,
                     participants: int | None = None, record_id: str | None = None) -> CollectiveSweepRecord:
    """One file's table as a collective sweep record (see the module rules); its id is ``record_id``, else the
    file's name (:func:`sweep_ids` makes the ids of several files unique)."""
    if collective not in FACTORS:
        raise InputError(str(path), "collective", f"{collective!r}: nccl-tests tables are read for "
                                                  f"{', '.join(FACTORS)}")
    source = str(path)
    sizes, times, counts = [], [], []
    csv_form = None
    for item in iter_lines(path):
        if item.error is not None:
            raise item.error
        text = item.text.strip()
        if not text or text.startswith("#"):
            continue
        if csv_form is None and CSV_HEADER.match(text):
            csv_form = True
            continue
        if csv_form:
            cells = [c.strip() for c in text.split(",")]
            if len(cells) != 7:
                raise InputError(source, f"line {item.number}", f"{len(cells)} fields, the header has 7")
            names = ("size(B)", "count", "type", "time(ns)", "busbw(GB/s)", "time(ns) in-place", "busbw(GB/s) in-place")
            size, time_a, bus_a, time_b, bus_b = (cells[0], cells[3], cells[4], cells[5], cells[6])
            scale = 1e-9
            columns = (names[0], names[3], names[4], names[5], names[6])
        else:
            cells = text.split()
            if len(cells) not in (11, 13) or not cells[0].isdigit():
                raise InputError(source, f"line {item.number}", "not an nccl-tests data line (size count type "
                                                                "[redop root] time algbw busbw #wrong time algbw "
                                                                "busbw #wrong)")
            offset = 0 if len(cells) == 13 else -2
            size, time_a, bus_a = cells[0], cells[5 + offset], cells[7 + offset]
            time_b, bus_b = cells[9 + offset], cells[11 + offset]
            scale = 1e-6
            columns = ("size", "time (out-of-place)", "busbw (out-of-place)", "time (in-place)", "busbw (in-place)")
            csv_form = False
        line = item.number
        size_b = finite_number(size, source, columns[0], line=line, minimum=1)
        ta = finite_number(time_a, source, columns[1], line=line, minimum=0) * scale
        tb = finite_number(time_b, source, columns[3], line=line, minimum=0) * scale
        ba = finite_number(bus_a, source, columns[2], line=line, minimum=0)
        bb = finite_number(bus_b, source, columns[4], line=line, minimum=0)
        if not (ta > 0 and tb > 0):
            raise InputError(source, columns[1], "measured times must be positive", line=line)
        if sizes and not size_b > sizes[-1]:
            raise InputError(source, columns[0], f"sizes must strictly increase ({size_b:g} after {sizes[-1]:g})",
                             line=line)
        best, bus = (ta, ba) if ta <= tb else (tb, bb)
        counts.append((line, _participants(collective, size_b, best, bus)))
        sizes.append(size_b)
        times.append(best)
    if not sizes:
        raise InputError(source, "<file>", "no nccl-tests data line")
    estimates = [n for _, n in counts if math.isfinite(n)]
    if not estimates:
        raise InputError(source, "busbw", "the bus bandwidths do not match any participant count")
    found = round(float(np.median(estimates)))
    for line, n in counts:
        if not abs(n - found) <= 0.25 * found:
            raise InputError(source, "busbw", f"this line's bus bandwidth implies {n:.3g} participants, the table "
                                              f"{found}", line=line)
    if found < 2:
        raise InputError(source, "busbw", f"the table implies {found} participants (at least 2)")
    if participants is not None and participants != found:
        raise InputError(source, "--participants", f"{participants} given, the table's bus bandwidths imply {found}")
    return CollectiveSweepRecord(kind="collective_sweep", id=record_id or Path(source).name, collective=collective,
                                 participants=found, network_tier=network_tier, sizes_bytes=tuple(sizes),
                                 measured_s=tuple(times), note="nccl-tests; the faster of out-of-place and in-place")


def _non_decreasing(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks])


def sweep_curve(sweep: CollectiveSweepRecord, tier: NetworkTier, source: str) -> CollectiveCurve:
    """The tier's efficiency curve that reproduces ``sweep`` (see the module rules)."""
    model = tier.collectives[sweep.collective]
    sizes = np.array(sweep.sizes_bytes)
    times = np.array(sweep.measured_s)
    if np.any(times <= tier.latency_s):
        raise InputError(source, "measured_s", f"a measured time is not above the tier's latency {tier.latency_s} s")
    adjusted = sizes * model.volume_multiplier
    adjusted = adjusted + adjusted / sweep.participants * model.participant_offset
    efficiency = np.minimum(_non_decreasing(adjusted / ((times - tier.latency_s) * tier.bandwidth_bytes_per_s)), 1.0)
    octaves = np.log2(sizes / sizes[0]) * POINTS_PER_OCTAVE
    keep = [0]
    for i in range(1, len(sizes)):
        if np.floor(octaves[i]) > np.floor(octaves[keep[-1]]) or i == len(sizes) - 1:
            keep.append(i)
    points = tuple(SizePoint(size_bytes=float(sizes[i]), efficiency=float(max(efficiency[i], MIN_EFFICIENCY)))
                   for i in keep)
    return CollectiveCurve(participants=sweep.participants, points=points,
                           source=f"{sweep.id}: {sweep.collective} on tier {sweep.network_tier}, "
                                  f"{sweep.participants} participants ({sweep.note})")


#: A ring all-reduce is a reduce-scatter followed by an all-gather over the same ring: each half moves
#: ``(n - 1) / n`` of the message per processor (the all-reduce ``2 (n - 1) / n``) in ``n - 1`` of its
#: ``2 (n - 1)`` steps, so each takes half of the all-reduce's measured time at the same message size.
HALVES_OF_ALL_REDUCE = ("reduce_scatter", "all_gather")


def derived_sweeps(sweeps) -> tuple[CollectiveSweepRecord, ...]:
    """Reduce-scatter and all-gather sweeps derived from the all-reduce sweeps (see
    :data:`HALVES_OF_ALL_REDUCE`), for every tier and participant count that has no measured sweep of
    that collective (a measured sweep always wins)."""
    measured = {(s.collective, s.network_tier, s.participants) for s in sweeps}
    out = []
    for sweep in sweeps:
        if sweep.collective != "all_reduce":
            continue
        for collective in HALVES_OF_ALL_REDUCE:
            if (collective, sweep.network_tier, sweep.participants) in measured:
                continue
            out.append(sweep.model_copy(update={
                "collective": collective, "measured_s": tuple(t / 2 for t in sweep.measured_s),
                "note": f"derived: half the all_reduce time of the same message ({sweep.note})"}))
    return tuple(out)


def with_sweeps(profile, sweeps, source: str = "<sweeps>"):
    """``profile`` with the curves of ``sweeps`` on their tiers (a tier's curve for the same collective and
    participant count is replaced; others are kept)."""
    networks = list(profile.networks)
    for sweep in sweeps:
        if sweep.network_tier >= len(networks):
            raise InputError(source, "network_tier", f"tier {sweep.network_tier} does not exist in evidence profile "
                                                     f"{profile.name} ({len(networks)} tiers)")
        tier = networks[sweep.network_tier]
        curve = sweep_curve(sweep, tier, source)
        measured = dict(tier.measured_collectives or {})
        kept = tuple(c for c in measured.get(sweep.collective, ()) if c.participants != curve.participants)
        measured[sweep.collective] = tuple(sorted(kept + (curve,), key=lambda c: c.participants))
        networks[sweep.network_tier] = tier.model_copy(update={"measured_collectives": measured})
    return profile.model_copy(update={"networks": tuple(networks)})
