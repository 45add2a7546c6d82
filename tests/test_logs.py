"""Service logs: one logfmt line per record, on the process's stderr as it is when written."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest

from changebroker import logs


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, service = root.handlers[:], root.level, logs._service
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._service = service


@pytest.mark.usefixtures("restored_logging")
def test_a_line_goes_to_stderr_as_it_is_when_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test runner captures each test's stderr and closes the capture after the test: a
    # service configured during one test and still running in the next must not write there.
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("logs-test")
    first.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)

    logging.getLogger("changebroker.test").warning("after the swap", extra=logs.fields(rows=3))

    (line,) = now.getvalue().splitlines()
    assert " level=warning service=logs-test logger=changebroker.test " in line
    assert line.endswith(' msg="after the swap" rows=3')
