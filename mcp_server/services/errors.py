"""Errors the caller can act on; every message says what was wrong and what to do next."""


class ServiceError(Exception):
    """A refused request. `str(error)` is shown to the user's model verbatim."""


class NotFoundError(ServiceError):
    """An id that names nothing."""


class InvalidInputError(ServiceError):
    """A value out of range, an empty name, an unknown option."""


class ConflictError(ServiceError):
    """A request that clashes with current state (duplicate id, invalid transition, running task)."""
