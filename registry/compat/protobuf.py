"""Protocol Buffers compatibility, judged on the wire, with Buf's rules and rule names.

A version is compared with an earlier one as Buf's ``buf breaking`` compares them (messages
and enums paired by full name, fields by number; the rules of its ``WIRE`` or ``WIRE_JSON``
category, docs: registry/README.md). Each finding also says whose reads it breaks, so the
OpenSchema modes keep what concerns them: BACKWARD the new schema reading older data,
FORWARD older schemas reading new data, FULL both. Deleting a field or an enum value without
reserving it, or releasing a reservation, breaks no read today but lets a later version reuse
the number or name with another meaning: that counts in every mode.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from changebroker.registry.compat.model import Mode, SchemaError, Violation
from changebroker.registry.compat.protobuf_model import (
    EXPLICIT,
    IMPLICIT,
    MAP,
    REPEATED,
    REQUIRED,
    Enum,
    Field,
    File,
    Message,
    load,
)
from changebroker.registry.compat.rules import Rule


class Category(enum.StrEnum):
    """Buf's breaking-change categories a PB subject can follow."""

    WIRE = "WIRE"  # the binary encoding
    WIRE_JSON = "WIRE_JSON"  # the binary and the JSON encodings


DEFAULT_CATEGORY = Category.WIRE_JSON  # this project's consumers read JSON


class Breaks(enum.Enum):
    """Whose reads a change breaks."""

    NEW = "the new schema reading data of"  # BACKWARD
    OLD = "reading data of the new schema"  # FORWARD
    BOTH = "both ways between the new schema and"
    LATER = "a trap for later versions, since"  # reuse of a freed number or name


_COUNTED = {
    Mode.BACKWARD: {Breaks.NEW, Breaks.BOTH, Breaks.LATER},
    Mode.FORWARD: {Breaks.OLD, Breaks.BOTH, Breaks.LATER},
    Mode.FULL: set(Breaks),
}


def protobuf_check(
    mode: Mode, new: Any, history: Sequence[tuple[str, Any]], category: str
) -> list[Violation]:
    """Violations of ``mode`` by the decoded definition ``new`` against ``history`` (oldest
    first, each named, e.g. "version 3"), under Buf's ``category``; [] = compatible."""
    mode = Mode(mode)
    if mode is Mode.NONE or not history:
        return []
    counted = _COUNTED[Mode(mode.value.removesuffix("_TRANSITIVE"))]
    against = history if mode.transitive else history[-1:]
    found: list[Violation] = []
    for label, old in reversed(against):  # newest first: the likeliest culprit leads
        try:
            load(old)
        except SchemaError:
            found.append(_stored_unchecked(label))
            continue
        for violation, breaks in evolution(old, new, Category(category)):
            if breaks in counted:
                who = (
                    f"{label} {breaks.value}" if breaks is Breaks.OLD else f"{breaks.value} {label}"
                )
                found.append(dataclasses.replace(violation, message=f"{violation.message} ({who})"))
    return found


def _stored_unchecked(label: str) -> Violation:
    return Violation(
        "#",
        Rule.SCHEMA_INVALID,
        f"{label} was stored before PB definitions were compiled, so nothing can be promised"
        " about it; set the subject's compatibility to NONE to register past it",
    )


def evolution(old: Any, new: Any, category: Category) -> list[tuple[Violation, Breaks]]:
    """What ``buf breaking`` with ``category`` finds going from decoded definition ``old`` to
    ``new``, each with whose reads it breaks."""
    before, after = load(old), load(new)
    found = list(_file(before, after))
    for name, message in before.messages.items():
        if name in after.messages and after.messages[name] != message:  # unchanged: no finding
            found += _message(message, after.messages[name], before, after, category)
    for name, values in before.enums.items():
        if name in after.enums and after.enums[name] != values:
            found += _enum(values, after.enums[name], category)
    return found


Found = Iterator[tuple[Violation, Breaks]]


def _file(before: File, after: File) -> Found:
    if before.package != after.package:
        yield (
            Violation(
                "#/package",
                Rule.FILE_SAME_PACKAGE,
                f'the package changed from "{before.package}" to "{after.package}", and with it'
                " the full name of every type (what google.protobuf.Any and type URLs carry):"
                f' keep package "{before.package}" and add a new schema for the new one',
            ),
            Breaks.BOTH,
        )


