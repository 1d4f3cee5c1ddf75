"""The process helpers see what a person sees: a test that waits for text on a pseudo-terminal waits for the screen,
not for the bytes that drew it."""

from __future__ import annotations

import os
import sys

from .processes import Terminal

# A redraw that only sends what changed: "Allow", a cursor move over the space already on the screen, then "it?".
REDRAW = r"import sys; sys.stdout.write('Allow x?\r\x1b[6Cit?\n'); sys.stdout.flush()"


def test_text_a_redraw_sends_in_pieces_is_seen_on_the_screen() -> None:
    with Terminal([sys.executable, "-c", REDRAW], dict(os.environ)) as terminal:
        assert terminal.shows("Allow it?", 10), terminal.lines[:2]
        assert b"Allow it?" not in terminal.seen  # the bytes never say it, so a byte match would have waited forever
        assert not terminal.shows("Allow x?", 0.5)  # what the redraw covered is gone
