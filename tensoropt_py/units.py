"""Human-friendly sizes, rates, FLOP rates and durations; counts checked.

Everything inside tensoropt_py is in base SI units stored as ``float``: **bytes**,
**bytes per second**, **FLOP per second** and **seconds**. This module turns the strings
users type (``"16GB"``, ``"100Gb/s"``, ``"125TFLOPS"``, ``"500ms"``) into those numbers and
back into short strings for tables.

Conventions
-----------
* Decimal prefixes are powers of 1000: ``kB``/``KB`` = 1e3, ``MB`` = 1e6, ``GB`` = 1e9,
  ``TB`` = 1e12, ``PB`` = 1e15, ``EB`` = 1e18 (this is what vendors and the TensorOpt paper
  use: "14.5GB" is 14.5e9 bytes).
* Binary prefixes are powers of 1024: ``KiB`` = 2**10, ``MiB`` = 2**20, ``GiB`` = 2**30,
  ``TiB`` = 2**40, ``PiB`` = 2**50, ``EiB`` = 2**60.
* Prefix letters are case-insensitive, but the final **B means bytes and b means bits**
  (``"100Gb/s"`` is 12.5e9 bytes/s, ``"25GB/s"`` is 25e9 bytes/s). A memory *size* written in
  bits (``"16gb"``) is rejected rather than silently divided by 8.
* A bare number (``16e9``, ``"16e9"``) is already in the base unit.
* Values must be finite and positive; ``allow_zero=True`` also accepts 0. Negative values,
  NaN, infinity, booleans and unknown units raise :class:`~tensoropt_py.errors.InvalidInputError`
  naming the value and the accepted forms. Nothing is clamped.

Examples
--------
>>> parse_bytes("14.5GB"), parse_bytes("1 GiB")
(14500000000.0, 1073741824.0)
>>> parse_rate("100Gb/s")
12500000000.0
>>> parse_flops("15.7 TFLOP/s")
15700000000000.0
>>> parse_time("2min"), parse_time("500ms")
(120.0, 0.5)
>>> format_bytes(14.5e9), format_time(3.2e-5)
('14.5 GB', '32 us')

Counts (devices, steps, limits) take no unit: :func:`parse_count` checks that one is an
integer (a bool, a float or a string is refused, even ``4.0``) at or above its least value.
"""

from __future__ import annotations

import math
import numbers
import re

from .errors import InvalidInputError

__all__ = [
    "parse_bytes",
    "parse_rate",
    "parse_flops",
    "parse_time",
    "parse_count",
    "parse_positive",
    "format_bytes",
    "format_rate",
    "format_flops",
    "format_time",
    "describe_bytes",
]

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SPLIT = re.compile(rf"^\s*({_NUMBER})\s*(\S*?)\s*$")

