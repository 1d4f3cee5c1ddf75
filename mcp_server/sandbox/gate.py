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

Model routes (model_keys.py): a loopback port inside the run that the gate serves as the run's model endpoint, both
directly (`port-N.sock`) and through the proxy (`http://127.0.0.1:N/...` in absolute form). The gate reads the
request head, puts the real key where the run's placeholder is (only under the endpoint's base path), sends the
request on to the real endpoint (TLS, certificate checked, for https) and streams the answer back as it comes (SSE
unbuffered): one request per connection, `Connection: close` both ways, as the absolute-form proxy does.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from .. import paths
from .inner import splice
from .model_keys import ModelRoute, Swap, clean
from .rules import SandboxRules

log = logging.getLogger("agentqueue.sandbox")

MAX_HEAD = 64 * 1024
CONNECT_TIMEOUT = 15.0
HEAD_TIMEOUT = 10.0  # seconds for a request's whole head, from the connection's start
MAX_CONNECTIONS = 128  # open at once through one run's gate (proxy and forwards together)
resolve = socket.getaddrinfo  # the gate's resolver (a test may stand in for DNS)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
# Headers of one hop, never passed on by a model route (it sets its own Connection).
HOP_BY_HOP = ("connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
              "trailer", "upgrade", "expect", "host")
MAX_CHUNK_LINE = 4096
MAX_SCRUBBED = 1 << 20  # an error answer up to this size is searched for the real key before the run sees it


@functools.lru_cache(maxsize=1)
def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


tls_context: Callable[[], ssl.SSLContext] = _default_tls  # how a model route verifies its upstream (a test's CA)


class HeadTimeout(Exception):
    """The request head did not arrive whole within HEAD_TIMEOUT."""


