"""A ``/changes`` (or ``/snapshots``) query as transicator parses it, and the shape of its
answer."""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.requests import Request

from changebroker import http
from changebroker.changeserver import changes
from changebroker.changeserver.changelog import Snapshot
from changebroker.changeserver.errors import BadRequest
from changebroker.changeserver.pgoutput import NO_SELECTOR
from changebroker.changeserver.sequence import ZERO, Sequence

JSON = "application/json"
PROTOBUF = "application/transicator+protobuf"
COMPACT = changes.COMPACT  # the bridge's: the stored bodies as they are
DEFAULT_LIMIT = 100
MAX_LIMIT = 100_000
_SELECTOR = re.compile(r"^[0-9a-z_-]+$")
ANY_SELECTOR = "*"  # the waiters of ``table`` queries: woken by every durable batch


def _media_type(accept: str, served: tuple[str, ...]) -> str:
    """JSON unless the Accept header prefers another of ``served``; 415 when none fits."""
    if not accept.strip():
        return JSON
    for quality, name in http.accepted(accept):
        if quality == 0:
            break
        if name in served:
            return name
        if name in (JSON, "application/*", "*/*"):
            return JSON
    raise BadRequest(415, "UNSUPPORTED_FORMAT", f"unsupported media type: {accept}")


_GO_INT = re.compile(r"^[+-]?[0-9]+$")  # what transicator's strconv.ParseInt(s, 10, 32) takes


def _first(request: Request, name: str) -> str:
    """A parameter's first value, as transicator's ``url.Values.Get`` reads it ("" if absent)."""
    values = request.query_params.getlist(name)
    return values[0] if values else ""


def _integer(request: Request, name: str, default: int) -> int:
    """A 32-bit integer, any sign, as transicator parses ``limit`` and ``block``."""
    raw = _first(request, name)
    if raw == "":
        return default
    if not _GO_INT.match(raw) or not -(2**31) <= int(raw) < 2**31:
        raise BadRequest(400, "PARAMETER_INVALID", f"invalid {name}: {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class Query:
    selectors: list[str]
    since: Sequence
    limit: int
    block: int
    snapshot: Snapshot | None
    media_type: str
    tables: tuple[str, ...] = ()  # the ``table`` extension: every change of these tables


def parse_query(request: Request, served: tuple[str, ...] = (JSON, PROTOBUF)) -> Query:
    """The query of ``/changes`` (or ``/snapshots``), answered in one of ``served``."""
    media_type = _media_type(request.headers.get("accept", ""), served)
    params = request.query_params
    selectors = sorted(set(params.getlist("scope") + params.getlist("selector")))
    for selector in selectors:
        if not _SELECTOR.match(selector):
            raise BadRequest(
                400, "PARAMETER_INVALID", f"invalid selector {selector!r}: use [0-9a-z_-]"
            )
    tables = tuple(sorted(set(params.getlist("table"))))
    if tables:
        # The extension: every change of the named tables, whatever its selector.
        if selectors:
            raise BadRequest(
                400, "PARAMETER_INVALID", "table reads every selector: give no scope or selector"
            )
        if _first(request, "snapshot"):
            raise BadRequest(400, "PARAMETER_INVALID", "table cannot be combined with snapshot")
        selectors = [ANY_SELECTOR]
    # None named: the changes of rows without a selector (NULL, empty, or no such column).
    selectors = selectors or [NO_SELECTOR]
    since = ZERO
    if raw_since := _first(request, "since"):
        try:
            since = Sequence.parse(raw_since)
        except ValueError as error:
            raise BadRequest(400, "PARAMETER_INVALID", str(error)) from None
    snapshot = None
    if raw_snapshot := _first(request, "snapshot"):
        try:
            snapshot = Snapshot.parse(raw_snapshot)
        except ValueError:
            raise BadRequest(
                400, "PARAMETER_INVALID", f"invalid snapshot {raw_snapshot!r}"
            ) from None
    # Zero or negative: no changes, only the bounds (as transicator answers).
    limit = _integer(request, "limit", DEFAULT_LIMIT)
    if limit > MAX_LIMIT:
        raise BadRequest(400, "PARAMETER_INVALID", f"limit too high, exceeds max {MAX_LIMIT}")
    block = _integer(request, "block", 0)
    return Query(selectors, since, limit, block, snapshot, media_type, tables)


# An answer: (any changes?, behind the query's ``since``?, body, response headers, the same as
# lines for ``http.RESPOND``), shared by identical queries.
Answer = tuple[bool, bool, bytes, list[tuple[bytes, bytes]], bytes]
