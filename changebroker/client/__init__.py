"""A Python client for consumers of changebroker's public APIs (docs/client.md).

:class:`ChangeFeed` follows a changeserver's ``/changes`` for selectors, resuming from a
stored position, and takes ``/snapshots`` when the change log no longer holds what comes
after it (or on first start, when asked), handing out snapshot rows and changes, typed.
:class:`Subscription` consumes a Nakadi subscription, committing each batch once its handler
returns; ``from_snapshot`` makes one start right after a replay snapshot. ``Async*`` are the
same under asyncio.
"""

from changebroker.client.aio import AsyncChangeFeed, AsyncSubscription
from changebroker.client.backoff import Backoff
from changebroker.client.errors import (
    ChangeFeedError,
    ClientError,
    PositionLost,
    PositionMismatch,
    SnapshotUnavailable,
    SubscriptionError,
    SubscriptionRefused,
)
from changebroker.client.model import (
    Change,
    Column,
    Item,
    Operation,
    Row,
    SnapshotEnd,
    SnapshotRow,
    SnapshotStart,
    Value,
)
from changebroker.client.positions import (
    FilePositionStore,
    MemoryPositionStore,
    Position,
    PositionStore,
)
from changebroker.client.subscription import Cursor, EventBatch
from changebroker.client.sync import ChangeFeed, Subscription, create_snapshot_subscription
from changebroker.client.wire import sequence_order

__all__ = [
    "AsyncChangeFeed",
    "AsyncSubscription",
    "Backoff",
    "Change",
    "ChangeFeed",
    "ChangeFeedError",
    "ClientError",
    "Column",
    "Cursor",
    "EventBatch",
    "FilePositionStore",
    "Item",
    "MemoryPositionStore",
    "Operation",
    "Position",
    "PositionLost",
    "PositionMismatch",
    "PositionStore",
    "Row",
    "SnapshotEnd",
    "SnapshotRow",
    "SnapshotStart",
    "SnapshotUnavailable",
    "Subscription",
    "SubscriptionError",
    "SubscriptionRefused",
    "Value",
    "create_snapshot_subscription",
    "sequence_order",
]
