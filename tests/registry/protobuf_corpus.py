"""Seeded pairs of .proto definitions (an old version, a new one) for the Protobuf checks:
every scalar type changed into every other, and edits of two richer files (proto3 and
proto2): fields and enum values added, deleted, renamed, renumbered and reserved, oneof
moves, nested types, maps, reserved ranges, defaults, required fields, packages.

A text's ``{package}`` is filled in per pair, so that many pairs can live in one Buf module.
``message_class`` gives the classes a version generates, to show a difference on the wire.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from changebroker.registry.compat.model import SchemaError
from changebroker.registry.compat.protobuf_source import (
    encoded_descriptor,
    file_descriptor,
    proto_definition,
)


@dataclass(frozen=True)
class Pair:
    kind: str  # what changed, e.g. "type int32->string" or "field deleted"
    old: str
    new: str

    def texts(self, package: str) -> tuple[str, str]:
        return self.old.replace("{package}", package), self.new.replace("{package}", package)


SCALARS = [
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
]  # fmt: skip


def _value(scalar: str) -> str:
    return (
        f'syntax = "proto3";\npackage {{package}};\nmessage Value {{\n  {scalar} value = 1;\n}}\n'
    )


PROTO3 = """syntax = "proto3";
package {package};

import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";

// An order, as the shop writes it.
message Order {
  int64 id = 1;
  string note = 2;
  Status status = 3;
  Item item = 4;
  map<string, int32> counts = 5;
  repeated string tags = 6;
  oneof payment {
    string card = 7;
    bytes token = 8;
  }
  google.protobuf.Timestamp placed_at = 9;
  optional int32 priority = 10;
  uint32 weight = 11;
  reserved 20 to 25;
  reserved "legacy";

  message Item {
    string sku = 1;
    int32 quantity = 2;
  }
}

enum Status {
  STATUS_UNKNOWN = 0;
  STATUS_OPEN = 1;
  STATUS_CLOSED = 2;
  reserved 9;
  reserved "STATUS_GONE";
}
"""

PROTO2 = """syntax = "proto2";
package {package};

