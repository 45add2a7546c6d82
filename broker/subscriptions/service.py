"""Everything under ``/subscriptions`` for one app: the subscriptions, their streams, and the
notification listener that coordinates broker processes.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from changebroker.broker.access import Access
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.settings import Settings
from changebroker.broker.subscriptions.api import SubscriptionApi
from changebroker.broker.subscriptions.coordination import Coordinator
from changebroker.broker.subscriptions.session import DeadLetterSink
from changebroker.broker.subscriptions.store import Subscriptions, close_expired
from changebroker.broker.subscriptions.stream_api import SubscriptionStreams
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.store import TimelineStore


class SubscriptionService:
    """Everything under ``/subscriptions`` for one app, and its notification listener."""

    def __init__(
        self,
        timelines: TimelineStore,
        clusters: Clusters,
        settings: Settings,
        access: Access,
        avro: AvroSchemas,
        dead_letters: DeadLetterSink,
        own: OwnEvents,
    ) -> None:
        store = timelines.store
        self.subscriptions = Subscriptions(
            store, timelines, clusters, settings.subscription_max_partitions
        )
        self.coordinator = Coordinator(settings.pg_dsn, store.pool, lambda: close_expired(store))
        self.streams = SubscriptionStreams(
            self.subscriptions,
            self.coordinator,
            clusters,
            access,
            settings.max_commit_timeout,
            settings.stream_memory_limit,
            avro,
            dead_letters,
            own,
        )
        self.api = SubscriptionApi(self.subscriptions, self.streams.status, access, own)

    async def start(self) -> None:
        await self.coordinator.start()

    async def stop(self) -> None:
        await self.coordinator.stop()

    def routes(self) -> list[BaseRoute]:
        return [*self.api.routes(), *self.streams.routes()]
