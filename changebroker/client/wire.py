"""``/changes`` answers (JSON or transicator's protobuf) and error bodies, decoded.

The formats are docs/specs/changeserver-api.yaml and changebroker/transicator.proto; errors
are the changeserver's ``{"code", "error", "description"}`` or Nakadi's Problem JSON
(``{"title", "detail", "status"}``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from changebroker import transicator_pb2 as pb
from changebroker.client.model import Change, Operation, json_row, protobuf_row

JSON = "application/json"
PROTOBUF = "application/transicator+protobuf"
_SEQUENCE = re.compile(r"^([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})$")


def sequence_order(sequence: str) -> tuple[int, int]:
    """(commit LSN, index) of a ``/changes`` sequence, to compare positions; ValueError when
    it is not ``hex.hex.hex``."""
    match = _SEQUENCE.match(sequence)
    if not match:
        raise ValueError(f"invalid sequence {sequence!r}: expected hex.hex.hex")
    high, low, index = (int(part, 16) for part in match.groups())
    return (high << 32) | low, index


def later(first: str, second: str) -> str:
    return second if sequence_order(second) > sequence_order(first) else first


@dataclass(frozen=True, slots=True)
class Page:
    """One ``/changes`` answer: the changes, and the bounds of what the server holds
    (``last_sequence`` is the last change returned when ``limit`` cut the list)."""

    first_sequence: str
    last_sequence: str
    changes: list[Change]


# Operation(n) goes through Enum's lookup machinery: a dict is a tenth of it, per change.
_OPERATIONS = {operation.value: operation for operation in Operation}


def _json_change(change: Mapping[str, Any]) -> Change:
    return Change(
        _OPERATIONS[change["operation"]],
        change["table"],
        change["sequence"],
        change.get("commitSequence", 0),
        change.get("changeSequence", 0),
        change.get("commitIndex", 0),
        change.get("txid", 0),
        change.get("timestamp", 0),
        json_row(change.get("newRow")),
        json_row(change.get("oldRow")),
    )


def page_from_json(body: bytes) -> Page:
    document = orjson.loads(body)
    changes = [_json_change(change) for change in document.get("changes") or ()]
    return Page(document.get("firstSequence", ""), document.get("lastSequence", ""), changes)


def _protobuf_change(change: pb.ChangePb) -> Change:
    return Change(
        _OPERATIONS[change.operation],
        change.table,
        change.sequence,
        change.commitSequence,
        change.changeSequence,
        change.commitIndex,
        # The 64-bit txid; an older server sends only the 32-bit xid.
        change.transactionIDEpoch or change.transactionID,
        change.timestamp,
        protobuf_row(change.newColumns),
        protobuf_row(change.oldColumns),
    )


def page_from_protobuf(body: bytes) -> Page:
    document = pb.ChangeListPb.FromString(body)
    changes = [_protobuf_change(change) for change in document.changes]
    return Page(document.firstSequence, document.lastSequence, changes)


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer other than 200, as its body explains it."""

    status: int
    code: str  # the changeserver's ``code``; Nakadi's ``title``
    message: str

    @classmethod
    def of(cls, status: int, body: bytes) -> Refusal:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            return cls(status, "", body[:300].decode(errors="replace").strip())
        if "code" in document:  # the changeserver's
            parts = [document.get("error"), document.get("description")]
            return cls(status, str(document["code"]), ": ".join(str(p) for p in parts if p))
        title = str(document.get("title", ""))
        return cls(status, title, str(document.get("detail") or title))

    def __str__(self) -> str:
        return (
            f"{self.status} {self.code}: {self.message}"
            if self.code
            else (f"{self.status}: {self.message}")
        )
