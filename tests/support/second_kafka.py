"""A second Kafka cluster for the tests that move event types between storages, started
through the project's own stack code (``changebroker.stack.kafka``) on free ports, beside
whatever Kafka the session's services gave."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from changebroker.stack.kafka import LocalKafka
from changebroker.stack.processes import free_port, pid_alive
from changebroker.state import StateDir
from tests.support.services import CACHE, TEST_STATE_ROOT

_PREFIX = "kafka-2-"


def _node(root: Path) -> LocalKafka:
    return LocalKafka(
        StateDir(root, cache_root=CACHE), port=free_port(), controller_port=free_port(), heap="384m"
    )


def _clean_up_killed_runs() -> None:
    """Stop and delete the second clusters of test runs killed before they cleaned up."""
    for root in TEST_STATE_ROOT.glob(f"{_PREFIX}*"):
        owner = int(root.name.removeprefix(_PREFIX).split("-")[0])
        if not pid_alive(owner):
            _node(root).stop()
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def second_kafka() -> Iterator[str]:
    """A one-node Kafka of its own while the block runs; its bootstrap servers."""
    _clean_up_killed_runs()
    root = TEST_STATE_ROOT / f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    node = _node(root)
    try:
        node.start()
        yield node.bootstrap
    finally:
        node.stop()
        shutil.rmtree(root, ignore_errors=True)
