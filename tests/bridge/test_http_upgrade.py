"""The bridge's endpoints answer the JDK's ``Upgrade: h2c`` requests as HTTP/1.1, body and all
(the other services: ``tests/test_http_upgrade.py``)."""

from __future__ import annotations

from tests.support.bridge_stack import Stack
from tests.support.raw_http import jdk_exchange


def test_bridge_process(stack: Stack) -> None:
    process = stack.bridge_process().start()
    try:
        refused, after, again, after_again = jdk_exchange(
            stack.bridge_url, "POST", "/units/jdk/resume", {"event_type": "x"}, then="/health"
        )
        assert refused.status == 404 and again.status == 404, (refused, again)
        assert refused.json() == {"detail": "jdk is not stopped"}
        assert after.status == 200 and after_again.status == 200, (after, after_again)
    finally:
        process.stop()
