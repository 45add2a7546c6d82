"""fahrschein, Zalando's Java Nakadi client, unchanged from Maven Central, against a broker
process: create an event type, publish, subscribe, stream with commits, and resume.

``NakadiFlow.java`` is the application a fahrschein user would write; each step is a JVM of
its own, so resuming is what it is in production: a new process that subscribes again and
continues from the committed cursors. The requests are fahrschein's and the JDK's own:
``initial_cursors: []`` with ``read_from: begin``, zstd-compressed publishing,
``Upgrade: h2c`` from the JDK's HttpClient, ``batch_limit=4&max_uncommitted_events=2``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from changebroker.maven import resolve_jars
from changebroker.stack.run import broker_process
from tests.support.event_types import business_event_type
from tests.support.services import CACHE

HERE = Path(__file__).parent / "fahrschein"


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """fahrschein's jars and NakadiFlow compiled against them."""
    jars = resolve_jars(HERE / "pom.xml", CACHE / "clients" / "fahrschein")
    classes = tmp_path_factory.mktemp("fahrschein")
    path = ":".join(str(jar) for jar in jars)
    javac = shutil.which("javac")
    assert javac, "javac (a JDK) is needed: scripts/install.sh installs one"
    subprocess.run(
        [javac, "-d", str(classes), "-cp", path, str(HERE / "NakadiFlow.java")],
        check=True,
        capture_output=True,
    )
    return f"{classes}:{path}"


@pytest.fixture
def broker_url(pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> Iterator[str]:
    broker, url = broker_process(pg_dsn, kafka_bootstrap, tmp_path / "broker.log")
    broker.start()
    yield url
    broker.stop()


def flow(classpath: str, *args: str) -> list[str]:
    """One step of NakadiFlow; its output lines."""
    done = subprocess.run(
        ["java", "-cp", classpath, "NakadiFlow", *args], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_create_publish_subscribe_stream_commit_resume(
    classpath: str, broker_url: str, unique_name, tmp_path: Path
) -> None:
    name = unique_name("fahrschein")
    body = tmp_path / "event-type.json"
    body.write_text(json.dumps(business_event_type(name)))
    assert flow(classpath, "create", broker_url, name, str(body)) == ["created 201 HTTP_1_1"]
    assert flow(classpath, "publish", broker_url, name, "0", "10") == ["published 10"]

    first = flow(classpath, "consume", broker_url, name, "group", "4")
    subscription = first[0].removeprefix("subscription ")
    # batch_limit 4 with max_uncommitted_events 2: batches of two.
    assert first[1:-1] == ["batch 2", "event 0", "event 1", "batch 2", "event 2", "event 3"]
    assert first[-1].startswith("stream ended")

    resumed = flow(classpath, "consume", broker_url, name, "group", "6")
    assert resumed[0] == f"subscription {subscription}"
    events = [line.removeprefix("event ") for line in resumed if line.startswith("event ")]
    assert events == [str(n) for n in range(4, 10)]

    cursors = httpx.get(f"{broker_url}/subscriptions/{subscription}/cursors").json()["items"]
    assert [c["offset"] for c in cursors] == ["001-0001-000000000000000009"]
