"""Attacks on the walls, one module per surface (issue 33): each plays a hostile agent, repo or task."""
