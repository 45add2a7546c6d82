"""``nakadi.audit.log``: the broker's audit lines that change a resource, as Nakadi's audit events.

Every audit line (``changebroker.auth.audit``) stays a log line; those that record a change
of a resource also become a data-change event of ``nakadi.audit.log``: ``data_type`` and
``data.resource_type`` the resource's kind, ``data_op`` C, U or D, ``data.resource_id``, the
``user`` who asked and its hash, and what the line says of the change as ``data.new_object``.
Refusals are not changes and stay lines only.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from changebroker.auth import audit_log
from changebroker.broker.own_events import access_log
from changebroker.broker.own_events.definitions import AUDIT_LOG

# The audit lines that change a resource: its kind and the data_op of the change.
CHANGES: dict[str, tuple[str, str]] = {
    "event type created": ("event_type", "C"),
    "event type updated": ("event_type", "U"),
    "event type deleted": ("event_type", "D"),
    "subscription created": ("subscription", "C"),
    "subscription changed": ("subscription", "U"),
    "subscription deleted": ("subscription", "D"),
    "cursors reset": ("cursors", "U"),
    "admins changed": ("admins", "U"),
    "blocked": ("blacklist_entry", "C"),
    "unblocked": ("blacklist_entry", "D"),
    "feature set": ("feature", "U"),
}


class AuditEvents(logging.Handler):
    """Makes the audit lines of a request that change a resource events of its app."""

    def emit(self, record: logging.LogRecord) -> None:
        own = access_log.current.get()
        change = CHANGES.get(record.getMessage())
        if own is None or change is None:
            return
        fields: dict[str, Any] = dict(getattr(record, "fields", {}))
        user = str(fields.pop("sub", "-"))
        resource_type, op = change
        data: dict[str, Any] = {
            "resource_type": resource_type,
            "resource_id": str(fields.pop("resource", "")),
            "user": user,
            "user_hash": own.hashed(user),
        }
        if fields:
            data["new_object"] = fields
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        event = {
            "data_type": resource_type,
            "data_op": op,
            "data": data,
            "metadata": {"eid": str(uuid.uuid4()), "occurred_at": now},
        }
        own.add(AUDIT_LOG, dict, event)


def install() -> None:
    """Attach the handler to the audit logger, once per process (it serves every app), and let
    audit lines through wherever logging is not configured (they are always written)."""
    if not any(isinstance(handler, AuditEvents) for handler in audit_log.handlers):
        audit_log.addHandler(AuditEvents())
    if not audit_log.isEnabledFor(logging.INFO):
        audit_log.setLevel(logging.INFO)
