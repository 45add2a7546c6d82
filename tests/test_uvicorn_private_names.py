"""Every private uvicorn (and httptools) name ``changebroker.http`` relies on still exists.

``changebroker/http/protocol.py`` subclasses uvicorn's httptools protocol and completes its
request cycles itself; ``draining.py`` and ``workers.py`` subclass its server and its worker
supervisor. None of these is uvicorn's public API: a uvicorn release may rename any of them.
pyproject.toml pins the versions this is tested with; this test names what a new one must
keep, so an upgrade fails here, by name, before it fails in a request."""

from __future__ import annotations

import ast
import inspect
import textwrap

import httptools
import pytest
import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState
from uvicorn.supervisors.multiprocess import Multiprocess

from changebroker import http
from changebroker.http import protocol, serving


def _assigned(cls: type, *methods: str) -> set[str]:
    """The attributes ``methods`` of ``cls`` set on ``self``: an instance's attributes, read
    from uvicorn's source since building one needs a live connection."""
    names = set()
    for method in methods:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, method))))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return names


@pytest.mark.parametrize(
    "method",
    [
        # overridden, each calling uvicorn's own
        "connection_made",
        "connection_lost",
        "on_message_begin",
        "on_url",
        "on_header",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
        "data_received",
        "shutdown",
        # called
        "_unset_keepalive_if_required",
        "_unsupported_upgrade_warning",
        "send_400_response",
    ],
)
def test_the_protocol_methods_it_overrides_and_calls(method: str) -> None:
    assert callable(getattr(HttpToolsProtocol, method, None)), method
    assert method in vars(HttpToolsProtocol), f"{method} is no longer uvicorn's own"


def test_the_protocol_attributes_it_reads() -> None:
    used = {"parser", "cycle", "scope", "transport", "loop", "config", "server_state"}
    used |= {"flow", "logger", "client", "url", "headers"}
    assert used <= _assigned(HttpToolsProtocol, "__init__", "connection_made", "on_message_begin")


def test_the_request_cycle_it_completes() -> None:
    used = {"scope", "disconnected", "response_started", "response_complete", "keep_alive"}
    used |= {"message_event", "on_response", "waiting_for_100_continue"}
    assert used <= _assigned(RequestResponseCycle, "__init__")


def test_the_status_lines_and_the_default_headers() -> None:
    assert STATUS_LINE[200].startswith(b"HTTP/1.1 200 ")
    assert all(code in STATUS_LINE for code in (100, 204, 404, 408, 431, 500, 599))
    assert "default_headers" in _assigned(ServerState, "__init__")


def test_the_parser_it_builds_again() -> None:
    # Caught apart: the upgrade first (its args[0] is where the request's head ends).
    assert issubclass(httptools.HttpParserUpgrade, Exception)
    assert issubclass(httptools.HttpParserError, Exception)
    parser = httptools.HttpRequestParser(object())
    for method in ("feed_data", "should_upgrade", "get_method", "get_http_version"):
        assert callable(getattr(parser, method)), method
    parser.set_dangerous_leniencies(lenient_data_after_close=True)
    assert callable(protocol.UpgradeIgnoringProtocol._without_upgrade)


def test_the_flow_control_it_reads() -> None:
    assert "read_paused" in _assigned(FlowControl, "__init__")


def test_the_server_and_the_worker_supervisor_it_subclasses() -> None:
    assert callable(uvicorn.Server.handle_exit)
    for method in ("handle_int", "handle_term", "run"):
        assert method in vars(Multiprocess), method
    assert "sockets" in _assigned(Multiprocess, "__init__")


def test_the_settings_it_passes() -> None:
    parameters = inspect.signature(uvicorn.Config.__init__).parameters
    settings = serving.config("changebroker.http:serving", "127.0.0.1", 0)
    passed = {"http", "timeout_keep_alive", "ws", "log_config", "access_log"}
    passed |= {"ssl_certfile", "ssl_keyfile", "factory", "workers", "timeout_graceful_shutdown"}
    passed |= {"timeout_worker_healthcheck"}
    assert passed <= set(parameters)
    assert settings.http is http.UpgradeIgnoringProtocol
