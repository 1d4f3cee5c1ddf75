"""Persistence: the SQLite store (`db`) and the models it holds (`models`)."""
