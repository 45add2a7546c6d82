"""Any schema gets an answer: the corpora's schemas, with values swapped for ones of the wrong
kind (seeded), are either refused as invalid (42201, a RegistryError) or checked; nothing else
escapes, since anything else would be a 500."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from registry.compat import Mode, check
from registry.definitions import EngineFormat, parse_definition
from registry.errors import RegistryError
from tests.registry import avro_corpus, json_corpus

ODD_VALUES: list[Any] = [
    None, True, 0, -1, 2**70, 1.5, 1e308, "", "x", "int", "record", "a.b", ".a", "a..b",
    "\u0000", "\ud800", [], [None], ["int"], {}, {"a": 1}, {"type": "int"},
]  # fmt: skip
KEYS = ["default", "aliases", "namespace", "order", "symbols", "size", "items", "values"]
KEYS += ["fields", "type", "name", "$schema", "$ref", "enum", "const", "required", "pattern"]
KEYS += ["multipleOf", "properties", "additionalProperties", "prefixItems", "minimum"]
SCHEMAS: list[tuple[EngineFormat, Any]] = [("AVRO", p.old) for p in avro_corpus.corpus()]
SCHEMAS += [("JSON", p.writer) for p in json_corpus.corpus()]
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
