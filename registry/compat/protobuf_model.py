"""What the Protobuf checker compares, read from a compiled definition's descriptor: messages
and enums by full name, fields by number, each with what the wire and JSON encodings see."""

from __future__ import annotations

import codecs
import functools
import math
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2

from changebroker.registry.compat.protobuf_source import encoded_descriptor, file_descriptor

FieldProto = descriptor_pb2.FieldDescriptorProto

# The names protoc gives field types, as a person writes them in a .proto file.
KINDS = {value: name.removeprefix("TYPE_").lower() for name, value in FieldProto.Type.items()}

# How a field's values may repeat; Buf's names (cardinality.go in bufbuild/buf).
EXPLICIT = "optional with explicit presence"
IMPLICIT = "optional with implicit presence"
REQUIRED = "required"
REPEATED = "repeated"
MAP = "map"


@dataclass(frozen=True)
class Field:
    number: int
    name: str
    json_name: str
    kind: str  # "int32", "string", "message", "enum", "group", ...
    type_name: str  # full name of a message, group or enum type ("" for scalars)
    cardinality: str
    oneof: str | None  # a real oneof's name; proto3 `optional`'s synthetic one is none
    default: object  # proto2 `default`, else the type's zero value (see _default)


@dataclass(frozen=True)
class Message:
    full_name: str
    path: str  # "#/messages/Order.Item"
    fields: dict[int, Field]
    reserved_ranges: tuple[tuple[int, int], ...]  # inclusive
    reserved_names: frozenset[str]
    map_entry: bool
    json_format: str  # "ALLOW", or "LEGACY_BEST_EFFORT" (proto2)


@dataclass(frozen=True)
class Enum:
    full_name: str
    name: str  # unqualified
    path: str  # "#/enums/Order.Status"
    names_by_number: dict[int, tuple[str, ...]]  # an alias gives a number several names
    numbers_by_name: dict[str, int]
    reserved_ranges: tuple[tuple[int, int], ...]  # inclusive
    reserved_names: frozenset[str]
    json_format: str


@dataclass(frozen=True)
class File:
    package: str
    syntax: str
    messages: dict[str, Message]
    enums: dict[str, Enum]


def load(definition: Any) -> File:
    """The model of a decoded PB definition (kept per definition: versions are compared
    again and again)."""
    return _load(encoded_descriptor(definition))


@functools.lru_cache(maxsize=1024)
def _load(encoded: str) -> File:
    proto = file_descriptor(encoded)
    prefix = f"{proto.package}." if proto.package else ""
    enums: dict[str, Enum] = {}
    messages: dict[str, Message] = {}
    for enum in proto.enum_type:
        _add_enum(enums, enum, prefix, proto)
    for message in proto.message_type:
        _collect(enums, message, prefix, proto)
    for message in proto.message_type:
        _add_message(messages, enums, message, prefix, proto)
    return File(proto.package, proto.syntax, messages, enums)


def _collect(
    enums: dict[str, Enum],
    message: descriptor_pb2.DescriptorProto,
    prefix: str,
    proto: descriptor_pb2.FileDescriptorProto,
) -> None:
    """The enums nested in ``message``, before any field needs their default."""
    inner = f"{prefix}{message.name}."
    for enum in message.enum_type:
        _add_enum(enums, enum, inner, proto)
    for nested in message.nested_type:
        _collect(enums, nested, inner, proto)


def _path(kind: str, full_name: str, proto: descriptor_pb2.FileDescriptorProto) -> str:
    """``#/messages/Order.Item``: a type's place in the file, named without the package."""
    package = f"{proto.package}." if proto.package else ""
    return f"#/{kind}/{full_name.removeprefix(package)}"


def _json_format(syntax: str) -> str:
    """The JSON support Buf resolves (the json_format feature): full in proto3 alone."""
    return "ALLOW" if syntax == "proto3" else "LEGACY_BEST_EFFORT"


def _add_enum(
    enums: dict[str, Enum],
    enum: descriptor_pb2.EnumDescriptorProto,
    prefix: str,
    proto: descriptor_pb2.FileDescriptorProto,
) -> None:
    full_name = prefix + enum.name
    by_number: dict[int, tuple[str, ...]] = {}
    for value in enum.value:
        by_number[value.number] = (*by_number.get(value.number, ()), value.name)
    enums[full_name] = Enum(
        full_name,
        enum.name,
        _path("enums", full_name, proto),
        by_number,
        {value.name: value.number for value in enum.value},
        tuple((r.start, r.end) for r in enum.reserved_range),
        frozenset(enum.reserved_name),
        _json_format(proto.syntax),
    )


def _add_message(
    messages: dict[str, Message],
    enums: dict[str, Enum],
    message: descriptor_pb2.DescriptorProto,
    prefix: str,
    proto: descriptor_pb2.FileDescriptorProto,
) -> None:
    full_name = prefix + message.name
    map_entries = {
        f"{full_name}.{nested.name}" for nested in message.nested_type if nested.options.map_entry
    }
    fields = {
        field.number: _field(field, message, map_entries, enums, proto.syntax)
        for field in message.field
    }
    messages[full_name] = Message(
        full_name,
        _path("messages", full_name, proto),
        fields,
        tuple((r.start, r.end - 1) for r in message.reserved_range),  # end is exclusive here
        frozenset(message.reserved_name),
        message.options.map_entry,
        _json_format(proto.syntax),
    )
    for nested in message.nested_type:
        _add_message(messages, enums, nested, f"{full_name}.", proto)


def _field(
    field: FieldProto,
    message: descriptor_pb2.DescriptorProto,
    map_entries: set[str],
    enums: dict[str, Enum],
    syntax: str,
) -> Field:
    kind = KINDS[field.type]
    type_name = field.type_name.removeprefix(".")
    in_oneof = field.HasField("oneof_index")
    oneof = None
    if in_oneof and not field.proto3_optional:
        oneof = message.oneof_decl[field.oneof_index].name
    if field.label == FieldProto.LABEL_REPEATED:
        cardinality = MAP if type_name in map_entries else REPEATED
    elif field.label == FieldProto.LABEL_REQUIRED:
        cardinality = REQUIRED
    elif syntax == "proto2" or in_oneof or kind in ("message", "group"):
        cardinality = EXPLICIT
    else:
        cardinality = IMPLICIT
    return Field(
        field.number,
        field.name,
        field.json_name if field.HasField("json_name") else _json_name(field.name),
        kind,
        type_name,
        cardinality,
        oneof,
        _default(field, kind, enums.get(type_name)),
    )


def _json_name(name: str) -> str:
    """protoc's default JSON name: underscores dropped, the letter after each capitalised."""
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def _default(field: FieldProto, kind: str, enum: Enum | None) -> object:
    """The value a reader sees for an absent field, comparable across types as Buf compares
    them (field_default.go): text for string and bytes, a number for the rest."""
    text = field.default_value if field.HasField("default_value") else None
    if kind == "string":
        return text or ""
    if kind == "bytes":
        return codecs.escape_decode(text.encode("latin-1"))[0].decode("latin-1") if text else ""
    if kind == "enum":
        if enum is None:
            return 0
        if text is not None:
            return enum.numbers_by_name.get(text, 0)
        return next(iter(enum.names_by_number), 0)  # the first value declared
    if kind == "bool":
        return 1 if text == "true" else 0
    if text is None:
        return 0
    if kind in ("float", "double"):
        return float(text) if text not in ("nan", "-nan") else math.nan
    return int(text)