def _message(
    old: Message, new: Message, before: File, after: File, category: Category
) -> Iterator[tuple[Violation, Breaks]]:
    json = category is Category.WIRE_JSON
    for number, field in old.fields.items():
        path = f"{old.path}/fields/{number}"
        if number not in new.fields:
            yield from _deleted_field(field, path, new, json)
            continue
        if new.fields[number] == field:  # the same field: no finding (enums are compared apart)
            continue
        yield from _field(field, new.fields[number], path, old, new, before, after, json)
    yield from _required_fields(old, new)
    yield from _released(
        old.path, "message", old.reserved_ranges, new.reserved_ranges,
        old.reserved_names, new.reserved_names, Rule.RESERVED_MESSAGE_NO_DELETE,
    )  # fmt: skip
    if json and old.json_format == "ALLOW" and new.json_format != "ALLOW":
        yield _json_format(old.path, "message", Rule.MESSAGE_SAME_JSON_FORMAT, new.json_format)


def _deleted_field(field: Field, path: str, new: Message, json: bool) -> Found:
    described = _described(field)
    if not _reserved(field.number, new.reserved_ranges):
        yield (
            Violation(
                path,
                Rule.FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED,
                f"{described} was deleted without reserving its number: add `reserved"
                f" {field.number};` so no later version reuses it for other data",
            ),
            Breaks.LATER,
        )
    if json and field.name not in new.reserved_names:
        yield (
            Violation(
                path,
                Rule.FIELD_NO_DELETE_UNLESS_NAME_RESERVED,
                f"{described} was deleted without reserving its name: add `reserved"
                f' "{field.name}";` so no later field takes its JSON key',
            ),
            Breaks.LATER,
        )


def _field(
    old: Field,
    new: Field,
    path: str,
    old_message: Message,
    new_message: Message,
    before: File,
    after: File,
    json: bool,
) -> Found:
    described = _described(old)
    if json and old.name != new.name:
        yield (
            Violation(
                path,
                Rule.FIELD_SAME_NAME,
                f'{described} was renamed to "{new.name}", which JSON readers and writers see:'
                f' keep the name "{old.name}" (or add the new one as a new field)',
            ),
            Breaks.BOTH,
        )
    if json and old.json_name != new.json_name:
        yield (
            Violation(
                path,
                Rule.FIELD_SAME_JSON_NAME,
                f'{described} changed its JSON name from "{old.json_name}" to'
                f' "{new.json_name}": keep json_name "{old.json_name}"',
            ),
            Breaks.BOTH,
        )
    yield from _type(old, new, path, before, after, json)
    if not (old_message.map_entry and new_message.map_entry):
        yield from _cardinality(old, new, path, json)
    yield from _oneof(old, new, path)
    yield from _default(old, new, path)


