"""The board: the queue in a browser, served by the daemon's own HTTP server (issue 11)."""

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
              bearer_ok: Callable[[Request], bool]) -> tuple[Board, Any]:
    """The board and its ASGI app (behind Host/Origin, session and CSRF checks)."""
    auth = BoardAuth(token, allowed_hosts)
    board = Board(services, auth, live, bearer_ok)
    return board, guarded(routes(board), auth, bearer_ok)
