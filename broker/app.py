"""The broker's Starlette app: every Nakadi route this project serves, in one place.

Build it for tests (Postgres metadata database, Kafka bootstrap)::

    from changebroker.broker.app import create_app
    from changebroker.broker.settings import Settings
    from changebroker.stack.run import serve_in_thread

    settings = Settings(pg_dsn=pg_dsn, kafka_bootstrap=kafka_bootstrap)
    with serve_in_thread(create_app(settings)) as url:
        httpx.post(f"{url}/event-types", json={...})  # 201

Start-up applies ``sql/registry`` and ``sql/broker`` migrations, opens the Postgres pool and the
Kafka producer; /health answers 200 ``OK`` (text, as Nakadi's) once they are up, /status whether
Postgres and Kafka answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from changebroker import auth, http, kafka, logs, pg, tasks
from changebroker import metrics as service_metrics
from changebroker.broker import bodies
from changebroker.broker.access import Access
from changebroker.broker.admin_settings import AdminSettings, initial_admins
from changebroker.broker.authorization import OPEN_PATHS
from changebroker.broker.avro import api as avro_api
from changebroker.broker.avro.schemas import AvroSchemas
from changebroker.broker.errors import BrokerError
from changebroker.broker.event_types.api import EventTypeApi
from changebroker.broker.event_types.rules import ENRICHMENT_STRATEGIES
from changebroker.broker.event_types.store import Store
from changebroker.broker.own_events.access_log import AccessLog
from changebroker.broker.own_events.audit import install as install_audit_events
from changebroker.broker.own_events.collector import OwnEvents
from changebroker.broker.own_events.definitions import event_types as own_event_types
from changebroker.broker.problems import problem, render
from changebroker.broker.publishing.api import Publisher
from changebroker.broker.publishing.partitioning import STRATEGIES
from changebroker.broker.settings import Settings
from changebroker.broker.settings_api import SettingsApi
from changebroker.broker.status import Status
from changebroker.broker.streams import api as streams
from changebroker.broker.subscriptions.lag import SubscriptionLag
from changebroker.broker.subscriptions.service import SubscriptionService
from changebroker.broker.timelines.api import TimelineApi
from changebroker.broker.timelines.cleanup import cleaning
from changebroker.broker.timelines.clusters import Clusters
from changebroker.broker.timelines.repartition import Repartitioning
from changebroker.broker.timelines.storages import Storages
from changebroker.broker.timelines.store import TimelineStore
from changebroker.broker.timelines.switch import Switcher
from changebroker.broker.timelines.writers import Writer
from changebroker.broker.url_firewall import UrlFirewall

log = logging.getLogger(__name__)

# Endless responses that hold Kafka consumers or a subscription's partitions while they last:
# Starlette would serve a HEAD of them with the GET handler (a stream opened, its events
# discarded, and a subscription session holding partitions its real consumer then cannot
# get), so a HEAD of them answers 405.
STREAMS = frozenset({"/event-types/{name}/events", "/subscriptions/{id}/events"})


def create_app(settings: Settings) -> ASGIApp:
    store = Store(settings.pg_dsn, settings.pool_size)
    admin = AdminSettings(store.pool, initial_admins(settings.auth.admins))
    access = Access(store.pool, admin)
    # Kafka clients per cluster: the storage "default" is --kafka-bootstrap (broker/timelines/).
    clusters = Clusters(
        kafka.Cluster(settings.kafka_bootstrap),
        settings.replication_factor,
        settings.min_insync_replicas,
    )
    timelines = TimelineStore(store, clusters.own)
    own = OwnEvents(settings.nakadi_event_types, settings.kpi_salt)
    event_type_api = EventTypeApi(store, clusters, settings, access, own)
    # This process takes part in every timeline switch as a writer of events.
    writer = Writer(
        settings.pg_dsn,
        store.pool,
        "broker",
        wait_timeout=settings.timeline_wait_timeout,
        on_resume=store.forget_revisions,
    )
    avro_schemas = AvroSchemas(store)
    publisher = Publisher(store, clusters, writer, access, avro_schemas, own)
    subscriptions = SubscriptionService(
        timelines, clusters, settings, access, avro_schemas, publisher.publish_internal, own
    )
    lag = SubscriptionLag(timelines)
    lag_refresh = service_metrics.Interval(settings.lag_interval, lag.refresh)
    timeline_api = TimelineApi(
        store,
        Storages(store.pool),
        timelines,
        clusters,
        Switcher(store, clusters, settings.default_retention_ms, settings.timeline_wait_timeout),
        Repartitioning(store, clusters, settings.max_partitions),
        access,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Event type schemas are registry subjects in the same database
        # (broker/event_types/store.py).
        await asyncio.to_thread(pg.migrate, settings.pg_dsn, "registry")
        await asyncio.to_thread(pg.migrate, settings.pg_dsn, "broker")
        await store.open()
        await writer.start()
        await subscriptions.start()
        if own.enabled:
            for body in own_event_types():
                try:
                    await event_type_api.ensure(body)
                except BrokerError as exc:
                    # The broker serves without it; its events for it are dropped, logged.
                    log.error(
                        "one of Nakadi's own event types could not be created",
                        extra=logs.fields(event_type=body["name"], error=exc.detail),
                    )
            install_audit_events()
        own.start(publisher.publish_internal_records, publisher.publish_internal, avro_schemas)
        try:
            async with tasks.running(cleaning(store, clusters)):
                yield
        finally:
            await own.stop()
            await subscriptions.stop()
            await writer.stop()
            await clusters.close()
            await lag.close()
            await store.close()
            service_metrics.worker_exiting()

    async def enrichment_strategies(request: Request) -> Response:
        return JSONResponse(list(ENRICHMENT_STRATEGIES))

    async def partition_strategies(request: Request) -> Response:
        return JSONResponse(list(STRATEGIES))

    routes: list[BaseRoute] = [
        # Publishing first: the most frequent request, matched before the 12 routes it followed
        # (~3% of a single-event publish's CPU; a GET of its path still finds the stream).
        *publisher.routes(),
        # /health: Nakadi's plain OK for load balancers; /status: Postgres and Kafka answer.
        *Status(store.pool, clusters.topics(clusters.own)).routes(),
        # Process, request and publishing metrics (broker/metrics.py), and every subscription's
        # lag, read and rendered in the background at most once per --lag-interval.
        service_metrics.route(refresh=[lag_refresh], texts=[lag.text], nakadi_json=True),
        Route("/registry/enrichment-strategies", enrichment_strategies, methods=["GET"]),
        Route("/registry/partition-strategies", partition_strategies, methods=["GET"]),
        *event_type_api.routes(),
        # Nakadi's envelope schemas, for Avro clients.
        *avro_api.routes(),
        # Streams, partitions and cursor operations: broker/streams/api.py.
        *streams.routes(
            timelines, clusters, access, settings.stream_memory_limit, avro_schemas, own
        ),
        # Storages, timelines and repartitioning: broker/timelines/.
        *timeline_api.routes(),
        # Subscriptions, their streams, commits and stats: broker/subscriptions/.
        *subscriptions.routes(),
        *SettingsApi(admin, access).routes(),
    ]
    for route in routes:
        if isinstance(route, Route) and route.path in STREAMS and route.methods:
            route.methods.discard("HEAD")
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            BrokerError: render,
            HTTPException: _http_problem,
            ClientDisconnect: _client_left,
            Exception: _internal_problem,
        },
    )
    app.state.admin = admin
    authenticated = auth.AuthMiddleware(
        bodies.EncodedOnlyOnPost(app),
        settings.auth.authenticator(),
        _refused,
        open_paths=OPEN_PATHS,
        scopes=settings.scopes.table(),
    )
    # Outside authentication: a refused request is one of nakadi.access.log too.
    logged = AccessLog(authenticated, own) if own.enabled else authenticated
    # Outermost, as Nakadi's firewall runs before its filters and authentication.
    return UrlFirewall(logged)


def _refused(status: int, detail: str) -> Response:
    response = problem(status, detail)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


async def _client_left(request: Request, exc: Exception) -> Response:
    """Its client left before the body was read: nothing failed, and nobody reads an answer."""
    return Response(status_code=http.CLIENT_LEFT)


async def _http_problem(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return problem(500)
    response = problem(exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})  # a 405's Allow
    return response


async def _internal_problem(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "the broker failed on this request; see its log for the flow id")
