"""Who may use the board: one-time login codes, signed session cookies, CSRF tokens, Host/Origin checks.

A session is a cookie signed with the daemon's bearer token (HMAC), not a row anywhere: it survives
a daemon restart (the page reconnects without logging in again) and rotating the token ends every
session. Login codes are the only state: single-use and short-lived, so a link in a shell history
or a browser's history is worthless a minute later.

Browsers share cookies between every port of a host, so the session is bound to the daemon's port:
the port is in the cookie's name (two local daemons never overwrite each other's cookie) and in the
signed value (another daemon's cookie, even one signed with the same token, is refused here).
`__Host-` would be the standard way, but browsers honour it only over https, and the board is http.

The port stops another daemon, not another server: the browser still sends the cookie to every port of
127.0.0.1, so a dev server an agent wrote, previewed by the person, receives it and can replay it with any
headers it likes (issue 33). So the cookie alone only reads: acting also needs the CSRF token, and no page
holds it. The login answer (reached only with a one-time code) puts it in the board origin's
localStorage, which browsers keep per scheme, host and port, and board.js sends it as `X-CSRF-Token`. The gate
also refuses an action the browser says came from another origin (`Sec-Fetch-Site`), as defence in depth.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from urllib.parse import urlsplit

COOKIE = "agentqueue_board"  # the cookie's name is COOKIE_<port>
CSRF_STORAGE_KEY = "agentqueue.csrf"  # localStorage is per origin: the port is already in its scope
CODE_TTL_S = 120.0
SESSION_TTL_S = 12 * 3600.0
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


class BoardAuth:
    def __init__(self, token: str, port: int, allowed_hosts: list[str] | None = None) -> None:
        self.port = port
        self.cookie_name = f"{COOKIE}_{port}"
        self._key = hashlib.sha256(b"agentqueue board session\0" + token.encode()).digest()
        self._codes: dict[str, float] = {}
        self._lock = threading.Lock()
        self.hosts = {*LOOPBACK_NAMES, *(h.lower() for h in allowed_hosts or [])}

    # -- one-time login codes -----------------------------------------------------------------
    def issue_code(self) -> str:
        code = secrets.token_urlsafe(24)
        with self._lock:
            now = time.monotonic()
            self._codes = {c: t for c, t in self._codes.items() if t > now}
            self._codes[code] = now + CODE_TTL_S
        return code

    def redeem(self, code: str) -> str | None:
        """A new session cookie value for a valid unused code; the code is spent either way."""
        with self._lock:
            expires = self._codes.pop(code, None)
        if expires is None or expires < time.monotonic():
            return None
        return self._sign(f"{self.port}.{int(time.time() + SESSION_TTL_S)}.{secrets.token_urlsafe(16)}")

    # -- sessions and CSRF --------------------------------------------------------------------
    def _sign(self, body: str) -> str:
        return f"{body}.{hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()}"

    def session_ok(self, cookie: str | None) -> bool:
        """Signed by this daemon's key, minted for this port, not expired."""
        if not cookie or not cookie.isascii() or cookie.count(".") != 3:
            return False
        body, _, signature = cookie.rpartition(".")
        expected = hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature, expected):
            return False
        port, expires, _nonce = body.split(".")
        return port == str(self.port) and expires.isdigit() and int(expires) > time.time()

    def csrf_token(self, cookie: str) -> str:
        """Bound to the session, and only ever in the login answer: a stolen cookie cannot yield it."""
        return hmac.new(self._key, b"csrf\0" + cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie: str, supplied: str | None) -> bool:
        # Bytes: compare_digest refuses a non-ASCII str with a TypeError (a 500), and a form can send one.
        given = (supplied or "").encode("utf-8", "surrogatepass")
        return bool(supplied) and hmac.compare_digest(self.csrf_token(cookie).encode(), given)

    # -- where the request comes from ---------------------------------------------------------
    def host_ok(self, host_header: str | None) -> bool:
        """Host must name this machine or an allowed host: a DNS-rebinding page names its own."""
        if not host_header:
            return False
        name = urlsplit(f"//{host_header}").hostname or ""
        return name.lower() in self.hosts or f"[{name.lower()}]" in self.hosts

    @staticmethod
    def fetch_site_ok(fetch_site: str | None) -> bool:
        """An action must come from the board's own pages: a browser that says another origin sent it is refused."""
        return fetch_site is None or fetch_site.lower() in ("same-origin", "none")

    def origin_ok(self, origin: str | None, host_header: str | None) -> bool:
        """A browser's Origin, when sent, must be the board's own address (same host and port)."""
        if origin is None:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() == (host_header or "").lower()
