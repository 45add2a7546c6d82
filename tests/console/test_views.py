"""The console's pure parts: the schema diff, the lag chart, a bridge unit's state."""

from __future__ import annotations

import json
from types import SimpleNamespace

from changebroker.console import diff
from changebroker.console.bridge_pages import unit_of
from changebroker.console.context import templates
from changebroker.console.history import Series, compact, svg_chart

V1 = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
V2 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_the_diff_names_added_and_removed_fields_and_pairs_lines() -> None:
    added, removed = diff.field_changes(json.dumps(V1), V2)
    assert added == ["address", "address.city"]
    assert removed == ["name"]
    rows = diff.side_by_side(V1, V2)
    assert {r.kind for r in rows} >= {"equal", "added"}
    assert any('"address"' in r.right and r.kind in ("added", "changed") for r in rows)
    assert any('"name"' in r.left and r.kind in ("removed", "changed") for r in rows)
    # Every line of both sides, in order, once.
    assert [r.left for r in rows if r.left] == diff.pretty(V1).splitlines()
    assert [r.right for r in rows if r.right] == diff.pretty(V2).splitlines()


def test_a_schema_that_is_not_json_diffs_as_text() -> None:
    assert diff.fields("record Foo {") == set()
    rows = diff.side_by_side("a\nb", "a\nc")
    assert [(r.left, r.right, r.kind) for r in rows] == [("a", "a", "equal"), ("b", "c", "changed")]


def test_samples_older_than_kept_are_dropped_and_the_rate_is_per_second() -> None:
    series = Series(keep=60)
    series.add(0, at=1000)
    series.add(100, at=1010)
    assert series.rate() == 10
    series.add(100, at=1100)
    assert [t for t, _ in series.points] == [1100]
    assert series.rate() is None


def test_the_chart_has_a_text_alternative_and_says_when_it_has_too_few_samples() -> None:
    series = Series(keep=3600)
    assert "not enough samples" in svg_chart(series, title="Lag", unit="events")
    series.add(5, at=0)
    series.add(2_500_000, at=120)
    chart = svg_chart(series, title="Lag", unit="events")
    assert 'role="img"' in chart and "newest 2.5e+06 events" in chart
    assert ">2.5M<" in chart and "-2 min" in chart
    assert compact(999) == "999" and compact(1500) == "1.5k"


def test_a_bridge_unit_is_running_snapshotting_or_stopped() -> None:
    running = unit_of("public.a", {"event_type": "x.a", "position": "0.1.0", "lag_bytes": 3})
    assert (running.state, running.lag_bytes, running.snapshot) == ("running", 3, None)
    stopped = unit_of("public.b", {"stopped": "type-narrowed at name"})
    assert (stopped.state, stopped.reason) == ("stopped", "type-narrowed at name")
    # The shape a bridge with per-table snapshots reports: progress while it runs.
    snapshot = {"state": "running", "rows_read": 1200, "estimated_rows": 5000}
    snapshotting = unit_of("public.c", {"snapshot": snapshot, "stopped": None})
    assert snapshotting.state == "snapshotting" and snapshotting.snapshot == snapshot
    assert snapshotting.snapshot_progress == "1,200 of ~5,000 rows (24%)"
    done = unit_of("public.d", {"snapshot": {**snapshot, "state": "done"}})
    assert done.state == "running"


def test_the_bridge_page_draws_a_snapshot_in_progress() -> None:
    snapshot = {
        "state": "running",
        "rows_read": 1200,
        "estimated_rows": 5000,
        "started_at": "2026-11-23T15:00:00Z",
        "finished_at": None,
    }
    html = (
        templates()
        .get_template("bridge.html")
        .render(
            request=SimpleNamespace(url=SimpleNamespace(path="/bridge")),
            title="Bridge",
            status={},
            health={},
            units=[unit_of("public.c", {"snapshot": snapshot})],
            chart="",
            read_only=False,
        )
    )
    assert "snapshotting" in html
    assert '<progress max="5000" value="1200"' in html
    assert "1,200 of ~5,000 rows (24%)" in html
