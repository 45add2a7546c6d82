"""What serving an ignored ``Upgrade`` costs: requests/s of the shared uvicorn protocol.

    .venv/bin/python -m bench http_protocol

One keep-alive client posts a ~0.5 KB JSON body to a Starlette endpoint that reads it,
served by ``changebroker.http.UpgradeIgnoringProtocol`` (every service's), by uvicorn's
plain httptools protocol (the baseline: it loses the body of an ``Upgrade: h2c`` request),
and by h11 (which keeps it too). The server runs in a process of its own; no stack needed.
"""

from __future__ import annotations

import http.client
import multiprocessing
import time

from bench.report import Figure, report
from changebroker.stack.processes import answers, free_port, wait_until

REQUESTS = 3000
ROUNDS = 3
BODY = b'[{"order_number": "1", "metadata": {"eid": "x"}}]' * 10


def _serve(protocol: str, port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from changebroker.http import UpgradeIgnoringProtocol

    async def read(request: Request) -> Response:
        await request.body()
        return Response(status_code=200)

    app = Starlette(routes=[Route("/", read, methods=["GET", "POST"])])
    http_impl = UpgradeIgnoringProtocol if protocol == "ours" else protocol
    uvicorn.run(app, host="127.0.0.1", port=port, http=http_impl, log_level="warning")


def requests_per_second(protocol: str) -> float:
    """The best of ``ROUNDS`` runs of ``REQUESTS`` sequential posts."""
    port = free_port()
    server = multiprocessing.Process(target=_serve, args=(protocol, port), daemon=True)
    server.start()
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/"), timeout=30, what="the server")
        client = http.client.HTTPConnection("127.0.0.1", port)
        best = 0.0
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(REQUESTS):
                client.request("POST", "/", body=BODY)
                client.getresponse().read()
            best = max(best, REQUESTS / (time.perf_counter() - started))
        client.close()
        return best
    finally:
        server.terminate()
        server.join()


def main() -> int:
    baseline = requests_per_second("httptools")
    figures = [
        Figure(
            "http_protocol",
            f"{name}: requests/s, one keep-alive client",
            requests_per_second(protocol),
            "req/s",
            baseline,
            "uvicorn's httptools protocol",
        )
        for name, protocol in (("UpgradeIgnoringProtocol", "ours"), ("h11", "h11"))
    ]
    report(figures)
    return 0
