"""Blueprinting's calibration harness.

Lowers a Transformer training step through ModelIR -> DistributedTaskIR ->
PortablePlanIR, costs the plan with a peak-only and a system-evidence view,
composes the 1F1B / interleaved iteration, and (only afterwards) compares
with Calculon 0.1.0 and the Korthikanti et al. 2022 Table 5 measurements.

Public API (the package's names; modules hold the rest):

- ``estimate_input(data, views=..., *, source=..., evidence_dir=...)``: both
  cost views of one anonymous :class:`EstimateInput` (it is
  ``harness.estimate.estimate``);
- :class:`Estimate` (its result), :class:`EstimateInput`, ``load_case(path)``.

``harness.estimate`` is the module, never the function: the package does not
rebind a submodule's name (``import harness.estimate as E`` gives the module).
"""

from harness.cases import EstimateInput, load_case
from harness.estimate import Estimate
from harness.estimate import estimate as estimate_input

__version__ = "0.1.0"
__all__ = ["Estimate", "EstimateInput", "estimate_input", "load_case", "__version__"]
