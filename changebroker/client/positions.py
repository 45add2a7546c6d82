"""Where a change feed stands: its sequence, for the selectors it reads, kept in a store.

A position is only good for the selectors it was read for: one taken for ``a`` says nothing
about the changes of ``b`` before it, so a store holding another set's is refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from changebroker.client.wire import sequence_order
from changebroker.files import write_atomically


@dataclass(frozen=True, slots=True)
class Position:
    sequence: str  # every change up to here has been handled
    selectors: tuple[str, ...]  # sorted, each once

    def __post_init__(self) -> None:
        sequence_order(self.sequence)  # ValueError when malformed


class PositionStore(Protocol):
    """Keeps a feed's position between runs. ``save`` is called once the items before the
    position have been handled, and must be durable when it returns."""

    def load(self) -> Position | None: ...

    def save(self, position: Position) -> None: ...


class MemoryPositionStore:
    """A position for as long as the process lives (or given to start from)."""

    def __init__(self, position: Position | None = None) -> None:
        self.position = position

    def load(self) -> Position | None:
        return self.position

    def save(self, position: Position) -> None:
        self.position = position


class FilePositionStore:
    """A JSON file, ``{"sequence": ..., "selectors": [...]}``, replaced atomically: a crash
    at any moment leaves the old position or the new, never a mix."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> Position | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            document = json.loads(text)
            return Position(document["sequence"], tuple(document["selectors"]))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{self.path} is not a change feed position ({error}): remove it to start over"
            ) from None

    def save(self, position: Position) -> None:
        document = {"sequence": position.sequence, "selectors": list(position.selectors)}
        write_atomically(self.path, json.dumps(document))
