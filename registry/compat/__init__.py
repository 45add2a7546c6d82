"""The compatibility engine the registry and the broker share.

Every "incompatible" answer is a list of ``Violation``s (path, rule, message),
never a bare false; the rules are the table in ``rules.py``.
"""

from changebroker.registry.compat.avro import avro_violations
from changebroker.registry.compat.json_schema import json_schema_violations, share_subtrees
from changebroker.registry.compat.model import Evolution, Level, Mode, SchemaError, Violation
from changebroker.registry.compat.modes import check, check_labelled
from changebroker.registry.compat.nakadi import nakadi_evolution, next_version
from changebroker.registry.compat.rules import RULES, Rule

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
