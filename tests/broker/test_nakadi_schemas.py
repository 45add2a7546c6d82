"""``POST /event-types/{name}/schemas``: a schema alone, by the compatibility mode, as Nakadi.

A JSON schema evolves by the mode's rules (tests/broker/test_schemas.py holds the matrix); a
switch to ``avro_schema`` is a new MAJOR version in every mode, Avro to Avro follows Avro's
resolution rules, and there is no way back to ``json_schema``. ``?fetch=true`` answers the
stored version of the schema sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from changebroker.broker.authorization import Scopes
from tests.broker.swagger import assert_problem, validate
from tests.support.event_types import business_event_type

FOO_JSON: dict[str, Any] = {"type": "object", "properties": {"foo": {"type": "string"}}}
FOO_AVRO = {"type": "record", "name": "Foo", "fields": [{"name": "foo", "type": "string"}]}


def _json(schema: dict[str, Any]) -> dict[str, str]:
    return {"type": "json_schema", "schema": json.dumps(schema)}


def _avro(schema: dict[str, Any]) -> dict[str, str]:
    return {"type": "avro_schema", "schema": json.dumps(schema)}


def _with_fields(*fields: dict[str, Any]) -> dict[str, Any]:
    return {**FOO_AVRO, "fields": [*FOO_AVRO["fields"], *fields]}


@pytest.fixture
def foo_type(client: httpx.Client, make_event_type: Callable[..., str]) -> Callable[..., str]:
    """``foo_type(compatibility_mode="forward")``: a business type of ``{"foo": string}``."""

    def make(**overrides: Any) -> str:
        return make_event_type(
            partition_strategy="random",
            partition_key_fields=None,
            schema=_json(FOO_JSON),
            **overrides,
        )

    return make


def _latest(client: httpx.Client, name: str) -> dict[str, Any]:
    response = client.get(f"/event-types/{name}/schemas/latest")
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_json_schema_is_added_by_its_mode_and_answered_without_a_body(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    name = foo_type()
    wider = {**FOO_JSON, "properties": {**FOO_JSON["properties"], "bar": {"type": "string"}}}
    response = client.post(f"/event-types/{name}/schemas", json=_json(wider))
    assert response.status_code == 200, response.text
    assert response.content == b""
    latest = _latest(client, name)
    assert (latest["version"], json.loads(latest["schema"])) == ("1.1.0", wider)
    # The event type says so too, and lists both versions.
    assert client.get(f"/event-types/{name}").json()["schema"]["version"] == "1.1.0"
    versions = client.get(f"/event-types/{name}/schemas").json()["items"]
    assert [v["version"] for v in versions] == ["1.1.0", "1.0.0"]


def test_a_change_the_mode_refuses_is_422_and_changes_nothing(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    name = foo_type(compatibility_mode="forward")
    narrowed = {"type": "object", "properties": {"foo": {"type": "integer"}}}
    response = client.post(f"/event-types/{name}/schemas", json=_json(narrowed))
    assert_problem(response, 422, "#/properties/foo/type")
    assert _latest(client, name)["version"] == "1.0.0"


def test_the_same_schema_keeps_its_version(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    name = foo_type()
    response = client.post(f"/event-types/{name}/schemas", json=_json(FOO_JSON))
    assert response.status_code == 200, response.text
    assert [v["version"] for v in client.get(f"/event-types/{name}/schemas").json()["items"]] == [
        "1.0.0"
    ]


def test_fetch_answers_the_stored_version_of_the_schema_sent(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    name = foo_type()
    wider = {**FOO_JSON, "properties": {**FOO_JSON["properties"], "bar": {"type": "string"}}}
    assert client.post(f"/event-types/{name}/schemas", json=_json(wider)).status_code == 200
    # The first version, sent with other spacing and key order: the same JSON; its type by
    # the enum's name, as SchemaControllerAT.whenCreateSchemaWithFetchThen200 sends it.
    respelled = {"type": "JSON_SCHEMA", "schema": '{"properties":{"foo":{"type":"string"}},'
                 '"type":"object"}'}  # fmt: skip
    fetched = client.post(f"/event-types/{name}/schemas", params={"fetch": "true"}, json=respelled)
    assert fetched.status_code == 200, fetched.text
    validate("EventTypeSchema", fetched.json())
    assert fetched.json()["version"] == "1.0.0"
    assert fetched.json()["schema"] == json.dumps(FOO_JSON)
    # Fetching stores nothing.
    assert _latest(client, name)["version"] == "1.1.0"
    unknown = {"type": "object", "properties": {"baz": {"type": "string"}}}
    missing = client.post(f"/event-types/{name}/schemas?fetch=true", json=_json(unknown))
    assert_problem(missing, 404, f"schema is not found for {name}")


def test_unknown_event_type_and_bad_bodies(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    assert_problem(
        client.post("/event-types/no-such-type/schemas", json=_json(FOO_JSON)),
        404,
        'EventType "no-such-type" does not exist.',
    )
    name = foo_type()
    bad = client.post(f"/event-types/{name}/schemas", json={"type": "proto", "schema": "{}"})
    assert_problem(bad, 422, "schema.type 'proto' is not supported")
    not_text = client.post(f"/event-types/{name}/schemas", json={"type": "json_schema"})
    assert_problem(not_text, 422, "schema.schema must be the schema as a string")
    flag = client.post(f"/event-types/{name}/schemas?fetch=maybe", json=_json(FOO_JSON))
    assert_problem(flag, 400, "'fetch' must be true or false")
    assert _latest(client, name)["version"] == "1.0.0"


@pytest.mark.parametrize("mode", ["compatible", "forward", "none"])
def test_a_switch_to_avro_is_a_major_version_in_every_mode_and_has_no_way_back(
    client: httpx.Client, foo_type: Callable[..., str], mode: str
) -> None:
    name = foo_type(compatibility_mode=mode)
    response = client.post(f"/event-types/{name}/schemas", json=_avro(FOO_AVRO))
    assert response.status_code == 200, response.text
    latest = _latest(client, name)
    assert (latest["type"], latest["version"]) == ("avro_schema", "2.0.0")
    assert json.loads(latest["schema"]) == FOO_AVRO
    stored = client.get(f"/event-types/{name}").json()["schema"]
    assert (stored["type"], stored["version"]) == ("avro_schema", "2.0.0")
    # Older versions keep their type.
    first = client.get(f"/event-types/{name}/schemas/1.0.0").json()
    assert first["type"] == "json_schema"
    back = client.post(f"/event-types/{name}/schemas", json=_json(FOO_JSON))
    assert_problem(back, 422, "Cannot change from avro_schema to json_schema!")
    # The same Avro schema with documentation only is no change.
    documented = {**FOO_AVRO, "doc": "foo events"}
    assert client.post(f"/event-types/{name}/schemas", json=_avro(documented)).status_code == 200
    assert _latest(client, name)["version"] == "2.0.0"


# (mode, new Avro schema) -> "3.0.0", or what the 422 says. Forward: readers of the previous
# schema read events of the new one; compatible: both ways; none: anything.
AVRO_CHANGES: list[tuple[str, dict[str, Any], str]] = [
    ("forward", _with_fields({"name": "bar", "type": "string"}), "3.0.0"),
    ("forward", {**FOO_AVRO, "fields": []}, "Failed to evolve avro schema due to"),
    ("compatible", _with_fields({"name": "bar", "type": "string", "default": ""}), "3.0.0"),
    ("compatible", _with_fields({"name": "bar", "type": "string"}), "backward"),
    ("none", {**FOO_AVRO, "fields": [{"name": "foo", "type": "int"}]}, "3.0.0"),
]


@pytest.mark.parametrize(("mode", "schema", "expected"), AVRO_CHANGES)
def test_avro_schemas_evolve_by_avro_resolution(
    client: httpx.Client,
    foo_type: Callable[..., str],
    mode: str,
    schema: dict[str, Any],
    expected: str,
) -> None:
    name = foo_type(compatibility_mode=mode)
    assert client.post(f"/event-types/{name}/schemas", json=_avro(FOO_AVRO)).status_code == 200
    response = client.post(f"/event-types/{name}/schemas", json=_avro(schema))
    if expected == "3.0.0":
        assert response.status_code == 200, response.text
        assert _latest(client, name)["version"] == "3.0.0"
    else:
        assert_problem(response, 422, expected)
        assert _latest(client, name)["version"] == "2.0.0"


def test_fetch_finds_an_avro_schema_by_its_canonical_form(
    client: httpx.Client, foo_type: Callable[..., str]
) -> None:
    name = foo_type()
    assert client.post(f"/event-types/{name}/schemas", json=_avro(FOO_AVRO)).status_code == 200
    # Another spelling of the same schema: documentation and key order do not count.
    respelled = {"fields": [{"type": "string", "name": "foo", "doc": "f"}], "name": "Foo",
                 "type": "record"}  # fmt: skip
    fetched = client.post(f"/event-types/{name}/schemas?fetch=true", json=_avro(respelled))
    assert fetched.status_code == 200, fetched.text
    assert (fetched.json()["type"], fetched.json()["version"]) == ("avro_schema", "2.0.0")


def test_an_avro_event_type_deleted_can_be_created_again(
    client: httpx.Client, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("avro")
    body = business_event_type(
        name, partition_strategy="random", partition_key_fields=None, schema=_avro(FOO_AVRO)
    )
    assert client.post("/event-types", json=body).status_code == 201
    stored = client.get(f"/event-types/{name}").json()["schema"]
    assert (stored["type"], stored["version"]) == ("avro_schema", "1.0.0")
    assert client.delete(f"/event-types/{name}").status_code == 200
    # Its Avro versions' registry subject went with it: the name is free again.
    assert client.post("/event-types", json=body).status_code == 201, "subject left behind"
    assert client.get(f"/event-types/{name}/schemas/latest").json()["version"] == "1.0.0"


def test_adding_a_schema_needs_the_event_type_write_scope() -> None:
    scopes = Scopes()
    assert scopes.table()("POST", "/event-types/orders/schemas") == scopes.event_type_write
    assert scopes.table()("GET", "/event-types/orders/schemas") is None
