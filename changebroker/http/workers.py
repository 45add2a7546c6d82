"""``--workers`` processes sharing one port, under uvicorn's supervisor, drained as one."""

from __future__ import annotations

import argparse

from uvicorn.supervisors.multiprocess import Multiprocess

from changebroker.http.limits import limits_of
from changebroker.http.serving import config
from changebroker.http.tls import tls_of


class _DrainingWorkers(Multiprocess):
    """uvicorn's supervisor of worker processes, which lets go of its copy of the listening
    socket as soon as it is told to stop: once the workers have closed theirs, connections are
    refused, as by one process, instead of queued where no worker takes them any more and
    reset at exit. The workers drain once that is so (``draining.until_nobody_listens``)."""

    def handle_int(self) -> None:
        self._close_listeners()
        super().handle_int()

    def handle_term(self) -> None:
        self._close_listeners()
        super().handle_term()

    def _close_listeners(self) -> None:
        for sock in self.sockets:
            sock.close()


def serve_workers(factory: str, args: argparse.Namespace) -> None:
    """A service's ``--workers`` processes sharing its ``--host`` and ``--port``, each serving
    the app the function ``factory`` ("module:function", which calls ``drain_in_worker``)
    makes, with the service's TLS and limit options; until SIGTERM/SIGINT, drained as
    :func:`serve` drains one."""
    server_config = config(
        factory,
        args.host,
        args.port,
        tls=tls_of(args),
        limits=limits_of(args),
        factory=True,
        workers=args.workers,
        timeout_graceful_shutdown=10,
        # A worker that does not answer its supervisor within this is killed and started
        # again; uvicorn's 5 s is shorter than a worker's start-up on a loaded machine, which
        # then never finished starting.
        timeout_worker_healthcheck=60,
    )
    _DrainingWorkers(server_config, sockets=[server_config.bind_socket()]).run()
