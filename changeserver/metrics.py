"""The changeserver's counters: changes and bytes made durable, long-poll wake-ups,
refused requests by code. What is read from Postgres and the change log on an interval is
``observed``; both are served at ``/metrics`` on the management port.
"""

from __future__ import annotations

from prometheus_client import Counter

PREFIX = "changebroker_changeserver"
changes_ingested = Counter(
    f"{PREFIX}_changes_ingested_total", "Changes made durable in the change log."
)
bytes_ingested = Counter(
    f"{PREFIX}_ingested_bytes_total", "Bytes of change bodies made durable in the change log."
)
transactions_ingested = Counter(
    f"{PREFIX}_transactions_ingested_total", "Transactions made durable in the change log."
)
longpoll_wakeups = Counter(
    f"{PREFIX}_longpoll_wakeups_total",
    "Long polls woken because their selectors got new durable changes.",
)
refusals = Counter(
    f"{PREFIX}_refusals_total",
    "Requests answered with an error, by code (SNAPSHOT_TOO_OLD, PARAMETER_INVALID, ...).",
    ["code"],
)
slot_losses = Counter(
    f"{PREFIX}_slot_losses_total",
    "Replication slots found dropped or invalidated, by the policy applied (fail, recreate).",
    ["policy"],
)