_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_BINARY = {"ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40, "pi": 2.0**50, "ei": 2.0**60}

_BYTES_FORMS = (
    "a number of bytes (int/float or '16e9'), or a number with a byte unit: "
    "B, kB/KB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024), "
    "e.g. '16GB', '14.5 GiB', '512MB'"
)
_RATE_FORMS = (
    "a number of bytes/s, or a number with a rate unit: <prefix>B/s or <prefix>Bps for bytes, "
    "<prefix>b/s, <prefix>bps or <prefix>bit/s for bits (prefix: k, M, G, T, P or Ki, Mi, Gi, Ti), "
    "e.g. '100Gb/s', '25GB/s', '300 GB/s', '12.5 GiB/s'"
)
_FLOPS_FORMS = (
    "a number of FLOP/s, or a number with a unit <prefix>FLOPS or <prefix>FLOP/s "
    "(prefix: k, M, G, T, P, E; case-insensitive), e.g. '125TFLOPS', '15.7 TFLOP/s'"
)
_TIME_FORMS = (
    "a number of seconds, or a number with a unit: ns, us (or µs), ms, s, min, h, "
    "e.g. '30s', '2min', '500ms', '5us'"
)

_TIME_UNITS = {
    "": 1.0,
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}


def _fail(what, value, forms, why=None):
    reason = f" ({why})" if why else ""
    raise InvalidInputError(f"invalid {what} {value!r}{reason}; expected {forms}")


def _split(value, what, forms):
    """Return (number, unit_string) for a number or a string; validate the number's type."""
    if isinstance(value, bool):
        _fail(what, value, forms, "a boolean is not a quantity")
    if isinstance(value, numbers.Real):
        return float(value), ""
    if not isinstance(value, str):
        _fail(what, value, forms, f"type {type(value).__name__} is not a number or a string")
    m = _SPLIT.match(value)
    if m is None:
        _fail(what, value, forms)
    return float(m.group(1)), m.group(2)


def _check(number, value, what, forms, allow_zero):
    if not math.isfinite(number):
        _fail(what, value, forms, "must be finite")
    if number < 0 or (number == 0 and not allow_zero):
        _fail(what, value, forms, "must be >= 0" if allow_zero else "must be > 0")
    return number


def _prefix_factor(prefix):
    """Factor of a decimal or binary prefix (case-insensitive), or None."""
    p = prefix.lower()
    if p in _DECIMAL:
        return _DECIMAL[p]
    return _BINARY.get(p)


def _byte_or_bit(unit):
    """Split '<prefix><B|b|byte|bit>' into (prefix factor, bytes-per-unit) or None."""
    m = re.fullmatch(r"([A-Za-z]{0,2}?)(B|b|[Bb]ytes?|[Bb]its?)", unit)
    if m is None:
        return None
    factor = _prefix_factor(m.group(1))
    if factor is None:
        return None
    suffix = m.group(2)
    per = 0.125 if suffix == "b" or suffix.lower().startswith("bit") else 1.0
    return factor, per


def parse_bytes(value, *, allow_zero=False):
    """Parse a memory size to a float number of **bytes**.

    Parameters
    ----------
    value : int, float or str
        A number of bytes, or a string such as ``"16GB"`` (decimal: 16e9), ``"14.5 GiB"``
        (binary: 14.5 * 2**30), ``"512MB"``, ``"1e9"`` or ``"100 B"``. Prefixes are
        case-insensitive; a lowercase final ``b`` (bits) is rejected.
    allow_zero : bool, default False
        Accept 0.

    Returns
    -------
    float
        Bytes.

    Raises
    ------
    InvalidInputError
        Unknown unit, bits instead of bytes, negative, zero (unless allowed), NaN or infinite.

    Examples
    --------
    >>> parse_bytes("16GB")
    16000000000.0
    >>> parse_bytes("14.5 GiB") == 14.5 * 2**30
    True
    >>> parse_bytes(512)
    512.0
    >>> parse_bytes("16gb")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: invalid size '16gb' (a lowercase 'b' means bits; memory sizes are in bytes: write 'B'); expected ...
    """
    number, unit = _split(value, "size", _BYTES_FORMS)
    if unit:
        parsed = _byte_or_bit(unit)
        if parsed is None:
            _fail("size", value, _BYTES_FORMS, f"unknown unit {unit!r}")
        factor, per = parsed
        if per != 1.0:
            _fail("size", value, _BYTES_FORMS, "a lowercase 'b' means bits; memory sizes are in bytes: write 'B'")
        number *= factor
    return _check(number, value, "size", _BYTES_FORMS, allow_zero)


def parse_rate(value, *, allow_zero=False):
    """Parse a bandwidth to a float number of **bytes per second**.

    Parameters
    ----------
    value : int, float or str
        A number of bytes/s, or a string such as ``"100Gb/s"`` (bits: 12.5e9 B/s),
        ``"25GB/s"`` (bytes: 25e9 B/s), ``"300 GB/s"``, ``"100 Gbps"``, ``"12.5 GiB/s"``,
        ``"10 Gbit/s"``. The case of the final ``b``/``B`` decides bits vs bytes.
    allow_zero : bool, default False
        Accept 0.

    Returns
    -------
    float
        Bytes per second.

    Examples
    --------
    >>> parse_rate("100Gb/s"), parse_rate("25GB/s"), parse_rate("100 Gbps")
    (12500000000.0, 25000000000.0, 12500000000.0)
    >>> parse_rate("1 GiB/s") == 2**30
    True
    """
    number, unit = _split(value, "rate", _RATE_FORMS)
    if unit:
        m = re.fullmatch(r"(.+?)(?:/s|/sec|ps)", unit)
        parsed = _byte_or_bit(m.group(1)) if m else None
        if parsed is None:
            _fail("rate", value, _RATE_FORMS, f"unknown unit {unit!r}")
        factor, per = parsed
        number *= factor * per
    return _check(number, value, "rate", _RATE_FORMS, allow_zero)


def parse_flops(value, *, allow_zero=False):
    """Parse a compute throughput to a float number of **FLOP per second**.

    Parameters
    ----------
    value : int, float or str
        A number of FLOP/s, or a string such as ``"125TFLOPS"``, ``"15.7 TFLOP/s"``,
        ``"312 tflops"``. Prefixes are decimal (k, M, G, T, P, E) and case-insensitive.
    allow_zero : bool, default False
        Accept 0.

    Returns
    -------
    float
        FLOP/s.

    Examples
    --------
    >>> parse_flops("125TFLOPS")
    125000000000000.0
    >>> parse_flops("15.7 TFLOP/s") == 15.7e12
    True
    """
    number, unit = _split(value, "FLOP rate", _FLOPS_FORMS)
    if unit:
        m = re.fullmatch(r"([A-Za-z]?)(?:flops|flop/s|flop/sec)", unit, flags=re.IGNORECASE)
        factor = _DECIMAL.get(m.group(1).lower()) if m else None
        if factor is None:
            _fail("FLOP rate", value, _FLOPS_FORMS, f"unknown unit {unit!r}")
        number *= factor
    return _check(number, value, "FLOP rate", _FLOPS_FORMS, allow_zero)


def parse_time(value, *, allow_zero=False):
    """Parse a duration to a float number of **seconds**.

    Parameters
    ----------
    value : int, float or str
        A number of seconds, or a string such as ``"30s"``, ``"2min"``, ``"500ms"``,
        ``"5us"``/``"5µs"``, ``"10ns"``, ``"1.5h"``.
    allow_zero : bool, default False
        Accept 0 (e.g. a latency that is negligible).

    Returns
    -------
    float
        Seconds.

    Examples
    --------
    >>> parse_time("30s"), parse_time("2min"), parse_time("500ms"), parse_time("1.5h")
    (30.0, 120.0, 0.5, 5400.0)
    >>> parse_time("0s", allow_zero=True)
    0.0
    """
    number, unit = _split(value, "duration", _TIME_FORMS)
    factor = _TIME_UNITS.get(unit if unit in ("µs", "μs") else unit.lower())
    if factor is None:
        _fail("duration", value, _TIME_FORMS, f"unknown unit {unit!r}")
    return _check(number * factor, value, "duration", _TIME_FORMS, allow_zero)


def parse_count(value, name, *, least=1, allow_none=False):
    """Check a count (of devices, steps, points...): an integer at or above ``least``.

    Parameters
    ----------
    value : int
        The count (a Python or NumPy integer; a bool, a float or a string is refused).
    name : str
        What the count is, for the error message.
    least : int, default 1
        The least allowed value.
    allow_none : bool, default False
        Accept None (returned as is), for counts whose default is decided elsewhere.

    Returns
    -------
    int or None

    Raises
    ------
    InvalidInputError
        Naming ``name``, the value and what is allowed.

    Examples
    --------
    >>> parse_count(4, "devices")
    4
    >>> parse_count(0, "warmup", least=0)
    0
    >>> parse_count(4.0, "devices")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: devices must be an integer >= 1, got 4.0
    """
    if allow_none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        allowed = f"{'None or ' if allow_none else ''}an integer >= {least}"
        raise InvalidInputError(f"{name} must be {allowed}, got {value!r}")
    return int(value)


def parse_positive(value, name, *, allowed="a number > 0", allow_none=False):
    """Check a positive real number (a work or byte budget): finite or ``inf``, never NaN.

    Parameters
    ----------
    value : int or float
        The number (a Python or NumPy real; a bool or a string is refused).
    name : str
        What the number is, for the error message.
    allowed : str, default "a number > 0"
        What the error message says is allowed.
    allow_none : bool, default False
        Accept None (returned as is), for budgets whose default is decided elsewhere.

    Returns
    -------
    float or None

    Raises
    ------
    InvalidInputError
        Naming ``name``, the value and ``allowed``.

    Examples
    --------
    >>> parse_positive(1e10, "max_work"), parse_positive(float("inf"), "max_work")
    (10000000000.0, inf)
    >>> parse_positive(float("nan"), "max_work")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: max_work must be a number > 0, got nan
    """
    if allow_none and value is None:
        return None
    # a bool is an Integral, and NaN fails the comparison
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise InvalidInputError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def _format_scaled(x, units, digits):
    """Format ``x`` with the largest (factor, name) in ``units`` (ascending) such that |x|/factor >= 1."""
    if not math.isfinite(x):
        base = next(n for f, n in units if f == 1.0)
        return f"{x} {base}"
    sign = "-" if x < 0 else ""
    a = abs(x)
    factor, name = units[0]
    for f, n in units:
        if a >= f:
            factor, name = f, n
    text = f"{a / factor:.{digits}g}"
    # rounding may reach the next unit (999.96 kB -> '1e+03 kB'): move up one unit
    if "e" in text:
        idx = [f for f, _ in units].index(factor)
        if idx + 1 < len(units):
            factor, name = units[idx + 1]
            text = f"{a / factor:.{digits}g}"
    return f"{sign}{text} {name}"


def format_bytes(nbytes, *, binary=False, digits=3):
    """Format a byte count for a table: ``format_bytes(14.5e9) == '14.5 GB'``.

    Parameters
    ----------
    nbytes : float
        Bytes (may be negative, e.g. a difference).
    binary : bool, default False
        Use KiB/MiB/GiB (powers of 1024) instead of kB/MB/GB (powers of 1000).
    digits : int, default 3
        Significant digits.

    Examples
    --------
    >>> format_bytes(14.5e9), format_bytes(2**30, binary=True), format_bytes(512)
    ('14.5 GB', '1 GiB', '512 B')
    >>> parse_bytes(format_bytes(123456789, digits=6))
    123457000.0
    """
    if binary:
        units = [(1.0, "B"), (2.0**10, "KiB"), (2.0**20, "MiB"), (2.0**30, "GiB"), (2.0**40, "TiB"), (2.0**50, "PiB")]
    else:
        units = [(1.0, "B"), (1e3, "kB"), (1e6, "MB"), (1e9, "GB"), (1e12, "TB"), (1e15, "PB")]
    return _format_scaled(float(nbytes), units, digits)


def format_rate(bytes_per_s, *, digits=3):
    """Format a bandwidth in bytes/s: ``format_rate(12.5e9) == '12.5 GB/s'``.

    Examples
    --------
    >>> format_rate(12.5e9)
    '12.5 GB/s'
    """
    units = [(1.0, "B/s"), (1e3, "kB/s"), (1e6, "MB/s"), (1e9, "GB/s"), (1e12, "TB/s")]
    return _format_scaled(float(bytes_per_s), units, digits)


def format_flops(flops_per_s, *, digits=3):
    """Format a FLOP rate: ``format_flops(15.7e12) == '15.7 TFLOP/s'``.

    Examples
    --------
    >>> format_flops(15.7e12)
    '15.7 TFLOP/s'
    """
    units = [(1.0, "FLOP/s"), (1e3, "kFLOP/s"), (1e6, "MFLOP/s"), (1e9, "GFLOP/s"), (1e12, "TFLOP/s"), (1e15, "PFLOP/s")]
    return _format_scaled(float(flops_per_s), units, digits)


def format_time(seconds, *, digits=3):
    """Format a duration with ns, us, ms, s, min or h: ``format_time(0.0032) == '3.2 ms'``.

    ``us`` is written in ASCII so table columns stay aligned; :func:`parse_time` reads it back.

    Examples
    --------
    >>> format_time(0.0032), format_time(95), format_time(0), format_time(2e-9)
    ('3.2 ms', '1.58 min', '0 s', '2 ns')
    >>> parse_time(format_time(4.25e-4))
    0.000425
    """
    s = float(seconds)
    if s == 0:
        return "0 s"
    units = [(1e-9, "ns"), (1e-6, "us"), (1e-3, "ms"), (1.0, "s"), (60.0, "min"), (3600.0, "h")]
    return _format_scaled(s, units, digits)


#: Display units (name, size in base units), ascending, for tables and plot axes.
MEMORY_UNITS = (("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))
TIME_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def describe_bytes(nbytes: float) -> str:
    """Bytes for messages: short, but precise enough to tell a cap from the memory it misses.

    Parameters
    ----------
    nbytes : float

    Examples
    --------
    >>> describe_bytes(15.6e9)
    '15.6 GB (1.56e+10 bytes)'
    """
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= div:
            return f"{nbytes / div:.4g} {unit} ({nbytes:.6g} bytes)"
    return f"{nbytes:.6g} bytes"


def display_unit(arrays, units):
    """``(name, divisor)``: the largest of ``units`` (ascending) that the largest finite value reaches.

    ``arrays`` is an array or a sequence of arrays sharing one axis or column.

    Examples
    --------
    >>> display_unit([[2.5e6, 9e8]], MEMORY_UNITS)
    ('MB', 1000000.0)
    >>> display_unit([], TIME_UNITS)
    ('us', 1e-06)
    """
    import numpy as np

    parts = [np.ravel(np.asarray(a, dtype=float)) for a in (arrays if isinstance(arrays, (list, tuple)) else [arrays])]
    v = np.concatenate(parts) if parts else np.zeros(0)
    v = v[np.isfinite(v)]
    top = float(np.abs(v).max()) if v.size else 0.0
    name, div = units[0]
    for n, d in units:
        if top >= d:
            name, div = n, d
    return name, div
