"""A new server of a fleet takes its change log from a peer before it serves.

Every server of a fleet has its own slot, and a slot streams only what commits after it was
made: a server that joins later would hold nothing from before, and answer
``SNAPSHOT_TOO_OLD`` for positions its peers still serve. So a server started with
``--seed-from`` whose log is new (it never streamed) or retired (a markdown dropped its slot)
first makes its own slot, at LSN ``S``, then asks its peers' management ports for
``GET /changelog?through=S``. A peer that has made durable everything committed before ``S``
answers a consistent copy of its whole log (SQLite's online backup); the new server takes it
as its own and streams from its slot, skipping the transactions the copy already holds (as
after any restart). Nothing committed before ``S`` is missing (the peer had it), nothing
after it either (our slot has it), and sequences are the same on every server.

A peer answers 409 ``NO_HISTORY`` while it has never streamed itself: when every peer says
so, the fleet is new and the server starts its log at its slot. When no peer can seed in
``--seed-timeout`` (all away, or behind), it starts at its slot too, and says loudly that
positions before it are ``SNAPSHOT_TOO_OLD`` here.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from changebroker import logs
from changebroker.changeserver import errors, management
from changebroker.changeserver.changelog import ChangeLog
from changebroker.changeserver.replication import ensure_slot, format_lsn, slot_start

log = logging.getLogger(__name__)

PATH = "/changelog"
THROUGH_HEADER = "X-Changelog-Through"  # the LSN up to which the copy holds every commit
_RETRY_SECONDS = 0.5


def route(changelog: ChangeLog, state: management.State, confirmed: Callable[[], int]) -> Route:
    """``GET /changelog?through=LSN`` on the management port: a copy of the whole log once
    everything committed before ``LSN`` is durable here (``confirmed``: the position this
    server confirmed to Postgres)."""
    for left in changelog.path.parent.glob("seed-*"):  # copies a stopped server never sent
        _remove(left)

    async def copy(request: Request) -> Response:
        raw = request.query_params.get("through", "")
        if not raw.isascii() or not raw.isdigit():
            return errors.error_response(
                400, "PARAMETER_INVALID", f"invalid through {raw!r}: an LSN as a decimal number"
            )
        if state.marked_down:
            return errors.error_response(503, "MARKED_DOWN", "the server is marked down")
        if (failure := state.failure()) is not None:
            return errors.error_response(503, "NOT_READY", failure)
        if not await asyncio.to_thread(_has_history, changelog):
            return errors.error_response(
                409, "NO_HISTORY", "this server has not streamed yet: it has nothing to seed"
            )
        through = confirmed()  # read before the copy: the copy holds at least this much
        if through < int(raw):
            return errors.error_response(
                503,
                "BEHIND",
                f"durable through {format_lsn(through)}, not yet {format_lsn(int(raw))}",
                headers={"Retry-After": "1"},
            )
        folder = tempfile.mkdtemp(prefix="seed-", dir=changelog.path.parent)
        target = Path(folder) / "changes.sqlite"
        await asyncio.to_thread(changelog.copy_to, target)
        return FileResponse(
            target,
            media_type="application/vnd.sqlite3",
            headers={THROUGH_HEADER: str(through)},
            background=BackgroundTask(_remove, Path(folder)),
        )

    return Route(PATH, copy, methods=["GET"])


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _has_history(changelog: ChangeLog) -> bool:
    """Whether this log streamed from a slot it still has (a peer may copy it)."""
    return changelog.slot_created() and not changelog.retired()


def needs_seed(changelog: ChangeLog) -> bool:
    """A new log (nothing durable, no slot yet), or one whose slot a markdown dropped: nothing
    continues it. A log with changes from before ``slot_created`` was kept is not new."""
    new = not changelog.slot_created() and changelog.durable() == (0, 0)
    return new or changelog.retired()


def seed(
    changelog: ChangeLog,
    *,
    dsn: str,
    slot: str,
    publication: str,
    tables: tuple[str, ...],
    peers: tuple[str, ...],
    timeout: float,
    stopping: threading.Event,
    headers: dict[str, str],
    verify: ssl.SSLContext | bool = True,
) -> str | None:
    """Seed ``changelog`` from the first peer that can (see the module); the peer's URL, or
    None when the log starts at our slot instead."""
    retired = changelog.retired()
    ensure_slot(dsn, slot, publication, tables)
    start = slot_start(dsn, slot)
    deadline = time.monotonic() + timeout
    log.info(
        "seeding the change log from a peer",
        extra=logs.fields(slot=slot, through=format_lsn(start), peers=",".join(peers)),
    )
    timeouts = httpx.Timeout(30, read=300)
    with httpx.Client(timeout=timeouts, headers=headers, verify=verify) as client:
        while not stopping.is_set():
            without_history = 0
            for peer in peers:
                outcome = _try_peer(client, peer, start, changelog)
                if outcome == "seeded":
                    log.info("change log seeded", extra=logs.fields(peer=peer))
                    return peer
                without_history += outcome == "no history"
            if without_history == len(peers):
                log.info(
                    "no peer has streamed yet: a new fleet, the change log starts at our slot",
                    extra=logs.fields(start=format_lsn(start)),
                )
                break
            if time.monotonic() > deadline:
                log.error(
                    "no peer could seed the change log in time: it starts at our slot, and"
                    " positions before it are SNAPSHOT_TOO_OLD here; start the peers and"
                    " restart this server to seed it",
                    extra=logs.fields(start=format_lsn(start), timeout_s=timeout),
                )
                break
            stopping.wait(_RETRY_SECONDS)
    if retired:
        changelog.restart_after_gap(start)  # the old log's positions have no slot behind them
    changelog.note_slot_created()
    return None


def _try_peer(client: httpx.Client, peer: str, start: int, changelog: ChangeLog) -> str:
    """ "seeded", "no history", or "not now" (away, behind, marked down, refused)."""
    url = f"{peer.rstrip('/')}{PATH}"
    with tempfile.TemporaryDirectory(dir=changelog.path.parent) as folder:
        target = Path(folder) / "seed.sqlite"
        try:
            with client.stream("GET", url, params={"through": str(start)}) as response:
                if response.status_code == 409:
                    return "no history"
                if response.status_code != 200:
                    log.info(
                        "peer cannot seed yet",
                        extra=logs.fields(peer=peer, status=response.status_code),
                    )
                    return "not now"
                with open(target, "wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
        except httpx.HTTPError as error:
            log.info("peer unreachable", extra=logs.fields(peer=peer, error=str(error)))
            return "not now"
        changelog.import_seed(target)
    return "seeded"
