"""The broker's Starlette app: every Nakadi route this project serves, in one place.

Build it for tests (Postgres metadata database, Kafka bootstrap)::

    from broker.app import create_app
    from broker.settings import Settings
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
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from broker import bodies
from broker.access import Access
from broker.admin_settings import AdminSettings, initial_admins
from broker.avro import api as avro_api
from broker.avro.schemas import AvroSchemas
from broker.errors import BrokerError
from broker.event_types.api import EventTypeApi
from broker.event_types.rules import ENRICHMENT_STRATEGIES
from broker.event_types.store import Store, StoreResolver
from broker.event_types.topics import Topics
from broker.own_events.access_log import AccessLog
from broker.own_events.audit import install as install_audit_events
from broker.own_events.collector import OwnEvents
from broker.own_events.definitions import event_types as own_event_types
from broker.problems import problem, render
from broker.publishing.api import Publisher
from broker.publishing.partitioning import STRATEGIES
from broker.publishing.producer import KafkaProducer
from broker.settings import Settings
from broker.status import Status
from broker.streams import api as streams
from broker.streams.watermarks import Watermarks
from broker.subscriptions.lag import SubscriptionLag
from broker.subscriptions.service import SubscriptionService
from changebroker import auth, logs, pg
from changebroker import metrics as service_metrics

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> ASGIApp:
    store = Store(settings.pg_dsn, settings.pool_size)
    admin = AdminSettings(store.pool, initial_admins(settings.auth.admins))
    access = Access(store.pool, admin)
    topics = Topics(
        settings.kafka_bootstrap, settings.replication_factor, settings.min_insync_replicas
    )
    own = OwnEvents(settings.nakadi_event_types, settings.kpi_salt)
    event_type_api = EventTypeApi(store, topics, settings, access, own)
    producer = KafkaProducer(settings.kafka_bootstrap)
    avro_schemas = AvroSchemas(store)
    publisher = Publisher(store, producer, access, avro_schemas, own)
    watermarks = Watermarks(settings.kafka_bootstrap)
    subscriptions = SubscriptionService(
        store, settings, watermarks, access, avro_schemas, publisher.publish_internal, own
    )
    lag = SubscriptionLag(store, settings.kafka_bootstrap)
    lag_refresh = service_metrics.Interval(settings.lag_interval, lag.refresh)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Event type schemas are registry subjects in the same database
        # (broker/event_types/store.py).
        await asyncio.to_thread(pg.migrate, settings.pg_dsn, "registry")
        await asyncio.to_thread(pg.migrate, settings.pg_dsn, "broker")
        await store.open()
        producer.start()
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
            yield
        finally:
            await own.stop()
            await subscriptions.stop()
            await asyncio.to_thread(producer.close)
            await watermarks.close()
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
        *Status(store.pool, topics).routes(),
        # Process, request and publishing metrics (broker/metrics.py), and every subscription's
        # lag, read and rendered in the background at most once per --lag-interval.
        service_metrics.route(refresh=[lag_refresh], texts=[lag.text]),
        Route("/registry/enrichment-strategies", enrichment_strategies, methods=["GET"]),
        Route("/registry/partition-strategies", partition_strategies, methods=["GET"]),
        *event_type_api.routes(),
        # Nakadi's envelope schemas, for Avro clients.
        *avro_api.routes(),
        # Streams, partitions and cursor operations: broker/streams/api.py.
        *streams.routes(
            StoreResolver(store),
            settings.kafka_bootstrap,
            watermarks,
            access,
            settings.stream_memory_limit,
            avro_schemas,
            own,
        ),
        # Subscriptions, their streams, commits and stats: broker/subscriptions/.
        *subscriptions.routes(),
        *admin.routes(),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            BrokerError: render,
            HTTPException: _http_problem,
            auth.Forbidden: _forbidden,
            Exception: _internal_problem,
        },
    )
    app.state.admin = admin
    authenticated = auth.AuthMiddleware(
        bodies.EncodedOnlyOnPost(app),
        settings.auth.authenticator(),
        _refused,
        # Load balancers probe /health without credentials.
        open_paths=frozenset({"/health"}),
        scope_of=settings.scopes.of,
    )
    # Outside authentication: a refused request is one of nakadi.access.log too.
    return AccessLog(authenticated, own) if own.enabled else authenticated


def _refused(status: int, detail: str) -> Response:
    response = problem(status, detail)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


async def _forbidden(request: Request, exc: Exception) -> Response:
    return problem(403, str(exc))


async def _http_problem(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else None
    return problem(status, detail)


async def _internal_problem(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "the broker failed on this request; see its log for the flow id")
