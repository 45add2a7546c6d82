"""The whole local stack over TLS with a self-signed CA: `up --demo` works, plain HTTP does not."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import httpx
import pytest

from changebroker.services import SERVICE_MODULES
from changebroker.stack.processes import free_port, pid_alive
from changebroker.stack.state import REPO_ROOT
from tests.support import cli
from tests.support.credentials import self_signed_ca


# The whole stack, its demo and a Spark replay: minutes on a loaded machine.
@pytest.mark.timeout(900)
def test_up_demo_over_tls_with_a_self_signed_ca(tmp_path: Path) -> None:
    certificates = self_signed_ca(tmp_path)
    flags = ["PG_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "BROKER_PORT", "REGISTRY_PORT"]
    flags += ["CHANGESERVER_PORT", "CHANGESERVER_MGMT_PORT", "BRIDGE_PORT", "CONSOLE_PORT"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHANGEBROKER_")}
    env.update({f"CHANGEBROKER_{name}": str(free_port()) for name in flags})
    env["CHANGEBROKER_STATE_DIR"] = str(tmp_path / "state")
    env["CHANGEBROKER_CACHE_DIR"] = str(REPO_ROOT / ".state" / "cache")
    # Every flag has its variable: the stack's TLS through the environment, as a container has.
    env["CHANGEBROKER_TLS_CERT"] = str(certificates.cert)
    env["CHANGEBROKER_TLS_KEY"] = str(certificates.key)
    env["CHANGEBROKER_TLS_CA"] = str(certificates.ca)
    try:
        cli.up_demo(env)
        status = cli.status(env)
        for name in SERVICE_MODULES:
            assert pid_alive(status[name]["pid"]), f"{name} is not running after up"
            assert status[name]["url"].startswith("https://127.0.0.1:")
        # The bridge read the changeserver and wrote to the broker over verified TLS.
        assert status["bridge"]["status"]["position"], status["bridge"]
        trusted = ssl.create_default_context(cafile=str(certificates.ca))
        for name in ("registry", "broker", "bridge", "console"):
            url = status[name]["url"]
            assert httpx.get(f"{url}/health", verify=trusted, timeout=30).status_code == 200
            with pytest.raises(httpx.ConnectError):  # not trusted without the CA
                httpx.get(f"{url}/health", timeout=30)
            plain = url.replace("https://", "http://")
            with pytest.raises(httpx.HTTPError):  # no plain HTTP beside it
                httpx.get(f"{plain}/health", timeout=30)
    finally:
        purged = cli.changebroker(env, "down", "--purge")
    assert purged.returncode == 0, purged.stderr
