"""The loopback server the model-API mocks share: a thread, a free port, a record of every request.

A mock subclasses `LoopbackMock`, sets `handler` (its BaseHTTPRequestHandler, which reaches the mock
as `self.server.mock`) and `name`, and gives `base_url`.
"""

from __future__ import annotations

import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    mock: LoopbackMock


class LoopbackMock:
    handler: ClassVar[type[BaseHTTPRequestHandler]]
    name: ClassVar[str] = "mock"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._log: list[tuple[str, str]] = []
        self._headers: list[dict[str, str]] = []  # each request's headers (names lower case), in arrival order
        self._steps: list[str] = []
        self._ids = itertools.count(1)
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._server = LoopbackServer((self.host, self.port), self.handler)
        self._server.mock = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Parsed JSON bodies of every POST, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def log(self) -> list[tuple[str, str]]:
        """(method, path) of every request, GETs included."""
        with self._lock:
            return list(self._log)

    @property
    def steps_sent(self) -> list[str]:
        """The usage keys of every answered step, in order."""
        with self._lock:
            return list(self._steps)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of every request (names lower case), in arrival order: what credential each one carried."""
        with self._lock:
            return list(self._headers)

    def _record(self, method: str, path: str, body: dict[str, Any] | None,
                headers: Any = None) -> None:
        with self._lock:
            self._log.append((method, path))
            self._headers.append({k.lower(): v for k, v in (headers or {}).items()})
            if body is not None:
                self._requests.append(body)

    def _sent(self, step: str) -> None:
        with self._lock:
            self._steps.append(step)
