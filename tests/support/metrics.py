"""Scrape a service's ``/metrics`` and read it with prometheus_client's own parser."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from changebroker.metrics import PROMETHEUS_ACCEPT


@dataclass(frozen=True)
class Scrape:
    families: dict[str, str]  # family name -> type (counter names without ``_total``)
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float | None:
        """The sample ``name`` with exactly ``labels``, or None."""
        return self.samples.get((name, frozenset(labels.items())))

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
        wanted = set(labels.items())
        return sum(v for (n, found), v in self.samples.items() if n == name and wanted <= found)

    def names(self) -> set[str]:
        """Every sample name the families declare, with or without samples yet (a labelled
        counter has none until its first increment)."""
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
        found = {sample for sample, _ in self.samples}
        for family, kind in self.families.items():
            found |= {family + suffix for suffix in suffixes.get(kind, ("",))}
        return found

    def has(self, name: str) -> bool:
        """A sample named ``name`` exists (any labels)."""
        return any(n == name for n, _ in self.samples)


def scrape(url: str) -> Scrape:
    """``url`` is the whole /metrics URL; fails unless it answers 200 in Prometheus text."""
    response = httpx.get(url, timeout=30, headers={"accept": PROMETHEUS_ACCEPT})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    families: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(response.text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(families, samples)
