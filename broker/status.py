"""``/health``: Nakadi's plain-text ``OK`` while the process serves; ``/status``: whether what
it serves from answers, as JSON.

Load balancers and scripts compare ``/health`` with ``OK`` (Nakadi's answer, text/plain), so it
says nothing more and asks nothing of Postgres or Kafka: a database hiccup must not take every
broker process out of rotation at once. ``/status`` asks both (``{"status": "OK", "postgres":
"OK", "kafka": "OK"}``; 503 and ``"DEGRADED"`` with the failing one's error otherwise), for
operators and the console.
"""

from __future__ import annotations

import asyncio

import psycopg
from confluent_kafka import KafkaException
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from changebroker.broker.event_types.topics import Topics

# The longest each dependency may take to answer /status.
CHECK_SECONDS = 3.0
OK = "OK"


async def health(request: Request) -> Response:
    return PlainTextResponse(OK)


class Status:
    def __init__(self, pool: AsyncConnectionPool, topics: Topics) -> None:
        self._pool = pool
        self._topics = topics

    async def postgres(self) -> str:
        try:
            async with self._pool.connection(timeout=CHECK_SECONDS) as conn:
                await conn.execute("SELECT 1")
        except psycopg.Error as error:
            return f"{type(error).__name__}: {error}"
        return OK

    async def kafka(self) -> str:
        try:
            await asyncio.to_thread(self._topics.cluster_metadata, CHECK_SECONDS)
        except KafkaException as error:
            return f"{error.args[0].str()}"
        return OK

    async def status(self, request: Request) -> Response:
        postgres, kafka = await asyncio.gather(self.postgres(), self.kafka())
        healthy = postgres == OK and kafka == OK
        return JSONResponse(
            {"status": OK if healthy else "DEGRADED", "postgres": postgres, "kafka": kafka},
            status_code=200 if healthy else 503,
        )

    def routes(self) -> list[Route]:
        return [
            Route("/health", health, methods=["GET"]),
            Route("/status", self.status, methods=["GET"]),
        ]
