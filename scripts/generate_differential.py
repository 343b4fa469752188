"""Generate the differential corpus inputs: seeded random Calculon-format configurations.

Usage (from the repository root)::

    python scripts/generate_differential.py [--seed 20240611] [--count 1500] \
        [--output vendor/calculon-0.1.0/differential/inputs.jsonl.gz]

Writes one ``{"id", "model", "execution", "system"}`` line per configuration
(Calculon field names, see harness.interop.calculon_batch), gzip-compressed
with a zero mtime, so the same seed and count give the same bytes. Shapes go
round-robin over the 13 example shapes; everything else is drawn by
harness.oracles.configspace.draw_configuration. Exits 1 when a feature of
harness.oracles.configspace.FEATURES is not exercised.

Then record Calculon's outputs (both views, no per-layer figures)::

    python -m harness oracle record --calculon-src ../calculon-src \
        --batch vendor/calculon-0.1.0/differential/inputs.jsonl.gz \
        --output records/differential.json.gz --no-layers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.interop.calculon_batch import batch_line_json
from harness.outputs import write_bytes
from harness.oracles.configspace import (
    EXAMPLE_SHAPES,
    FEATURES,
    OVERLAP_FEATURES,
    RandomChooser,
    draw_configuration,
    feature_counts,
)

DEFAULT_SEED = 20240611
DEFAULT_COUNT = 1500
DEFAULT_OUTPUT = Path("vendor/calculon-0.1.0/differential/inputs.jsonl.gz")
OVERLAP_SEED = 20261130
OVERLAP_COUNT = 3000
OVERLAP_OUTPUT = Path("vendor/calculon-0.1.0/overlap/inputs.jsonl.gz")


def generate(seed: int, count: int, overlap: bool = False) -> list[tuple[str, object]]:
    """``(line, configuration)`` pairs, ids ``differential/NNNN/<shape>`` (``overlap/NNNN/<shape>``)."""
    chooser = RandomChooser(seed)
    names = sorted(EXAMPLE_SHAPES)
    prefix = "overlap" if overlap else "differential"
    out = []
    for index in range(count):
        config = draw_configuration(chooser, names[index % len(names)], overlap=overlap)
        record_id = f"{prefix}/{index:04d}/{config.shape_name}"
        line = batch_line_json(record_id, config.calculon_model, config.calculon_execution, config.input.system)
        out.append((line, config))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overlap", action="store_true",
                        help="draw TP/DP overlap and offload too (at least one option on per line); "
                             f"defaults: seed {OVERLAP_SEED}, count {OVERLAP_COUNT}, {OVERLAP_OUTPUT}")
    parser.add_argument("--seed", type=int, default=None, help=f"random seed (default {DEFAULT_SEED})")
    parser.add_argument("--count", type=int, default=None, help=f"configurations (default {DEFAULT_COUNT})")
    parser.add_argument("--output", type=Path, default=None, help=f"JSONL(.gz) file (default {DEFAULT_OUTPUT})")
    args = parser.parse_args(argv)
    defaults = (OVERLAP_SEED, OVERLAP_COUNT, OVERLAP_OUTPUT) if args.overlap else \
        (DEFAULT_SEED, DEFAULT_COUNT, DEFAULT_OUTPUT)
    seed, count, output = (given if given is not None else default
                           for given, default in zip((args.seed, args.count, args.output), defaults))
    args.output = output
    lines = generate(seed, count, args.overlap)
    data = "".join(line + "\n" for line, _ in lines).encode("utf-8")
    write_bytes(args.output, data, replaces_data=("vendor",))  # atomic; .gz with a fixed header (mtime 0), so the bytes are reproducible
    counts = feature_counts([config.input for _, config in lines], OVERLAP_FEATURES if args.overlap else FEATURES)
    width = max(len(name) for name in counts)
    for name, number in counts.items():
        print(f"  {name:{width}s} {number}")
    missing = [name for name, number in counts.items() if number == 0]
    print(f"wrote {len(lines)} configurations to {args.output}")
    if missing:
        print(f"error: features not exercised: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
