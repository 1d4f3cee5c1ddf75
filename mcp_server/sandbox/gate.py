"""The host side of a sandboxed run's network: an allowlisting HTTP proxy and loopback forwards.

A run in its own network namespace has no route out. What it may reach comes through Unix sockets in
a private bridge folder that the sandbox shows it: `proxy.sock` (an HTTP proxy that takes CONNECT and
absolute-form requests, and lets through only the hosts on the run's allowlist) and one `port-N.sock`
per allowed loopback port (a local model endpoint). Every refusal is reported to `on_deny`, so it shows
in the task log, the audit log and get_task. A direct socket to anything else fails inside the sandbox.

Limits (issue 33): a run has at most MAX_CONNECTIONS open at once (one more gets a 503 at once, not a thread); a
request head must arrive whole within HEAD_TIMEOUT (else 408 and the connection is closed); and a name is
resolved here, once, and refused when an answer is loopback, link-local, private or otherwise not global, unless
the allowlist entry that let it through names that host or address literally (`127.0.0.1:8080`, `localhost:11434`,
never `*.example.com`). The connection goes to the address that was checked, so a second answer cannot differ.
"""

from __future__ import annotations

import ipaddress
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from .. import paths
from .inner import splice
from .rules import SandboxRules

log = logging.getLogger("agentqueue.sandbox")

MAX_HEAD = 64 * 1024
CONNECT_TIMEOUT = 15.0
HEAD_TIMEOUT = 10.0  # seconds for a request's whole head, from the connection's start
MAX_CONNECTIONS = 128  # open at once through one run's gate (proxy and forwards together)
resolve = socket.getaddrinfo  # the gate's resolver (a test may stand in for DNS)


class HeadTimeout(Exception):
    """The request head did not arrive whole within HEAD_TIMEOUT."""


def _read_head(client: socket.socket) -> tuple[bytes, bytes] | None:
    data = b""
    deadline = time.monotonic() + HEAD_TIMEOUT
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise HeadTimeout
        client.settimeout(left)
        try:
            chunk = client.recv(65536)
        except TimeoutError:
            raise HeadTimeout from None
        if not chunk:
            return None
        data += chunk
    client.settimeout(None)
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _not_global(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global


class NetworkGate:
    """The bridge folder and its listeners for one run; `close()` ends them (and every open connection)."""

    def __init__(self, rules: SandboxRules, on_deny: Callable[[str, int, str], None],
                 also_allows: Callable[[str, int], bool] | None = None) -> None:
        self.rules = rules
        self.on_deny = on_deny
        self.also_allows = also_allows  # asked at connect time: a rule a person added mid-run counts at once
        # Short and private: AF_UNIX paths are limited to ~107 bytes, and nobody else may connect here.
        self.folder = Path(tempfile.mkdtemp(prefix="sb-", dir=paths.runtime_dir()))
        self._listeners: list[socket.socket] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._said: set[str] = set()  # the kinds of limit refusal already in the run's log (once each)
        self._listen(self.folder / "proxy.sock", self._proxy)
        for port in rules.forwards:
            self._listen(self.folder / f"port-{port}.sock", lambda client, port=port: self._forward(client, port),
                         port)

    def _listen(self, path: Path, handler: Callable[[socket.socket], None], port: int = 3128) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(64)
        self._listeners.append(listener)

        def accept() -> None:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                with self._lock:
                    full = len(self._open) >= MAX_CONNECTIONS
                    if not full:
                        self._open.add(client)
                if full:
                    self._refuse_over_cap(client, port)
                    continue
                threading.Thread(target=self._handle, args=(handler, client), daemon=True).start()
        threading.Thread(target=accept, daemon=True, name=f"sandbox-gate {path.name}").start()

    def _once(self, kind: str, host: str, port: int, why: str) -> None:
        """A limit's refusal in the run's log, the first time of its kind (the rest are alike)."""
        with self._lock:
            first = kind not in self._said
            self._said.add(kind)
        if first:
            self.on_deny(host, port, why)

    def _refuse_over_cap(self, client: socket.socket, port: int) -> None:
        why = f"{MAX_CONNECTIONS} connections of this run are open already, the most one run may have"
        self._once("cap", "127.0.0.1", port, why + " (further refusals of this kind are not logged)")
        body = f"AgentQueue's sandbox refused this connection: {why}.\n".encode()
        try:
            client.settimeout(1.0)
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        except OSError:
            pass
        finally:
            client.close()

    def _handle(self, handler: Callable[[socket.socket], None], client: socket.socket) -> None:
        try:
            handler(client)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(client)
            client.close()

    def _forward(self, client: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
        except OSError:
            return
        upstream.settimeout(None)
        with upstream:
            splice(client, upstream)

    def _proxy(self, client: socket.socket) -> None:
        try:
            got = _read_head(client)
        except HeadTimeout:
            why = f"its request head did not arrive within {HEAD_TIMEOUT:g} s"
            self._once("head", "127.0.0.1", 3128, why + " (further refusals of this kind are not logged)")
            client.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n" + why.encode() + b"\n")
            return
        if got is None:
            return
        head, rest = got
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            host = host.strip("[]")
            path = None
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                client.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                return
            host, port_text = url.hostname, str(url.port or 80)
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        try:
            port = int(port_text)
        except ValueError:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        if not self.rules.allows(host, port) and not (self.also_allows and self.also_allows(host, port)):
            self.on_deny(host, port, "not on the sandbox's network allowlist")
            body = (f"AgentQueue's sandbox refused {host}:{port}: it is not on this run's network allowlist. "
                    "A person can add it to [sandbox] hosts.\n").encode()
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            return
        try:
            answers = [info[4] for info in resolve(host, port, type=socket.SOCK_STREAM)]
        except OSError as error:
            client.sendall(f"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n{error}\n".encode())
            return
        inner = [str(a[0]) for a in answers if _not_global(str(a[0]))]
        if inner and not self._names_literally(host, port):
            why = (f"it resolves to {inner[0]}, a loopback, link-local or private address, and no allowlist entry "
                   "names that host or address literally")
            self.on_deny(host, port, why)
            body = f"AgentQueue's sandbox refused {host}:{port}: {why}.\n".encode()
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            return
        try:
            upstream = _connect(answers)
        except OSError as error:
            client.sendall(f"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n{error}\n".encode())
            return
        upstream.settimeout(None)
        with upstream:
            if path is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # absolute-form: passed on in origin-form, one request per connection
                headers = [h for h in lines[1:] if not h.lower().startswith(("proxy-", "connection:"))]
                upstream.sendall("\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
                                 .encode("latin-1") + rest)
                rest = b""
            if rest:
                upstream.sendall(rest)
            splice(client, upstream)

    def _names_literally(self, host: str, port: int) -> bool:
        """Whether an allowlist entry names this host (or address) itself, not through a wildcard."""
        return any(not e.host.startswith("*.") and e.allows(host, port) for e in self.rules.endpoints)

    def close(self) -> None:
        for listener in self._listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
            try:
                listener.close()
            except OSError:
                pass
        with self._lock:
            for sock in list(self._open):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _connect(answers: list[tuple]) -> socket.socket:  # type: ignore[type-arg]
    """A connection to the first of the checked addresses that answers (never resolved a second time)."""
    error: OSError = OSError("no address")
    for address in answers:
        family = socket.AF_INET6 if ":" in str(address[0]) else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect(address)
            return sock
        except OSError as caught:
            sock.close()
            error = caught
    raise error
