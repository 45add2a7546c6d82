"""Everything under ``/subscriptions`` for one app: the subscriptions, their streams, and the
notification listener that coordinates broker processes.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from broker.access import Access
from broker.avro.schemas import AvroSchemas
from broker.own_events.collector import OwnEvents
from broker.settings import Settings
from broker.subscriptions.api import SubscriptionApi
from broker.subscriptions.coordination import Coordinator
from broker.subscriptions.session import DeadLetterSink
from broker.subscriptions.store import Subscriptions, close_expired
from broker.subscriptions.stream_api import SubscriptionStreams
from broker.timelines.clusters import Clusters
from broker.timelines.store import TimelineStore


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
