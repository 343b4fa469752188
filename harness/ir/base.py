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


import dataclasses
import functools
import operator
import types
import typing
from typing import Any, Callable, ClassVar, Self

from pydantic import BaseModel, ConfigDict, PrivateAttr

from harness import session
from harness.digest import canonical_json, sha256_text
from harness.ir import attribute_read, canonical


class Frozen(BaseModel):
    """A frozen, strict value object."""

    # defer_build: a class's validator and serializer are built on first use;
    # IR classes built only by the passes (``trusted``) and written by the
    # compiled canonical writers never need them on the estimate path.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    #: True for value classes whose instances the passes share (constants,
    #: memoized facts): their canonical text is memoized per instance (see
    #: :mod:`harness.ir.canonical`).
    CANONICAL_MEMO: ClassVar[bool] = False
    #: True for value classes whose equal instances recur across tasks and
    #: estimates (shapes, retention flags, tasks): :meth:`trusted` returns one
    #: shared instance per field values (hash-consing), so that everything
    #: derived from an instance (its canonical text, its prices) is computed
    #: once. Implies ``CANONICAL_MEMO``.
    INTERNED: ClassVar[bool] = False
    #: Optional fields that are not content while they are None: ``model_dump`` (and so ``to_data``) and the
    #: canonical text leave them out, so adding such a field keeps every existing digest. Rule: only for fields
    #: added after the class's first digests were published.
    ABSENT_IF_NONE: ClassVar[frozenset[str]] = frozenset()

    # pydantic lets a call override the class's extra-field rule (``model_validate(data, extra="allow")``); the
    # extras would then be readable only through pydantic's ``__getattr__``, which the generic read of
    # :mod:`harness.ir.attribute_read` skips. A class that forbids extra fields refuses that override instead.
    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        _refuse_allowing_extra(cls, options)
        return super().model_validate(obj, **options)

    @classmethod
    def model_validate_json(cls, json_data: Any, **options: Any) -> Self:
        _refuse_allowing_extra(cls, options)
        return super().model_validate_json(json_data, **options)

    @classmethod
    def model_validate_strings(cls, obj: Any, **options: Any) -> Self:
        _refuse_allowing_extra(cls, options)
        return super().model_validate_strings(obj, **options)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Each IR class without private attributes reads its fields through CPython's generic attribute read,
        not pydantic's ``__getattr__`` hook (:mod:`harness.ir.attribute_read`: the same values, faster)."""
        super().__pydantic_init_subclass__(**kwargs)
        attribute_read.use_generic_read(cls, BaseModel, cls.model_config,
                                        _class_attribute(cls, "__private_attributes__"))

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """As pydantic's, without the :data:`ABSENT_IF_NONE` fields that are None (at any depth)."""
        data = super().model_dump(**kwargs)
        if _holds_absent(type(self)):
            _drop_absent(self, data)
        return data

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

        Interning (``INTERNED`` classes): the key is the class and the field
        values, a nested model by identity (the shared instance holds it, so
        its id cannot be reused while the entry exists, and a default factory's
        fresh instance defeats sharing: pass interned values); the table is the
        current session's (:meth:`harness.session.Session.interned`: bounded, two generations).
        ``model_fields_set`` of a shared instance is that of its first construction.
        """
        try:  # the type's own lookup: a pydantic class's attribute access goes through its metaclass's hook
            spec = _class_attribute(cls, CONSTRUCTION)
        except AttributeError:
            spec = _construction(cls)
        if spec.owner is not cls:  # inherited from a base class: this class's own
            spec = _construction(cls)
        given = tuple(fields)
        if given == spec.names:
            values, fields_set = fields, spec.all_fields
        else:  # defaults to fill or fields out of order: the plan of these names (derived once per names)
            plan = spec.plans.get(given) or spec.plan(cls, given)
            values = spec.template | fields  # every name in declaration order, the given values over the defaults
            for name, factory in plan[0]:
                values[name] = factory()
            fields_set = plan[1]
        if spec.key is not None:
            table = session.interned(cls)
            key = spec.key(values)
            shared = table.get(key)
            if shared is not None:
                return shared
        obj = spec.new(cls)
        _set_dict(obj, values)
        # All instances built from the same field names share one fields-set (pydantic mutates it only through
        # attribute assignment, which a frozen model refuses, or on a copy made by ``model_copy``).
        _set_fields_set(obj, fields_set)
        _set_extra(obj, None)
        _set_private(obj, None if spec.private is None else dict(spec.private))
        if spec.key is not None:
            table.put(key, obj)
        return obj

    @classmethod
    def trusted_ordered(cls, values: dict[str, Any]) -> Self:
        """:meth:`trusted` for a hot loop that builds ``values`` itself: every field, in declaration order, of a
        class that is not ``INTERNED`` (checked by length only: the caller guarantees the order)."""
        try:
            spec = _class_attribute(cls, CONSTRUCTION)
        except AttributeError:
            spec = _construction(cls)
        if spec.owner is not cls or spec.key is not None or len(values) != len(spec.names):
            return cls.trusted(**values)
        obj = spec.new(cls)
        _set_dict(obj, values)
        _set_fields_set(obj, spec.all_fields)
        _set_extra(obj, None)
        _set_private(obj, None if spec.private is None else dict(spec.private))
        return obj

    def trusted_replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied, under the rules of :meth:`trusted`."""
        return self.trusted(**{**self.__dict__, **changes})


