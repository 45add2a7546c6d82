"""Schema changes in the four rule groups the engine once refused too often: patternProperties,
``not``, keywords it did not model (dependencies, contains, propertyNames, unknown ones) and
``unevaluated*``. Each change is checked both ways: ``backward`` says whether the new schema
reads every document of the old one, ``forward`` whether the old reads the new one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

D2020 = "https://json-schema.org/draft/2020-12/schema"
S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741


@dataclass(frozen=True)
class Change:
    group: str
    name: str
    old: Any
    new: Any
    backward: bool  # the new schema reads the old one's documents
    forward: bool  # the old schema reads the new one's documents


def _o(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", **keywords}


def _d(**keywords: Any) -> dict[str, Any]:
    return {"$schema": D2020, **keywords}


CHANGES = [
    # patternProperties: compared only where a name can fall under both schemas
    Change("patternProperties", "annotation added beside a pattern",
           _o(patternProperties={"^S_": S}),
           _o(patternProperties={"^S_": S}, description="codes"), True, True),
    Change("patternProperties", "pattern beside additionalProperties, annotated",
           _o(patternProperties={"^S_": S}, additionalProperties=I),
           _o(patternProperties={"^S_": {**S, "title": "s"}}, additionalProperties=I), True, True),
    Change("patternProperties", "pattern's schema narrowed",
           _o(patternProperties={"^S_": S}),
           _o(patternProperties={"^S_": {**S, "maxLength": 3}}), False, True),
    Change("patternProperties", "pattern's schema widened",
           _o(patternProperties={"^S_": S}),
           _o(patternProperties={"^S_": {"type": ["string", "null"]}}), True, False),
    Change("patternProperties", "pattern added to open content",
           _o(), _o(patternProperties={"^n_": I}), False, True),
    Change("patternProperties", "disjoint pattern added to closed content",
           _o(patternProperties={"^a_": S}, additionalProperties=False),
           _o(patternProperties={"^a_": S, "^b_": I}, additionalProperties=False), True, False),
    Change("patternProperties", "pattern over a declared property",
           _o(properties={"S_id": I}, additionalProperties=False),
           _o(properties={"S_id": I}, patternProperties={"^S_": S}, additionalProperties=False),
           False, False),
    Change("patternProperties", "second pattern in open content",
           _o(patternProperties={"^x-": S}),
           _o(patternProperties={"^x-": S, "^y-": I}), False, True),
    # not: by inclusion, and writers that accept nothing
    Change("not", "not number to not integer",
           {"not": {"type": "number"}}, {"not": {"type": "integer"}}, True, False),
    Change("not", "not one value to not two",
           {**S, "not": {"const": "a"}}, {**S, "not": {"enum": ["a", "b"]}}, False, True),
    Change("not", "writer of not-everything becomes strings",
           {"not": {}}, S, True, False),
    Change("not", "writer of not-true becomes integers",
           {"not": True}, I, True, False),
    Change("not", "excluded value allowed again",
           {**I, "not": {"const": 0}}, I, True, False),
    Change("not", "not string to not string-or-null",
           {"not": S}, {"not": {"type": ["string", "null"]}}, False, True),
    Change("not", "null excluded from a nullable string, spelt as a string",
           {"type": ["string", "null"], "not": {"type": "null"}}, S, True, True),
    Change("not", "not an object with a to not an object",
           {"not": _o(required=["a"])}, {"not": _o()}, False, True),
    # keywords the engine used to accept only unchanged
    Change("dependencies", "a dependency dropped",
           _o(dependencies={"a": ["b", "c"]}), _o(dependencies={"a": ["b"]}), True, False),
    Change("dependencies", "dependentRequired emptied",
           _d(type="object", dependentRequired={"a": ["b"]}),
           _d(type="object", dependentRequired={}), True, False),
    Change("dependencies", "dependentSchemas relaxed",
           _d(type="object", dependentSchemas={"a": {"required": ["c"]}}),
           _d(type="object", dependentSchemas={"a": {}}), True, False),
    Change("dependencies", "dependency on a property the writer never has",
           _o(properties={"b": S}, additionalProperties=False),
           _o(properties={"b": S}, additionalProperties=False,
              dependencies={"a": {"required": ["c"]}}), True, True),
    Change("contains", "minContains lowered",
           _d(type="array", contains=I, minContains=3), _d(type="array", contains=I, minContains=2),
           True, False),
    Change("contains", "maxContains raised",
           _d(type="array", contains=I, maxContains=2), _d(type="array", contains=I, maxContains=3),
           True, False),
    Change("propertyNames", "propertyNames every declared name matches",
           _o(properties={"a": S, "b": S}, additionalProperties=False),
           _o(properties={"a": S, "b": S}, additionalProperties=False,
              propertyNames={"maxLength": 5}), True, True),
    Change("propertyNames", "propertyNames added to open content",
           _o(), _o(propertyNames={"pattern": "^[a-z]+$"}), False, True),
    Change("unknown keywords", "a keyword no draft has, changed",
           {**S, "nullable": True}, {**S, "nullable": False}, True, True),
    # unevaluated*: spelt with the keywords beside it
    Change("unevaluated", "optional property added under unevaluatedProperties false",
           _d(properties={"a": S}, unevaluatedProperties=False),
           _d(properties={"a": S, "b": S}, unevaluatedProperties=False), True, False),
    Change("unevaluated", "prefixItems grown where unevaluatedItems allowed the same",
           _d(prefixItems=[S, {"type": "number"}], unevaluatedItems=S),
           _d(prefixItems=[S, {"type": "number"}, S], unevaluatedItems=S), True, True),
    Change("unevaluated", "property added in an allOf branch",
           _d(allOf=[{"properties": {"a": S}}], properties={"b": S}, unevaluatedProperties=False),
           _d(allOf=[{"properties": {"a": S, "c": S}}], properties={"b": S},
              unevaluatedProperties=False), True, False),
    Change("unevaluated", "unevaluatedProperties false opened to strings",
           _d(properties={"a": S}, unevaluatedProperties=False),
           _d(properties={"a": S}, unevaluatedProperties=S), True, False),
    Change("unevaluated", "property reached through $ref, annotated",
           _d(**{"$defs": {"base": {"properties": {"a": S}}}}, **{"$ref": "#/$defs/base"},
              properties={"b": S}, unevaluatedProperties=False),
           _d(**{"$defs": {"base": {"properties": {"a": S}}}}, **{"$ref": "#/$defs/base"},
              properties={"b": S}, unevaluatedProperties=False, title="t"), True, True),
    Change("unevaluated", "unevaluatedItems false after one more prefix item",
           _d(type="array", prefixItems=[S], unevaluatedItems=False),
           _d(type="array", prefixItems=[S, S], unevaluatedItems=False), True, False),
    Change("unevaluated", "unevaluatedItems widened from integers to numbers",
           _d(type="array", unevaluatedItems=I),
           _d(type="array", unevaluatedItems={"type": "number"}), True, False),
]  # fmt: skip
