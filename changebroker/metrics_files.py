"""Every worker's values from prometheus_client's multiprocess directory, as Prometheus text,
with the numbers ``MultiProcessCollector`` gives but a fraction of its work per scrape.

``MultiProcessCollector`` parses every entry's JSON key, builds a sample per worker, merges
them and formats each line anew on every scrape: 40 ms of CPU for 1,000 event types, taken
from the worker that also publishes. Yet a worker's file only ever grows: an entry (key,
value, timestamp) is appended once and afterwards only its value changes in place. So each
file is parsed once, as far as it is used, and later only its new entries; a scrape reads the
values at their known places and adds them into series whose text (the name and labels, as
prometheus_client formats them) was made when the series first appeared.

The file format is prometheus_client's ``mmap_dict``: a 4-byte used length, 4 bytes of
padding, then entries of a 4-byte key length, the UTF-8 JSON key ``[family, sample name,
labels, help]`` padded to 8 bytes, and two doubles (value, timestamp). File names are
``<type>_<pid>.db``, or ``gauge_<mode>_<pid>.db``; merged as ``MultiProcessCollector`` merges.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

_INT = struct.Struct("i")
_TWO_DOUBLES = struct.Struct("dd")
_HEADER = 8  # used length and padding

# Gauge modes whose workers' values make one sample (the rest keep a ``pid`` label).
_SUM = {"sum", "livesum"}
_MIN = {"min", "livemin"}
_MAX = {"max", "livemax"}
_RECENT = {"mostrecent", "livemostrecent"}

Labels = tuple[tuple[str, str], ...]


@dataclass
class _Family:
    name: str
    type: str
    header: str  # "# HELP ...\n# TYPE ...\n"
    gauge_mode: str = ""
    series: dict[tuple[str, Labels], _Series] = field(default_factory=dict)


@dataclass
class _Series:
    """One merged sample (or one histogram bucket) of a family."""

    family: _Family
    name: str
    labels: Labels  # without ``le`` for a bucket
    prefix: str  # "name{labels} "
    le: float | None = None  # a histogram bucket's upper bound
    value: float = 0.0
    timestamp: float = 0.0
    seen: bool = False  # given a value in this scrape


class _File:
    """One worker's file: its entries parsed as far as it was used at the last read."""

    def __init__(self, path: Path, families: _Families) -> None:
        parts = path.stem.split("_")
        self.path = path
        self.type = parts[0]
        self.gauge_mode = parts[1] if self.type == "gauge" else ""
        self.pid = parts[-1]
        self.families = families
        self.used = _HEADER
        self.entries: list[tuple[int, _Series]] = []  # (where the value is, its series)

    def read(self) -> Iterator[tuple[_Series, float, float]]:
        """(series, value, timestamp) of every entry now; FileNotFoundError when it is gone."""
        with open(self.path, "rb") as file:
            data = file.read(_HEADER)
            used = _INT.unpack_from(data, 0)[0] if len(data) == _HEADER else 0
            data += file.read(max(used - _HEADER, 0))
        if used > self.used:
            self._parse(data, used)
        for position, series in self.entries:
            value, timestamp = _TWO_DOUBLES.unpack_from(data, position)
            yield series, value, timestamp

    def _parse(self, data: bytes, used: int) -> None:
        position = self.used
        while position < used:
            length = _INT.unpack_from(data, position)[0]
            if position + 4 + length > used:
                raise RuntimeError(f"{self.path}: an entry runs past the used length")
            key = data[position + 4 : position + 4 + length].decode()
            position += 4 + length + (8 - (length + 4) % 8)
            self.entries.append((position, self.families.series_of(self, key)))
            position += _TWO_DOUBLES.size
        self.used = used


class _Families:
    """Every family and series met so far, in the order first met."""

    def __init__(self) -> None:
        self.by_name: dict[str, _Family] = {}

    def series_of(self, file: _File, key: str) -> _Series:
        family_name, name, label_map, help_text = json.loads(key)
        family = self.by_name.get(family_name)
        if family is None:
            family = _Family(family_name, file.type, _header(family_name, file.type, help_text))
            family.gauge_mode = file.gauge_mode
            self.by_name[family_name] = family
        labels: Labels = tuple(sorted(label_map.items()))
        le = None
        if file.type == "histogram" and "le" in label_map:
            le = float(label_map["le"])
            labels = tuple(item for item in labels if item[0] != "le")
        elif file.type == "gauge" and not _merged(file.gauge_mode):
            labels = (*labels, ("pid", file.pid))
        lookup = (name if le is None else f"{name}\0{le!r}", labels)
        series = family.series.get(lookup)
        if series is None:
            shown = labels if le is None else (*labels, ("le", floatToGoString(le)))
            series = _Series(family, name, labels, _prefix(name, shown), le)
            family.series[lookup] = series
        return series