def _read_head(client: socket.socket, data: bytes = b"") -> tuple[bytes, bytes] | None:
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
        self._upstreams: set[socket.socket] = set()  # a model route's connections on: shut when the run ends
        self._lock = threading.Lock()
        self._said: set[str] = set()  # the kinds of limit refusal already in the run's log (once each)
        self._routes = {route.port: route for route in rules.models}
        self._listen(self.folder / "proxy.sock", self._proxy)
        for port in rules.forwards:
            handler = (functools.partial(self._model_connection, route=self._routes[port]) if port in self._routes
                       else functools.partial(self._forward, port=port))
            self._listen(self.folder / f"port-{port}.sock", handler, port)

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

    def _request(self, client: socket.socket, port: int, pending: bytes = b""
                 ) -> tuple[str, str, str, list[str], bytes] | None:
        """A request's line and head lines, and what came after the head; None once it was answered (a 408 for a
        head that took too long, a 400 for a malformed line) or the client left."""
        try:
            got = _read_head(client, pending)
        except HeadTimeout:
            why = f"its request head did not arrive within {HEAD_TIMEOUT:g} s"
            self._once("head", "127.0.0.1", port, why + " (further refusals of this kind are not logged)")
            client.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n" + why.encode() + b"\n")
            return None
        if got is None:
            return None
        head, rest = got
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return None
        return parts[0], parts[1], parts[2], lines, rest

    def _proxy(self, client: socket.socket) -> None:
        request = self._request(client, 3128)
        if request is None:
            return
        method, target, version, lines, rest = request
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
        route = self._routes.get(port) if host.lower() in LOOPBACK_NAMES else None
        if route is not None:  # the run's model endpoint, asked for through the proxy (it honours HTTP_PROXY)
            if path is None:  # a tunnel to it (undici's proxy agent tunnels plain HTTP too): HTTP inside
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._model_connection(client, route, rest)
            else:
                self._model(client, route, method, path, version, lines[1:], rest)
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

    # -- the model route -------------------------------------------------------------------------------------
    def _refuse(self, client: socket.socket, host: str, port: int, why: str, status: str = "403 Forbidden") -> None:
        self.on_deny(host, port, why)
        body = f"AgentQueue's sandbox refused {host}:{port}: {why}.\n".encode()
        client.sendall(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n".encode()
                       + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    def _model_connection(self, client: socket.socket, route: ModelRoute, pending: bytes = b"") -> None:
        """A connection to the run's model port (or a tunnel to it): one request in origin form (or absolute form)."""
        request = self._request(client, route.port, pending)
        if request is None:
            return
        method, target, version, lines, rest = request
        if target.startswith("http://"):
            url = urlsplit(target)
            target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        self._model(client, route, method, target, version, lines[1:], rest)

    def _model(self, client: socket.socket, route: ModelRoute, method: str, target: str, version: str,
               headers: list[str], rest: bytes) -> None:
        """One request to the run's model endpoint: the placeholder swapped for the real key, sent on upstream,
        the answer streamed back."""
        path, _, query = target.partition("?")
        request = self._swapped(client, route, path, query, headers)
        if request is None:
            return
        kept, query, used, framing, expects = request
        if not self.rules.allows(route.host, route.upstream_port):
            self._refuse(client, route.host, route.upstream_port, "the model endpoint is not on this run's allowlist")
            return
        try:
            upstream = self._upstream(route)
        except (OSError, ssl.SSLError) as error:
            client.sendall(f"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n{error}\n".encode())
            return
        with self._lock:
            self._upstreams.add(upstream)
        try:
            head = "\r\n".join([f"{method} {path}{'?' if query else ''}{query} {version}",
                                 f"Host: {route.host_header}", *kept, "Connection: close", "", ""])
            if expects:
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                upstream.sendall(head.encode("latin-1"))
                _copy_body(client, upstream, framing, rest)
            except OSError:
                pass  # an upstream that answered early and closed: its answer is still read
            _copy_answer(upstream, client, used)
        finally:
            with self._lock:
                self._upstreams.discard(upstream)
            upstream.close()

    def _swapped(self, client: socket.socket, route: ModelRoute, path: str, query: str, headers: list[str]
                 ) -> tuple[list[str], str, list[bytes], tuple[str, int], bool] | None:
        """The request's headers and query with each placeholder replaced by its real value, the values used, the
        body's framing and whether it expects 100-continue; None when it was refused."""
        covered = route.covers(path)
        kept: list[str] = []
        used: list[bytes] = []  # the real values this request carries: searched for in an error answer
        framing: tuple[str, int] = ("none", 0)
        expects = False
        for line in headers:
            name, sep, value = line.partition(":")
            key, value = name.strip().lower(), value.strip()
            if not sep or not key or key in HOP_BY_HOP:
                expects = expects or (key == "expect" and value.lower() == "100-continue")
                continue
            if key == "content-length" and value.isdigit() and framing[0] != "chunked":
                framing = ("length", int(value))
            if key == "transfer-encoding" and "chunked" in value.lower():
                framing = ("chunked", 0)
            swap = _swap_for(route, key, value)
            if swap is not None:
                real = self._real(client, route, swap, covered, path)
                if real is None:
                    return None
                used.append(real.encode("latin-1"))
                value = swap.prefix + real
            kept.append(f"{name.strip()}: {value}")
        pieces = []
        for piece in query.split("&") if query else []:
            param, eq, value = piece.partition("=")
            swap = next((s for s in route.swaps if s.query and s.query == param and s.placeholder == value), None)
            if swap is not None and eq:
                real = self._real(client, route, swap, covered, path)
                if real is None:
                    return None
                used += [real.encode("latin-1"), quote(real, safe="").encode("latin-1")]
                piece = f"{param}={quote(real, safe='')}"
            pieces.append(piece)
        if framing[0] == "chunked":  # chunked wins over a length, and only one of them goes on (no smuggling)
            kept = [line for line in kept if line.split(":", 1)[0].strip().lower() != "content-length"]
        return kept, "&".join(pieces), used, framing, expects

    def _real(self, client: socket.socket, route: ModelRoute, swap: Swap, covered: bool, path: str) -> str | None:
        """The real value for a placeholder this request carries; None (the request refused) when it may not have
        one: outside the endpoint's base path, or none to be had."""
        if not covered:
            self._refuse(client, route.host, route.upstream_port,
                         f"{path[:200]!r} is not under the model endpoint {route.upstream}, so no key is added to it")
            return None
        real = clean(swap.real())
        if real is None:
            self._refuse(client, route.host, route.upstream_port,
                         f"the daemon has no {swap.name} to add to this request (the person's login is unreadable)",
                         "502 Bad Gateway")
        return real

    def _upstream(self, route: ModelRoute) -> socket.socket:
        """A connection to the model endpoint the person configured (resolved here, TLS verified for https)."""
        answers = [info[4] for info in resolve(route.host, route.upstream_port, type=socket.SOCK_STREAM)]
        sock = _connect(answers)
        if route.scheme == "https":
            try:
                sock = tls_context().wrap_socket(sock, server_hostname=route.host)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(None)
        return sock

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
            for sock in [*self._open, *self._upstreams]:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _swap_for(route: ModelRoute, header: str, value: str) -> Swap | None:
    return next((s for s in route.swaps if s.header == header and value == s.prefix + s.placeholder), None)


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("closed")
    return chunk


def _copy_body(client: socket.socket, upstream: socket.socket, framing: tuple[str, int], data: bytes) -> None:
    """The request's body, as its framing says, from the client on to the upstream (streamed, never held whole)."""
    kind, length = framing
    if kind == "length":
        upstream.sendall(data[:length])
        left = length - len(data)
        while left > 0:
            chunk = _recv(client)[:left]
            upstream.sendall(chunk)
            left -= len(chunk)
    elif kind == "chunked":
        buffer = data
        while True:
            while b"\r\n" not in buffer:
                if len(buffer) > MAX_CHUNK_LINE:
                    raise ConnectionError("chunk line too long")
                buffer += _recv(client)
            line, _, buffer = buffer.partition(b"\r\n")
            size = int(line.split(b";")[0].strip() or b"0", 16)
            upstream.sendall(line + b"\r\n")
            if size == 0:
                while not (buffer.startswith(b"\r\n") or b"\r\n\r\n" in buffer):
                    if len(buffer) > MAX_CHUNK_LINE:
                        raise ConnectionError("trailers too long")
                    buffer += _recv(client)
                end = 2 if buffer.startswith(b"\r\n") else buffer.index(b"\r\n\r\n") + 4
                upstream.sendall(buffer[:end])
                return
            left = size + 2  # the data and its CRLF
            upstream.sendall(buffer[:left])
            left -= len(buffer[:left])
            buffer = buffer[size + 2:] if left == 0 else b""
            while left > 0:
                chunk = _recv(client)
                upstream.sendall(chunk[:left])
                buffer = chunk[left:]
                left -= len(chunk[:left])


def _copy_answer(upstream: socket.socket, client: socket.socket, used: list[bytes]) -> None:
    """The upstream's answer back to the run as it comes, its head told the connection closes; an error answer's
    body searched for the real key first (an API that echoes a refused key would hand it to the run)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = upstream.recv(65536)
        if not chunk:
            client.sendall(data)
            return
        data += chunk
        if len(data) > MAX_HEAD:
            client.sendall(data)
            data = b""
            break
    if data:
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        kept = [h for h in lines[1:] if h.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")]
        status = lines[0].split(b" ")
        failed = len(status) > 1 and status[1][:1] in (b"4", b"5")
        length = next((int(h.split(b":", 1)[1]) for h in kept
                       if h.split(b":", 1)[0].strip().lower() == b"content-length"
                       and h.split(b":", 1)[1].strip().isdigit()), None)
        client.sendall(b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]))
        if failed and length is not None and length <= MAX_SCRUBBED and used:
            while len(body) < length:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                body += chunk
            for real in used:
                body = body.replace(real, b"*" * len(real))  # the same length: Content-Length still holds
        if body:
            client.sendall(body)
    while chunk := upstream.recv(65536):
        client.sendall(chunk)


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
