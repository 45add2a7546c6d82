"""The compatibility engine the registry and the broker share.

Every "incompatible" answer is a list of ``Violation``s (path, rule, message),
never a bare false; the rules are the table in ``rules.py``.
"""

from registry.compat.avro import avro_violations
from registry.compat.json_schema import json_schema_violations, share_subtrees
from registry.compat.model import Evolution, Level, Mode, SchemaError, Violation
from registry.compat.modes import check, check_labelled
from registry.compat.nakadi import nakadi_evolution, next_version
from registry.compat.rules import RULES, Rule

__all__ = [
    "RULES",
    "Evolution",
    "Level",
    "Mode",
    "Rule",
    "SchemaError",
    "Violation",
    "avro_violations",
    "check",
    "check_labelled",
    "json_schema_violations",
    "nakadi_evolution",
    "next_version",
    "share_subtrees",
]
