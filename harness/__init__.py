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

``data`` is an :class:`EstimateInput`; ``views`` a tuple (or list) of cost views
(``harness.cost.views.CostView``) or of the named views' names (``"peak_only"``,
``"system_evidence"``); ``path`` a str or os.PathLike. An argument of another type
(``estimate_input(None)``, a dict, ``views="peak_only"``, ``load_case(5)``) is an
:class:`~harness.errors.InputError` naming the argument (``<input>: views: ...``), as
is bad input; constructing ``EstimateInput(...)`` yourself raises pydantic's
ValidationError.

The public names are imported on first use: ``import harness`` (which every
submodule's import begins with) loads neither pydantic nor the estimate path.
``harness.estimate`` is the module, never the function: the package does not
rebind a submodule's name (``import harness.estimate as E`` gives the module).
"""

__version__ = "0.1.0"
__all__ = ["Estimate", "EstimateInput", "estimate_input", "load_case", "__version__"]

#: The public names -> (their module, their name there): imported on first use (PEP 562), so that importing a
#: submodule (``harness.cli`` for ``--version``, a command's module) loads only what that submodule needs.
_PUBLIC = (("Estimate", "harness.estimate", "Estimate"), ("EstimateInput", "harness.cases", "EstimateInput"),
           ("estimate_input", "harness.estimate", "estimate"), ("load_case", "harness.cases", "load_case"))


def __getattr__(name: str):
    for public, module, attribute in _PUBLIC:
        if name == public:
            import importlib

            return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
