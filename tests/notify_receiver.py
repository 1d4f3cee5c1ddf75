"""A loopback HTTP receiver for notifications: Apprise's `json://127.0.0.1:PORT/hook` posts each message here.

`status` is what it answers (200, or 500 to play a failing service); `hold()` keeps every request waiting
until `release()` (a service that hangs); `messages` are the JSON bodies that were answered 200, and `requests`
their method and path too. `answers` maps a path's start to the body a service's API answers there (Slack's
webhook says `ok`, Telegram and Matrix answer JSON), for plugins pointed at the receiver instead of the service.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.answers: dict[str, bytes] = {}
        self.attempts = 0
        self.status = 200
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver._open.wait(30)
                with receiver._lock:
                    receiver.attempts += 1
                    status = receiver.status
                    if status == 200:
                        receiver.messages.append(json.loads(body or b"{}"))
                        receiver.requests.append((self.command, self.path, receiver.messages[-1]))
                    answer = next((a for start, a in receiver.answers.items() if self.path.startswith(start)), b"{}")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_PUT = do_POST  # noqa: N815 (Matrix sends its messages with PUT)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"json://127.0.0.1:{self.port}/hook"
        # A short poll: shutdown() waits for the loop to look, 0.5 s by default, at every test's end.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def texts(self) -> list[str]:
        with self._lock:
            return [f"{m.get('title', '')}\n{m.get('message', '')}" for m in self.messages]

    def stop(self) -> None:
        self._open.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A json:// URL on a loopback port nobody listens on (a dead receiver)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"json://127.0.0.1:{port}/hook"
