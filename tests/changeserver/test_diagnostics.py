"""GET /diagnostics/stack: where transicator serves it, and on the management port."""

from __future__ import annotations

import httpx

from tests.support.changeserver import MakeServer


def test_diagnostics_stack_beside_changes_and_on_the_management_port(
    make_server: MakeServer,
) -> None:
    cs = make_server(separate_management=True, prefix="/v1")
    for url in (f"{cs.url}/v1/diagnostics/stack", f"{cs.mgmt_url}/diagnostics/stack"):
        response = httpx.get(url)
        assert response.status_code == 200, url
        assert response.headers["content-type"].startswith("text/plain")
        assert "thread replication" in response.text  # the replication thread's stack
        assert "Stack for <Task" in response.text  # and the event loop's tasks
