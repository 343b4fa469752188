"""Base class of every artifact: frozen, strict, self-describing, digestible.

Rules (after QCElemental's models):
- frozen pydantic models with ``extra="forbid"``; every field is described;
- units are in field names (``_bytes``, ``_flops``, ``_s``);
- every artifact carries ``schema_name`` and ``schema_version``;
- ``canonical()`` is the one canonical printer (see :mod:`harness.digest`) and
  ``digest()`` its SHA-256; the digest is computed once per object; the text
  is written by a compiled per-class writer (:mod:`harness.ir.canonical`),
  byte-identical to ``canonical_json(to_data())``;
- passes build their output with :meth:`Frozen.trusted` (no re-validation of
  values derived from validated IRs); everything read from outside (cases,
  batches, profiles) is validated.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, Callable, ClassVar, Self

from pydantic import BaseModel, ConfigDict, PrivateAttr

from harness.digest import canonical_json, sha256_text
from harness.ir import canonical


class Frozen(BaseModel):
    """A frozen, strict value object."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def trusted(cls, **fields: Any) -> Self:
        """Build an instance from values that already satisfy the schema.

        Rules: for internal hot paths only (a pass deriving its output from a
        validated IR). Values are stored as given, without validation or
        conversion (an int stays an int in a float field, as with
        ``model_construct``); omitted fields take their defaults; fields are
        stored in declaration order (``model_dump`` and the printer follow
        it); a missing required or an unknown field is a TypeError. It costs a
        fraction of ``model_construct``, which dominated lowering time.
        """
        spec = _construction(cls)
        if tuple(fields) == spec.names:  # every field, in declaration order: store as given
            values = fields
        else:
            values = spec.complete(cls, fields)
        obj = cls.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(obj, "__dict__", values)
        setattr_(obj, "__pydantic_fields_set__", set(fields))
        setattr_(obj, "__pydantic_extra__", None)
        setattr_(obj, "__pydantic_private__", spec.private())
        return obj

    def trusted_replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied, under the rules of :meth:`trusted`."""
        return self.trusted(**{**self.__dict__, **changes})


@dataclasses.dataclass(frozen=True)
class _Construction:
    """How :meth:`Frozen.trusted` builds one class."""

    names: tuple[str, ...]
    getter: Callable[[dict[str, Any]], tuple[Any, ...]]
    defaults: dict[str, Any]
    factories: tuple[tuple[str, Callable[[], Any]], ...]
    private: Callable[[], dict[str, Any] | None]

    def complete(self, cls: type, fields: dict[str, Any]) -> dict[str, Any]:
        """All field values in declaration order: defaults filled, unknown names refused."""
        merged = self.defaults | fields
        for name, factory in self.factories:
            if name not in merged:
                merged[name] = factory()
        if tuple(merged) == self.names:
            return merged
        try:
            values = dict(zip(self.names, self.getter(merged)))
        except KeyError as missing:
            raise TypeError(f"{cls.__name__}.trusted: missing field {missing}") from None
        if len(values) != len(merged):
            raise TypeError(f"{cls.__name__}.trusted: unknown field(s) {sorted(set(merged) - set(values))}")
        return values


_IMMUTABLE = (type(None), bool, int, float, str, tuple, frozenset)


@functools.cache
def _construction(cls: type[BaseModel]) -> _Construction:
    names = tuple(cls.__pydantic_fields__)
    defaults: dict[str, Any] = {}
    factories = []
    for name, field in cls.__pydantic_fields__.items():
        if field.default_factory is not None:
            factories.append((name, field.default_factory))
        elif not field.is_required():
            if isinstance(field.default, _IMMUTABLE):
                defaults[name] = field.default
            else:  # a mutable default is copied per instance, as pydantic does
                factories.append((name, functools.partial(field.get_default, call_default_factory=True)))
    getter = operator.itemgetter(*names) if len(names) > 1 else (lambda d, _n=names[0]: (d[_n],))
    private = cls.__private_attributes__
    return _Construction(names, getter, defaults, tuple(factories),
                         (lambda: {n: a.get_default() for n, a in private.items()}) if private else (lambda: None))


class Artifact(Frozen):
    """A versioned artifact with one canonical serialization and digest."""

    SCHEMA_NAME: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 0

    _digest: str | None = PrivateAttr(default=None)

    def to_data(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True)
        data["schema_name"] = self.SCHEMA_NAME
        data["schema_version"] = self.SCHEMA_VERSION
        return data

    def canonical(self) -> str:
        """``canonical_json(self.to_data())``, written by the compiled writer when it covers the class."""
        text = canonical.write(self, _schema_entries(type(self)))
        return canonical_json(self.to_data()) if text is None else text

    def digest(self) -> str:
        if self._digest is None:
            self._digest = sha256_text(self.canonical())
        return self._digest


@functools.cache
def _schema_entries(cls: type[Artifact]) -> tuple[tuple[str, str], ...]:
    """The two keys :meth:`Artifact.to_data` adds, as canonical ``(key, JSON)`` pairs."""
    return (("schema_name", canonical_json(cls.SCHEMA_NAME)), ("schema_version", canonical_json(cls.SCHEMA_VERSION)))
