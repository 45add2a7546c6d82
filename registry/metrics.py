"""The registry's counters, served at ``/metrics`` beside its process and request metrics.

Labels are bounded: a lookup's kind, a check's verdict, an error code; never a subject.
"""

from __future__ import annotations

from prometheus_client import Counter

PREFIX = "changebroker_registry"

registrations = Counter(
    f"{PREFIX}_registrations_total",
    "Schemas registered: result new (a new version) or existing (the same definition again).",
    ["result"],
)
lookups = Counter(
    f"{PREFIX}_lookups_total",
    "Reads by kind: schema (by id), subject, versions, version, config.",
    ["kind"],
)
compatibility_checks = Counter(
    f"{PREFIX}_compatibility_checks_total",
    "Compatibility checks (asked for, or before a registration) by verdict.",
    ["verdict"],
)
refusals = Counter(
    f"{PREFIX}_refusals_total",
    "Requests answered with an error, by OpenSchema error code.",
    ["code"],
)
