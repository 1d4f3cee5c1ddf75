"""The board: the queue in a browser, served by the daemon (issue 11)."""
