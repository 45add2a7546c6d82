"""PB subjects through the API on Postgres: protoc refuses what does not compile (line and
column, never a 500), comments, spacing and option order keep the id, every mode judges
whose reads break, and a subject's protobufCategory picks Buf's WIRE or WIRE_JSON rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from google.protobuf.message import DecodeError, EncodeError

from changebroker.registry.compat.model import Mode
from changebroker.registry.compat.protobuf import protobuf_check
from changebroker.registry.compat.protobuf_source import proto_definition
from tests.registry.protobuf_corpus import PROTO2, PROTO3, corpus, message_class

ORDER = PROTO3.replace("{package}", "shop")
ACCOUNT = PROTO2.replace("{package}", "bank")


@pytest.fixture
def subject(unique_name: Callable[[str], str]) -> str:
    return unique_name("pb")


def create(client: httpx.Client, subject: str, **meta: Any) -> dict[str, Any]:
    body = {"tenant": "t", "namespace": "n", "status": "released", "format": "PB", **meta}
    response = client.post(f"/subjects/{subject}", json=body)
    assert response.status_code == 200, response.text
    created: dict[str, Any] = response.json()
    return created


def register(client: httpx.Client, subject: str, text: Any) -> httpx.Response:
    return client.post(
        f"/subjects/{subject}/versions", json={"serialization": "pb", "schemaDefinition": text}
    )


def check(client: httpx.Client, subject: str, text: str) -> dict[str, Any]:
    response = client.post(
        f"/compatibility/subjects/{subject}/versions/latest", json={"schema": text}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


INVALID = [
    ('syntax = "proto3";\nmessage A {\n  int32 a = 1\n  string b = 2;\n}\n', "line 4, column 3"),
    ('syntax = "proto3";\nmessage A {\n  Missing m = 1;\n}\n', "line 3, column 3"),
    ('syntax = "proto3";\nmessage A { int32 a = 1; int32 b = 1; }\n', "line 2"),
    ('syntax = "proto3";\nmessage A { int32 a = 0; }\n', "line 2"),
    ('syntax = "proto3";\nmessage A { required int32 a = 1; }\n', "line 2"),
    ('syntax = "proto3";\nenum E { A = 1; }\n', "line 2"),
    ('syntax = "proto4";\n', "line 1"),
    ('syntax = "proto3";\nimport "other.proto";\n', "line 2, column 1"),
    ('syntax = "proto3";\nimport "../../etc/passwd";\n', "line 2, column 1"),
    ('syntax = "proto3";\nimport "/etc/passwd";\n', "line 2, column 1"),
    ('syntax = "proto3";\nimport "schema.proto";\n', "line 2"),
    ('edition = "2023";\nmessage A {}\n', "proto3"),
    ('syntax = "proto3";\nmessage A { int32 a = 536870912; }\n', "line 2"),
    ("\x00\x01\x02 binary", "line 1"),
    ('syntax = "proto3"; message \u00e9 {}', "line 1"),
    ({"syntax": "proto3"}, "text of a .proto file"),
    (42, "text of a .proto file"),
    (["message A {}"], "text of a .proto file"),
]


@pytest.mark.parametrize(("text", "said"), INVALID)
def test_invalid_proto_is_refused_with_the_compilers_words(
    client: httpx.Client, subject: str, text: Any, said: str
) -> None:
    create(client, subject)
    response = register(client, subject, text)
    assert response.status_code == 422, response.text
    assert response.json()["errorCode"] == 42201
    assert said in response.json()["errorMessage"], response.json()
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": []}


def test_mangled_proto_text_never_answers_500(client: httpx.Client, subject: str) -> None:
    create(client, subject, compatibility="FULL")
    assert register(client, subject, ORDER).status_code == 200
    texts = [pair.new.replace("{package}", "shop") for pair in corpus()[210:300]]
    rng = random.Random(51)
    statuses = set()
    for _ in range(150):
        text = list(rng.choice(texts))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(text))
            if rng.random() < 0.5:
                del text[at : at + rng.randint(1, 8)]
            else:
                text.insert(at, rng.choice(["{", "}", ";", "=", '"', "\n", "9", "x", "\\", "/*"]))
        mangled = "".join(text)
        statuses.add(check_status := client.post(
            f"/compatibility/subjects/{subject}/versions/latest", json={"schema": mangled}
        ).status_code)  # fmt: skip
        assert check_status in (200, 422)
        statuses.add(status := register(client, subject, mangled).status_code)
        assert status in (200, 409, 422)
    assert 422 in statuses and 200 in statuses


def test_comments_spacing_and_option_order_keep_the_id(client: httpx.Client, subject: str) -> None:
    create(client, subject)
    written = ORDER.replace(
        "message Order {",
        'option java_package = "a.b";\noption optimize_for = SPEED;\nmessage Order {',
    ).replace("string note = 2;", 'string note = 2 [deprecated = true, json_name = "memo"];')
    respelled = "// the shop's order\n" + ORDER.replace(
        "message Order {",
        'option optimize_for = SPEED; /* why */ option java_package="a.b";\n\n\nmessage   Order{',
    ).replace("int64 id = 1;", "int64 id=1;   // the key").replace(
        "string note = 2;", 'string note = 2 [json_name = "memo", deprecated = true];'
    )
    first = register(client, subject, written)
    assert first.status_code == 200, first.text
    assert register(client, subject, respelled).json() == first.json()
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}
    other = register(client, subject, written.replace('"a.b"', '"a.c"'))  # a value, not an order
    assert other.status_code == 200 and other.json()["id"] != first.json()["id"]
    stored = client.get(f"/schemas/{first.json()['id']}").json()
    assert stored["schemaDefinition"] == written  # as it was sent


def test_wire_json_is_the_default_and_wire_lets_a_field_be_renamed(
    client: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    renamed = ORDER.replace("string note = 2;", "string comment = 2;")
    strict, wire = unique_name("pb_json"), unique_name("pb_wire")
    assert create(client, strict)["protobufCategory"] == "WIRE_JSON"
    assert create(client, wire, protobufCategory="wire")["protobufCategory"] == "WIRE"
    for name in (strict, wire):
        assert register(client, name, ORDER).status_code == 200
    refused = register(client, strict, renamed)
    assert refused.status_code == 409, refused.text
    violations = refused.json()["violations"]
    assert {v["rule"] for v in violations} == {"FIELD_SAME_NAME", "FIELD_SAME_JSON_NAME"}
    for violation in violations:
        assert violation["path"] == "#/messages/Order/fields/2"
        assert '"comment"' in violation["message"] and "version 1" in violation["message"]
    assert register(client, wire, renamed).status_code == 200
    # The versions of the WIRE subject break WIRE_JSON: it cannot move there.
    moved = client.post(f"/subjects/{wire}", json={"tenant": "t", "namespace": "n",
                                                    "protobufCategory": "WIRE_JSON"})  # fmt: skip
    assert moved.status_code == 409 and moved.json()["errorCode"] == 40901
    assert client.get(f"/subjects/{wire}").json()["protobufCategory"] == "WIRE"
    bad = client.post(f"/subjects/{strict}", json={"tenant": "t", "namespace": "n",
                                                    "protobufCategory": "JSON"})  # fmt: skip
    assert bad.status_code == 422 and "WIRE_JSON" in bad.json()["errorMessage"]


REQUIRED_ADDED = ACCOUNT.replace(
    "  optional int32 level", "  required string email = 9;\n  optional int32 level"
)
REQUIRED_REMOVED = ACCOUNT.replace("  required int64 id = 1;\n", "  reserved 1;\n")
STRING = 'syntax = "proto3";\npackage v;\nmessage Value {\n  string value = 1;\n}\n'
BYTES = STRING.replace("string value", "bytes value")


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [
        (ACCOUNT, REQUIRED_ADDED, False, True),
        (ACCOUNT, REQUIRED_REMOVED, True, False),
        (STRING, BYTES, True, False),
        (BYTES, STRING, False, True),
    ],
)
def test_each_mode_keeps_the_reads_it_protects(
    client: httpx.Client,
    unique_name: Callable[[str], str],
    old: str,
    new: str,
    backward: bool,
    forward: bool,
) -> None:
    for mode, expected in (("BACKWARD", backward), ("FORWARD", forward), ("FULL", False)):
        name = unique_name("pb_mode")
        create(client, name, compatibility=mode, protobufCategory="WIRE")
        assert register(client, name, old).status_code == 200
        assert check(client, name, new)["isCompatible"] is expected, mode


def test_the_wire_shows_the_modes_verdicts() -> None:
    """What the modes above say, seen on the wire with classes built from each version: a
    reader missing a required field holds a message that is not initialized (Java and C++
    parsers refuse it; Python's refuses to write it on)."""
    account, added, removed = (
        message_class(text, "Account") for text in (ACCOUNT, REQUIRED_ADDED, REQUIRED_REMOVED)
    )
    old_data = account(id=1).SerializeToString()
    assert added.FromString(old_data).FindInitializationErrors() == ["email"]  # type: ignore[attr-defined]
    assert removed.FromString(old_data).IsInitialized()  # the new reader is content
    new_data = removed(name="x").SerializeToString()
    assert account.FromString(new_data).FindInitializationErrors() == ["id"]  # type: ignore[attr-defined]
    with pytest.raises(EncodeError, match="id"):
        account.FromString(new_data).SerializeToString()
    string, bytes_ = (message_class(text, "Value") for text in (STRING, BYTES))
    assert bytes_.FromString(string(value="é").SerializeToString()).value == "é".encode()  # type: ignore[attr-defined]
    with pytest.raises(DecodeError):
        string.FromString(bytes_(value=b"\xff").SerializeToString())


def test_transitive_modes_name_every_version_they_break(client: httpx.Client, subject: str) -> None:
    create(client, subject, compatibility="FULL_TRANSITIVE")
    assert register(client, subject, ORDER).status_code == 200
    grown = ORDER.replace(
        "  uint32 weight = 11;\n", "  uint32 weight = 11;\n  string channel = 12;\n"
    )
    assert register(client, subject, grown).status_code == 200
    broken = grown.replace("int64 id = 1;", "string id = 1;")
    answer = check(client, subject, broken)
    messages = [v["message"] for v in answer["violations"]]
    assert answer["isCompatible"] is False and len(messages) == 2
    assert "version 2" in messages[0] and "version 1" in messages[1]
    assert {v["path"] for v in answer["violations"]} == {"#/messages/Order/fields/1"}


def test_a_deleted_field_counts_in_every_mode() -> None:
    """Reusing a freed number is what non-transitive modes cannot see later: the deletion
    itself is refused, unless the number (and for JSON, the name) stays reserved."""
    old = proto_definition(ORDER)
    dropped = proto_definition(ORDER.replace("  string note = 2;\n", ""))
    kept = proto_definition(
        ORDER.replace("  string note = 2;\n", '  reserved 2;\n  reserved "note";\n')
    )
    for mode in (Mode.BACKWARD, Mode.FORWARD, Mode.FULL):
        rules = {v.rule.value for v in protobuf_check(mode, dropped, [("v1", old)], "WIRE_JSON")}
        assert rules == {
            "FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED",
            "FIELD_NO_DELETE_UNLESS_NAME_RESERVED",
        }
        assert protobuf_check(mode, kept, [("v1", old)], "WIRE_JSON") == []


def test_a_version_stored_before_pb_was_compiled_is_named_not_a_500() -> None:
    """Before PB had rules its definitions were kept as sent (mode NONE)."""
    new = proto_definition(ORDER)
    [violation] = protobuf_check(Mode.BACKWARD, new, [("version 1", "message A {}")], "WIRE")
    assert violation.rule.value == "schema-invalid" and "version 1" in violation.message
