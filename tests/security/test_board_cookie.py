"""The board's session cookie reaches every port of 127.0.0.1 (issue 33): a page on another port must not act with it.

Browsers scope cookies by host, not port, so a dev server an agent wrote, previewed by the person, receives the
board's cookie with every request. The attacker replays it: reads the board's pages for the CSRF token, then posts
an action; from a browser (its `Origin` or `Sec-Fetch-Site` name the other port) or as a plain HTTP client that
sends whatever headers it likes. Neither may read the token nor act, and the real board in Chromium still acts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2 as httpx
import pytest

from ..browser import chromium, needs_chromium
from ..cli_helpers import LiveDaemon, cli_json
from ..processes import wait_for
from ..test_board import board, login_link, stored_csrf  # noqa: F401  (board: fixture)

pytestmark = [pytest.mark.integration, pytest.mark.daemon]
TOKEN_LIKE = re.compile(r"\b[0-9a-f]{64}\b")


class DevServer:
    """Another port of 127.0.0.1, serving an agent's page: it keeps every Cookie header the browser sends it."""

    def __init__(self, page: str) -> None:
        self.cookies: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.cookies.append(self.headers.get("Cookie") or "")
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def dev_server() -> Iterator[DevServer]:
    server = DevServer("<!doctype html><title>my app</title><p>preview</p>")
    yield server
    server.stop()


def _cookie_name(live: LiveDaemon) -> str:
    return f"agentqueue_board_{live.base.rsplit(':', 1)[1]}"  # type: ignore[attr-defined]


def _replay(live: LiveDaemon, cookie: str, other_origin: str) -> None:
    """What the other port's owner does with the cookie; each way in must neither show the token nor act."""
    base = live.base  # type: ignore[attr-defined]
    ways = {"its page's Origin": {"Origin": other_origin},
            "same-site, no Origin": {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"},
            "a bare HTTP client": {}}
    with httpx.Client(base_url=base, follow_redirects=False) as attacker:
        attacker.cookies.set(_cookie_name(live), cookie)
        for way, headers in ways.items():
            found: set[str] = set()
            for path in ("/", "/projects/demo", "/agents"):
                page = attacker.get(path, headers=headers)
                assert page.status_code in (200, 403), (way, path, page.status_code)
                found |= set(TOKEN_LIKE.findall(page.text))
                assert 'data-csrf="' not in page.text and 'name="csrf" value="' not in page.text, (way, path)
            for guess in sorted(found) or [""]:
                for path, form in (("/orchestrator/pause", {}), ("/projects/demo/tasks",
                                                                  {"title": "Planted", "description": "SAY owned"})):
                    acted = attacker.post(path, data={**form, "csrf": guess},
                                          headers={**headers, "X-CSRF-Token": guess, "HX-Request": "true"})
                    assert acted.status_code == 403, (way, path, acted.status_code, acted.text[:200])
    assert live.call("orchestrator_control", action="status")["state"] == "running"
    assert not [t for t in cli_json(live.env, "tasks", "--all")["tasks"] if t["title"] == "Planted"]


def test_a_stolen_cookie_neither_reads_the_csrf_token_nor_acts(board: LiveDaemon,  # noqa: F811
                                                               dev_server: DevServer) -> None:
    base = board.base  # type: ignore[attr-defined]
    with httpx.Client(base_url=base, follow_redirects=False) as person:
        login = person.get(login_link(board).removeprefix(base))
        cookie = person.cookies[_cookie_name(board)]
        _replay(board, cookie, dev_server.origin)
        token = stored_csrf(login)
        # The person's own session still acts: the token is what the login answer kept, not what a page shows.
        done = person.post("/orchestrator/pause", headers={"X-CSRF-Token": token, "HX-Request": "true",
                                                           "Sec-Fetch-Site": "same-origin", "Origin": base})
        assert done.status_code == 200, done.text[:300]
    assert board.call("orchestrator_control", action="status")["state"] == "paused"


@needs_chromium()
@pytest.mark.anyio
async def test_the_cookie_reaches_another_port_in_chromium_yet_only_the_board_acts(  # noqa: F811
        board: LiveDaemon, dev_server: DevServer) -> None:
    base = board.base  # type: ignore[attr-defined]
    async with chromium() as browser:
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(login_link(board))
        await page.wait_for_url(f"{base}/")
        preview = await context.new_page()  # the person previews the agent's app in the same browser
        await preview.goto(dev_server.origin + "/")
        stolen = next(c for c in dev_server.cookies if _cookie_name(board) in c)  # the browser handed it over
        cookie = re.search(rf"{_cookie_name(board)}=([^;\s]+)", stolen).group(1)  # type: ignore[union-attr]
        # The agent's page itself posts to the board, with the browser's cookie and its own Origin.
        sent = await preview.evaluate("""async (board) => {
            try { await fetch(board + "/orchestrator/pause", {method: "POST", credentials: "include",
                                                              mode: "no-cors"}); return "sent"; }
            catch (error) { return String(error); } }""", base)
        assert sent == "sent"
        _replay(board, cookie, dev_server.origin)
        # The real board still acts: htmx sends the token the login kept.
        await page.click("text=Pause the orchestrator")
        await page.wait_for_selector("#flash .ok")
        await wait_for(lambda: board.call("orchestrator_control", action="status")["state"] == "paused", 10,
                       "the board's own pause")
