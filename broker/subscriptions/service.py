"""Everything under ``/subscriptions`` for one app: the subscriptions, their streams, and the
notification listener that coordinates broker processes.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from broker.event_types.store import Store, StoreResolver
from broker.streams.watermarks import Watermarks
from broker.subscriptions.api import SubscriptionApi
from broker.subscriptions.coordination import Coordinator
from broker.subscriptions.store import Subscriptions, close_expired
from broker.subscriptions.stream_api import SubscriptionStreams


class SubscriptionService:
    """Everything under ``/subscriptions`` for one app, and its notification listener."""

    def __init__(self, store: Store, pg_dsn: str, bootstrap: str, watermarks: Watermarks) -> None:
        self.subscriptions = Subscriptions(store, StoreResolver(store), watermarks)
        self.coordinator = Coordinator(pg_dsn, store.pool, lambda: close_expired(store))
        self.streams = SubscriptionStreams(
            self.subscriptions, self.coordinator, bootstrap, watermarks
        )
        self.api = SubscriptionApi(self.subscriptions, self.streams.status)

    async def start(self) -> None:
        await self.coordinator.start()

    async def stop(self) -> None:
        await self.coordinator.stop()

    def routes(self) -> list[BaseRoute]:
        return [*self.api.routes(), *self.streams.routes()]
