"""Service logs: one logfmt line per record, on the process's stderr as it is when written, and
nothing a request carries can split or forge one."""

from __future__ import annotations

import io
import logging
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from changebroker import logs, pg
from changebroker.controls import CODES
from changebroker.stack.run import broker_process, registry_process
from tests.support import logfmt
from tests.support.credentials import tokens_file
from tests.support.raw_http import until_closed


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


def test_every_control_character_in_a_value_is_escaped_and_reads_back() -> None:
    formatter = logs.LogfmtFormatter()
    for code in CODES:
        value = f"a{chr(code)}b"
        record = logging.LogRecord("changebroker.test", logging.INFO, "", 0, value, (), None)
        record.fields = {"value": value}
        line = formatter.format(record)
        assert line.isprintable(), (code, line)
        (parsed,) = [logfmt.parse(one) for one in line.splitlines()]
        assert parsed["msg"] == parsed["value"] == value


# A CR and a line a terminal or a line-based reader would take for the broker's own.
FORGED = "%0Dts=2026-11-22T14:03:11.201Z%20level=error%20logger=changebroker.audit%20msg=forged"
# What HTTP lets a header value carry besides printable ASCII (llhttp refuses the rest).
HEADER_CONTROLS = (0x09, *range(0x80, 0xA0))


@pytest.mark.parametrize("service", ["registry", "broker"])
def test_control_characters_from_requests_reach_the_real_log_escaped(
    service: str, pg_server_dsn: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Every control character in a path, a query and X-Flow-Id, sent to the service with
    authentication on (no token: the 401's audit line names the path), comes back from its
    log, read line by line, as sent: no line split, none forged."""
    tokens = tokens_file(tmp_path / "tokens.json", {"t": ("shop", [])})
    log_path = tmp_path / f"{service}.log"
    args = ("--auth", "tokens", "--auth-tokens", str(tokens))
    resource = {"registry": "/subjects/{}", "broker": "/event-types/{}/partitions"}[service]
    with pg.scratch_database(pg_server_dsn, "t_logs") as dsn:
        if service == "registry":
            process, url = registry_process(dsn, log_path, *args)
        else:
            process, url = broker_process(dsn, kafka_bootstrap, log_path, *args)
        process.start()
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                for code in CODES:
                    sent = quote(f"c{code:04x}{chr(code)}")
                    expected = 400 if _firewalled(service, code) else 401
                    assert client.get(resource.format(sent)).status_code == expected
                    assert client.get(f"/health?probe={sent}").status_code == 200
                assert client.get(resource.format(FORGED)).status_code == 401
            for code in HEADER_CONTROLS:
                assert _flow_id_answer(url, b"h%02x%c" % (code, code)).startswith(b"HTTP/1.1 200")
        finally:
            process.stop()

    records = logfmt.lines(log_path)
    assert not [r for r in records if r["msg"] == "forged"]
    paths = {r["path"] for r in records if r["logger"] == "changebroker.access"}
    refused = {r["resource"] for r in records if r["logger"] == "changebroker.audit"}
    queries = {r.get("query") for r in records}
    flow_ids = {r.get("flow_id") for r in records}
    for code in CODES:
        value = f"c{code:04x}{chr(code)}"
        # A path the broker's firewall refuses never reaches authentication: no audit line.
        logged = paths if _firewalled(service, code) else paths & refused
        assert resource.format(value) in logged, hex(code)
        assert f"probe={value}" in queries, hex(code)
    for code in HEADER_CONTROLS:
        assert f"h{code:02x}{chr(code)}" in flow_ids, hex(code)


def _firewalled(service: str, code: int) -> bool:
    """An encoded NUL in the path: the broker refuses it before authentication, as Nakadi's
    HTTP firewall does (broker/url_firewall.py)."""
    return service == "broker" and code == 0


def _flow_id_answer(url: str, flow_id: bytes) -> bytes:
    """The answer to a GET /health whose X-Flow-Id is ``flow_id``, sent byte for byte."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(
            b"GET /health HTTP/1.1\r\nHost: x\r\nX-Flow-Id: %s\r\nConnection: close\r\n\r\n"
            % flow_id
        )
        return until_closed(conn)
