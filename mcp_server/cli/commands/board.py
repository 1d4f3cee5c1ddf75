"""`agentqueue board`: open the board in a browser, logged in through a one-time link.

The login code never goes on a command line (`ps` shows argv to every local user, and opening a
browser runs `xdg-open <url>`): it is printed for the person, and written into a private page in
the home (0600) that redirects to the login link; only that page's path is given to the browser.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ... import paths
from ...visible import visible
from ..output import CliError
from ..parser import add_command, json_flag

WAIT_FOR_INFO_S = 15.0
LOGIN_PAGE = "board-login.html"


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "board", "open the board in a browser (starts the daemon if needed)", run,
        "Open the board: the queue, a kanban per project, agents, task pages with live logs and diffs, "
        "usage. Logs in with a one-time link (2 minutes); the session lasts 12 hours.")
    command.add_argument("--no-open", action="store_true", help="print the login link instead of opening a browser")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    import webbrowser

    base = board_address(home)
    link = login_link(home, base)
    if args.json:
        print(json.dumps({"board": base + "/", "login_url": link}))
    else:
        print(f"The board: {visible(base)}/\nLogin link (works once, for 2 minutes): {visible(link)}")
    if not args.no_open and not args.json:
        opened = webbrowser.open(login_page(home, link).as_uri())
        if not opened:
            print("No browser could be opened here: open the login link above in yours.", file=sys.stderr)
    return 0


def board_address(home: Path) -> str:
    """The running (or just started) daemon's board address, e.g. http://127.0.0.1:8765."""
    from ...daemon.relay import DaemonStartError, connect_or_start

    try:
        connect_or_start(home, progress=lambda message: print(message, file=sys.stderr)).close()
    except DaemonStartError as error:
        raise CliError(str(error)) from None
    deadline = time.monotonic() + WAIT_FOR_INFO_S
    info: dict = {}
    while time.monotonic() < deadline:
        try:
            info = json.loads(paths.daemon_info_path(home).read_text())
            break
        except (OSError, ValueError):
            time.sleep(0.05)
    url = info.get("http_url")
    if not url:
        raise CliError("The daemon runs without HTTP (started with --no-http, or its port was taken; see "
                       f"{paths.logs_dir(home) / 'agentqueue.log'}). Restart it with a free port: "
                       "`agentqueue stop`, then `agentqueue serve --port 8766`.")
    base = url.removesuffix("/mcp")
    for wildcard in ("//0.0.0.0:", "//[::]:"):
        base = base.replace(wildcard, "//127.0.0.1:")
    return base


def login_link(home: Path, base: str) -> str:
    import urllib.error
    import urllib.request

    token = os.environ.get("AGENTQUEUE_TOKEN", "").strip()
    if not token:
        try:
            token = paths.token_path(home).read_text().strip()
        except OSError:
            raise CliError(f"No token in AGENTQUEUE_TOKEN or {paths.token_path(home)}: is this the daemon's home?") from None
    request = urllib.request.Request(f"{base}/board/login-code", method="POST", data=b"",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            code = json.loads(answer.read())["code"]
    except urllib.error.HTTPError as error:
        raise CliError(f"The daemon refused the login ({error.code}): the token in this terminal is not the "
                       "daemon's (AGENTQUEUE_TOKEN differs from the one it started with?).") from None
    except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
        raise CliError(f"Could not reach the board at {base}: {error}.") from None
    return f"{base}/login?code={code}"


def login_page(home: Path, link: str) -> Path:
    """A page only this user can read that sends the browser on to `link` (the code stays off argv)."""
    import html

    page = home / LOGIN_PAGE
    partial = home / f".{LOGIN_PAGE}.{os.getpid()}"
    quoted = html.escape(link, quote=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"<!doctype html><meta charset=utf-8><meta name=referrer content=no-referrer>"
                  f"<meta http-equiv=refresh content=\"0; url={quoted}\"><title>AgentQueue board</title>"
                  f"<p>Opening the board… <a href=\"{quoted}\">continue</a> (the link works once, for 2 minutes).</p>\n")
    os.replace(partial, page)
    return page
