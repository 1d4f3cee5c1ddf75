"""Errors the caller can act on; every message says what was wrong and what to do next."""

import errno
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


def os_limit_error(error: BaseException, parameter: str) -> InvalidInputError | None:
    """The input error for an OS or SQLite limit a caller's value hit (None if `error` is something else).

    A name too long for the filesystem, an argument over the kernel's 128 KiB, a NUL byte, a number too
    big for SQLite or a date: the value was wrong, not the code.
    """
    text = str(error)
    if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:
        return InvalidInputError(f"{parameter} is too long for the filesystem (255 bytes per name, 4096 per "
                                 "path). Use a shorter one.")
    if isinstance(error, OSError) and error.errno == errno.E2BIG:
        return InvalidInputError(f"{parameter} is too long to pass to a program (the OS allows 128 KiB per "
                                 "argument). Shorten it, or put it in a file.")
    if isinstance(error, ValueError) and "null byte" in text:
        return InvalidInputError(f"{parameter} contains a NUL byte (\\0). Remove it.")
    if isinstance(error, UnicodeEncodeError) and "surrogate" in text:
        return InvalidInputError(f"{parameter} contains an unpaired UTF-16 surrogate (a cut emoji?). "
                                 "Send valid Unicode.")
    if isinstance(error, OverflowError):
        return InvalidInputError(f"{parameter} is too large ({text}). Use a smaller number.")
    return None


@contextmanager
def os_limits(parameter: str) -> Iterator[None]:
    """Turn an OS limit hit while using `parameter` into an InvalidInputError that names it."""
    try:
        yield
    except (OSError, ValueError, OverflowError) as error:
        if (refused := os_limit_error(error, parameter)) is None:
            raise
        raise refused from None
@contextmanager
def unique(message: str) -> Iterator[None]:
    """A racing insert of a taken id (another client won between our check and our insert): the same
    "already exists" answer the check gives, not an internal error."""
    try:
        yield
    except Exception as error:
        if is_duplicate(error):
            raise ConflictError(message) from None
        raise


def is_duplicate(error: BaseException) -> bool:
    """A unique key refused an insert: SQLite's IntegrityError, or PostgreSQL's unique_violation (SQLSTATE 23505)."""
    if isinstance(error, sqlite3.IntegrityError):
        return "UNIQUE" in str(error) or "PRIMARY KEY" in str(error)
    return getattr(error, "sqlstate", None) == "23505"
