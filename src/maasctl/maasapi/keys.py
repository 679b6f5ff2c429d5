"""API key format, hashing and expiry parsing (pure: no I/O, no clock except where passed in).

Format: ``sk-oai-<id>_<secret>``. ``id`` is 16 random bytes in base62 (22 chars, the public key id, also the
row's primary key); ``secret`` is 32 random bytes in base62 (43 chars, 256 bits). Only
HMAC-SHA256(pepper, id NUL secret) is stored; the id binds the hash to its row, the server pepper means a
leaked table alone cannot be used to check guesses, and comparison is constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

PREFIX = "sk-oai-"
HASH_ALGORITHM = "hmac-sha256-v1"
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_BYTES = 16
SECRET_BYTES = 32
ID_LEN = 22  # ceil(128 / log2(62))
SECRET_LEN = 43  # ceil(256 / log2(62))
_KEY_RE = re.compile(rf"^{PREFIX}([0-9A-Za-z]{{{ID_LEN}}})_([0-9A-Za-z]{{{SECRET_LEN}}})$")
_ID_RE = re.compile(rf"^[0-9A-Za-z]{{{ID_LEN}}}$")
_DURATION_RE = re.compile(r"^(?:[0-9]{1,6}(?:\.[0-9]{1,6})?[smhdw]){1,5}$")
_DURATION_PART = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?)([smhdw])")
MAX_DURATION_SECONDS = 100 * 365 * 86400
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def b62encode(data: bytes, width: int) -> str:
    """Fixed-width base62 of a big-endian integer (fixed width keeps the format parseable by regex)."""
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(reversed(out)).rjust(width, "0")


@dataclass(frozen=True)
class NewKey:
    key_id: str
    secret: str

    @property
    def plaintext(self) -> str:
        return f"{PREFIX}{self.key_id}_{self.secret}"

    @property
    def display_prefix(self) -> str:
        return f"{PREFIX}{self.key_id[:12]}..."


def generate() -> NewKey:
    return NewKey(
        b62encode(secrets.token_bytes(ID_BYTES), ID_LEN),
        b62encode(secrets.token_bytes(SECRET_BYTES), SECRET_LEN),
    )


def parse(key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key, else None."""
    m = _KEY_RE.fullmatch(key)
    return (m.group(1), m.group(2)) if m else None


def looks_like_key(token: str) -> bool:
    return token.startswith(PREFIX)


def is_key_id(value: str) -> bool:
    return bool(_ID_RE.fullmatch(value))


def hash_secret(pepper: bytes, key_id: str, secret: str) -> str:
    return hmac.new(pepper, f"{key_id}\x00{secret}".encode(), hashlib.sha256).hexdigest()


def verify(pepper: bytes, key_id: str, secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(pepper, key_id, secret), stored_hash)


def display_prefix(key_id: str) -> str:
    return f"{PREFIX}{key_id[:12]}..."


class BadDuration(ValueError):
    """An expiry string that is not `<n><s|m|h|d|w>`."""


def parse_duration(value: str | int) -> timedelta:
    """A key lifetime as the reference accepts it: '30d', '12h', '90m', '45s', '2w', fractions ('1.5d'),
    combinations ('2h30m', '1h45m30s'), or a JSON integer of seconds (86400). Whole seconds; zero, negatives,
    other units and absurd lengths are refused."""
    if isinstance(value, bool):
        raise BadDuration("invalid duration: expected a string such as '30d' or a number of seconds")
    if isinstance(value, int):
        seconds = Decimal(value)
    elif isinstance(value, str) and _DURATION_RE.fullmatch(value):
        seconds = sum((Decimal(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value)), Decimal(0))
    else:
        raise BadDuration(f"invalid duration {value!r}: expected <number><s|m|h|d|w> (e.g. '30d', '1.5h', "
                          "'2h30m') or a number of seconds")
    whole = int(seconds)
    if not 1 <= whole <= MAX_DURATION_SECONDS:
        raise BadDuration(f"invalid duration {value!r}: must be between one second and {MAX_DURATION_SECONDS}s")
    return timedelta(seconds=whole)


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds // _UNIT_SECONDS[unit]}{unit}"
    return f"{seconds}s"
