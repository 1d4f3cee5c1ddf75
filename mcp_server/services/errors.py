"""Errors the caller can act on; every message says what was wrong and what to do next."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


class ServiceError(Exception):
    """A refused request. `str(error)` is shown to the user's model verbatim."""


class NotFoundError(ServiceError):
    """An id that names nothing."""


class InvalidInputError(ServiceError):
    """A value out of range, an empty name, an unknown option."""


class ConflictError(ServiceError):
    """A request that clashes with current state (duplicate id, invalid transition, running task)."""


@contextmanager
def unique(message: str) -> Iterator[None]:
    """A racing insert of a taken id (another client won between our check and our insert): the same
    "already exists" answer the check gives, not an internal error."""
    try:
        yield
    except sqlite3.IntegrityError as error:
        if "UNIQUE" in str(error) or "PRIMARY KEY" in str(error):
            raise ConflictError(message) from None
        raise
