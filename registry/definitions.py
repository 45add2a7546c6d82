"""Subject formats and schema definitions: what the registry accepts and how it compares them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import jsonschema_rs
from jsonschema.protocols import Validator as ValidatorProtocol

from changebroker.registry import errors
from changebroker.registry.compat import SchemaError
from changebroker.registry.compat.avro import parse as parse_avro
from changebroker.registry.compat.json_schema import validator_class
from changebroker.registry.compat.protobuf_source import proto_definition
from changebroker.registry.errors import RegistryError

# docs/specs/openschema-spec-cn.txt, 5.1: the format enumeration, spelled as the spec spells it.
FORMATS = ("NONE", "JSON", "PB", "AVRO", "USER-DEFINED", "Int", "Long", "String", "Map")
_SERIALIZATION_FORMATS = {
    "json": "JSON",
    "avro": "AVRO",
    "pb": "PB",
    "user-defined": "USER-DEFINED",
}

EngineFormat = Literal["JSON", "AVRO", "PB"]


def normalize_format(value: Any) -> str:
    """The spec's spelling of ``value`` (case-insensitive), else 42201."""
    if isinstance(value, str):
        for known in FORMATS:
            if known.lower() == value.lower():
                return known
    raise RegistryError(
        errors.INVALID_INPUT, f"format {value!r} is not one of {', '.join(FORMATS)}"
    )


def format_of_serialization(serialization: Any) -> str | None:
    """The subject format a schema's ``serialization`` implies (json -> JSON), if any."""
    if isinstance(serialization, str):
        return _SERIALIZATION_FORMATS.get(serialization.lower())
    return None


def engine_format(fmt: str | None) -> EngineFormat | None:
    """The formats the compatibility engine has rules for."""
    if fmt == "JSON":
        return "JSON"
    if fmt == "AVRO":
        return "AVRO"
    if fmt == "PB":
        return "PB"
    return None


@dataclass(frozen=True)
class Definition:
    value: Any  # decoded: what the compatibility engine compares
    canonical: str  # one text per definition, whatever its key order or spacing


# Canonical texts of definitions already found valid, per format: checking a JSON Schema
# against its metaschema costs more than comparing it with a version, and clients send the
# same definitions again (checks before registering, retries). Validity never changes.
_VALID_TEXT_LIMIT = 16 * 1024 * 1024
_valid: dict[tuple[str | None, str], None] = {}
_valid_chars = 0


def parse_definition(fmt: str | None, raw: Any) -> Definition:
    """``schemaDefinition`` decoded and checked for ``fmt``; 42201 says what is wrong."""
    global _valid_chars
    try:
        value = _decoded(fmt, raw)
        text = canonical(value)
        if (fmt, text) not in _valid:
            _check(fmt, value, text)
            if _valid_chars + len(text) > _VALID_TEXT_LIMIT:
                _valid.clear()
                _valid_chars = 0
            _valid[fmt, text] = None
            _valid_chars += len(text)
        return Definition(value, text_column(text, "schemaDefinition"))
    except RecursionError:
        raise RegistryError(
            errors.INVALID_INPUT, "the schema nests too deeply; reuse parts by reference"
        ) from None


def _decoded(fmt: str | None, raw: Any) -> Any:
    # {} is a real JSON Schema (anything goes); for other formats it says nothing.
    empty_object = isinstance(raw, dict) and not raw and fmt != "JSON"
    if raw is None or (isinstance(raw, str | list) and not raw) or empty_object:
        raise RegistryError(
            errors.INVALID_INPUT, "schema info cannot be empty: send schemaDefinition"
        )
    if fmt == "JSON":
        value = _decode(raw) if isinstance(raw, str) else raw
        if not isinstance(value, dict | bool):
            raise RegistryError(
                errors.INVALID_INPUT, "a JSON schemaDefinition is a JSON Schema object (or boolean)"
            )
        return value
    if fmt == "AVRO":
        return _decode(raw) if isinstance(raw, str) and raw.strip()[:1] in '{["' else raw
    if fmt == "PB":  # compiled here: what is compared, and kept, is its descriptor
        try:
            return proto_definition(raw)
        except SchemaError as error:
            raise RegistryError(
                errors.INVALID_INPUT, f"invalid .proto definition: {error}"
            ) from None
    return raw


def _check(fmt: str | None, value: Any, text: str) -> None:
    """42201 unless the decoded ``value`` (whose canonical text is ``text``) is a valid
    schema of ``fmt``."""
    if fmt == "JSON" and isinstance(value, dict):
        validator = validator_class(value, text)
        if _metaschema_accepts(validator, value):
            return
        try:
            validator.check_schema(value)
        except jsonschema.SchemaError as error:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise RegistryError(
                errors.INVALID_INPUT, f"invalid JSON Schema at {where}: {error.message}"
            ) from error
    elif fmt == "AVRO":
        try:
            parse_avro(value)
        except SchemaError as error:
            raise RegistryError(errors.INVALID_INPUT, f"invalid Avro schema: {error}") from error


# The formats the metaschemas use: judged by jsonschema's own checker, as check_schema judges
# them (Python's regular expressions, not ECMA 262's; a format it has no checker for passes).
_METASCHEMA_FORMATS = ("regex", "uri", "uri-reference", "iri", "iri-reference", "uri-template")


@functools.cache
def _metaschema(validator: type[ValidatorProtocol]) -> jsonschema_rs.Validator:
    conforms = validator.FORMAT_CHECKER.conforms
    formats: dict[str, Callable[..., bool]] = {
        name: functools.partial(conforms, format=name) for name in _METASCHEMA_FORMATS
    }
    return jsonschema_rs.validator_for(
        validator.META_SCHEMA, validate_formats=True, formats=formats
    )


def _metaschema_accepts(validator: type[ValidatorProtocol], value: Any) -> bool:
    """Whether jsonschema-rs finds ``value`` valid against ``validator``'s metaschema: a few
    µs, where jsonschema's ``check_schema`` takes about half a millisecond on every new
    definition registered. It only ever accepts; what it refuses, or cannot take, is
    judged and worded by ``check_schema``."""
    try:
        return bool(_metaschema(validator).is_valid(value))
    except (ValueError, TypeError, OverflowError):
        return False


def canonical(value: Any) -> str:
    """One text per definition, whatever its key order or spacing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def text_column(text: str, what: str) -> str:
    """``text`` as Postgres can store it in a text column; else 42201 saying why not."""
    if "\x00" in text:
        raise RegistryError(
            errors.INVALID_INPUT, f"{what} contains U+0000, which text cannot hold: remove it"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RegistryError(
            errors.INVALID_INPUT,
            f"{what} contains a lone UTF-16 surrogate (e.g. \\ud800), which is not Unicode text",
        ) from None
    return text


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RegistryError(
            errors.INVALID_INPUT, f"schemaDefinition is a string but not JSON: {error}"
        ) from error
