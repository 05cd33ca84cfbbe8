from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.config.units import format_duration_ms, format_size_bytes, parse_duration_ms, parse_size_bytes


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("6h", 6 * 3_600_000),
        ("30m", 1_800_000),
        ("1d", 86_400_000),
        ("100ms", 100),
        ("10s", 10_000),
        ("1h30m", 5_400_000),
        ("2d 3h", 2 * 86_400_000 + 3 * 3_600_000),
        ("6H", 6 * 3_600_000),
        ("21600000", 21_600_000),
        (5000, 5000),
    ],
)
def test_durations_parse(text: str | int, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "h", "6x", "1.5h", "-1h", "6 hours", "ms", True, None, -5, "1h-30m"])
def test_bad_durations_are_refused_with_an_example(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)  # type: ignore[arg-type]


def test_duration_error_message_shows_the_accepted_forms() -> None:
    with pytest.raises(ValueError, match=r"'6x' is not a duration like '6h'"):
        parse_duration_ms("6x")


@given(st.integers(min_value=0, max_value=10**12))
def test_duration_format_round_trips(ms: int) -> None:
    assert parse_duration_ms(format_duration_ms(ms)) == ms


def test_duration_format_picks_the_shortest_spelling() -> None:
    assert format_duration_ms(6 * 3_600_000) == "6h"
    assert format_duration_ms(5_400_000) == "1h30m"
    assert format_duration_ms(100) == "100ms"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("200M", 200 * 1024**2),
        ("150MB", 150 * 1024**2),
        ("1G", 1024**3),
        ("500K", 500 * 1024),
        ("500kb", 500 * 1024),
        ("1.5G", int(1.5 * 1024**3)),
        ("2T", 2 * 1024**4),
        ("1000", 1000),
        ("1000B", 1000),
        (4096, 4096),
    ],
)
def test_sizes_parse(text: str | int, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "M", "200X", "-5M", "1,5G", "lots", False, None, -1])
def test_bad_sizes_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_size_bytes(text)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=2**62))
def test_size_format_round_trips(size: int) -> None:
    assert parse_size_bytes(format_size_bytes(size)) == size


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["K", "M", "G", "KB", "MB", "GB"]))
def test_size_units_are_powers_of_1024(count: int, unit: str) -> None:
    power = {"K": 1, "M": 2, "G": 3}[unit[0]]
    assert parse_size_bytes(f"{count}{unit}") == count * 1024**power
