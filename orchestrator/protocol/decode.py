"""Bounded conversion of a decoded message into plain Python values (dicts, lists, str, int).

pycapnp's ``to_dict()`` has no limits of its own. Cap'n Proto's traversal limit charges a list
of zero-sized structs one word per element, so a 4 MiB frame can announce about two million
elements; ``to_dict()`` turned each into a dict with every default field, which took 18 s and
1.1 GB. This converter walks the schema instead and checks every list's length *before* it
creates anything for its elements, counts elements and text bytes over the whole message, and
refuses the message (:class:`FrameLimitExceeded`, a :class:`~orchestrator.protocol.framing.FrameError`:
drop the connection) as soon as a limit is passed. What it produces is therefore bounded by the
limits whatever the frame's shape. The limits are documented in ``docs/protocol.md`` ("Limits").

The result has the shape of ``to_dict()``: unset pointer fields (Text, Data, lists, structs)
are left out, enums are their names, only the active member of a union is present.
Call it inside :func:`orchestrator.protocol.framing.open_envelope`'s block.

An enum value this schema does not name (a newer peer added it) is not an error: it is read as
an :class:`UnknownEnum` (its ordinal) and reported to the caller's ``unknown`` list as
``("Struct.field", ordinal)``, so the caller decides what to skip (docs/protocol.md, "Values
this version does not know"). pycapnp itself raises on such a value (``Member was null``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import capnp

from orchestrator.protocol.framing import FrameGarbage

NO_DISCRIMINANT: Final = 0xFFFF
_POINTER_TYPES: Final = frozenset({"text", "data", "list", "struct", "anyPointer", "interface"})


class FrameLimitExceeded(FrameGarbage):
    """A decoded message is over one of the :class:`DecodeLimits` (a hostile or broken peer)."""


class UnknownEnum(int):
    """The ordinal of an enum value this schema does not name (sent by a newer peer)."""

    def __repr__(self) -> str:
        return f"UnknownEnum({int(self)})"

    def __str__(self) -> str:  # the number, as a message reports it (int's str would use __repr__)
        return str(int(self))


# One unknown enum value met while converting: ("Struct.field", ordinal).
Sighting = tuple[str, int]


@dataclass(frozen=True)
class DecodeLimits:
    """Per-message limits of :func:`to_plain` (see docs/protocol.md, "Limits")."""

    # Longest list. Sized so that an honestly encoded 4 MiB frame of hosts or facts (about 190
    # and 160 bytes each) fits.
    max_list_length: int = 25_000
    # List elements in the whole message, all lists together (a status reply has three lists).
    max_elements: int = 50_000
    # One Text or Data field; the longest legitimate one is a fact's detail (4096 bytes).
    max_text_bytes: int = 64 * 1024
    # All Text and Data of the message together; None: the frame's own length (an honest
    # message cannot hold more text than its bytes, only pointers shared by many fields can).
    max_total_text_bytes: int | None = None


DEFAULT_LIMITS: Final = DecodeLimits()

# What decoding and converting one frame of at most 4 MiB may cost a reader in memory, the
# frame's own buffers included, within DEFAULT_LIMITS (docs/protocol.md, "Limits"). Measured:
# about 20 MiB for the worst shape (50,000 empty list elements), a few MiB for refused frames.
MEMORY_BOUND_BYTES: Final = 64 * 1024 * 1024


class _Budget:
    def __init__(self, limits: DecodeLimits, frame_bytes: int, unknown: list[Sighting] | None) -> None:
        self.limits = limits
        # Bounded like the rest: one sighting per enum field read, and the fields read are
        # bounded by the list limits.
        self.unknown = unknown if unknown is not None else []
        self.elements = limits.max_elements
        total = limits.max_total_text_bytes
        self.text = total if total is not None else max(frame_bytes, limits.max_text_bytes)

    def take_list(self, path: str, length: int) -> None:
        if length > self.limits.max_list_length:
            raise FrameLimitExceeded(f"list {path} has {length} elements (limit {self.limits.max_list_length})")
        self.elements -= length
        if self.elements < 0:
            raise FrameLimitExceeded(f"message has more than {self.limits.max_elements} list elements (at {path})")

    def take_text(self, path: str, size: int) -> None:
        if size > self.limits.max_text_bytes:
            raise FrameLimitExceeded(f"text {path} has {size} bytes (limit {self.limits.max_text_bytes})")
        self.text -= size
        if self.text < 0:
            raise FrameLimitExceeded(f"message text exceeds its limit in total (at {path})")


# How to read one value: ("struct", type id) | ("list", element spec) | ("enum", names, "Struct.field")
# | (scalar kind,).
Spec = tuple[Any, ...]
# One field of a struct: (name, spec, union member?, pointer?).
FieldPlan = tuple[str, Spec, bool, bool]
# Field plans by struct type id, made once per type from the first reader of it: reading the
# schema through pycapnp costs far more than reading a field.
_PLANS: dict[int, tuple[bool, list[FieldPlan]]] = {}


def to_plain(
    reader: Any,
    limits: DecodeLimits = DEFAULT_LIMITS,
    *,
    frame_bytes: int = 0,
    unknown: list[Sighting] | None = None,
) -> dict[str, Any]:
    """The struct ``reader`` as a dict, within ``limits``; :class:`FrameLimitExceeded` otherwise.

    ``frame_bytes`` is the length of the frame the reader came from (the default total text
    budget). Every enum value the schema does not name is appended to ``unknown``.
    """
    node = reader.schema.node
    budget = _Budget(limits, frame_bytes, unknown)
    return _struct(reader, node.id, budget, node.displayName.rpartition(":")[2])


def _spec(type_: Any) -> Spec:
    kind = type_.which()
    if kind == "struct":
        return ("struct", type_.struct.typeId)
    if kind == "list":
        return ("list", _spec(type_.list.elementType))
    return (kind,)


def _plan(reader: Any, type_id: int) -> tuple[bool, list[FieldPlan]]:
    plan = _PLANS.get(type_id)
    if plan is None:
        struct_name = reader.schema.node.displayName.rpartition(":")[2]
        node = reader.schema.node.struct
        fields: list[FieldPlan] = []
        for field in node.fields:
            union = field.discriminantValue != NO_DISCRIMINANT
            if field.which() == "group":
                fields.append((field.name, ("struct", field.group.typeId), union, False))
                continue
            spec = _spec(field.slot.type)
            if spec[0] == "enum":
                enumerants = reader.schema.fields[field.name].schema.enumerants
                names = tuple(sorted(enumerants, key=enumerants.__getitem__))
                spec = ("enum", names, f"{struct_name}.{field.name}")
            fields.append((field.name, spec, union, spec[0] in _POINTER_TYPES))
        plan = (node.discriminantCount > 0, fields)
        _PLANS[type_id] = plan
    return plan


def _struct(reader: Any, type_id: int, budget: _Budget, path: str) -> dict[str, Any]:
    has_union, fields = _plan(reader, type_id)
    active = reader.which() if has_union else None
    out: dict[str, Any] = {}
    for name, spec, union, pointer in fields:
        if union and name != active:
            continue
        if spec[0] == "void":
            out[name] = None
        elif not pointer or reader._has(name):
            out[name] = _value(getattr(reader, name), spec, budget, path, name)
    return out


def _value(value: Any, spec: Spec, budget: _Budget, path: str, name: str) -> Any:
    kind = spec[0]
    if kind == "struct":
        return _struct(value, spec[1], budget, f"{path}.{name}")
    if kind == "list":
        where = f"{path}.{name}"
        budget.take_list(where, len(value))
        element = spec[1]
        return [_value(item, element, budget, where, str(i)) for i, item in enumerate(value)]
    if kind == "text":
        text = str(value)
        budget.take_text(f"{path}.{name}", len(text) if text.isascii() else len(text.encode("utf-8")))
        return text
    if kind == "data":
        data = bytes(value)
        budget.take_text(f"{path}.{name}", len(data))
        return data
    if kind == "enum":
        return _enum(value, spec, budget)
    if kind in ("anyPointer", "interface"):
        raise FrameLimitExceeded(f"field {path}.{name} of type {kind} is not part of this protocol")
    return value


def _enum(value: Any, spec: Spec, budget: _Budget) -> str | UnknownEnum:
    """An enum value's name; an :class:`UnknownEnum` (and a sighting) for one the schema does not name."""
    if not isinstance(value, capnp.lib.capnp._DynamicEnum):
        return str(value)
    ordinal = int(value.raw)
    if len(spec) == 1:  # an enum list element: no field to name, so pycapnp is asked
        try:
            return str(value._as_str())
        except RuntimeError:  # "Member was null": an ordinal its schema does not name
            budget.unknown.append(("enum", ordinal))
            return UnknownEnum(ordinal)
    names: tuple[str, ...] = spec[1]
    if ordinal < len(names):
        return names[ordinal]
    budget.unknown.append((spec[2], ordinal))
    return UnknownEnum(ordinal)
