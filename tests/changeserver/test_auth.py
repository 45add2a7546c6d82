"""With authentication on: /changes and /snapshots need a token, /markdown an admin's."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from changebroker.auth import AuthSettings
from changebroker.stack.processes import wait_until
from tests.support.changeserver import Harness, MakeServer
from tests.support.credentials import tokens_file

READER = {"authorization": "Bearer reader"}
ADMIN = {"authorization": "Bearer admin"}


@pytest.fixture
def secured(make_server: MakeServer, tmp_path: Path) -> Harness:
    path = tokens_file(
        tmp_path / "tokens.json",
        {
            "reader": ("bridge", ["changeserver.read"]),
            "admin": ("ops", ["changeserver.admin"]),
            "unscoped": ("someone", []),
        },
    )
    authenticator = AuthSettings(mode="tokens", tokens_file=path).authenticator()
    return make_server(
        separate_management=True,
        authenticator=authenticator,
        snapshots_dir=tmp_path / "snapshots",
    )


def test_changes_and_snapshots_need_a_token(secured: Harness) -> None:
    secured.sql("INSERT INTO items VALUES (1, 'one', 'a')")
    for path in ("/changes?scope=a", "/snapshots?scope=a"):
        refused = httpx.get(secured.url + path)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "UNAUTHORIZED"
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = httpx.get(secured.url + path, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        unscoped = httpx.get(secured.url + path, headers={"authorization": "Bearer unscoped"})
        assert unscoped.status_code == 403
    assert httpx.get(f"{secured.url}/snapshots?scope=a", headers=READER).status_code == 404

    def served() -> bool:
        response = httpx.get(f"{secured.url}/changes?scope=a", headers=READER)
        assert response.status_code == 200, response.text
        return len(response.json()["changes"]) == 1

    wait_until(served, timeout=30, what="the change, with a token")


def test_health_and_ready_stay_open_and_markdown_needs_the_admin_scope(secured: Harness) -> None:
    mgmt = secured.mgmt_url
    assert httpx.get(f"{mgmt}/health").status_code == 200
    assert httpx.get(f"{mgmt}/ready").status_code == 200
    assert httpx.get(f"{mgmt}/markdown").status_code == 401
    forbidden = httpx.get(f"{mgmt}/markdown", headers=READER)
    assert forbidden.status_code == 403
    assert forbidden.json()["code"] == "FORBIDDEN"
    assert httpx.get(f"{mgmt}/diagnostics/stack", headers=READER).status_code == 403
    # A copy of the whole change log, for a fleet's new server: an admin's too.
    copy = {"through": "0"}
    assert httpx.get(f"{mgmt}/changelog", params=copy, headers=READER).status_code == 403
    assert httpx.get(f"{mgmt}/changelog", params=copy, headers=ADMIN).status_code == 200
    # Nothing was marked down by the refused calls.
    assert httpx.get(f"{mgmt}/ready").status_code == 200
    assert httpx.get(f"{mgmt}/markdown", headers=ADMIN).status_code == 200
    assert httpx.get(f"{mgmt}/ready").status_code == 503
