"""The exception hierarchy of tensoropt_py.

Every error the library raises on purpose derives from :class:`TensorOptError`, so
callers can catch the library's errors without catching unrelated ones. Errors
about bad input also derive from :class:`ValueError` so that generic handlers work.
:class:`SearchSpaceWarning` is the one warning category: the library narrowed a search on
its own.
"""

__all__ = [
    "TensorOptError",
    "InvalidInputError",
    "CostGraphError",
    "InfeasibleError",
    "UnsupportedOperatorError",
    "CalibrationError",
    "MemoryLimitError",
    "SearchSpaceWarning",
]


class TensorOptError(Exception):
    """Base class of every error raised by tensoropt_py."""


class InvalidInputError(TensorOptError, ValueError):
    """An argument has a value that is not allowed; the message names it and what is allowed."""


class CostGraphError(InvalidInputError):
    """A :class:`~tensoropt_py.engine.CostGraph` is malformed (shape, NaN, negative cost, cycle...)."""


class InfeasibleError(TensorOptError):
    """No strategy satisfies the request (typically: nothing fits under the memory cap).

    Attributes
    ----------
    min_memory : float or None
        The smallest memory per device (bytes) any strategy needs, when known.
    memory_cap : float or None
        The cap (bytes) that was asked for, when there was one.
    """

    def __init__(self, message, *, min_memory=None, memory_cap=None):
        super().__init__(message)
        self.min_memory = min_memory
        self.memory_cap = memory_cap


class UnsupportedOperatorError(InvalidInputError):
    """A model contains an operator the importer cannot represent (e.g. an unknown op with parameters)."""


class CalibrationError(TensorOptError):
    """A calibration file is missing, unreadable, or does not match the cluster."""


class MemoryLimitError(TensorOptError, MemoryError):
    """A computation stopped before it would use more memory than allowed.

    Attributes
    ----------
    used_bytes : int
        Bytes held when it stopped.
    limit_bytes : int
        The limit.
    """

    def __init__(self, message, *, used_bytes=0, limit_bytes=0):
        super().__init__(message)
        self.used_bytes = used_bytes
        self.limit_bytes = limit_bytes


class SearchSpaceWarning(UserWarning):
    """The library restricted the search space on its own (the result says which space it searched)."""
