"""tensoropt_py.units: parsing and formatting of sizes, rates, FLOP rates and durations; counts."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.units import (
    format_bytes,
    format_flops,
    format_rate,
    format_time,
    parse_bytes,
    parse_count,
    parse_positive,
    parse_flops,
    parse_rate,
    parse_time,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16GB", 16e9),
        ("14.5GB", 14.5e9),
        ("14.5 GiB", 14.5 * 2**30),
        ("512MB", 512e6),
        ("512 MiB", 512 * 2**20),
        ("1kB", 1e3),
        ("1KB", 1e3),
        ("1 KiB", 1024.0),
        ("2TB", 2e12),
        ("1 TiB", 2.0**40),
        ("1PB", 1e15),
        ("100 B", 100.0),
        ("100 bytes", 100.0),
        ("1e9", 1e9),
        (".5GB", 0.5e9),
        ("  7 MB  ", 7e6),
        (512, 512.0),
        (1.5e3, 1500.0),
    ],
)
def test_parse_bytes_forms(text, expected):
    assert parse_bytes(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("100Gb/s", 12.5e9),
        ("100 Gbps", 12.5e9),
        ("10 Gbit/s", 1.25e9),
        ("25GB/s", 25e9),
        ("300 GB/s", 300e9),
        ("25 GBps", 25e9),
        ("1 GiB/s", 2.0**30),
        ("8 Kib/s", 1024.0),
        ("1e9", 1e9),
        (5, 5.0),
    ],
)
def test_parse_rate_forms(text, expected):
    assert parse_rate(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("125TFLOPS", 125e12),
        ("15.7 TFLOP/s", 15.7e12),
        ("312 tflops", 312e12),
        ("50 GFLOPS", 50e9),
        ("1 PFLOP/s", 1e15),
        ("1e12", 1e12),
        (2e9, 2e9),
    ],
)
def test_parse_flops_forms(text, expected):
    assert parse_flops(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("30s", 30.0),
        ("2min", 120.0),
        ("500ms", 0.5),
        ("5us", 5e-6),
        ("5µs", 5e-6),
        ("10 ns", 1e-8),
        ("1.5h", 5400.0),
        ("3 seconds", 3.0),
        ("0.25", 0.25),
        (2, 2.0),
    ],
)
def test_parse_time_forms(text, expected):
    assert parse_time(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "func, bad, fragment",
    [
        (parse_bytes, "16gb", "bits"),
        (parse_bytes, "16 GX", "unknown unit"),
        (parse_bytes, "sixteen GB", "expected"),
        (parse_bytes, "", "expected"),
        (parse_bytes, "-1GB", "> 0"),
        (parse_bytes, 0, "> 0"),
        (parse_bytes, float("nan"), "finite"),
        (parse_bytes, float("inf"), "finite"),
        (parse_bytes, True, "boolean"),
        (parse_bytes, None, "type NoneType"),
        (parse_bytes, "16G", "unknown unit"),
        (parse_rate, "100 Gb", "unknown unit"),
        (parse_rate, "100 Gx/s", "unknown unit"),
        (parse_rate, "-5GB/s", "> 0"),
        (parse_flops, "125 TFLOPZ", "unknown unit"),
        (parse_flops, "0 TFLOPS", "> 0"),
        (parse_time, "5 fortnights", "unknown unit"),
        (parse_time, "-1s", "> 0"),
        (parse_time, "0s", "> 0"),
    ],
)
def test_parse_errors_name_value_and_forms(func, bad, fragment):
    with pytest.raises(InvalidInputError) as info:
        func(bad)
    msg = str(info.value)
    assert repr(bad) in msg
    assert fragment in msg
    assert "expected" in msg  # lists the accepted forms


def test_invalid_input_error_is_value_error():
    with pytest.raises(ValueError):
        parse_bytes("nonsense")


def test_allow_zero():
    assert parse_bytes(0, allow_zero=True) == 0.0
    assert parse_time("0 us", allow_zero=True) == 0.0
    assert parse_rate("0GB/s", allow_zero=True) == 0.0
    with pytest.raises(InvalidInputError):
        parse_time("-0.1s", allow_zero=True)


def test_format_examples():
    assert format_bytes(14.5e9) == "14.5 GB"
    assert format_bytes(16 * 2**30, binary=True) == "16 GiB"
    assert format_bytes(0) == "0 B"
    assert format_bytes(-2e6) == "-2 MB"
    assert format_bytes(999_960) == "1 MB"  # rounding moves to the next unit, no '1e+03 kB'
    assert format_rate(12.5e9) == "12.5 GB/s"
    assert format_flops(125e12) == "125 TFLOP/s"
    assert format_time(0) == "0 s"
    assert format_time(5e-6) == "5 us"
    assert format_time(0.5) == "500 ms"
    assert format_time(120) == "2 min"
    assert format_time(7200) == "2 h"
    assert format_time(math.inf) == "inf s"
    assert format_bytes(math.nan) == "nan B"


@given(st.floats(min_value=1.0, max_value=1e18, allow_nan=False, allow_infinity=False), st.booleans())
def test_bytes_round_trip(x, binary):
    assert parse_bytes(format_bytes(x, binary=binary, digits=12)) == pytest.approx(x, rel=1e-10)


@given(st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_time_round_trip(x):
    assert parse_time(format_time(x, digits=12)) == pytest.approx(x, rel=1e-10)


@given(st.floats(min_value=1.0, max_value=1e14, allow_nan=False, allow_infinity=False))
def test_rate_and_flops_round_trip(x):
    assert parse_rate(format_rate(x, digits=12)) == pytest.approx(x, rel=1e-10)
    assert parse_flops(format_flops(x, digits=12)) == pytest.approx(x, rel=1e-10)


@pytest.mark.parametrize("value", [0, -3, True, False, 2.0, "2", None, [2]])
def test_parse_count_refuses_what_is_not_a_count(value):
    with pytest.raises(InvalidInputError, match=f"devices must be an integer >= 1, got {re.escape(repr(value))}"):
        parse_count(value, "devices")


def test_parse_count_accepts_integers_from_least():
    assert parse_count(np.int64(3), "k") == 3 and type(parse_count(np.int64(3), "k")) is int
    assert parse_count(0, "warmup", least=0) == 0
    assert parse_count(None, "threads", allow_none=True) is None
    with pytest.raises(InvalidInputError, match="threads must be None or an integer >= 1, got 0"):
        parse_count(0, "threads", allow_none=True)
    with pytest.raises(InvalidInputError, match="window must be an integer >= 2, got 1"):
        parse_count(1, "window", least=2)


@pytest.mark.parametrize("value", [0, -1.5, float("nan"), float("-inf"), True, np.bool_(True), "1e10", None, 1j,
                                   [2.0]])
def test_parse_positive_refuses_what_is_not_a_positive_number(value):
    with pytest.raises(InvalidInputError, match=f"max_work must be a number > 0, got {re.escape(repr(value))}"):
        parse_positive(value, "max_work")


def test_parse_positive_accepts_positive_reals_and_says_what_is_allowed():
    assert parse_positive(np.int64(3), "w") == 3.0 and type(parse_positive(np.int64(3), "w")) is float
    assert parse_positive(np.float32(0.5), "w") == 0.5 and parse_positive(float("inf"), "w") == float("inf")
    assert parse_positive(None, "max_memory", allow_none=True) is None
    with pytest.raises(InvalidInputError, match="max_memory must be bytes > 0 or None, got 0"):
        parse_positive(0, "max_memory", allowed="bytes > 0 or None", allow_none=True)
