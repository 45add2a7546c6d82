"""Every endpoint of the registry API and every error code, against real Postgres."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from changebroker.auth import AuthSettings
from changebroker.registry.app import create_app
from changebroker.stack.run import serve_in_thread
from tests.support.credentials import tokens_file

OPENSCHEMA = "application/vnd.openschema.v1+json"
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["id"],
}


@pytest.fixture
def subject(unique_name: Callable[[str], str]) -> str:
    return unique_name("subject")


def json_schema(definition: Any, **extra: Any) -> dict[str, Any]:
    return {"serialization": "json", "schemaDefinition": definition, **extra}


def register(client: httpx.Client, subject: str, definition: Any, **extra: Any) -> httpx.Response:
    return client.post(f"/subjects/{subject}/versions", json=json_schema(definition, **extra))


def error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["errorCode"] == code
    assert isinstance(body["errorMessage"], str) and body["errorMessage"]
    return body


def with_age_bounds(**bounds: Any) -> dict[str, Any]:
    age = {"type": "integer", **bounds}
    return {**PERSON, "properties": {**PERSON["properties"], "age": age}}


def avro_user(*fields: dict[str, Any]) -> dict[str, Any]:
    record = {"type": "record", "name": "User", "fields": list(fields)}
    return {"serialization": "avro", "schemaDefinition": record}


# Each step is BACKWARD (Avro resolution is not transitive), but 3 cannot read 1.
AVRO_CHAIN = [
    avro_user({"name": "a", "type": "int"}),
    avro_user(),
    avro_user({"name": "a", "type": "string", "default": ""}),
]


def test_health(client: httpx.Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "UP"}


def test_register_is_idempotent_and_versions_count_up(client: httpx.Client, subject: str) -> None:
    first = register(
        client, subject, PERSON, name="person", comment="a person", validator="v.groovy"
    )
    assert first.status_code == 200, first.text
    assert first.headers["content-type"].startswith(OPENSCHEMA)
    schema_id = first.json()["id"]
    assert isinstance(schema_id, str) and schema_id.isdigit()

    # The same definition, keys reordered or sent as a string, is the same schema.
    reordered = dict(reversed(list(PERSON.items())))
    assert register(client, subject, reordered).json() == {"id": schema_id}
    as_text = '{"required": ["id"], "type": "object", "properties": {"id": {"type": "string"},'
    as_text += ' "age": {"type": "integer"}}}'
    assert register(client, subject, as_text).json() == {"id": schema_id}
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}

    second = register(client, subject, with_age_bounds(minimum=0))
    assert second.status_code == 409  # BACKWARD: new readers reject old negative ages
    compatible = register(client, subject, {**PERSON, "description": "people"})
    assert compatible.status_code == 200
    assert compatible.json()["id"] != schema_id
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1, 2]}


def test_get_schema_by_id(client: httpx.Client, subject: str) -> None:
    schema_id = register(client, subject, PERSON, name="person", comment="c", validator="a.groovy")
    response = client.get(f"/schemas/{schema_id.json()['id']}")
    assert response.status_code == 200
    assert response.json() == {
        "version": 1,
        "id": schema_id.json()["id"],
        "serialization": "json",
        "schemaDefinition": PERSON,
        "name": "person",
        "comment": "c",
        "validator": "a.groovy",
    }
    assert client.get(f"/schemas/{schema_id.json()['id']}/subject").json() == {
        "subject": subject,
        "version": 1,
    }


@pytest.mark.parametrize("missing", ["999999999", "abc", "99999999999999999999", "\u00b2"])
def test_unknown_schema_id_is_40401(client: httpx.Client, missing: str) -> None:
    error(client.get(f"/schemas/{missing}"), 404, 40401)
    error(client.get(f"/schemas/{missing}/subject"), 404, 40401)


def test_subjects_list_and_filters(client: httpx.Client, unique_name: Callable[[str], str]) -> None:
    a, b = unique_name("list_a"), unique_name("list_b")
    meta = {"namespace": "ns1", "status": "released"}
    assert client.post(f"/subjects/{a}", json={**meta, "tenant": "t-list"}).status_code == 200
    assert client.post(f"/subjects/{b}", json={**meta, "tenant": "t-other"}).status_code == 200
    names = client.get("/subjects").json()["name"]
    assert {a, b} <= set(names)
    assert names == sorted(names)
    assert client.get("/subjects", params={"tenant": "t-list"}).json() == {"name": [a]}
    assert client.get("/subjects", params={"tenant": "t-list", "namespace": "nope"}).json() == {
        "name": []
    }


def test_subject_create_update_and_get(client: httpx.Client, subject: str) -> None:
    body = {
        "tenant": "messaging/rocketmq",
        "namespace": "org.apache.rocketmq",
        "app": "rocketmq",
        "description": "rocketmq user information",
        "compatibility": "NONE",
        "status": "deprecated",
        "coordinate": "g:a:1.0.0",
        "format": "json",
    }
    created = client.post(f"/subjects/{subject}/", json=body)
    assert created.status_code == 200, created.text
    got = client.get(f"/subjects/{subject}").json()
    assert got == created.json()
    assert {k: got[k] for k in body} == {**body, "format": "JSON"}
    assert got["subject"] == subject
    assert got["createdTime"] == got["lastModifiedTime"]

    updated = client.post(
        f"/subjects/{subject}",
        json={"tenant": body["tenant"], "namespace": body["namespace"], "status": "released"},
    ).json()
    assert updated["status"] == "released"
    assert updated["app"] == "rocketmq"  # what the update leaves out stays
    assert updated["createdTime"] == got["createdTime"]
    assert updated["lastModifiedTime"] >= got["lastModifiedTime"]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"namespace": "n", "status": "released"}, "tenant and namespace"),
        ({"tenant": "t", "namespace": "n"}, "status is required"),
        ({"tenant": "t", "namespace": "n", "status": "x", "compatibility": "SIDEWAYS"}, "SIDEWAYS"),
        ({"tenant": "t", "namespace": "n", "status": "x", "format": "XML"}, "XML"),
        ({"tenant": "t", "namespace": "n", "status": 3}, "'status' must be a string"),
        ({"tenant": 1, "namespace": "n", "status": "x"}, "the tenant must be a string"),
    ],
)
def test_subject_update_rejects_bad_metadata(
    client: httpx.Client, subject: str, body: dict[str, Any], complaint: str
) -> None:
    found = error(client.post(f"/subjects/{subject}", json=body), 422, 42201)
    assert complaint in found["errorMessage"]
    error(client.get(f"/subjects/{subject}"), 404, 40401)  # nothing was created


def test_subject_mode_change_that_history_breaks_is_40901(
    client: httpx.Client, subject: str
) -> None:
    meta = {"tenant": "", "namespace": "", "status": "released"}
    assert client.post(f"/subjects/{subject}", json={**meta, "compatibility": "NONE"}).is_success
    assert register(client, subject, PERSON).is_success
    assert register(client, subject, {"type": "string"}).is_success
    body = error(
        client.post(f"/subjects/{subject}", json={**meta, "compatibility": "FULL"}), 409, 40901
    )
    assert {v["rule"] for v in body["violations"]} == {"type-narrowed"}
    error(client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"}), 409, 40901)
    assert client.get(f"/config/{subject}").json() == {"compatibility": "NONE"}


def test_subject_format_is_fixed_once_it_has_schemas(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    meta = {"tenant": "", "namespace": "", "status": "released"}
    refused = error(
        client.post(f"/subjects/{subject}", json={**meta, "format": "AVRO"}), 422, 42201
    )
    assert "cannot change" in refused["errorMessage"]
    same = client.post(f"/subjects/{subject}", json={**meta, "format": "json"})
    assert same.status_code == 200 and same.json()["format"] == "JSON"


def test_unknown_subject_is_40401_everywhere(client: httpx.Client, subject: str) -> None:
    for response in [
        client.get(f"/subjects/{subject}"),
        client.get(f"/subjects/{subject}/versions"),
        client.get(f"/subjects/{subject}/versions/1/schema"),
        client.delete(f"/subjects/{subject}"),
        client.delete(f"/subjects/{subject}/versions/1"),
        client.post(f"/compatibility/subjects/{subject}/versions/latest", json={"schema": {}}),
        client.get(f"/config/{subject}"),
        client.put(f"/config/{subject}", json={"compatibility": "FULL"}),
    ]:
        error(response, 404, 40401)


def test_versions_by_number_and_latest(client: httpx.Client, subject: str) -> None:
    first = register(client, subject, PERSON).json()["id"]
    second = register(client, subject, {**PERSON, "title": "Person"}).json()["id"]
    v1 = client.get(f"/subjects/{subject}/versions/1/schema").json()
    assert v1["subject"] == subject and v1["compatibility"] == "BACKWARD"
    assert v1["schema"]["id"] == first and v1["schema"]["version"] == 1
    latest = client.get(f"/subjects/{subject}/versions/latest/schema").json()
    assert latest["schema"]["id"] == second and latest["schema"]["version"] == 2
    error(client.get(f"/subjects/{subject}/versions/3/schema"), 404, 40402)
    for bad in ("abc", "0", "-1", "1.5", "\u00b2"):
        error(client.get(f"/subjects/{subject}/versions/{bad}/schema"), 422, 42202)


def test_latest_of_a_subject_without_versions_is_40402(client: httpx.Client, subject: str) -> None:
    meta = {"tenant": "", "namespace": "", "status": "released"}
    assert client.post(f"/subjects/{subject}", json=meta).is_success
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": []}
    error(client.get(f"/subjects/{subject}/versions/latest/schema"), 404, 40402)


def test_incompatible_registration_is_40901_with_violations(
    client: httpx.Client, subject: str
) -> None:
    assert register(client, subject, PERSON).is_success
    narrowed = {**PERSON, "properties": {**PERSON["properties"], "age": {"type": "string"}}}
    body = error(register(client, subject, narrowed), 409, 40901)
    assert body["violations"] == [
        {
            "path": "#/properties/age/type",
            "rule": "type-narrowed",
            "message": "the writer allows integer, which the reader's type string rejects"
            " (new schema reading data of version 1)",
            # A document version 1 accepts and the new schema rejects, checked by the engine.
            "example": {"id": "", "age": 0},
            "proven": True,
        }
    ]
    assert "type string rejects" in body["errorMessage"]
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}


def test_an_avro_refusal_carries_the_writer_datum_the_reader_cannot_read(
    client: httpx.Client, subject: str
) -> None:
    def avro(symbols: list[str]) -> dict[str, Any]:
        color = {"type": "enum", "name": "Color", "symbols": symbols}
        return {"type": "record", "name": "R", "fields": [{"name": "c", "type": ["null", color]}]}

    versions = f"/subjects/{subject}/versions"
    first = {"serialization": "avro", "schemaDefinition": avro(["RED", "GREEN"])}
    assert client.post(versions, json=first).is_success
    narrowed = {"serialization": "avro", "schemaDefinition": avro(["RED"])}
    body = error(client.post(versions, json=narrowed), 409, 40901)
    # Version 1 may write GREEN (in the union's JSON encoding), which the new enum lacks.
    assert [(v["rule"], v["example"], v["proven"]) for v in body["violations"]] == [
        ("enum-symbol-missing", {"c": {"Color": "GREEN"}}, True)
    ]


@pytest.mark.parametrize(
    ("definition", "complaint"),
    [
        (None, "cannot be empty"),
        ("", "cannot be empty"),
        ({"type": "strin"}, "invalid JSON Schema"),
        ("{not json", "not JSON"),
        ([1, 2], "JSON Schema object"),
    ],
)
def test_invalid_schema_is_42201_and_stores_nothing(
    client: httpx.Client, subject: str, definition: Any, complaint: str
) -> None:
    found = error(register(client, subject, definition), 422, 42201)
    assert complaint in found["errorMessage"]
    versions = client.get(f"/subjects/{subject}/versions")
    assert versions.status_code == 404 or versions.json() == {"version": []}


def test_draft4_schemas_are_checked_as_draft4(client: httpx.Client, subject: str) -> None:
    # Valid in draft 4 only (boolean exclusiveMinimum), and read with draft 4 meaning.
    draft4 = {"type": "integer", "minimum": 0, "exclusiveMinimum": True}
    assert register(client, subject, draft4).is_success
    assert register(client, subject, {"type": "integer", "minimum": 0}).is_success
    answer = client.post(
        f"/compatibility/subjects/{subject}/versions/latest", json={"schema": draft4}
    ).json()
    assert [(v["rule"], v["path"]) for v in answer["violations"]] == [
        ("minimum-tightened", "#/minimum")
    ]


def test_a_history_nested_as_deep_as_can_be_stored_is_checked_not_crashed(
    client: httpx.Client, subject: str
) -> None:
    # Deeper than a walk of Python frames per level goes, shallow enough to be stored.
    def nested(leaf: dict[str, Any]) -> dict[str, Any]:
        for _ in range(300):
            leaf = {"type": "object", "properties": {"a": leaf}}
        return leaf

    deep = nested({"type": "string"})
    assert register(client, subject, deep).is_success
    assert client.put(f"/config/{subject}", json={"compatibility": "FULL_TRANSITIVE"}).is_success
    url = f"/compatibility/subjects/{subject}/versions/latest"
    titled = client.post(url, json={"schema": {**deep, "title": "the same schema, titled"}})
    assert titled.status_code == 200, titled.text
    assert titled.json() == {"isCompatible": True, "violations": []}
    narrowed = client.post(url, json={"schema": nested({"type": "integer"})})
    assert narrowed.status_code == 200, narrowed.text
    # Too deep to walk to the change: said so (and not compatible), not a 500.
    assert {v["rule"] for v in narrowed.json()["violations"]} == {"schema-too-deep"}
    assert narrowed.json()["isCompatible"] is False


def test_bad_bodies(client: httpx.Client, subject: str) -> None:
    url = f"/subjects/{subject}/versions"
    deep = b"[" * 100_000 + b"]" * 100_000
    error(client.post(url, content=deep, headers={"content-type": OPENSCHEMA}), 422, 42201)
    error(client.post(url, content=b"{nope", headers={"content-type": OPENSCHEMA}), 422, 42201)
    error(client.post(url, content=b"", headers={"content-type": OPENSCHEMA}), 422, 42201)
    error(client.post(url, json=[1]), 422, 42201)
    error(client.post(url, content=b"{}", headers={"content-type": "text/plain"}), 415, 41501)


def test_avro_subject(client: httpx.Client, subject: str) -> None:
    url = f"/subjects/{subject}/versions"
    assert client.post(url, json=avro_user({"name": "id", "type": "string"})).is_success
    body = error(
        client.post(
            url, json=avro_user({"name": "id", "type": "string"}, {"name": "n", "type": "int"})
        ),
        409,
        40901,
    )
    assert [v["rule"] for v in body["violations"]] == ["field-without-default"]
    with_default = avro_user(
        {"name": "id", "type": "string"}, {"name": "n", "type": "int", "default": 0}
    )
    assert client.post(url, json=with_default).is_success
    assert client.get(f"/subjects/{subject}").json()["format"] == "AVRO"
    bad = {"serialization": "avro", "schemaDefinition": {"type": "record", "name": "User"}}
    assert "needs 'fields'" in error(client.post(url, json=bad), 422, 42201)["errorMessage"]
    json_on_avro = json_schema({"type": "string"})
    assert "does not fit" in error(client.post(url, json=json_on_avro), 422, 42201)["errorMessage"]


def test_formats_without_rules_need_mode_none(client: httpx.Client, subject: str) -> None:
    url = f"/subjects/{subject}/versions"
    own = {"serialization": "user-defined", "schemaDefinition": "struct A { id: text }"}
    assert client.post(url, json=own).is_success
    changed = {**own, "schemaDefinition": "struct A { id: text, n: int }"}
    body = error(client.post(url, json=changed), 409, 40901)
    assert body["violations"][0]["rule"] == "format-not-checkable"
    assert client.put(f"/config/{subject}", json={"compatibility": "NONE"}).is_success
    assert client.post(url, json=changed).is_success


def test_transitive_mode_checks_every_version(client: httpx.Client, subject: str) -> None:
    url = f"/subjects/{subject}/versions"
    assert client.post(url, json=AVRO_CHAIN[0]).is_success
    assert client.post(url, json=AVRO_CHAIN[1]).is_success
    assert client.put(
        f"/config/{subject}", json={"compatibility": "backward_transitive"}
    ).json() == {"compatibility": "BACKWARD_TRANSITIVE"}
    body = error(client.post(url, json=AVRO_CHAIN[2]), 409, 40901)
    assert [(v["rule"], v["path"]) for v in body["violations"]] == [
        ("type-mismatch", "#/fields/a/type")
    ]
    assert "version 1" in body["violations"][0]["message"]
    assert client.put(f"/config/{subject}", json={"compatibility": "BACKWARD"}).is_success
    assert client.post(url, json=AVRO_CHAIN[2]).is_success


def test_forward_mode_names_the_version_it_breaks(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, with_age_bounds(minimum=0, maximum=150)).is_success
    assert client.put(f"/config/{subject}", json={"compatibility": "FORWARD"}).is_success
    assert register(client, subject, with_age_bounds(minimum=0, maximum=120)).is_success
    body = error(register(client, subject, with_age_bounds(minimum=0, maximum=140)), 409, 40901)
    assert body["violations"][0]["rule"] == "maximum-tightened"
    assert "version 2 reading data of the new schema" in body["violations"][0]["message"]


def test_delete_version(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    assert register(client, subject, {**PERSON, "title": "v2"}).is_success
    assert register(client, subject, {**PERSON, "title": "v3"}).is_success
    assert client.delete(f"/subjects/{subject}/versions/2").json() == {"version": 2}
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1, 3]}
    assert client.delete(f"/subjects/{subject}/versions/latest").json() == {"version": 3}
    error(client.delete(f"/subjects/{subject}/versions/2"), 404, 40402)
    error(client.delete(f"/subjects/{subject}/versions/two"), 422, 42202)
    # The next version follows the highest one left.
    assert register(client, subject, {**PERSON, "title": "again"}).is_success
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1, 2]}


def test_delete_version_that_would_break_the_chain_is_40901(
    client: httpx.Client, subject: str
) -> None:
    url = f"/subjects/{subject}/versions"
    for step in AVRO_CHAIN:
        assert client.post(url, json=step).is_success
    body = error(client.delete(f"/subjects/{subject}/versions/2"), 409, 40901)
    assert body["violations"][0]["rule"] == "type-mismatch"
    assert client.get(url).json() == {"version": [1, 2, 3]}
    assert client.delete(f"/subjects/{subject}/versions/3").json() == {"version": 3}


def test_delete_subject(client: httpx.Client, subject: str) -> None:
    first = register(client, subject, PERSON).json()["id"]
    assert register(client, subject, {**PERSON, "title": "v2"}).is_success
    assert client.delete(f"/subjects/{subject}").json() == {"version": [1, 2]}
    error(client.get(f"/subjects/{subject}"), 404, 40401)
    error(client.get(f"/schemas/{first}"), 404, 40401)
    # Ids are never reused: a new subject of the same name gets a fresh one.
    again = register(client, subject, PERSON).json()["id"]
    assert int(again) > int(first)
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}


def test_compatibility_endpoint(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    url = f"/compatibility/subjects/{subject}/versions/latest"
    assert client.post(url, json={"schema": {**PERSON, "title": "P"}}).json() == {
        "isCompatible": True,
        "violations": [],
    }
    narrowed = {**PERSON, "required": ["id", "age"]}
    answer = client.post(url, json={"schema": narrowed}).json()
    assert answer["isCompatible"] is False
    assert [(v["path"], v["rule"]) for v in answer["violations"]] == [
        ("#/required", "required-added")
    ]
    # A full schema object and a definition as a string are read the same way.
    as_schema = client.post(url, json={"schema": json_schema(narrowed)}).json()
    assert as_schema["isCompatible"] is False
    as_text = client.post(f"/compatibility/subjects/{subject}/versions/1", json={"schema": "{}"})
    assert as_text.json()["isCompatible"] is True
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}


def test_compatibility_endpoint_errors(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    base = f"/compatibility/subjects/{subject}/versions"
    error(client.post(f"{base}/7", json={"schema": PERSON}), 404, 40402)
    error(client.post(f"{base}/x", json={"schema": PERSON}), 422, 42202)
    error(client.post(f"{base}/1", json={"other": 1}), 422, 42201)
    error(client.post(f"{base}/1", json={"schema": {"type": 5}}), 422, 42201)


def test_config(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    assert client.get(f"/config/{subject}").json() == {"compatibility": "BACKWARD"}
    assert client.put(f"/config/{subject}", json={"compatibility": "FULL"}).json() == {
        "compatibility": "FULL"
    }
    assert client.get(f"/config/{subject}").json() == {"compatibility": "FULL"}
    error(client.put(f"/config/{subject}", json={"compatibility": "MOST"}), 422, 42201)
    error(client.put(f"/config/{subject}", json={}), 422, 42201)
    assert client.get(f"/config/{subject}").json() == {"compatibility": "FULL"}


def test_tenants_and_namespaces_keep_subjects_apart(client: httpx.Client, subject: str) -> None:
    for tenant in ("t1", "t2"):
        meta = {"tenant": tenant, "namespace": "ns", "status": "released", "app": tenant}
        assert client.post(f"/subjects/{subject}", json=meta).is_success
    found = error(client.get(f"/subjects/{subject}"), 422, 42201)
    assert "pass the tenant and namespace" in found["errorMessage"]
    assert client.get(f"/subjects/{subject}", params={"tenant": "t2"}).json()["app"] == "t2"
    scoped = {"tenant": "t1", "namespace": "ns"}
    url = f"/subjects/{subject}/versions"
    assert client.post(url, params=scoped, json=json_schema(PERSON)).is_success
    assert client.get(url, params=scoped).json() == {"version": [1]}
    assert client.get(url, params={"tenant": "t2"}).json() == {"version": []}


def test_content_negotiation(client: httpx.Client, subject: str) -> None:
    assert register(client, subject, PERSON).is_success
    url = f"/subjects/{subject}"
    assert client.get(url).headers["content-type"].startswith(OPENSCHEMA)
    as_json = client.get(url, headers={"accept": "application/json"})
    assert as_json.headers["content-type"].startswith("application/json")
    weighted = client.get(url, headers={"accept": f"application/json;q=0.5, {OPENSCHEMA}"})
    assert weighted.headers["content-type"].startswith(OPENSCHEMA)
    assert client.get(url, headers={"accept": "*/*"}).headers["content-type"].startswith(OPENSCHEMA)
    error(client.get(url, headers={"accept": "text/html"}), 406, 40601)
    posted = client.post(
        f"{url}/versions",
        content=b'{"serialization": "json", "schemaDefinition": {"type": "object"}}',
        headers={"content-type": "application/json", "accept": "application/json"},
    )
    assert posted.status_code == 200, posted.text
    assert client.get(f"{url}/versions").json() == {"version": [1, 2]}
    assert posted.headers["content-type"].startswith("application/json")


def test_unknown_routes_answer_in_the_error_format(client: httpx.Client) -> None:
    error(client.get("/nothing/here"), 404, 40403)
    error(client.patch("/subjects/x"), 405, 40501)


def test_credentials_and_scopes_protect_everything_but_health(
    registry_dsn: str, tmp_path: Path
) -> None:
    tokens = tokens_file(
        tmp_path / "tokens.json",
        {
            "reader": ("catalog", ["registry.read"]),
            "writer": ("schemas-team", ["registry.read", "registry.write"]),
        },
    )
    authenticator = AuthSettings(mode="tokens", tokens_file=tokens).authenticator()
    app = create_app(registry_dsn, authenticator=authenticator)
    reader = {"authorization": "Bearer reader"}
    writer = {"authorization": "Bearer writer"}
    with serve_in_thread(app) as url, httpx.Client(base_url=url) as http:
        assert http.get("/health").status_code == 200
        missing = error(http.get("/subjects"), 401, 40101)
        assert "Bearer" in missing["errorMessage"]
        error(http.get("/subjects", headers={"authorization": "Bearer wrong"}), 401, 40101)
        error(http.post("/subjects/scoped/versions", json=json_schema(PERSON)), 401, 40101)
        assert http.get("/subjects", headers=reader).status_code == 200
        # Writes (register, config, delete) need the write scope; a reader gets 40301.
        error(
            http.post("/subjects/scoped/versions", json=json_schema(PERSON), headers=reader),
            403,
            40301,
        )
        config = {"compatibility": "NONE"}
        error(http.put("/config/scoped", json=config, headers=reader), 403, 40301)
        error(http.delete("/subjects/scoped", headers=reader), 403, 40301)
        assert http.get("/subjects/scoped/versions", headers=reader).status_code == 404
        assert (
            http.post(
                "/subjects/scoped/versions", json=json_schema(PERSON), headers=writer
            ).status_code
            == 200
        )
        # Testing compatibility changes nothing: readers may.
        check = http.post(
            "/compatibility/subjects/scoped/versions/latest",
            json={"schema": PERSON},
            headers=reader,
        )
        assert check.status_code == 200, check.text
        assert http.put("/config/scoped", json=config, headers=writer).status_code == 200


def test_storage_timeout_is_50002_and_changes_nothing(
    registry_dsn: str, client: httpx.Client, subject: str
) -> None:
    assert register(client, subject, PERSON).is_success
    with (
        serve_in_thread(create_app(registry_dsn, statement_timeout_ms=300)) as url,
        httpx.Client(base_url=url) as http,
        psycopg.connect(registry_dsn) as blocker,
    ):
        # Hold the subject's row lock: the registration waits past its statement timeout.
        blocker.execute("SELECT 1 FROM registry_subjects WHERE subject = %s FOR UPDATE", (subject,))
        error(register(http, subject, {**PERSON, "title": "v2"}), 500, 50002)
        blocker.rollback()
    assert client.get(f"/subjects/{subject}/versions").json() == {"version": [1]}


def test_storage_failure_is_50001(pg_dsn: str) -> None:
    with (
        serve_in_thread(create_app(pg_dsn)) as url,
        httpx.Client(base_url=url) as http,
    ):
        assert register(http, "s", PERSON).is_success
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE registry_schemas")
        body = error(http.get("/subjects/s/versions"), 500, 50001)
        assert "UndefinedTable" in body["errorMessage"]