def _refuse_allowing_extra(cls: type, options: dict[str, Any]) -> None:
    """Refuse a validation's ``extra="allow"`` for a class that forbids extra fields (see ``Frozen``)."""
    if options.get("extra") == "allow" and cls.model_config.get("extra") == "forbid":
        raise TypeError(f"{cls.__name__} forbids extra fields: a validation with extra='allow' is refused "
                        "(its extras would be unreadable: harness.ir.attribute_read)")


#: The template's value of a field without an immutable default (always overwritten: given or made by a factory).
_REQUIRED = object()
#: Construction plans kept per class (distinct tuples of given field names: one per call site's keyword set, so
#: a few per class; past the bound a plan is derived on every call, still correct).
PLAN_LIMIT = 64


#: What :meth:`Frozen.trusted` calls instead of attribute access on a pydantic class (whose metaclass's
#: ``__getattr__`` hook makes every class attribute lookup a slot wrapper's) or ``object.__setattr__`` (which
#: looks the name up in the class's MRO): the type's own lookup and the setters of ``BaseModel``'s four slots.
_class_attribute = type.__getattribute__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


@dataclasses.dataclass(frozen=True, slots=True)
class _Construction:
    """How :meth:`Frozen.trusted` builds one class (derived code, stored on the class)."""

    owner: type  # the class (a subclass finds its base's spec first, and derives its own)
    new: Callable[[type], Any]  # the class's ``__new__``
    names: tuple[str, ...]
    template: dict[str, Any]  # every field name in declaration order -> its immutable default (else _REQUIRED)
    factories: tuple[tuple[str, Callable[[], Any]], ...]
    private: dict[str, Any] | None  # private attributes' (immutable) defaults, copied per instance
    key: Callable[[dict[str, Any]], tuple] | None
    all_fields: set[str]
    #: given field names (not in declaration order, or not all) -> (the factories of the omitted fields that
    #: have one, the fields-set of the instances built from those names): the plan of :meth:`plan`.
    plans: dict[tuple[str, ...], tuple[tuple[tuple[str, Callable[[], Any]], ...], set[str]]]

    def plan(self, cls: type, given: tuple[str, ...]) -> tuple[tuple[tuple[str, Callable[[], Any]], ...], set[str]]:
        """How to complete ``given`` field names (checked once per names: no unknown field, every required
        field given), remembered in :attr:`plans` (bounded by :data:`PLAN_LIMIT`)."""
        made = {name for name, _ in self.factories}
        for name in self.names:
            if name not in given and self.template[name] is _REQUIRED and name not in made:
                raise TypeError(f"{cls.__name__}.trusted: missing field {name!r}")
        unknown = set(given) - set(self.names)
        if unknown:
            raise TypeError(f"{cls.__name__}.trusted: unknown field(s) {sorted(unknown)}")
        plan = (tuple((n, f) for n, f in self.factories if n not in given), set(given))
        if len(self.plans) < PLAN_LIMIT:
            self.plans[given] = plan
        return plan


_IMMUTABLE = (type(None), bool, int, float, str, tuple, frozenset)


#: The class attribute holding a class's :class:`_Construction` (derived code, :func:`harness.session.derived`).
CONSTRUCTION = "_harness_construction"


def _construction(cls: type[BaseModel]) -> _Construction:
    """The construction spec of ``cls``, computed once and stored on the class."""
    return session.derived(cls, CONSTRUCTION, _new_construction)


