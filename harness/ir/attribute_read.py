"""CPython's generic attribute read for IR value classes: a speed rule, every value unchanged.

Why: pydantic's ``BaseModel`` defines ``__getattr__`` (its fallback for private attributes and extra fields),
so CPython gives every model class the *hook* read (``slot_tp_getattr_hook``): each ``task.forward`` first looks
``__getattr__`` and ``__getattribute__`` up in the class, then reads the attribute generically, and Python
3.11's specializing interpreter never caches an attribute read on such a class (it specializes only classes
whose read is ``PyObject_GenericGetAttr``). An estimate reads IR fields millions of times: with the generic
read a cold first pass of the public differential corpus costs a tenth fewer instructions (a sixth without
the digests; docs/performance.md).

Rule (:func:`use_generic_read`): a class gets the generic read only if pydantic's fallback could never answer
for it, that is, the class has no private attributes and forbids extra fields (``extra="forbid"``: its
``__pydantic_extra__`` is always None), and if it reads as ``BaseModel`` does (``__getattr__`` is
pydantic's and ``__getattribute__`` is ``object``'s: a class that defines either keeps the hook, which calls
it). The fallback then only raises ``AttributeError``, with the message the generic read gives (``'Work'
object has no attribute 'x'``), so every read, ``getattr`` with a default and ``hasattr`` behave as before
(a property that raises AttributeError is called once, not twice: the same result for any property that does
not change state).

pydantic lets one validation override the class's rule (``model_validate(data, extra="allow")``: the extras
are then readable only through the fallback); ``Frozen.model_validate``, ``model_validate_json`` and
``model_validate_strings`` refuse that override for a class that forbids extra fields. Not covered: a
``pydantic.TypeAdapter`` of an IR class called with ``extra="allow"`` (the harness makes none).

Nothing is changed where the rule cannot be checked: not CPython, a type layout this module does not
recognise (the word it would write is checked against ``object``'s first), or a class whose read is its own.

Invariant: the generic read is the class's own C slot. CPython recomputes that slot when ``__getattr__`` or
``__getattribute__`` is later assigned on the class or a base; the hook read comes back, which is slower,
never different.
"""

from __future__ import annotations

import sys
from typing import Any

#: Index of ``tp_getattro`` among the pointer-sized words of a ``PyTypeObject`` (the stable prefix of the
#: struct: ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize, tp_itemsize, tp_dealloc, tp_vectorcall_offset,
#: tp_getattr, tp_setattr, tp_as_async, tp_repr, tp_as_number, tp_as_sequence, tp_as_mapping, tp_hash,
#: tp_call, tp_str, then tp_getattro).
GETATTRO_WORD = 18


def _slot_word(cls: type):
    """The ctypes word holding ``cls``'s attribute read (``tp_getattro``)."""
    import ctypes

    return ctypes.c_void_p.from_address(id(cls) + GETATTRO_WORD * ctypes.sizeof(ctypes.c_void_p))


def _generic_read() -> int | None:
    """The address of ``PyObject_GenericGetAttr`` if ``object``'s slot holds it where this module expects it."""
    if sys.implementation.name != "cpython":
        return None
    import ctypes

    try:
        generic = ctypes.cast(ctypes.pythonapi.PyObject_GenericGetAttr, ctypes.c_void_p).value
    except AttributeError:  # an interpreter that does not export it
        return None
    return generic if generic and _slot_word(object).value == generic else None


def use_generic_read(cls: type, model_base: type, config: dict[str, Any], private: dict[str, Any]) -> bool:
    """Give ``cls`` (a subclass of the pydantic ``model_base``, with its ``model_config`` and its private
    attributes) the generic attribute read under the module's rule; whether it now has it."""
    if private or config.get("extra") != "forbid":
        return False
    if (_inherited(cls, "__getattribute__") is not object.__dict__["__getattribute__"]
            or _inherited(cls, "__getattr__") is not model_base.__dict__.get("__getattr__")):
        return False  # a read of its own (or a base's), which the hook serves: left as it is
    generic = _generic_read()
    if generic is None:
        return False
    _slot_word(cls).value = generic
    return True


def _inherited(cls: type, name: str) -> Any:
    """What ``cls`` finds under ``name`` in its MRO (its own or a base's entry; None if none has one)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None

