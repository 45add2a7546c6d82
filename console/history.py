"""Lag over time, kept in memory for the last hours, and drawn as a small inline SVG.

Samples are taken by the console's sampler in the background (every subscription's stats,
the bridge's lag), so pages read the newest values without calling every service again.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from html import escape


@dataclass
class Series:
    """(Unix time, value) pairs no older than ``keep`` seconds."""

    keep: float
    points: deque[tuple[float, float]] = field(default_factory=deque)

    def add(self, value: float, at: float | None = None) -> None:
        now = time.time() if at is None else at
        self.points.append((now, value))
        while self.points and self.points[0][0] < now - self.keep:
            self.points.popleft()

    @property
    def latest(self) -> tuple[float, float] | None:
        return self.points[-1] if self.points else None

    def rate(self) -> float | None:
        """Change per second over the last two samples (a counter's rate)."""
        if len(self.points) < 2:
            return None
        (t0, v0), (t1, v1) = self.points[-2], self.points[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else None


class History:
    """Named series, e.g. ``subscription:<id>`` or ``bridge:lag_bytes``."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep = keep_seconds
        self._series: dict[str, Series] = {}

    def add(self, name: str, value: float, at: float | None = None) -> None:
        self._series.setdefault(name, Series(self.keep)).add(value, at)

    def get(self, name: str) -> Series:
        return self._series.get(name) or Series(self.keep)


def compact(value: float) -> str:
    """``39719400`` -> ``39.7M``: an axis label that fits beside the chart."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:g}"


def svg_chart(series: Series, *, title: str, unit: str, width: int = 600, height: int = 140) -> str:
    """A line chart of ``series`` as inline SVG, with a text alternative for screen readers."""
    points = list(series.points)
    label = escape(title)
    if len(points) < 2:
        return (
            f'<p class="muted">{label}: not enough samples yet'
            f" ({len(points)} so far; the console samples in the background).</p>"
        )
    pad = 56
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return pad + (t - t0) / span * (width - 2 * pad)

    def y(v: float) -> float:
        return height - pad / 2 - v / top * (height - pad)

    path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    newest = points[-1][1]
    minutes = span / 60
    since = f"-{minutes:.0f} min" if minutes >= 1 else f"-{span:.0f} s"
    summary = (
        f"{title}: {len(points)} samples over {minutes:.0f} min, newest {newest:g} {unit},"
        f" highest {top:g} {unit}"
    )
    return (
        f'<svg class="chart" role="img" aria-label="{escape(summary)}" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>{escape(summary)}</title>"
        f'<line x1="{pad}" y1="{y(0):.1f}" x2="{width - pad}" y2="{y(0):.1f}" class="axis"/>'
        f'<text x="{pad}" y="12" class="caption">{label} ({escape(unit)})</text>'
        f'<text x="2" y="{y(top) + 4:.1f}" class="tick">{compact(top)}</text>'
        f'<text x="2" y="{y(0):.1f}" class="tick">0</text>'
        f'<text x="{pad}" y="{height - 2}" class="tick">{since}</text>'
        f'<text x="{width - pad}" y="{height - 2}" class="tick" text-anchor="end">now</text>'
        f'<polyline points="{path}" class="line"/></svg>'
    )
