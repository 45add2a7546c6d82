"""The services' log read back as a log shipper reads it: line by line, each line nothing but
``key=value`` pairs, a quoted value a JSON string."""

from __future__ import annotations

import json
import re
from pathlib import Path

_PAIR = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "]*)(?: |$)')


def parse(line: str) -> dict[str, str]:
    """Every pair of ``line``; ``ValueError`` when any part of it is not one."""
    values: dict[str, str] = {}
    position = 0
    while position < len(line):
        pair = _PAIR.match(line, position)
        if pair is None:
            raise ValueError(f"not logfmt at character {position}: {line!r}")
        key, raw = pair.groups()
        values[key] = json.loads(raw) if raw.startswith('"') else raw
        position = pair.end()
    return values


def lines(path: Path) -> list[dict[str, str]]:
    """Each line of the log at ``path``, parsed. ``str.splitlines`` is the strictest line-based
    reader: it also splits at CR, VT, FF, U+001C-U+001E, U+0085, U+2028 and U+2029."""
    return [parse(line) for line in path.read_text(encoding="utf-8").splitlines()]
