"""Does turning TP or DP overlap on ever expose more TP or DP time? Counted per projection on a corpus.

Usage (from the repository root)::

    python scripts/overlap_properties.py [--limit N]

For every configuration of the vendored overlap corpus
(``vendor/calculon-0.1.0/overlap/inputs.jsonl.gz``) that overlaps TP
(DP), both views: the ``tensor_parallel`` (``data_parallel``) component with
the overlap on and with it off, in the ``calculon-0.1.0`` projection and in
the ``physical`` one; prints how many comparisons there are, how many expose
more time with the overlap on, the largest ratio, and the configuration it
belongs to. The physical projection never does (tests/test_concurrency_properties.py
asserts it); the figures here are those docs/concurrency.md quotes.
"""

from __future__ import annotations

import argparse
import sys

from harness.cost.views import COST_VIEWS, pricer_for
from harness.evidence.profile import load_profile
from harness.interop.calculon_batch import require_valid
from harness.oracles.records import vendor_dir
from harness.passes.concretize import TransformerConcretize
from harness.pipeline import lower
from harness.schedule.physical import physical_projection
from harness.schedule.projection import calculon_projection


def _projections(data, view):
    concrete = TransformerConcretize.for_layout(data.execution).run(lower(data).plan)[0]
    pricer = pricer_for(load_profile(data.system), view, concrete.datatype)
    return {"calculon-0.1.0": calculon_projection(concrete, pricer), "physical": physical_projection(concrete, pricer)}


def count(inputs) -> dict[tuple[str, str], list]:
    """``(option, projection) -> [comparisons, breaks, largest on/off ratio, its configuration]``."""
    out = {(o, p): [0, 0, 0.0, None] for o in ("tp_overlap", "dp_overlap") for p in ("calculon-0.1.0", "physical")}
    for record_id, data in inputs:
        e = data.execution
        checks = []
        if e.tp_overlap != "none":
            checks.append(("tp_overlap", "tensor_parallel", {"tp_overlap": "none"}))
        if e.dp_overlap:
            checks.append(("dp_overlap", "data_parallel", {"dp_overlap": False}))
        for option, component, off in checks:
            plain = data.model_copy(update={"execution": e.model_copy(update=off)})
            for view in COST_VIEWS.values():
                on_p, off_p = _projections(data, view), _projections(plain, view)
                for name in on_p:
                    a, b = on_p[name].components_s[component], off_p[name].components_s[component]
                    row = out[option, name]
                    row[0] += 1
                    if a > b * (1 + 1e-12):
                        row[1] += 1
                        if b and a / b > row[2]:
                            row[2], row[3] = a / b, f"{record_id} [{view.name}]"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N configurations")
    args = parser.parse_args(argv)
    inputs = require_valid(vendor_dir() / "overlap" / "inputs.jsonl.gz")[:args.limit]
    print("| option | projection | comparisons | more exposed with it on | largest on/off | where |")
    print("|---|---|---|---|---|---|")
    for (option, name), (n, broken, largest, where) in count(inputs).items():
        print(f"| `{option}` | {name} | {n} | {broken} | {largest:.4g} | {where or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