def _new_construction(cls: type[BaseModel]) -> _Construction:
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
    private = cls.__private_attributes__
    mutable = [n for n, a in private.items() if not isinstance(a.get_default(), _IMMUTABLE)]
    if mutable:
        raise TypeError(f"{cls.__name__}.trusted: private attribute(s) {mutable} need a per-instance copy")
    return _Construction(cls, cls.__new__, names, {n: defaults.get(n, _REQUIRED) for n in names}, tuple(factories),
                         {n: a.get_default() for n, a in private.items()} if private else None,
                         _intern_key(cls) if getattr(cls, "INTERNED", False) else None, set(names), {})


def _model_classes(annotation: Any) -> tuple[type, ...]:
    """The model classes an annotation can hold (directly, optionally, in a union or in a tuple)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _model_classes(args[0])
    if origin in (typing.Union, types.UnionType, tuple):
        return tuple(c for a in args if a is not Ellipsis for c in _model_classes(a))
    return (annotation,) if isinstance(annotation, type) and issubclass(annotation, BaseModel) else ()


def _holds_absent(cls: type) -> bool:
    """Whether an instance of ``cls`` can hold an :data:`Frozen.ABSENT_IF_NONE` field at any depth (derived
    once per class and stored on it)."""
    return session.derived(cls, "_harness_holds_absent", _find_absent)


def _find_absent(cls: type) -> bool:
    if getattr(cls, "ABSENT_IF_NONE", None):
        return True
    return any(_holds_absent(c) for f in cls.model_fields.values() for c in _model_classes(f.annotation))


def _drop_absent(obj: BaseModel, data: dict[str, Any]) -> None:
    """Remove from ``data`` (``obj``'s dump) the absent fields of ``obj`` and of every model it holds."""
    cls = type(obj)
    for name in getattr(cls, "ABSENT_IF_NONE", ()):
        if getattr(obj, name) is None:
            data.pop(name, None)
    for name in cls.model_fields:
        if name not in data:
            continue
        value, dumped = getattr(obj, name), data[name]
        if isinstance(value, BaseModel) and _holds_absent(type(value)):
            _drop_absent(value, dumped)
        elif isinstance(value, tuple):
            for item, item_data in zip(value, dumped):
                if isinstance(item, BaseModel) and _holds_absent(type(item)):
                    _drop_absent(item, item_data)


def _is_model(annotation: Any) -> bool:
    """A model, an optional model or a union of models (possibly Annotated)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_model(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return all(_is_model(a) for a in members)
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _intern_key(cls: type[BaseModel]) -> Callable[[dict[str, Any]], tuple]:
    """``values -> (value or id(model), ...)`` in declaration order (one table per class).

    A field must be hashable by value (str, int, bool, None, tuples of those)
    or hold a model (keyed by identity); anything else is refused here.
    """
    names, models = tuple(cls.__pydantic_fields__), []
    for index, (name, field) in enumerate(cls.__pydantic_fields__.items()):
        annotation = field.annotation
        if _is_model(annotation):
            models.append(index)
        elif not _hashable_by_value(annotation):
            raise TypeError(f"{cls.__name__}.{name}: {annotation} cannot key an interned instance")
    if len(names) == 1:
        (name,) = names
        return (lambda v: (id(v[name]),)) if models else (lambda v: (v[name],))
    values = operator.itemgetter(*names)
    if not models:
        return values

    def key(v: dict[str, Any]) -> tuple:
        parts = list(values(v))
        for index in models:
            parts[index] = id(parts[index])
        return tuple(parts)

    return key


def _hashable_by_value(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (str, int, bool, type(None)) or origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType):
        return all(_hashable_by_value(a) for a in args)
    if origin is tuple:
        return all(a is Ellipsis or _hashable_by_value(a) for a in args)
    return False


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
        text = canonical.write(self, session.derived(type(self), "_harness_schema_entries", _schema_entries))
        return canonical_json(self.to_data()) if text is None else text

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        """A copy whose digest is recomputed (the cached one belongs to the original)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__pydantic_private__["_digest"] = None
        return copy

    def digest(self) -> str:
        # The private ``_digest`` lives in ``__pydantic_private__``; reading and
        # writing that dict directly skips pydantic's slow attribute fallbacks.
        private = self.__pydantic_private__
        digest = private["_digest"]
        if digest is None:
            digest = private["_digest"] = sha256_text(self.canonical())
        return digest


def _schema_entries(cls: type[Artifact]) -> tuple[tuple[str, str], ...]:
    """The two keys :meth:`Artifact.to_data` adds, as canonical ``(key, JSON)`` pairs."""
    return (("schema_name", canonical_json(cls.SCHEMA_NAME)), ("schema_version", canonical_json(cls.SCHEMA_VERSION)))
