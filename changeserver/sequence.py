"""Transicator sequences: ``hex(lsn >> 32).hex(lsn & 0xffffffff).hex(index)``.

``lsn`` is the commit LSN of the change's transaction and ``index`` its position
inside that transaction, so sequences order exactly as commits (then changes) do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PATTERN = re.compile(r"^([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})$")


def text(lsn: int, index: int) -> str:
    """The sequence of ``lsn`` and ``index`` as text, without a :class:`Sequence` (a frozen
    dataclass costs a microsecond to make, and every change served names its sequence)."""
    return f"{lsn >> 32:x}.{lsn & 0xFFFFFFFF:x}.{index:x}"


@dataclass(frozen=True, order=True)
class Sequence:
    lsn: int
    index: int

    def __str__(self) -> str:
        return text(self.lsn, self.index)

    @classmethod
    def parse(cls, text: str) -> Sequence:
        """``"1.2a.0"`` -> ``Sequence(0x1_0000002a, 0)``; ValueError when malformed."""
        match = _PATTERN.match(text)
        if not match:
            raise ValueError(f"invalid sequence {text!r}: expected hex.hex.hex")
        high, low, index = (int(part, 16) for part in match.groups())
        return cls((high << 32) | low, index)


ZERO = Sequence(0, 0)
