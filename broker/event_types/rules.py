"""The rules of an EventType body: ``EventType`` in the API spec, and the event types guide.

Both are in docs/specs/ (nakadi-event-bus-api-0.10.1.yaml, nakadi-event-types.txt).

:func:`validate_new` checks a POST body, :func:`validate_update` a PUT body
against the stored event type; both return the normalised EventType (defaults
filled in, read-only fields dropped) or raise :class:`InvalidEventType` whose
message the API answers as a 422 Problem detail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.validators import Draft4Validator

from changebroker.broker.annotations import KINDS, annotations_problems
from changebroker.broker.authorization import section_problem
from changebroker.broker.avro.payloads import PayloadError, compile_schema
from changebroker.broker.errors import AUTHORIZATION_KEPT, Unprocessable
from changebroker.broker.event_types import effective_schema
from changebroker.registry.compat.nakadi import unsupported_keywords

NAME = re.compile(r"[a-zA-Z][-0-9a-zA-Z_]*(\.[0-9a-zA-Z][-0-9a-zA-Z_]*)*")
# Nakadi's limit, and the broker's: topic names derive from event type names and Kafka allows
# 249 characters (docs/nakadi-differences.md).
NAKADI_MAX_NAME_LENGTH = 255
MAX_NAME_LENGTH = 200

CATEGORIES = ("undefined", "data", "business")
PARTITION_STRATEGIES = ("random", "hash", "user_defined")
ENRICHMENT_STRATEGIES = ("metadata_enrichment",)
COMPATIBILITY_MODES = ("compatible", "forward", "none")
JSON_SCHEMA, AVRO_SCHEMA = "json_schema", "avro_schema"
SCHEMA_TYPES = (JSON_SCHEMA, AVRO_SCHEMA)
CLEANUP_POLICIES = ("delete", "compact", "compact_and_delete")
# The one change of cleanup_policy Nakadi allows: a deleted topic becomes compacted too.
CLEANUP_POLICY_CHANGES = {("delete", "compact_and_delete")}
AUDIENCES = (
    "component-internal",
    "business-unit-internal",
    "company-internal",
    "external-partner",
    "external-public",
)
STATISTIC_FIELDS = ("messages_per_minute", "message_size", "read_parallelism", "write_parallelism")
# Only stricter: none -> forward -> compatible (manual, "Changing compatibility modes").
MODE_UPGRADES = {("none", "forward"), ("forward", "compatible")}
READ_ONLY = ("created_at", "updated_at")
# Fields a PUT leaves as they are when it omits them or sends null, as Nakadi does.
KEPT_WHEN_ABSENT = ("annotations", "labels")
OWNER_SELECTOR_TYPES = ("path", "static", "metadata")


class InvalidEventType(Unprocessable):
    """The body breaks a rule; the message says which and how to fix it."""


def validate_new(body: Any) -> dict[str, Any]:
    """A POST /event-types body -> the EventType to store (without timestamps)."""
    if not isinstance(body, Mapping):
        raise InvalidEventType("the body must be a JSON object describing an EventType")
    for field in ("name", "owning_application", "category", "schema"):
        if body.get(field) in (None, ""):
            raise InvalidEventType(f"field {field!r} is required")
    out = {k: v for k, v in body.items() if k not in READ_ONLY}
    _name(out["name"])
    _string(out, "owning_application")
    category = _choice(out, "category", CATEGORIES, None)
    _choice(out, "compatibility_mode", COMPATIBILITY_MODES, "forward")
    _choice(out, "partition_strategy", PARTITION_STRATEGIES, "random")
    _choice(out, "cleanup_policy", CLEANUP_POLICIES, "delete")
    _annotations(out)
    _owner_selector(out)
    _enrichment(out, category)
    try:
        schema = _schema(out)
    except RecursionError:
        raise InvalidEventType(
            "schema.schema nests too deeply to check: reuse parts with definitions and $ref"
        ) from None
    _partitioning(out, category, schema)
    _statistic(out)
    _options(out)
    _authorization(out)
    _audience(out)
    if schema is not None:
        _ordering(out, category, schema)
        _compiles(out, category, schema)
    if effective_schema.compacted(out["cleanup_policy"]) and category == "undefined":
        # Nakadi's words; compaction keeps the last event per metadata.partition_compaction_key,
        # which 'undefined' events have no place for.
        raise InvalidEventType(
            "cleanup_policy 'compact' and 'compact_and_delete' is not available for 'undefined'"
            " event type category"
        )
    return out


def validate_update(body: Any, current: Mapping[str, Any]) -> dict[str, Any]:
    """A PUT body against the stored ``current`` -> the EventType to store."""
    if isinstance(body, Mapping) and body.get("name") not in (None, current["name"]):
        raise InvalidEventType(
            f"the name of an event type cannot change: the body names {body.get('name')!r},"
            f" the path {current['name']!r}"
        )
    old_strategy = current["partition_strategy"]
    if (
        isinstance(body, Mapping)
        and body.get("partition_strategy", "random") != old_strategy
        and old_strategy != "random"
    ):
        # Nakadi's first check and its words, before the new strategy's own rules (a hash type
        # turned random still carries its key fields): events of one key must stay together.
        raise InvalidEventType(
            "changing partition_strategy is only allowed if the original strategy was 'random'"
        )
    out = validate_new({**body, "name": current["name"]} if isinstance(body, Mapping) else body)
    if out["category"] != current["category"]:
        raise InvalidEventType(f"category cannot change (it is {current['category']!r})")
    policies = (current["cleanup_policy"], out["cleanup_policy"])
    if policies[0] != policies[1] and policies not in CLEANUP_POLICY_CHANGES:
        raise InvalidEventType(
            f"Invalid cleanup_policy change: {policies[0].upper()} cannot be changed to"
            f" {policies[1].upper()}"
        )
    for field in KEPT_WHEN_ABSENT:
        if out.get(field) is None and current.get(field) is not None:
            out[field] = current[field]
    if (out.get("options") or {}).get("retention_time") is None:
        # Nakadi keeps the options (the retention) a PUT leaves out or sends as null.
        out.pop("options", None)
        if current.get("options") is not None:
            out["options"] = current["options"]
    old_mode, new_mode = current["compatibility_mode"], out["compatibility_mode"]
    if old_mode != new_mode and (old_mode, new_mode) not in MODE_UPGRADES:
        raise InvalidEventType(
            f"compatibility_mode cannot change from {old_mode!r} to {new_mode!r}: modes only get"
            " stricter, none -> forward -> compatible, one step at a time"
        )
    if current.get("default_statistic") and out.get("default_statistic") not in (
        None,
        current["default_statistic"],
    ):
        raise InvalidEventType("default_statistic cannot change: it fixed the partition count")
    out.setdefault("default_statistic", current.get("default_statistic"))
    if out["default_statistic"] is None:
        del out["default_statistic"]
    if current.get("authorization") and not out.get("authorization"):
        raise InvalidEventType(AUTHORIZATION_KEPT)
    if old_strategy == "hash" and out.get("partition_key_fields") != current.get(
        "partition_key_fields"
    ):
        raise InvalidEventType("partition_key_fields cannot change: keys would move partitions")
    return out


def partition_count(event_type: Mapping[str, Any], *, default: int, maximum: int) -> int:
    """Partitions for a new topic: the parallelism asked for, within [1, maximum]."""
    statistic = event_type.get("default_statistic")
    if not statistic:
        return min(default, maximum)
    wanted = max(statistic["read_parallelism"], statistic["write_parallelism"], 1)
    return min(wanted, maximum)


def _name(name: Any) -> None:
    """Every rule the name breaks, as Nakadi lists them."""
    if not isinstance(name, str):
        raise InvalidEventType(f"name must be a string, not {json.dumps(name)}")
    broken = []
    if not NAME.fullmatch(name):
        broken.append(
            f"name {name!r} does not match {NAME.pattern}: start with a letter, then letters,"
            " digits, '-' or '_', dot-separated (e.g. 'acme-team.price-change')"
        )
    if len(name) > NAKADI_MAX_NAME_LENGTH:
        broken.append(f"the length of the name must be >= 1 and <= {NAKADI_MAX_NAME_LENGTH}")
    elif len(name) > MAX_NAME_LENGTH:
        broken.append(
            f"the length of the name must be <= {MAX_NAME_LENGTH}: the Kafka topic is named"
            " after it"
        )
    if broken:
        raise InvalidEventType("; ".join(broken))


def _string(body: Mapping[str, Any], field: str) -> None:
    if not isinstance(body[field], str) or not body[field].strip():
        raise InvalidEventType(f"{field} must be a non-empty string")


def _choice(body: dict[str, Any], field: str, allowed: tuple[str, ...], default: str | None) -> str:
    value = body.get(field)
    if value is None and default is not None:
        body[field] = value = default
    if value not in allowed:
        raise InvalidEventType(f"{field} {value!r} is not one of: {', '.join(allowed)}")
    return str(value)


def _annotations(body: dict[str, Any]) -> None:
    """``annotations`` and ``labels``: every broken rule listed, as Nakadi lists them."""
    broken = [problem for kind in KINDS for problem in annotations_problems(kind, body.get(kind))]
    if broken:
        raise InvalidEventType("\n".join(broken))


def _owner_selector(body: dict[str, Any]) -> None:
    """``event_owner_selector``: where an event's owner is read (a ``path`` in the event, a
    ``static`` value, or the publisher's ``metadata``), type written lower-case as Nakadi does."""
    selector = _object(body, "event_owner_selector", "an object with type, name and value")
    if selector is None:
        return
    kind = selector.get("type")
    if not isinstance(kind, str) or kind.lower() not in OWNER_SELECTOR_TYPES:
        raise InvalidEventType(
            f"event_owner_selector.type {kind!r} is not one of: {', '.join(OWNER_SELECTOR_TYPES)}"
        )
    if not isinstance(selector.get("name"), str) or not selector["name"]:
        raise InvalidEventType(
            'Field "event_owner_selector.name" the length of the name must be >= 1'
        )
    value = selector.get("value")
    if kind.lower() == "metadata":
        if value is not None:
            raise InvalidEventType(
                "event_owner_selector specifying value for type 'metadata' is not supported"
            )
    elif not isinstance(value, str):
        raise InvalidEventType(f"event_owner_selector.value is required for type {kind!r}")
    body["event_owner_selector"] = {**selector, "type": kind.lower()}


