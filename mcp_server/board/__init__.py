"""The board: the queue in a browser, served by the daemon's own HTTP server (design.md "The board")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from ..services import Services
from .auth import BoardAuth
from .gate import guarded
from .live import Broadcaster
from .routes import Board, routes


def board_app(services: Services, token: str, allowed_hosts: list[str], live: Broadcaster,
              bearer_ok: Callable[[Request], bool], port: int,
              options: dict[str, Any] | None = None) -> tuple[Board, Any]:
    """The board and its ASGI app (behind Host/Origin, session and CSRF checks) for the daemon on `port`;
    `options` are the daemon's --read-only/--toolsets, which limit the board's actions as any HTTP client's."""
    auth = BoardAuth(token, port, allowed_hosts)
    board = Board(services, auth, live, bearer_ok, options or {})
    return board, guarded(routes(board), auth, bearer_ok)
