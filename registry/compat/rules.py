"""Every rule a compatibility check can name, and what it means: the checkers report from here.

A violation's ``rule`` is one of these ids; clients may match on them, so an id never changes
meaning. ``registry/README.md`` lists the same table (a test keeps the two equal).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Rule(enum.StrEnum):
    SCHEMA_TOO_DEEP = "schema-too-deep"
    SCHEMA_INVALID = "schema-invalid"
    FORMAT_NOT_CHECKABLE = "format-not-checkable"
    # JSON Schema
    REF_UNRESOLVED = "ref-unresolved"
    SCHEMA_FALSE = "schema-false"
    NOT_OVERLAPS = "not-overlaps"
    CONDITIONAL_CHANGED = "conditional-changed"
    ENUM_VALUE_REMOVED = "enum-value-removed"
    VALUE_REJECTED = "value-rejected"
    UNION_UNMATCHED = "union-unmatched"
    ONE_OF_AMBIGUOUS = "one-of-ambiguous"
    TYPE_NARROWED = "type-narrowed"
    ENUM_ADDED = "enum-added"
    CONSTRAINT_CHANGED = "constraint-changed"
    MINIMUM_TIGHTENED = "minimum-tightened"
    MAXIMUM_TIGHTENED = "maximum-tightened"
    MULTIPLE_OF_CHANGED = "multiple-of-changed"
    PATTERN_CHANGED = "pattern-changed"
    FORMAT_CHANGED = "format-changed"
    MIN_LENGTH_TIGHTENED = "min-length-tightened"
    MAX_LENGTH_TIGHTENED = "max-length-tightened"
    MIN_ITEMS_TIGHTENED = "min-items-tightened"
    MAX_ITEMS_TIGHTENED = "max-items-tightened"
    MIN_PROPERTIES_TIGHTENED = "min-properties-tightened"
    MAX_PROPERTIES_TIGHTENED = "max-properties-tightened"
    ADDITIONAL_ITEMS_REJECTED = "additional-items-rejected"
    UNIQUE_ITEMS_ADDED = "unique-items-added"
    PROPERTY_CONSTRAINED = "property-constrained"
    PROPERTY_REJECTED = "property-rejected"
    ADDITIONAL_PROPERTIES_CLOSED = "additional-properties-closed"
    REQUIRED_ADDED = "required-added"
    DEPENDENCY_ADDED = "dependency-added"
    CONTAINS_CHANGED = "contains-changed"
    PROPERTY_NAME_REJECTED = "property-name-rejected"
    # Nakadi's compatible mode
    KEYWORD_NOT_SUPPORTED = "keyword-not-supported"
    # Avro
    UNION_BRANCH_MISSING = "union-branch-missing"
    TYPE_MISMATCH = "type-mismatch"
    NAME_MISMATCH = "name-mismatch"
    ENUM_SYMBOL_MISSING = "enum-symbol-missing"
    FIXED_SIZE_CHANGED = "fixed-size-changed"
    FIELD_AMBIGUOUS = "field-ambiguous"
    FIELD_WITHOUT_DEFAULT = "field-without-default"
    # Protobuf: Buf's rule ids, of its WIRE and WIRE_JSON categories
    FILE_SAME_PACKAGE = "FILE_SAME_PACKAGE"
    FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED = "FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED"
    FIELD_NO_DELETE_UNLESS_NAME_RESERVED = "FIELD_NO_DELETE_UNLESS_NAME_RESERVED"
    FIELD_WIRE_COMPATIBLE_TYPE = "FIELD_WIRE_COMPATIBLE_TYPE"
    FIELD_WIRE_JSON_COMPATIBLE_TYPE = "FIELD_WIRE_JSON_COMPATIBLE_TYPE"
    FIELD_WIRE_COMPATIBLE_CARDINALITY = "FIELD_WIRE_COMPATIBLE_CARDINALITY"
    FIELD_WIRE_JSON_COMPATIBLE_CARDINALITY = "FIELD_WIRE_JSON_COMPATIBLE_CARDINALITY"
    FIELD_SAME_ONEOF = "FIELD_SAME_ONEOF"
    FIELD_SAME_DEFAULT = "FIELD_SAME_DEFAULT"
    FIELD_SAME_NAME = "FIELD_SAME_NAME"
    FIELD_SAME_JSON_NAME = "FIELD_SAME_JSON_NAME"
    MESSAGE_SAME_REQUIRED_FIELDS = "MESSAGE_SAME_REQUIRED_FIELDS"
    MESSAGE_SAME_JSON_FORMAT = "MESSAGE_SAME_JSON_FORMAT"
    RESERVED_MESSAGE_NO_DELETE = "RESERVED_MESSAGE_NO_DELETE"
    ENUM_VALUE_NO_DELETE_UNLESS_NUMBER_RESERVED = "ENUM_VALUE_NO_DELETE_UNLESS_NUMBER_RESERVED"
    ENUM_VALUE_NO_DELETE_UNLESS_NAME_RESERVED = "ENUM_VALUE_NO_DELETE_UNLESS_NAME_RESERVED"
    ENUM_VALUE_SAME_NAME = "ENUM_VALUE_SAME_NAME"
    ENUM_SAME_JSON_FORMAT = "ENUM_SAME_JSON_FORMAT"
    RESERVED_ENUM_NO_DELETE = "RESERVED_ENUM_NO_DELETE"


@dataclass(frozen=True)
class RuleInfo:
    formats: str  # which checker reports it: "JSON Schema", "Avro", "Protobuf" or "any"
    description: str  # what the reader cannot read, in one line


RULES: dict[Rule, RuleInfo] = {
    Rule.SCHEMA_TOO_DEEP: RuleInfo("any", "the schemas nest too deeply to compare"),
    Rule.SCHEMA_INVALID: RuleInfo(
        "any", "a schema is not valid (by today's rules), so nothing can be promised about it"
    ),
    Rule.FORMAT_NOT_CHECKABLE: RuleInfo(
        "any", "the subject's format has no compatibility rules; only mode NONE lets it change"
    ),
    Rule.REF_UNRESOLVED: RuleInfo("JSON Schema", "the reader's `$ref` is not a local definition"),
    Rule.SCHEMA_FALSE: RuleInfo("JSON Schema", "the reader accepts nothing where the writer does"),
    Rule.NOT_OVERLAPS: RuleInfo(
        "JSON Schema", "the reader's `not` may exclude documents the writer allows"
    ),
    Rule.CONDITIONAL_CHANGED: RuleInfo(
        "JSON Schema", "the reader's `if`/`then`/`else` differs from the writer's"
    ),
    Rule.ENUM_VALUE_REMOVED: RuleInfo(
        "JSON Schema", "the writer allows a value the reader's `enum` no longer lists"
    ),
    Rule.VALUE_REJECTED: RuleInfo(
        "JSON Schema", "the writer allows a value (`enum` / `const`) the reader rejects"
    ),
    Rule.UNION_UNMATCHED: RuleInfo(
        "JSON Schema", "no branch of the reader's union accepts everything the writer allows"
    ),
    Rule.ONE_OF_AMBIGUOUS: RuleInfo(
        "JSON Schema", "a document may match two branches of the reader's `oneOf`"
    ),
    Rule.TYPE_NARROWED: RuleInfo("JSON Schema", "the writer allows a type the reader rejects"),
    Rule.ENUM_ADDED: RuleInfo(
        "JSON Schema", "the reader limits values to an `enum` the writer does not have"
    ),
    Rule.CONSTRAINT_CHANGED: RuleInfo(
        "JSON Schema",
        "a keyword the engine accepts only unchanged (a dynamic reference, a draft 3 keyword)"
        " differs",
    ),
    Rule.MINIMUM_TIGHTENED: RuleInfo(
        "JSON Schema", "the reader's lower bound is above the writer's"
    ),
    Rule.MAXIMUM_TIGHTENED: RuleInfo(
        "JSON Schema", "the reader's upper bound is below the writer's"
    ),
    Rule.MULTIPLE_OF_CHANGED: RuleInfo(
        "JSON Schema", "the writer's numbers need not be multiples of the reader's `multipleOf`"
    ),
    Rule.PATTERN_CHANGED: RuleInfo(
        "JSON Schema", "the reader requires a `pattern` the writer's strings need not follow"
    ),
    Rule.FORMAT_CHANGED: RuleInfo(
        "JSON Schema", "the reader requires a `format` the writer's strings need not have"
    ),
    Rule.MIN_LENGTH_TIGHTENED: RuleInfo("JSON Schema", "the reader's `minLength` is larger"),
    Rule.MAX_LENGTH_TIGHTENED: RuleInfo("JSON Schema", "the reader's `maxLength` is smaller"),
    Rule.MIN_ITEMS_TIGHTENED: RuleInfo("JSON Schema", "the reader's `minItems` is larger"),
    Rule.MAX_ITEMS_TIGHTENED: RuleInfo("JSON Schema", "the reader's `maxItems` is smaller"),
    Rule.MIN_PROPERTIES_TIGHTENED: RuleInfo(
        "JSON Schema", "the reader's `minProperties` is larger"
    ),
    Rule.MAX_PROPERTIES_TIGHTENED: RuleInfo(
        "JSON Schema", "the reader's `maxProperties` is smaller"
    ),
    Rule.ADDITIONAL_ITEMS_REJECTED: RuleInfo(
        "JSON Schema", "the writer allows array items the reader rejects"
    ),
    Rule.UNIQUE_ITEMS_ADDED: RuleInfo(
        "JSON Schema", "the reader requires unique items, the writer allows duplicates"
    ),
    Rule.PROPERTY_CONSTRAINED: RuleInfo(
        "JSON Schema",
        "the reader constrains a property the writer's open content leaves free",
    ),
    Rule.PROPERTY_REJECTED: RuleInfo(
        "JSON Schema", "the writer allows a property the reader's closed content model rejects"
    ),
    Rule.ADDITIONAL_PROPERTIES_CLOSED: RuleInfo(
        "JSON Schema", "the writer allows undeclared properties the reader rejects"
    ),
    Rule.REQUIRED_ADDED: RuleInfo(
        "JSON Schema", "the reader requires a property the writer may leave out"
    ),
    Rule.DEPENDENCY_ADDED: RuleInfo(
        "JSON Schema",
        "the reader requires, wherever a property is present, properties or a schema the"
        " writer's objects need not have",
    ),
    Rule.CONTAINS_CHANGED: RuleInfo(
        "JSON Schema",
        "the writer's arrays need not hold as many (or as few) items as the reader's"
        " `contains` / `minContains` / `maxContains` asks",
    ),
    Rule.PROPERTY_NAME_REJECTED: RuleInfo(
        "JSON Schema", "the writer allows a property name the reader's `propertyNames` rejects"
    ),
    Rule.KEYWORD_NOT_SUPPORTED: RuleInfo(
        "JSON Schema", "a keyword Nakadi's `compatible` mode does not allow"
    ),
    Rule.UNION_BRANCH_MISSING: RuleInfo(
        "Avro", "the writer may write a type no branch of the reader's union reads"
    ),
    Rule.TYPE_MISMATCH: RuleInfo("Avro", "the writer's type does not resolve to the reader's"),
    Rule.NAME_MISMATCH: RuleInfo("Avro", "a named type's full name differs (no alias matches)"),
    Rule.ENUM_SYMBOL_MISSING: RuleInfo(
        "Avro", "the writer may write an enum symbol the reader lacks (and it has no default)"
    ),
    Rule.FIXED_SIZE_CHANGED: RuleInfo("Avro", "a `fixed` type's size differs"),
    Rule.FIELD_AMBIGUOUS: RuleInfo(
        "Avro", "a reader field matches more than one writer field by name and aliases"
    ),
    Rule.FIELD_WITHOUT_DEFAULT: RuleInfo(
        "Avro", "a reader field is missing from the writer and has no default"
    ),
    Rule.FILE_SAME_PACKAGE: RuleInfo(
        "Protobuf", "the package changed, and with it every type's full name"
    ),
    Rule.FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED: RuleInfo(
        "Protobuf", "a field was deleted without reserving its number"
    ),
    Rule.FIELD_NO_DELETE_UNLESS_NAME_RESERVED: RuleInfo(
        "Protobuf", "a field was deleted without reserving its name (WIRE_JSON)"
    ),
    Rule.FIELD_WIRE_COMPATIBLE_TYPE: RuleInfo(
        "Protobuf", "a field's type changed to one the binary encoding does not read alike"
    ),
    Rule.FIELD_WIRE_JSON_COMPATIBLE_TYPE: RuleInfo(
        "Protobuf",
        "a field's type changed to one the binary or JSON encoding does not read alike (WIRE_JSON)",
    ),
    Rule.FIELD_WIRE_COMPATIBLE_CARDINALITY: RuleInfo(
        "Protobuf", "a field became repeated, required or optional where it was not"
    ),
    Rule.FIELD_WIRE_JSON_COMPATIBLE_CARDINALITY: RuleInfo(
        "Protobuf",
        "as `FIELD_WIRE_COMPATIBLE_CARDINALITY`, and a map and a repeated field differ too"
        " (WIRE_JSON)",
    ),
    Rule.FIELD_SAME_ONEOF: RuleInfo("Protobuf", "a field moved into, out of or between oneofs"),
    Rule.FIELD_SAME_DEFAULT: RuleInfo(
        "Protobuf", "a field's default (what a reader sees when it is absent) changed"
    ),
    Rule.FIELD_SAME_NAME: RuleInfo("Protobuf", "a field was renamed (WIRE_JSON)"),
    Rule.FIELD_SAME_JSON_NAME: RuleInfo("Protobuf", "a field's JSON name changed (WIRE_JSON)"),
    Rule.MESSAGE_SAME_REQUIRED_FIELDS: RuleInfo(
        "Protobuf", "a proto2 `required` field was added or removed"
    ),
    Rule.MESSAGE_SAME_JSON_FORMAT: RuleInfo(
        "Protobuf", "a message's JSON support fell from full to best-effort (WIRE_JSON)"
    ),
    Rule.RESERVED_MESSAGE_NO_DELETE: RuleInfo(
        "Protobuf", "a message's reserved number or name was released"
    ),
    Rule.ENUM_VALUE_NO_DELETE_UNLESS_NUMBER_RESERVED: RuleInfo(
        "Protobuf", "an enum value was deleted without reserving its number"
    ),
    Rule.ENUM_VALUE_NO_DELETE_UNLESS_NAME_RESERVED: RuleInfo(
        "Protobuf", "an enum value was deleted without reserving its name (WIRE_JSON)"
    ),
    Rule.ENUM_VALUE_SAME_NAME: RuleInfo("Protobuf", "an enum number's name changed (WIRE_JSON)"),
    Rule.ENUM_SAME_JSON_FORMAT: RuleInfo(
        "Protobuf", "an enum's JSON support fell from full to best-effort (WIRE_JSON)"
    ),
    Rule.RESERVED_ENUM_NO_DELETE: RuleInfo(
        "Protobuf", "an enum's reserved number or name was released"
    ),
}
