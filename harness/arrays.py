"""Numpy arrays without importing numpy: the estimate path works on Python floats and never needs numpy,
while the same functions take the search's numpy arrays (one element per variant).

Rule: a value can be a numpy array only once numpy is imported (by whoever built the array), so
:func:`is_array` asks ``sys.modules`` and imports nothing; code that then does array arithmetic imports numpy
inside the branch that has an array (free: it is already loaded). Importing numpy costs about a tenth of a
second, a tenth of a batch process's start-up (docs/performance.md).
"""

from __future__ import annotations

import sys
from typing import Any, Iterable


def is_array(value: Any) -> bool:
    """Whether ``value`` is a numpy array (``numpy.ndarray`` or a subclass); False whenever numpy is not
    imported."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def holds_array(values: Iterable[Any]) -> bool:
    """Whether any of ``values`` is a numpy array (:func:`is_array`); False without looking at them whenever numpy
    is not imported (an estimate's case: its block times are floats)."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return False
    array = numpy.ndarray
    return any(isinstance(value, array) for value in values)
