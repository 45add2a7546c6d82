"""The console with authentication on: operators sign in with a token, pages need the read
scope and actions the admin scope, and nothing but /health, /static and the sign-in page
answers without one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from changebroker.auth import AuthSettings
from changebroker.console.login import COOKIE, DEFAULT_ADMIN_SCOPE, DEFAULT_READ_SCOPE
from tests.console.test_unreachable import ACTIONS, PAGES, unreachable_console
from tests.support.console import screenshot
from tests.support.credentials import tokens_file

TOKENS = {
    "operator-token": ("operator", [DEFAULT_READ_SCOPE, DEFAULT_ADMIN_SCOPE]),
    "viewer-token": ("viewer", [DEFAULT_READ_SCOPE]),
    "stranger-token": ("stranger", ["nakadi.event_stream.read"]),
}


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    path = tokens_file(tmp_path_factory.mktemp("console-auth") / "tokens.json", TOKENS)
    authenticator = AuthSettings(mode="tokens", tokens_file=Path(path)).authenticator()
    yield from unreachable_console(authenticator=authenticator)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("path", PAGES)
def test_every_page_asks_for_a_token_first(signed: httpx.Client, path: str) -> None:
    refused = signed.get(path)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert 'name="token"' in refused.text and f'value="{path}"' in refused.text
    assert signed.get(path, headers=bearer("nonsense")).status_code == 401
    assert signed.get(path, headers=bearer("stranger-token")).status_code == 403
    assert signed.get(path, headers=bearer("viewer-token")).status_code == 200


def test_actions_need_the_admin_scope(signed: httpx.Client) -> None:
    for path in ACTIONS:
        assert signed.post(path).status_code == 401, path
        viewer = signed.post(path, headers=bearer("viewer-token"), data={"to": "begin"})
        assert viewer.status_code == 403, path
        assert DEFAULT_ADMIN_SCOPE in viewer.text
    # A viewer is shown no action; an operator is (the services themselves do not answer).
    assert (
        "publishing is off"
        in signed.get("/event-types/orders", headers=bearer("viewer-token")).text
    )
    operator = signed.get("/event-types/orders", headers=bearer("operator-token")).text
    assert 'action="/event-types/orders/publish"' in operator


def test_an_action_is_audited_with_the_operator_who_took_it(
    signed: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="changebroker.audit"):
        # The changeserver does not answer: the action is tried, and not done.
        answer = signed.post("/changeserver/markdown", headers=bearer("operator-token"))
    assert answer.status_code == 502
    lines = [r for r in caplog.records if r.getMessage() == "console action"]
    assert [r.fields for r in lines] == [  # type: ignore[attr-defined]
        {"sub": "operator", "resource": "/changeserver/markdown", "status": 502}
    ]


def test_health_static_and_the_sign_in_page_stay_open(signed: httpx.Client) -> None:
    assert signed.get("/health").status_code == 200
    assert signed.get("/static/console.css").status_code == 200
    assert signed.get("/login").status_code == 200
    # A bad token or one without the read scope is refused at the form, and no cookie is set.
    for token, status in (("nonsense", 401), ("stranger-token", 403)):
        answer = signed.post("/login", data={"token": token, "next": "/"})
        assert answer.status_code == status and COOKIE not in answer.cookies
    # After signing in, only this console's own pages: never another site.
    answer = signed.post("/login", data={"token": "viewer-token", "next": "//elsewhere.example/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    assert answer.cookies[COOKIE] == "viewer-token"
    signed.cookies.clear()


def test_an_operator_signs_in_acts_and_signs_out_in_a_browser(
    signed: httpx.Client, page: Page
) -> None:
    base = str(signed.base_url).rstrip("/")
    page.goto(f"{base}/changeserver/markdown")
    page.get_by_label("Token").fill("operator-token")
    page.get_by_role("button", name="Sign in").click()
    # Back where the operator was going, signed in, with the action offered.
    expect(page).to_have_url(f"{base}/changeserver/markdown")
    expect(page.locator(".signed-in")).to_contain_text("operator")
    expect(page.get_by_role("button", name="Mark the changeserver down")).to_be_visible()
    screenshot(page, "signed-in")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{base}/login")
    page.goto(f"{base}/")
    expect(page.get_by_label("Token")).to_be_visible()


SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self';"
    " img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none';"
    " frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
}


def test_every_answer_carries_the_security_headers(signed: httpx.Client) -> None:
    answers = [signed.get("/health"), signed.get("/static/console.css"), signed.get("/login")]
    for path in PAGES:
        for token in (None, "stranger-token", "viewer-token"):  # 401, 403, 200
            answers.append(signed.get(path, headers=bearer(token) if token else None))
    answers.append(signed.post(ACTIONS[0], headers=bearer("viewer-token")))
    assert {a.status_code for a in answers} >= {200, 401, 403}
    for answer in answers:
        assert {k: answer.headers.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS, (
            answer.request.url
        )


def test_the_console_works_under_its_policy_and_shows_in_no_frame(
    signed: httpx.Client, page: Page
) -> None:
    """Styles and the live-update script are the console's own files: the policy blocks
    nothing of it. Another page that frames the console shows nothing of it."""
    base = str(signed.base_url).rstrip("/")
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text))
    page.goto(f"{base}/login")
    page.get_by_label("Token").fill("viewer-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".signed-in")).to_contain_text("viewer")
    # The stylesheet applied, and the live updates' script ran and fetched the page again.
    expect(page.locator("nav .brand")).to_have_css("color", "rgb(255, 210, 77)")
    with page.expect_response(lambda response: response.url == f"{base}/"):
        page.get_by_label("Live updates (every 5 s)").check()
    assert [text for text in refused if "Content Security Policy" in text] == []

    # A page of no origin of the console's (about:blank) framing it: the browser refuses.
    elsewhere = page.context.new_page()
    try:
        with elsewhere.expect_console_message(lambda m: "frame-ancestors 'none'" in m.text):
            elsewhere.set_content(f'<iframe src="{base}/login" title="framed"></iframe>')
        assert [frame.url for frame in elsewhere.frames][1].startswith("chrome-error:")
    finally:
        elsewhere.close()
