"""Sending one message to one Apprise URL, and how long to wait before trying a failed one again.

Apprise is imported on the first send, in the notifier's own thread: nothing else pays for it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from .messages import Message

log = logging.getLogger("agentqueue.notify")

RETRY_BASE_SECONDS = 15.0
RETRY_MAX_SECONDS = 900.0
MAX_ATTEMPTS = 10  # about two hours of tries; then the message is given up (and logged)
SEND_TIMEOUT = 10.0  # one try's time limit (Apprise's own connect and read limits are shorter)
_KINDS = {"permission": "warning", "failed": "failure", "blocked": "warning", "parked": "warning"}
_apprise_lock = threading.Lock()


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str | None = None


def backoff(attempts: int, base: float = RETRY_BASE_SECONDS) -> float:
    """Seconds before try number `attempts + 1`: doubling from `base`, at most RETRY_MAX_SECONDS."""
    return min(base * 2 ** max(attempts - 1, 0), RETRY_MAX_SECONDS)


def warm() -> None:
    """Import Apprise and load its plugins now (about half a second), so the first message does not wait for it."""
    try:
        with _apprise_lock:
            import apprise
        apprise.Apprise().add("json://localhost")
    except Exception:
        log.exception("could not load Apprise")


def send(url: str, message: Message) -> Outcome:
    """Deliver `message` to `url` once; never raises."""
    try:
        with _apprise_lock:  # Apprise's plugin registry loads lazily and is not thread-safe the first time
            import apprise
        sender = apprise.Apprise()
        if not sender.add(url):
            return Outcome(False, "Apprise does not understand this URL: check its scheme and form "
                                  "(https://github.com/caronc/apprise/wiki).")
        with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
            result = sender.notify(body=message.body, title=message.title, body_format="text",
                                   notify_type=_KINDS.get(message.kind, "info"), timeout=SEND_TIMEOUT)
        if result:
            return Outcome(True)
        said = [line for line in captured.getvalue().splitlines() if line.strip()]
        return Outcome(False, (said[-1] if said else "the service refused the message")[:300])
    except Exception as error:  # a plugin bug must not take the notifier down
        log.exception("notifier failed")
        return Outcome(False, f"{type(error).__name__}: {error}"[:300])
