"""/ready is truthful during a fault: while the changeserver's connection to Postgres is cut
it answers not ready; once the link is back it is ready again, and what was committed
meanwhile is served."""

from __future__ import annotations

import httpx
import psycopg

from changebroker.chaos.proxy import CUT, PASS, Link, Proxies
from changebroker.stack.processes import free_port, wait_until
from tests.support.changeserver import MakeServer

BOUND = 30.0  # seconds /ready has to tell, either way


def test_ready_answers_not_ready_while_postgres_is_cut_off_and_ready_after(
    make_server: MakeServer, pg_dsn: str
) -> None:
    target = int(psycopg.conninfo.conninfo_to_dict(pg_dsn)["port"])  # type: ignore[arg-type]
    proxies = Proxies([Link("postgres", free_port(), target)])
    proxies.start()
    try:
        through = psycopg.conninfo.make_conninfo(
            pg_dsn, port=str(proxies.links["postgres"].listen_port)
        )
        cs = make_server(separate_management=True, dsn=through)

        def ready() -> int:
            return httpx.get(f"{cs.mgmt_url}/ready", timeout=10).status_code

        cs.sql("INSERT INTO items VALUES (1, 'before', 's')")
        cs.wait_for(1, scope="s")
        assert ready() == 200

        proxies.set("postgres", CUT)
        wait_until(lambda: ready() == 503, timeout=BOUND, what="not ready while cut off")
        cs.sql("INSERT INTO items VALUES (2, 'during', 's')")  # straight to Postgres

        proxies.set("postgres", PASS)
        wait_until(lambda: ready() == 200, timeout=BOUND, what="ready once the link is back")
        changes = cs.wait_for(2, scope="s")["changes"]
        assert [c["newRow"]["name"]["value"] for c in changes] == ["before", "during"]
    finally:
        proxies.stop()
