"""Wiring: change log + replication thread + API, with one lifespan for all of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from changebroker import auth, logs, metrics
from changebroker.changeserver import api, errors, seeding, snapshots
from changebroker.changeserver.changelog import ChangeLog, LogReader
from changebroker.changeserver.management import State, base, management_routes, stack_route
from changebroker.changeserver.observed import Observed, Source
from changebroker.changeserver.replication import Replicator, drop_slot

log = logging.getLogger(__name__)

# With authentication on: what /changes and /snapshots need, and what /markdown needs.
DEFAULT_READ_SCOPE = "changeserver.read"
DEFAULT_ADMIN_SCOPE = "changeserver.admin"


@dataclass(frozen=True)
class Settings:
    dsn: str
    slot: str
    db_dir: Path
    publication: str | None = None
    tables: tuple[str, ...] = ()  # for a publication we create; none: FOR ALL TABLES
    selector_column: str = "_change_selector"
    max_age: float | None = None
    group_commit_ms: int = 10  # a change log flush waits this long after the last, at most
    prefix: str = ""
    snapshots_dir: Path | None = None  # where replay snapshots are; none: no /snapshots
    on_slot_loss: str = "fail"  # or "recreate": a new slot, readers told SNAPSHOT_TOO_OLD
    # The longest the slot's and the change log's numbers in /metrics and /status may be old.
    metrics_interval: float = 10.0
    # A fleet's peers (management URLs): a new or retired change log is seeded from one of
    # them before this server streams (``seeding``); how long to wait for one that can.
    seed_from: tuple[str, ...] = ()
    seed_timeout: float = 60.0
    client_token: str | None = None  # sent to the peers, when they check credentials
    tls_ca: Path | None = None  # what the peers' certificates are checked against


class ChangeServer:
    """``api_app`` serves /changes and /diagnostics/stack (under the prefix), and the management
    paths (/health /ready /markdown /metrics /status) unless ``separate_management``;
    ``management_app`` serves those and the stack dump."""

    def __init__(
        self,
        settings: Settings,
        *,
        separate_management: bool = False,
        authenticator: auth.Authenticator | None = None,
        read_scope: str = DEFAULT_READ_SCOPE,
        admin_scope: str = DEFAULT_ADMIN_SCOPE,
    ) -> None:
        self.settings = settings
        self.changelog = ChangeLog(settings.db_dir)
        self.reader = LogReader(self.changelog.path)
        self.replicator = Replicator(
            settings.dsn,
            settings.slot,
            settings.publication or settings.slot,
            self.changelog,
            settings.selector_column,
            on_durable=lambda selectors: self.state.waiters.notify_threadsafe(selectors),
            max_age=settings.max_age,
            tables=settings.tables,
            on_slot_loss=settings.on_slot_loss,
            group_commit=settings.group_commit_ms / 1000,
        )
        replicator = self.replicator
        self.state = State(streaming=replicator.streaming, failure=lambda: replicator.failure)
        changes = api.changes_route(self.state, self.reader, settings.prefix)
        routes = [changes, stack_route(settings.prefix)]
        if settings.snapshots_dir is not None:
            routes.append(
                snapshots.snapshots_route(
                    self.state, settings.snapshots_dir, settings.selector_column, settings.prefix
                )
            )
        source = Source(
            dsn=settings.dsn,
            slot=settings.slot,
            changelog=self.changelog.path,
            max_age=settings.max_age,
            snapshots_dir=settings.snapshots_dir,
        )
        self.observed = Observed(source, replicator, self.state)
        refresh = metrics.Interval(settings.metrics_interval, self.observed.refresh)
        management = [
            *management_routes(self.state),
            seeding.route(self.changelog, self.state, lambda: replicator.confirmed_lsn),
            metrics.route([self.observed], [refresh]),
            Route("/status", self._status(refresh), methods=["GET"]),
        ]
        if separate_management:
            management.append(stack_route(""))
        else:
            routes += management
        handlers = errors.EXCEPTION_HANDLERS
        authenticator = authenticator or auth.Off()

        prefix = re.escape(base(settings.prefix))
        # Load balancers probe /health and /ready without credentials; /markdown stops the
        # service, the stack dump shows its internals, and /changelog hands out the whole log
        # (to a fleet's new server): admins only.
        scopes = auth.ScopeTable(
            (
                auth.rule("GET", f"{prefix}/(changes|snapshots)|/metrics|/status", read_scope),
                auth.rule(
                    "GET", f"/markdown|{seeding.PATH}|({prefix})?/diagnostics/stack", admin_scope
                ),
            ),
            strictest=admin_scope,
        )

        def guarded(app: ASGIApp) -> ASGIApp:
            return auth.AuthMiddleware(
                app,
                authenticator,
                errors.refuse,
                open_paths=frozenset({"/health", "/ready"}),
                scopes=scopes,
            )

        self.api_app = guarded(
            api.ChangesFirst(
                changes,
                Starlette(routes=routes, lifespan=self._lifespan, exception_handlers=handlers),
            )
        )
        self.management_app = (
            guarded(Starlette(routes=management, exception_handlers=handlers))
            if separate_management
            else None
        )

    def _status(self, refresh: metrics.Refresh) -> Callable[[Request], Awaitable[Response]]:
        """``/status``: the observed numbers as JSON (the console's changeserver page)."""

        async def status(request: Request) -> Response:
            await refresh()
            return JSONResponse(self.observed.status())

        return status

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.state.waiters.bind(asyncio.get_running_loop())
        if self.settings.seed_from and seeding.needs_seed(self.changelog):
            # Before the API port opens: nothing is served from a log that is not whole yet.
            await asyncio.to_thread(self._seed)
        self.replicator.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.shutdown)

    def _seed(self) -> None:
        s = self.settings
        seeding.seed(
            self.changelog,
            dsn=s.dsn,
            slot=s.slot,
            publication=s.publication or s.slot,
            tables=s.tables,
            peers=s.seed_from,
            timeout=s.seed_timeout,
            stopping=self.replicator.stopping,
            headers=auth.client_headers(s.client_token),
            verify=auth.client_verify(s.tls_ca),
        )
        self.replicator.confirmed_lsn = self.changelog.durable()[1]

    def shutdown(self) -> None:
        """Stop replicating; after a markdown, also drop the slot (nothing will resume it)."""
        self.replicator.stop()
        if self.replicator.is_alive():
            self.replicator.join(timeout=30)
        if self.state.marked_down:
            # Noted first: a restart then knows the log has no slot behind it, even if the
            # drop below did not happen (a fleet's server seeds itself again from a peer).
            self.changelog.note_retired()
            drop_slot(self.settings.dsn, self.settings.slot)
        self.reader.close()
        self.observed.close()
        self.changelog.close()
        log.info("stopped", extra=logs.fields(marked_down=self.state.marked_down))
