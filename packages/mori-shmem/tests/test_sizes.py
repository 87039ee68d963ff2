# SPDX-License-Identifier: MIT
"""mori.shmem.parse_size: the size syntax of MORI_SHMEM_HEAP_SIZE and friends.

Reference: plain integer arithmetic. Binary units K/M/G/T (powers of 1024), optional "B" or "iB"
suffix, case-insensitive, decimals before the unit, result rounded down to whole bytes.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import mori.shmem as shmem

UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
SUFFIXES = ("", "B", "iB")
U64_MAX = 2**64 - 1


def reference(number: str, unit: str) -> int:
    """floor(number * 1024**k) computed exactly."""
    return int(Fraction(Decimal(number)) * 1024 ** UNITS[unit.upper()])


def spell(unit: str, suffix: str, case: str) -> str:
    text = unit + (suffix if unit else "")
    return {"upper": text.upper(), "lower": text.lower(), "asis": text}[case]


@given(st.integers(min_value=0, max_value=2**60))
@example(0)
@example(4096)
@example(U64_MAX)
def test_plain_integers(n: int) -> None:
    assert shmem.parse_size(str(n)) == n


@given(
    n=st.integers(min_value=0, max_value=2**20),
    unit=st.sampled_from(["K", "M", "G", "T"]),
    suffix=st.sampled_from(SUFFIXES),
    case=st.sampled_from(["upper", "lower", "asis"]),
)
@example(n=6, unit="G", suffix="", case="asis")
@example(n=512, unit="M", suffix="", case="asis")
@example(n=64, unit="M", suffix="iB", case="asis")
@example(n=1, unit="T", suffix="B", case="lower")
def test_integer_with_unit_round_trips(n: int, unit: str, suffix: str, case: str) -> None:
    text = f"{n}{spell(unit, suffix, case)}"
    assert shmem.parse_size(text) == n * 1024 ** UNITS[unit], text


@given(
    whole=st.integers(min_value=0, max_value=4096),
    frac=st.integers(min_value=0, max_value=999),
    digits=st.integers(min_value=1, max_value=3),
    unit=st.sampled_from(["", "K", "M", "G", "T"]),
    suffix=st.sampled_from(SUFFIXES),
)
@example(whole=1, frac=5, digits=1, unit="G", suffix="iB")
@example(whole=0, frac=5, digits=1, unit="K", suffix="")
@example(whole=1, frac=5, digits=1, unit="", suffix="")
def test_decimals_round_down(whole: int, frac: int, digits: int, unit: str, suffix: str) -> None:
    number = f"{whole}.{frac % 10**digits:0{digits}d}"
    text = number + spell(unit, suffix, "asis")
    assert shmem.parse_size(text) == reference(number, unit), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("6G", 6 << 30),
        ("512M", 512 << 20),
        ("1.5GiB", 3 << 29),
        ("1.5gib", 3 << 29),
        ("0.5K", 512),
        ("2kb", 2048),
        ("3TiB", 3 << 40),
        ("16777215T", 16777215 << 40),
    ],
)
def test_documented_examples(text: str, expected: int) -> None:
    assert shmem.parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "G",
        "MiB",
        "12Q",
        "12 Q",
        "-5M",
        "-1",
        "1.2.3G",
        ".G",
        "M5",
        "5MM",
        "5MiBB",
        "5Bi",
        "0x10",
        "inf",
        "nan",
        "1,5G",
        "18446744073709551616",  # 2**64
        "16777216T",  # 2**64 bytes
        "99999999999999999999999G",
    ],
)
def test_invalid_strings_raise(text: str) -> None:
    with pytest.raises(shmem.InvalidArgumentError) as info:
        shmem.parse_size(text)
    # InvalidArgumentError is a ValueError and a MoriShmemError.
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, shmem.MoriShmemError)
    if text:
        assert text in str(info.value), f"the message should quote the bad value: {info.value}"


@given(st.text(alphabet="0123456789.KMGTBikmgtb xQ-+", min_size=1, max_size=12))
def test_fuzz_accepts_only_the_grammar(text: str) -> None:
    """Anything parse_size accepts matches the grammar and gives the reference value."""
    # Spellings the grammar leaves open (".5K", "5.K", "5B"): either outcome is acceptable.
    if re.fullmatch(r"\d*\.\d*[KMGTkmgt]?([Bb]|[Ii][Bb])?", text) and not re.fullmatch(r"\d+\.\d+.*", text):
        return
    if re.fullmatch(r"\d+(\.\d+)?([Bb]|[Ii][Bb])", text):
        return
    if " " in text and re.fullmatch(r"[\d.]+[KMGTkmgtBbIi]*", text.replace(" ", "")):
        return  # whitespace inside or around a size
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTkmgt](?:[Bb]|[Ii][Bb])?)?", text)
    try:
        value = shmem.parse_size(text)
    except shmem.InvalidArgumentError:
        if match is not None:
            number, unit = match.group(1), (match.group(2) or "")[:1]
            assert reference(number, unit) > U64_MAX, f"rejected a valid size {text!r}"
        return
    assert match is not None, f"accepted {text!r}, which is not a size"
    number, unit = match.group(1), (match.group(2) or "")[:1]
    assert value == reference(number, unit)