def _enrichment(body: dict[str, Any], category: str) -> None:
    strategies = body.setdefault("enrichment_strategies", [])
    if not isinstance(strategies, list) or any(s not in ENRICHMENT_STRATEGIES for s in strategies):
        raise InvalidEventType(
            f"enrichment_strategies must be a list of: {', '.join(ENRICHMENT_STRATEGIES)}"
        )
    if len(set(strategies)) != len(strategies):
        raise InvalidEventType("enrichment_strategies lists a strategy twice")
    if category in ("business", "data") and "metadata_enrichment" not in strategies:
        raise InvalidEventType(
            f"category {category!r} needs enrichment_strategies ['metadata_enrichment']"
        )
    if category == "undefined" and strategies:
        raise InvalidEventType(
            "category 'undefined' has no metadata to enrich: remove enrichment_strategies"
        )


def _compiles(body: Mapping[str, Any], category: str, schema: Mapping[str, Any]) -> None:
    try:
        effective_schema.EventValidator(
            effective_schema.build(
                category, schema, body["compatibility_mode"], body["cleanup_policy"]
            )
        )
    except (effective_schema.UncompilableSchema, RecursionError) as exc:
        raise InvalidEventType(
            f"events cannot be validated against schema.schema ({exc}): flatten deep nesting"
        ) from None