message Account {
  required int64 id = 1;
  optional string name = 2 [default = "none"];
  optional int32 level = 3 [default = 1];
  optional Kind kind = 4 [default = KIND_USER];
  repeated int32 scores = 5;
  optional bytes blob = 6;
  optional double ratio = 7 [default = 0.5];
  optional bool active = 8;
  reserved 30;

  enum Kind {
    KIND_USER = 1;
    KIND_ADMIN = 2;
  }
}
"""

Edit = Callable[[str], str]


def _sub(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        if old not in text:
            raise ValueError(f"the edit's text is not there: {old!r}")
        return text.replace(old, new, 1)

    return edit


def _both(*edits: Edit) -> Edit:
    def edit(text: str) -> str:
        for one in edits:
            text = one(text)
        return text

    return edit


_ITEM = "  message Item {\n    string sku = 1;\n    int32 quantity = 2;\n  }\n"
_NOTE = "  string note = 2;\n"

PROTO3_EDITS: dict[str, Edit] = {
    "unchanged": lambda text: text,
    "comments, spacing and import order": _both(
        _sub("int64 id = 1;", "int64   id=1;  // the key"),
        _sub(
            'import "google/protobuf/duration.proto";\nimport "google/protobuf/timestamp.proto";',
            'import "google/protobuf/timestamp.proto";\n/* why */ import'
            ' "google/protobuf/duration.proto";',
        ),
    ),
    "field added": _sub(_NOTE, _NOTE + "  string channel = 12;\n"),
    "repeated field added": _sub(_NOTE, _NOTE + "  repeated int64 refs = 12;\n"),
    "field deleted": _sub(_NOTE, ""),
    "field deleted, number reserved": _sub(_NOTE, "  reserved 2;\n"),
    "field deleted, name reserved": _sub(_NOTE, '  reserved "note";\n'),
    "field deleted, number and name reserved": _sub(_NOTE, '  reserved 2;\n  reserved "note";\n'),
    "field renamed": _sub("string note = 2;", "string comment = 2;"),
    "field renamed, same JSON name": _sub(
        "string note = 2;", 'string remark = 2 [json_name = "note"];'
    ),
    "json_name set": _sub("string note = 2;", 'string note = 2 [json_name = "memo"];'),
    "field renumbered": _sub("string note = 2;", "string note = 12;"),
    "two fields swap numbers": _both(
        _sub("int64 id = 1;", "int64 id = 2;"), _sub("string note = 2;", "string note = 1;")
    ),
    "field into existing oneof": _both(
        _sub(_NOTE, ""),
        _sub("    bytes token = 8;\n", "    bytes token = 8;\n    string note = 2;\n"),
    ),
    "field out of oneof": _both(
        _sub("    string card = 7;\n", ""), _sub(_NOTE, _NOTE + "  string card = 7;\n")
    ),
    "field between oneofs": _both(
        _sub("    bytes token = 8;\n", ""),
        _sub("  }\n  google", "  }\n  oneof secret {\n    bytes token = 8;\n  }\n  google"),
    ),
    "oneof renamed": _sub("oneof payment {", "oneof paid_with {"),
    "new field added to oneof": _sub(
        "    bytes token = 8;\n", "    bytes token = 8;\n    int64 voucher = 13;\n"
    ),
    "oneof member deleted": _sub("    bytes token = 8;\n", ""),
    "implicit to explicit presence": _sub(
        "  uint32 weight = 11;", "  optional uint32 weight = 11;"
    ),
    "explicit to implicit presence": _sub("optional int32 priority = 10;", "int32 priority = 10;"),
    "singular to repeated": _sub("  string note = 2;", "  repeated string note = 2;"),
    "repeated to singular": _sub("repeated string tags = 6;", "string tags = 6;"),
    "map to repeated entries": _sub(
        "  map<string, int32> counts = 5;\n",
        "  repeated CountsEntry counts = 5;\n"
        "  message CountsEntry {\n    string key = 1;\n    int32 value = 2;\n  }\n",
    ),
    "map value type changed": _sub("map<string, int32> counts", "map<string, int64> counts"),
    "map value type changed to string": _sub(
        "map<string, int32> counts", "map<string, string> counts"
    ),
    "map key type changed": _sub("map<string, int32> counts", "map<int32, int32> counts"),
    "message field type renamed": _both(
        _sub("Item item = 4;", "Line item = 4;"), _sub("message Item {", "message Line {")
    ),
    "nested type moved to top level": _both(
        _sub(_ITEM, ""),
        _sub(
            "enum Status {",
            "message Item {\n  string sku = 1;\n  int32 quantity = 2;\n}\n\nenum Status {",
        ),
    ),
    "nested field type changed": _sub("    int32 quantity = 2;", "    string quantity = 2;"),
    "nested field widened": _sub("    int32 quantity = 2;", "    int64 quantity = 2;"),
    "nested field deleted": _sub("    int32 quantity = 2;\n", ""),
    "nested field renamed": _sub("    int32 quantity = 2;", "    int32 count = 2;"),
    "nested message added": _sub(_ITEM, _ITEM + "  message Gift {\n    string text = 1;\n  }\n"),
    "top-level message added": _sub(
        "enum Status {", "message Refund {\n  int64 order_id = 1;\n}\n\nenum Status {"
    ),
    "well-known type changed": _sub(
        "google.protobuf.Timestamp placed_at", "google.protobuf.Duration placed_at"
    ),
    "message to bytes": _sub("Item item = 4;", "bytes item = 4;"),
    "enum to int32": _sub("Status status = 3;", "int32 status = 3;"),
    "enum value added": _sub(
        "  STATUS_CLOSED = 2;\n", "  STATUS_CLOSED = 2;\n  STATUS_HELD = 3;\n"
    ),
    "enum value deleted": _sub("  STATUS_CLOSED = 2;\n", ""),
    "enum value deleted, number reserved": _sub("  STATUS_CLOSED = 2;\n", "  reserved 2;\n"),
    "enum value deleted, name reserved": _sub(
        "  STATUS_CLOSED = 2;\n", '  reserved "STATUS_CLOSED";\n'
    ),
    "enum value deleted, number and name reserved": _sub(
        "  STATUS_CLOSED = 2;\n", '  reserved 2;\n  reserved "STATUS_CLOSED";\n'
    ),
    "enum value renamed": _sub("STATUS_CLOSED = 2;", "STATUS_DONE = 2;"),
    "enum value renumbered": _sub("STATUS_CLOSED = 2;", "STATUS_CLOSED = 4;"),
    "enum alias added": _both(
        _sub("enum Status {\n", "enum Status {\n  option allow_alias = true;\n"),
        _sub("  STATUS_CLOSED = 2;\n", "  STATUS_CLOSED = 2;\n  STATUS_SHUT = 2;\n"),
    ),
    "enum moved into the message, values grown": _both(
        _sub("Status status = 3;", "Order.Status status = 3;"),
        _sub(
            _ITEM,
            _ITEM + "  enum Status {\n    STATUS_UNKNOWN = 0;\n    STATUS_OPEN = 1;\n"
            "    STATUS_CLOSED = 2;\n    STATUS_HELD = 3;\n  }\n",
        ),
        _sub("\nenum Status {", "\nenum State {"),
        _sub(
            "STATUS_UNKNOWN = 0;\n  STATUS_OPEN = 1;\n  STATUS_CLOSED = 2;",
            "STATE_UNKNOWN = 0;\n  STATE_OPEN = 1;\n  STATE_CLOSED = 2;",
        ),
    ),
    "enum renamed": _both(
        _sub("Status status = 3;", "State status = 3;"), _sub("enum Status {", "enum State {")
    ),
    "reserved range released": _sub("  reserved 20 to 25;\n", ""),
    "reserved range shrunk": _sub("reserved 20 to 25;", "reserved 20 to 22;"),
    "reserved range split": _sub("reserved 20 to 25;", "reserved 20 to 21, 23 to 25;"),
    "reserved range grown": _sub("reserved 20 to 25;", "reserved 20 to 30;"),
    "reserved range to max": _sub("reserved 20 to 25;", "reserved 20 to max;"),
    "reserved name released": _sub('  reserved "legacy";\n', ""),
    "enum reserved number released": _sub("  reserved 9;\n", ""),
    "enum reserved name released": _sub('  reserved "STATUS_GONE";\n', ""),
    "package renamed": _sub("package {package};", "package {package}.v2;"),
    "legacy JSON field conflicts": _sub(
        "message Order {\n",
        "message Order {\n  option deprecated_legacy_json_field_conflicts = true;\n",
    ),
    "message option added": _sub(
        "message Order {\n", "message Order {\n  option deprecated = true;\n"
    ),
    "field deprecated": _sub("string note = 2;", "string note = 2 [deprecated = true];"),
}

_NAME = '  optional string name = 2 [default = "none"];\n'

PROTO2_EDITS: dict[str, Edit] = {
    "proto2 unchanged": lambda text: text,
    "proto2 default changed": _sub('[default = "none"]', '[default = "nobody"]'),
    "proto2 default removed": _sub(' [default = "none"]', ""),
    "proto2 number default changed": _sub("[default = 1]", "[default = 2]"),
    "proto2 number default spelled differently": _sub("[default = 1]", "[default = 0x1]"),
    "proto2 float default changed": _sub("[default = 0.5]", "[default = 0.25]"),
    "proto2 default added": _sub(
        "optional bool active = 8;", "optional bool active = 8 [default = true];"
    ),
    "proto2 enum default changed": _sub("[default = KIND_USER]", "[default = KIND_ADMIN]"),
    "proto2 enum default made implicit": _sub(" [default = KIND_USER]", ""),
    "proto2 required added": _sub(_NAME, _NAME + "  required string email = 9;\n"),
    "proto2 required removed": _sub("  required int64 id = 1;\n", "  reserved 1;\n"),
    "proto2 optional to required": _sub("optional bytes blob = 6;", "required bytes blob = 6;"),
    "proto2 required to optional": _sub("required int64 id = 1;", "optional int64 id = 1;"),
    "proto2 optional field added": _sub(_NAME, _NAME + "  optional string email = 9;\n"),
    "proto2 field deleted": _sub("  optional bool active = 8;\n", ""),
    "proto2 packed repeated": _sub(
        "repeated int32 scores = 5;", "repeated int32 scores = 5 [packed = true];"
    ),
    "proto2 repeated to optional": _sub("repeated int32 scores = 5;", "optional int32 scores = 5;"),
    "proto2 enum value added": _sub(
        "    KIND_ADMIN = 2;\n", "    KIND_ADMIN = 2;\n    KIND_GUEST = 3;\n"
    ),
    "proto2 enum value deleted": _sub("    KIND_ADMIN = 2;\n", ""),
    "proto2 int32 to int64": _sub("optional int32 level = 3", "optional int64 level = 3"),
    "proto2 int32 to sint32": _sub("optional int32 level = 3", "optional sint32 level = 3"),
    "proto2 bytes to string": _sub("optional bytes blob = 6;", "optional string blob = 6;"),
    "proto2 double to float": _sub("optional double ratio = 7", "optional float ratio = 7"),
    "proto2 reserved released": _sub("  reserved 30;\n", ""),
    "proto2 to proto3": lambda text: (
        text.replace('syntax = "proto2";', 'syntax = "proto3";')
        .replace("required int64", "int64")
        .replace("optional ", "")
        .replace(' [default = "none"]', "")
        .replace(" [default = 1]", "")
        .replace(" [default = KIND_USER]", "")
        .replace(" [default = 0.5]", "")
        .replace("KIND_USER = 1;", "KIND_UNKNOWN = 0;\n    KIND_USER = 1;")
    ),
}


def corpus(seed: int = 51, mixed: int = 60) -> list[Pair]:
    """Every scalar-to-scalar change, each edit alone on its base, ``mixed`` seeded pairs of
    two edits at once, and each proto3 edit taken back (the new version as the old)."""
    pairs = [
        Pair(f"type {a}->{b}", _value(a), _value(b)) for a in SCALARS for b in SCALARS if a != b
    ]
    for base, edits in ((PROTO3, PROTO3_EDITS), (PROTO2, PROTO2_EDITS)):
        pairs += [Pair(kind, base, edit(base)) for kind, edit in edits.items()]
    pairs += [
        Pair(f"reverted: {kind}", edit(PROTO3), PROTO3) for kind, edit in PROTO3_EDITS.items()
    ]
    rng = random.Random(seed)
    names = sorted(PROTO3_EDITS)
    while mixed:
        first, second = rng.sample(names, 2)
        try:
            new = PROTO3_EDITS[second](PROTO3_EDITS[first](PROTO3))
            proto_definition(new.replace("{package}", "p"))
        except (ValueError, SchemaError):  # the two edits clash (text, or field numbers)
            continue
        pairs.append(Pair(f"{first} + {second}", PROTO3, new))
        mixed -= 1
    return pairs


def message_class(text: str, name: str) -> type[Message]:
    """The class protoc's generated code would give ``name``, from the same descriptor."""
    pool = descriptor_pool.DescriptorPool()
    proto = file_descriptor(encoded_descriptor(proto_definition(text)))
    for dependency in proto.dependency:
        well_known = descriptor_pool.Default().FindFileByName(dependency)
        imported = descriptor_pb2.FileDescriptorProto()
        well_known.CopyToProto(imported)
        pool.Add(imported)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{proto.package}.{name}"))
