"""The whole local stack over TLS with a self-signed CA and tokens, two broker processes behind
HAProxy: `up --demo` works (the bridge, the replay and the console send the client token;
HAProxy passes TLS through and checks the brokers over TLS), plain HTTP and no token do not."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from changebroker.services import SERVICE_MODULES
from changebroker.stack.processes import pid_alive
from tests.support import cli
from tests.support.credentials import self_signed_ca, tokens_file

SCOPES = [
    "nakadi.config.write",
    "nakadi.event_type.write",
    "nakadi.event_stream.write",
    "nakadi.event_stream.read",
    "registry.read",
    "registry.write",
    "changeserver.read",
    "console.read",
    "console.admin",
]


# The whole stack, its demo and a Spark replay: minutes on a loaded machine.
@pytest.mark.timeout(900)
def test_up_demo_over_tls_with_a_self_signed_ca_and_tokens(tmp_path: Path) -> None:
    certificates = self_signed_ca(tmp_path)
    env = cli.stack_env(tmp_path / "state")
    # Every flag has its variable: the stack's TLS through the environment, as a container has.
    env["CHANGEBROKER_TLS_CERT"] = str(certificates.cert)
    env["CHANGEBROKER_TLS_KEY"] = str(certificates.key)
    env["CHANGEBROKER_TLS_CA"] = str(certificates.ca)
    env["CHANGEBROKER_AUTH"] = "tokens"
    env["CHANGEBROKER_AUTH_TOKENS"] = str(
        tokens_file(tmp_path / "tokens.json", {"stack-token": ("stack", SCOPES)})
    )
    env["CHANGEBROKER_CLIENT_TOKEN"] = "stack-token"
    # The replay reads the timelines of the bridge's event types, which only the broker's
    # administrators' readers may (as in Nakadi): the stack's own token is one.
    env["CHANGEBROKER_ADMINS"] = "stack"
    env["CHANGEBROKER_BROKER_PROCESSES"] = "2"
    token = {"authorization": "Bearer stack-token"}
    try:
        cli.up_demo(env)
        status = cli.status(env)
        brokers = ["broker-1", "broker-2", "loadbalancer"]
        for name in [*(n for n in SERVICE_MODULES if n != "broker"), *brokers]:
            assert pid_alive(status[name]["pid"]), f"{name} is not running after up"
            assert status[name]["url"].startswith("https://127.0.0.1:")
        assert status["broker-1"]["ready"] and status["broker-2"]["ready"], status
        # The bridge read the changeserver and wrote to the broker over verified TLS.
        assert status["bridge"]["status"]["position"], status["bridge"]
        trusted = ssl.create_default_context(cafile=str(certificates.ca))
        for name in ("registry", "loadbalancer", "broker-1", "bridge", "console"):
            url = status[name]["url"]
            assert httpx.get(f"{url}/health", verify=trusted, timeout=30).status_code == 200
            with pytest.raises(httpx.ConnectError):  # not trusted without the CA
                httpx.get(f"{url}/health", timeout=30)
            plain = url.replace("https://", "http://")
            with pytest.raises(httpx.HTTPError):  # no plain HTTP beside it
                httpx.get(f"{plain}/health", timeout=30)
        # No token, no answer; the console asks its operators to sign in.
        with httpx.Client(verify=trusted, timeout=30) as client:
            broker, console = status["loadbalancer"]["url"], status["console"]["url"]
            assert client.get(f"{broker}/event-types").status_code == 401
            assert client.get(f"{broker}/event-types", headers=token).status_code == 200
            assert client.get(f"{console}/").status_code == 401
            # Signed in, it sees every service through its own token.
            overview = client.get(f"{console}/", headers=token)
            assert overview.status_code == 200
            assert overview.text.count('class="stage ok"') == 5, overview.text
    finally:
        purged = cli.changebroker(env, "down", "--purge")
    assert purged.returncode == 0, purged.stderr
