"""Pure key logic: format, entropy, hashing, durations."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.maasapi import keys


def test_generated_key_has_documented_format_and_parses_back() -> None:
    new = keys.generate()
    plaintext = new.plaintext
    assert plaintext.startswith("sk-oai-")
    assert keys.parse(plaintext) == (new.key_id, new.secret)
    assert len(new.secret) == keys.SECRET_LEN
    assert new.display_prefix == f"sk-oai-{new.key_id[:12]}..."
    assert new.secret not in new.display_prefix


def test_secret_carries_at_least_256_bits() -> None:
    assert keys.SECRET_BYTES * 8 >= 256
    # the fixed-width base62 encoding can represent every 256-bit value
    assert 62**keys.SECRET_LEN >= 2**256
    assert keys.SECRET_LEN * math.log2(62) >= 256


def test_keys_are_unique() -> None:
    generated = {keys.generate().plaintext for _ in range(2000)}
    assert len(generated) == 2000


@given(st.binary(min_size=32, max_size=32))
def test_b62_is_fixed_width_and_injective(data: bytes) -> None:
    enc = keys.b62encode(data, keys.SECRET_LEN)
    assert len(enc) == keys.SECRET_LEN
    n = 0
    for ch in enc:
        n = n * 62 + "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".index(ch)
    assert n == int.from_bytes(data, "big")


@pytest.mark.parametrize(
    "bad",
    ["", "sk-oai-", "sk-oai-abc_def", "pk-oai-" + "a" * 22 + "_" + "b" * 43, "sk-oai-" + "a" * 22 + "_" + "b" * 42,
     "sk-oai-" + "a" * 22 + "_" + "b" * 43 + "\n", "sk-oai-" + "a" * 21 + "-_" + "b" * 43],
)
def test_malformed_keys_do_not_parse(bad: str) -> None:
    assert keys.parse(bad) is None


def test_hash_is_keyed_and_bound_to_id() -> None:
    new = keys.generate()
    h = keys.hash_secret(b"pepper", new.key_id, new.secret)
    assert new.secret not in h
    assert keys.verify(b"pepper", new.key_id, new.secret, h)
    assert not keys.verify(b"other-pepper", new.key_id, new.secret, h)
    assert not keys.verify(b"pepper", keys.generate().key_id, new.secret, h)
    other_last = "y" if new.secret.endswith("x") else "x"  # a secret that differs in its last character
    assert not keys.verify(b"pepper", new.key_id, new.secret[:-1] + other_last, h)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("90m", timedelta(minutes=90)),
     ("45s", timedelta(seconds=45)), ("2w", timedelta(weeks=2)),
     # the reference's forms: fractions, combinations, a JSON number of seconds
     ("1.5d", timedelta(hours=36)), ("2.5h", timedelta(minutes=150)), ("2h30m", timedelta(minutes=150)),
     ("1h45m30s", timedelta(hours=1, minutes=45, seconds=30)), (86400, timedelta(days=1))],
)
def test_parse_duration(text: str | int, expected: timedelta) -> None:
    assert keys.parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["", "0d", "-1d", "10", "d", "1y", "1 d", "1D", "99999999d", "1h 30m", "0.1s",
                                 ".5h", "1.h", 0, -5, True, 10**12])
def test_parse_duration_rejects(bad: str | int) -> None:
    with pytest.raises(keys.BadDuration):
        keys.parse_duration(bad)


def test_format_duration_round_trips() -> None:
    for text in ("2w", "3d", "5h", "7m", "61s"):
        assert keys.format_duration(keys.parse_duration(text)) == text