class WorkerFiles:
    """The multiprocess directory's families as text; keep one for the process's life."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.families = _Families()
        self.files: dict[Path, _File] = {}

    def text(self) -> str:
        for family in self.families.by_name.values():
            for series in family.series.values():
                series.seen = False
                series.value = 0.0
                series.timestamp = 0.0
        present = set(self.directory.glob("*.db"))
        for gone in self.files.keys() - present:
            del self.files[gone]
        for path in sorted(present):
            file = self.files.get(path)
            if file is None:
                file = self.files[path] = _File(path, self.families)
            try:
                for series, value, timestamp in file.read():
                    _merge(series, value, timestamp)
            except FileNotFoundError:
                # A live gauge's file, removed as its worker ended, between the glob and now.
                del self.files[path]
        return "".join(_render(self.families.by_name.values()))


def _merged(gauge_mode: str) -> bool:
    return gauge_mode in _SUM | _MIN | _MAX | _RECENT


def _merge(series: _Series, value: float, timestamp: float) -> None:
    mode = series.family.gauge_mode
    if not series.seen:
        series.seen, series.value, series.timestamp = True, value, timestamp
    elif mode in _MIN:
        series.value = min(series.value, value)
    elif mode in _MAX:
        series.value = max(series.value, value)
    elif mode in _RECENT:
        if timestamp > series.timestamp:
            series.value, series.timestamp = value, timestamp
    else:  # counters, summaries, histograms, summed gauges (the rest keep one per pid)
        series.value += value


def _render(families: Iterable[_Family]) -> Iterator[str]:
    for family in families:
        lines: list[str] = []
        if family.type == "histogram":
            lines = list(_histogram_lines(family))
        else:
            for series in family.series.values():
                if series.seen:
                    lines.append(f"{series.prefix}{floatToGoString(series.value)}\n")
        if lines:
            yield family.header
            yield from lines


def _histogram_lines(family: _Family) -> Iterator[str]:
    """Buckets as files keep them count their own range: added up from the lowest bound,
    the last is ``_count``; then ``_sum``."""
    by_labels: dict[Labels, list[_Series]] = {}
    for series in family.series.values():
        if series.seen:
            by_labels.setdefault(series.labels, []).append(series)
    for labels, members in by_labels.items():
        buckets = sorted((s for s in members if s.le is not None), key=lambda s: s.le or 0.0)
        total = 0.0
        for bucket in buckets:
            total += bucket.value
            yield f"{bucket.prefix}{floatToGoString(total)}\n"
        if buckets:
            yield f"{_count_prefix(family, labels)}{floatToGoString(total)}\n"
        for series in members:
            if series.le is None:
                yield f"{series.prefix}{floatToGoString(series.value)}\n"


def _count_prefix(family: _Family, labels: Labels) -> str:
    name = f"{family.name}_count"
    lookup = (name, labels)
    series = family.series.get(lookup)
    if series is None:
        # Not in any file (computed from the buckets); kept unseen so it is not rendered twice.
        series = family.series[lookup] = _Series(family, name, labels, _prefix(name, labels))
    return series.prefix


class _One:
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def _header(name: str, type_: str, help_text: str) -> str:
    """HELP and TYPE lines, as prometheus_client writes them (``_total`` on a counter)."""
    return generate_latest(_One(Metric(name, help_text, type_))).decode()


def _prefix(name: str, labels: Labels) -> str:
    """``name{labels} ``, quoted as prometheus_client quotes them: its own line for a zero,
    without the zero."""
    metric = Metric(name, "", "untyped")
    metric.add_sample(name, dict(labels), 0.0)
    line = generate_latest(_One(metric)).decode().splitlines()[-1]
    return line[: -len(floatToGoString(0.0))]
