"""Any schema gets an answer: the corpora's schemas, with values swapped for ones of the wrong
kind (seeded), are either refused as invalid (42201, a RegistryError) or checked; nothing else
escapes, since anything else would be a 500."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import jsonschema
import pytest

from changebroker.registry.compat import Mode, check
from changebroker.registry.compat.json_schema import validator_class
from changebroker.registry.compat.modes import Format
from changebroker.registry.definitions import _metaschema_accepts, parse_definition
from changebroker.registry.errors import RegistryError
from tests.registry import avro_corpus, json_corpus

ODD_VALUES: list[Any] = [
    None, True, 0, -1, 2**70, 1.5, 1e308, "", "x", "int", "record", "a.b", ".a", "a..b",
    "\u0000", "\ud800", [], [None], ["int"], {}, {"a": 1}, {"type": "int"},
]  # fmt: skip
KEYS = ["default", "aliases", "namespace", "order", "symbols", "size", "items", "values"]
KEYS += ["fields", "type", "name", "$schema", "$ref", "enum", "const", "required", "pattern"]
KEYS += ["multipleOf", "properties", "additionalProperties", "prefixItems", "minimum"]
SCHEMAS: list[tuple[Format, Any]] = [("AVRO", p.old) for p in avro_corpus.corpus()]
JSON_SCHEMAS = [p.writer for p in json_corpus.corpus() if isinstance(p.writer, dict)]
SCHEMAS += [("JSON", schema) for schema in JSON_SCHEMAS]
ROUNDS = 10
PER_ROUND = 400


def _mutate(rng: random.Random, node: Any) -> None:
    """Replace one member of ``node`` (a key's value or an item) by an odd value, or mutate
    inside it; sometimes add a keyword with an odd value to an object."""
    if not isinstance(node, dict | list) or not node:
        return
    where = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
    if rng.random() < 0.5:
        node[where] = copy.deepcopy(rng.choice(ODD_VALUES))
    else:
        _mutate(rng, node[where])
    if isinstance(node, dict) and rng.random() < 0.15:
        node[rng.choice(KEYS)] = copy.deepcopy(rng.choice(ODD_VALUES))


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_mutated_schemas_are_refused_or_checked(seed: int) -> None:
    rng = random.Random(seed)
    checked = refused = 0
    for _ in range(PER_ROUND):
        fmt, original = rng.choice(SCHEMAS)
        mutated = copy.deepcopy(original)
        for _ in range(rng.randint(1, 3)):
            _mutate(rng, mutated)
        try:
            new = parse_definition(fmt, mutated)
            old = parse_definition(fmt, original)
        except RegistryError:
            refused += 1
            continue
        check(Mode.FULL, new.value, [old.value], fmt)
        checked += 1
    assert checked and refused  # both paths taken


@pytest.mark.parametrize("seed", range(ROUNDS))
def test_the_compiled_metaschema_check_accepts_what_jsonschema_accepts(seed: int) -> None:
    # registry/definitions.py: jsonschema-rs accepts on the hot path, jsonschema refuses.
    rng = random.Random(seed)
    judged = {True: 0, False: 0}
    for _ in range(PER_ROUND):
        mutated = copy.deepcopy(rng.choice(JSON_SCHEMAS))
        for _ in range(rng.randint(1, 3)):
            _mutate(rng, mutated)
        validator = validator_class(mutated)
        try:
            validator.check_schema(mutated)
            valid = True
        except jsonschema.SchemaError:
            valid = False
        accepted = _metaschema_accepts(validator, mutated)
        # Never more than jsonschema; less only where jsonschema-rs cannot take a value.
        assert accepted is valid or (valid and not _unicode(mutated)), mutated
        judged[valid] += 1
    assert judged[True] and judged[False]


def _unicode(value: Any) -> bool:
    """Whether ``value`` is Unicode throughout (no lone UTF-16 surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


DRAFT_4 = "http://json-schema.org/draft-04/schema#"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    ("schema", "valid"),
    [
        # Patterns are Python's regular expressions, as jsonschema's format checker says:
        ({"pattern": "(?P<x>a)"}, True),  # Python only
        ({"pattern": "(?<x>a)"}, False),  # ECMA 262 only
        ({"pattern": "\\p{L}"}, False),  # ECMA 262 only
        ({"$schema": DRAFT_2020_12, "patternProperties": {"[": {}}}, False),
        ({"$schema": DRAFT_4, "minLength": 1.0}, False),
        ({"minLength": 1.0}, True),
        ({"maxLength": 10**30}, True),
        ({"$schema": DRAFT_4, "required": []}, False),
        ({"$schema": DRAFT_2020_12, "prefixItems": [{"type": 1}]}, False),
    ],
)
def test_the_compiled_metaschema_check_on_what_drafts_and_engines_differ_in(
    schema: dict[str, Any], valid: bool
) -> None:
    validator = validator_class(schema)
    assert _metaschema_accepts(validator, schema) is valid
    if valid:
        validator.check_schema(schema)
    else:
        with pytest.raises(jsonschema.SchemaError):
            validator.check_schema(schema)