# Types the binary encoding reads alike (Buf's breaking_util.go, after the Protocol Buffers
# guide's "Updating A Message Type"); a type in no group is alike only to itself.
_WIRE_GROUPS = [
    {"int32", "int64", "uint32", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
]
# ... and that JSON also writes alike (64-bit integers are JSON strings, 32-bit numbers).
_WIRE_JSON_GROUPS = [
    {"int32", "uint32"},
    {"int64", "uint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
]


def _alike(old: str, new: str, groups: list[set[str]]) -> bool:
    return old == new or any(old in group and new in group for group in groups)


def _type(old: Field, new: Field, path: str, before: File, after: File, json: bool) -> Found:
    rule = Rule.FIELD_WIRE_JSON_COMPATIBLE_TYPE if json else Rule.FIELD_WIRE_COMPATIBLE_TYPE
    described = _described(old)
    if not _alike(old.kind, new.kind, _WIRE_JSON_GROUPS if json else _WIRE_GROUPS):
        if not json and {old.kind, new.kind} == {"string", "bytes"}:
            yield _string_bytes(old, new, path, rule)
            return
        yield (
            Violation(
                path,
                rule,
                f"{described} changed type from {old.kind} to {new.kind}, which "
                + ("its binary or JSON encoding" if json else "the binary encoding")
                + f" does not read alike: keep {old.kind}, or add a field with a new number"
                f" and reserve {old.number}",
            ),
            Breaks.BOTH,
        )
        return
    if old.type_name == new.type_name:
        return
    if old.kind == "enum" and _enum_grows(
        before.enums.get(old.type_name), after.enums.get(new.type_name)
    ):
        return
    yield (
        Violation(
            path,
            rule,
            f'{described} changed type from "{old.type_name}" to "{new.type_name}": keep'
            f' "{old.type_name}" (changing a type\'s contents keeps its name), or add a field'
            f" with a new number",
        ),
        Breaks.BOTH,
    )


def _string_bytes(old: Field, new: Field, path: str, rule: Rule) -> tuple[Violation, Breaks]:
    """string and bytes share the binary encoding, but a string reader refuses bytes that are
    not UTF-8: only the side that reads a string breaks."""
    described = _described(old)
    if new.kind == "bytes":
        return (
            Violation(
                path,
                rule,
                f"{described} changed type from string to bytes: readers of the string reject"
                " values that are not UTF-8; keep string unless every reader has moved on",
            ),
            Breaks.OLD,
        )
    return (
        Violation(
            path,
            rule,
            f"{described} changed type from bytes to string: the new string reader rejects"
            " bytes written earlier that are not UTF-8; keep bytes",
        ),
        Breaks.NEW,
    )


def _enum_grows(old: Enum | None, new: Enum | None) -> bool:
    """Buf lets a field move to an enum of the same short name holding every old value."""
    if old is None or new is None or old.name != new.name:
        return False
    return all(new.numbers_by_name.get(name) == n for name, n in old.numbers_by_name.items())


# Cardinalities the encodings read alike: optional either way; a map is a repeated field of
# entries on the wire, but a JSON object where a repeated field is a JSON array.
_WIRE_CARDINALITY = {EXPLICIT: 1, IMPLICIT: 1, REQUIRED: 2, REPEATED: 3, MAP: 3}
_WIRE_JSON_CARDINALITY = {**_WIRE_CARDINALITY, MAP: 4}


def _cardinality(old: Field, new: Field, path: str, json: bool) -> Found:
    groups = _WIRE_JSON_CARDINALITY if json else _WIRE_CARDINALITY
    if groups[old.cardinality] != groups[new.cardinality]:
        yield (
            Violation(
                path,
                Rule.FIELD_WIRE_JSON_COMPATIBLE_CARDINALITY
                if json
                else Rule.FIELD_WIRE_COMPATIBLE_CARDINALITY,
                f'{_described(old)} changed cardinality from "{old.cardinality}" to'
                f' "{new.cardinality}", which readers decode differently: add a field with a'
                f" new number instead",
            ),
            Breaks.BOTH,
        )


def _oneof(old: Field, new: Field, path: str) -> Found:
    if old.oneof == new.oneof:
        return
    if old.oneof and new.oneof:
        moved = f'from oneof "{old.oneof}" to oneof "{new.oneof}"'
    elif new.oneof:
        moved = f'into oneof "{new.oneof}"'
    else:
        moved = f'out of oneof "{old.oneof}"'
    yield (
        Violation(
            path,
            Rule.FIELD_SAME_ONEOF,
            f"{_described(old)} moved {moved}: a reader keeps one member of a oneof and drops"
            " the others, so data written with the other layout reads differently; leave it"
            " where it was",
        ),
        Breaks.BOTH,
    )


def _default(old: Field, new: Field, path: str) -> Found:
    if not (_may_default(old) and _may_default(new)):
        return
    if not old.default and not new.default:
        return
    if _same_default(old, new):
        return
    yield (
        Violation(
            path,
            Rule.FIELD_SAME_DEFAULT,
            f"{_described(old)} changed its default from {old.default!r} to {new.default!r}:"
            " readers of each version see a different value where it is absent; keep"
            f" {old.default!r}",
        ),
        Breaks.BOTH,
    )


def _may_default(field: Field) -> bool:
    return field.cardinality not in (REPEATED, MAP) and field.kind not in ("message", "group")


def _same_default(old: Field, new: Field) -> bool:
    a, b = old.default, new.default
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    assert isinstance(a, int | float) and isinstance(b, int | float)
    a_nan, b_nan = (isinstance(v, float) and math.isnan(v) for v in (a, b))
    if a_nan or b_nan:
        return a_nan and b_nan
    if "float" in (old.kind, new.kind):  # a float's default is what 32 bits keep of it
        return bool(_float32(a) == _float32(b))
    return a == b


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _required_fields(old: Message, new: Message) -> Found:
    was = {n for n, field in old.fields.items() if field.cardinality == REQUIRED}
    now = {n for n, field in new.fields.items() if field.cardinality == REQUIRED}
    for number in sorted(was - now):
        yield (
            Violation(
                f"{old.path}/fields/{number}",
                Rule.MESSAGE_SAME_REQUIRED_FIELDS,
                f"required {_described(old.fields[number])} is no longer required: readers that"
                " still require it refuse messages written without it; keep it required",
            ),
            Breaks.OLD,
        )
    for number in sorted(now - was):
        yield (
            Violation(
                f"{new.path}/fields/{number}",
                Rule.MESSAGE_SAME_REQUIRED_FIELDS,
                f"{_described(new.fields[number])} is now required: the new schema refuses"
                " messages written without it; make it optional",
            ),
            Breaks.NEW,
        )


def _released(
    path: str,
    kind: str,
    old_ranges: tuple[tuple[int, int], ...],
    new_ranges: tuple[tuple[int, int], ...],
    old_names: frozenset[str],
    new_names: frozenset[str],
    rule: Rule,
) -> Found:
    freed = sorted(
        number for start, end in old_ranges for number in _missing(start, end, new_ranges)
    )
    if freed:
        yield (
            Violation(
                f"{path}/reserved",
                rule,
                f"the {kind} no longer reserves {_numbers(freed)}: keep every reservation, so no"
                " later version gives a retired number another meaning",
            ),
            Breaks.LATER,
        )
    for name in sorted(old_names - new_names):
        yield (
            Violation(
                f"{path}/reserved",
                rule,
                f'the {kind} no longer reserves the name "{name}": keep every reservation',
            ),
            Breaks.LATER,
        )


def _missing(start: int, end: int, ranges: tuple[tuple[int, int], ...]) -> Iterator[int]:
    """The first numbers of [start, end] that no range in ``ranges`` holds (at most a few:
    a message's reserved range may reach 536870911)."""
    shown = 0
    number = start
    while number <= end and shown < 4:
        covering = [r_end for r_start, r_end in ranges if r_start <= number <= r_end]
        if covering:
            number = max(covering) + 1
            continue
        yield number
        shown += 1
        number += 1


def _numbers(numbers: list[int]) -> str:
    return ("number " if len(numbers) == 1 else "numbers ") + ", ".join(map(str, numbers))


def _reserved(number: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(start <= number <= end for start, end in ranges)


def _enum(old: Enum, new: Enum, category: Category) -> Found:
    json = category is Category.WIRE_JSON
    for number, names in old.names_by_number.items():
        path = f"{old.path}/values/{number}"
        if number not in new.names_by_number:
            listed = ", ".join(names)
            if not _reserved(number, new.reserved_ranges):
                yield (
                    Violation(
                        path,
                        Rule.ENUM_VALUE_NO_DELETE_UNLESS_NUMBER_RESERVED,
                        f"enum value {number} ({listed}) of {old.name} was deleted without"
                        f" reserving its number: data holding it becomes unknown to the new"
                        f" schema; keep it, or add `reserved {number};`",
                    ),
                    Breaks.LATER,
                )
            if json and not all(name in new.reserved_names for name in names):
                yield (
                    Violation(
                        path,
                        Rule.ENUM_VALUE_NO_DELETE_UNLESS_NAME_RESERVED,
                        f"enum value {number} ({listed}) of {old.name} was deleted without"
                        " reserving its name, which JSON carries: add `reserved "
                        + ", ".join(f'"{name}"' for name in names)
                        + ";`",
                    ),
                    Breaks.LATER,
                )
        elif json and not set(names) <= set(new.names_by_number[number]):
            yield (
                Violation(
                    path,
                    Rule.ENUM_VALUE_SAME_NAME,
                    f"enum value {number} of {old.name} was renamed from {', '.join(names)} to"
                    f" {', '.join(new.names_by_number[number])}; JSON carries the name: keep"
                    " the old name (a new one can be an alias: `option allow_alias = true;`)",
                ),
                Breaks.BOTH,
            )
    yield from _released(
        old.path, "enum", old.reserved_ranges, new.reserved_ranges,
        old.reserved_names, new.reserved_names, Rule.RESERVED_ENUM_NO_DELETE,
    )  # fmt: skip
    if json and old.json_format == "ALLOW" and new.json_format != "ALLOW":
        yield _json_format(old.path, "enum", Rule.ENUM_SAME_JSON_FORMAT, new.json_format)


def _json_format(path: str, kind: str, rule: Rule, now: str) -> tuple[Violation, Breaks]:
    return (
        Violation(
            path,
            rule,
            f"the {kind}'s JSON support fell from ALLOW to {now} (the file moved to proto2):"
            ' keep syntax = "proto3"',
        ),
        Breaks.BOTH,
    )


def _described(field: Field) -> str:
    return f'field {field.number} ("{field.name}")'