def schema_wrapper(wrapper: Any) -> dict[str, Any]:
    """An EventTypeSchema (``type``, ``schema``) as stored; its Avro schema checked, a JSON
    schema only for its form (:func:`validate_new` checks the rest)."""
    if not isinstance(wrapper, Mapping):
        raise InvalidEventType("schema must be an object with 'type' and 'schema'")
    kind = wrapper.get("type")
    # Nakadi reads the type's enum by name too (``JSON_SCHEMA``, as its own tests send it).
    if isinstance(kind, str) and kind.lower() in SCHEMA_TYPES:
        kind = kind.lower()
    if kind not in SCHEMA_TYPES:
        raise InvalidEventType(
            f"schema.type {kind!r} is not supported: use {' or '.join(map(repr, SCHEMA_TYPES))}"
        )
    text = wrapper.get("schema")
    if not isinstance(text, str):
        raise InvalidEventType("schema.schema must be the schema as a string")
    if kind == AVRO_SCHEMA:
        try:
            compile_schema(text)
        except PayloadError as exc:
            raise InvalidEventType(str(exc)) from None
    # Only type and schema are the client's; version and created_at are ours.
    return {"type": kind, "schema": text}


def _schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The parsed user JSON schema, after checking it is draft-04 and fits the mode and
    category; None for an Avro schema (checked by :func:`schema_wrapper`)."""
    body["schema"] = schema_wrapper(body["schema"])
    if body["schema"]["type"] == AVRO_SCHEMA:
        return None
    text = body["schema"]["schema"]
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise InvalidEventType(f"schema.schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise InvalidEventType("schema.schema must be a JSON object")
    try:
        Draft4Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise InvalidEventType(
            f"schema.schema is not a valid JSON Schema (draft 04) at {where}: {exc.message}"
        ) from None
    remote = sorted(set(_remote_refs(schema)))
    if remote:
        raise InvalidEventType(
            f"schema.schema refers to {remote}: only local references ('#/definitions/...')"
            " are supported; inline the referenced schemas"
        )
    if body["compatibility_mode"] == "compatible":
        found = unsupported_keywords(schema)
        if found:
            raise InvalidEventType(
                "schema not allowed in compatible mode: "
                + "; ".join(f"{v.path}: {v.message} [{v.rule}]" for v in found)
            )
    if body["category"] == "business" and schema.get("type", "object") != "object":
        raise InvalidEventType(
            "a business schema describes the event object: its 'type' must be 'object' (or absent)"
        )
    if body["category"] == "business" and "metadata" in schema.get("properties", {}):
        raise InvalidEventType(
            "a business schema must not declare 'metadata': the category adds it (effective schema)"
        )
    return schema


def _remote_refs(node: Any) -> Iterator[str]:
    """``$ref`` values that leave the document: never fetched while validating events."""
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            yield ref
        for value in node.values():
            yield from _remote_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _remote_refs(value)


def _declares(schema: Any, path: str) -> bool:
    """Whether the dot-separated ``path`` is a property the schema declares."""
    node = schema
    for part in path.split("."):
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(properties, Mapping) or part not in properties:
            return False
        node = properties[part]
    return True


def _field_list(body: Mapping[str, Any], field: str) -> list[str]:
    fields = body[field]
    if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
        raise InvalidEventType(f"{field} must be a list of field paths (strings)")
    return fields


def _partitioning(body: dict[str, Any], category: str, schema: Mapping[str, Any] | None) -> None:
    """``schema``: the JSON schema the key fields must be declared in (an Avro event carries
    its partition keys in its metadata, so Nakadi checks nothing there)."""
    strategy = body["partition_strategy"]
    keys = body.get("partition_key_fields")
    if strategy == "hash":
        if not keys:
            raise InvalidEventType("partition_strategy 'hash' needs partition_key_fields")
        # Nakadi reads key fields of data events relative to "data": the user schema.
        fields = _field_list(body, "partition_key_fields")
        missing = [f for f in fields if schema is not None and not _declares(schema, f)]
        if missing:
            raise InvalidEventType(
                f"partition_key_fields {missing} are not declared in the schema: declare them"
                " under 'properties' (dot paths for nested fields)"
            )
    elif keys:
        raise InvalidEventType(
            f"partition_key_fields is only for partition_strategy 'hash', not {strategy!r}"
        )
    else:
        body.pop("partition_key_fields", None)
    if strategy == "user_defined" and category == "undefined":
        raise InvalidEventType(
            "partition_strategy 'user_defined' reads metadata.partition, which 'undefined' events"
            " lack: use category business or data"
        )


def _object(body: Mapping[str, Any], key: str, what: str = "an object") -> Mapping[str, Any] | None:
    """``body[key]``: None when absent, else it must be an object."""
    value = body.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise InvalidEventType(f"{key} must be {what}")
    return value


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _statistic(body: Mapping[str, Any]) -> None:
    statistic = _object(body, "default_statistic")
    if statistic is None:
        return
    for field in STATISTIC_FIELDS:
        if not _positive(statistic.get(field)):
            raise InvalidEventType(f"default_statistic.{field} must be a positive integer")


def _options(body: Mapping[str, Any]) -> None:
    retention = (_object(body, "options") or {}).get("retention_time")
    if retention is not None and not _positive(retention):
        raise InvalidEventType("options.retention_time must be a positive number of milliseconds")


def _authorization(body: Mapping[str, Any]) -> None:
    authorization = body.get("authorization")
    if authorization is not None:
        invalid = section_problem(authorization, ("admins", "readers", "writers"))
        if invalid is not None:
            raise InvalidEventType(invalid)


def _audience(body: Mapping[str, Any]) -> None:
    audience = body.get("audience")
    if audience is not None and audience not in AUDIENCES:
        raise InvalidEventType(f"audience {audience!r} is not one of: {', '.join(AUDIENCES)}")


def _ordering(body: Mapping[str, Any], category: str, schema: dict[str, Any]) -> None:
    if body.get("ordering_instance_ids") and not body.get("ordering_key_fields"):
        raise InvalidEventType("ordering_instance_ids needs ordering_key_fields")
    # Ordering fields are paths in the whole event, metadata and data included.
    whole = effective_schema.build(
        category, schema, body["compatibility_mode"], body["cleanup_policy"]
    )
    for field in ("ordering_key_fields", "ordering_instance_ids"):
        if body.get(field) is None:
            continue
        missing = [f for f in _field_list(body, field) if not _declares(whole, f)]
        if missing:
            raise InvalidEventType(f"{field} {missing} are not declared in the effective schema")
