"""Blueprinting's calibration harness.

Lowers a Transformer training step through ModelIR -> DistributedTaskIR ->
PortablePlanIR, costs the plan with a peak-only and a system-evidence view,
composes the 1F1B / interleaved iteration, and (only afterwards) compares
with Calculon 0.1.0 and the Korthikanti et al. 2022 Table 5 measurements.
"""

from harness.estimate import Estimate, estimate

__version__ = "0.1.0"
__all__ = ["Estimate", "estimate", "__version__"]
