"""Seed handling: every stochastic function takes ``seed=None`` and calls :func:`as_generator`."""

import numpy as np

from .errors import InvalidInputError

__all__ = ["as_generator"]


def as_generator(seed=None):
    """Normalise ``seed`` to a :class:`numpy.random.Generator`.

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.SeedSequence
        ``None`` draws fresh entropy; an int (>= 0) or SeedSequence gives a reproducible
        stream; a Generator is returned unchanged so callers can share one stream.

    Examples
    --------
    >>> bool(as_generator(0).integers(10) == as_generator(0).integers(10))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if seed < 0:
            raise InvalidInputError(f"seed must be a non-negative integer, got {seed}")
        return np.random.default_rng(int(seed))
    raise InvalidInputError(
        f"seed must be None, a non-negative int, a numpy Generator or SeedSequence; got {seed!r}"
    )
