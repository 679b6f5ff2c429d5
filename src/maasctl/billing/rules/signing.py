"""HMAC-SHA256 signatures over a timestamped body (the generic `webhook` provider, both directions).

Header `Maasctl-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>` — the same shape
Stripe uses, so one mental model covers both providers. Several `v1=` entries may be present (a sender rotating
its secret signs with both). Verification is constant-time, refuses a timestamp outside the replay window
(`tolerance` seconds either way) and never says which part was wrong beyond a coarse reason.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

__all__ = ["HEADER", "TOLERANCE_SECONDS", "Verdict", "sign", "signature_header", "verify"]

HEADER: Final = "Maasctl-Signature"
TOLERANCE_SECONDS: Final = 300
_MAX_HEADER = 1024


def sign(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={sign(secret, timestamp, body)}"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str  # Valid, MissingSignature, MalformedSignature, TimestampOutsideWindow, SignatureMismatch
    timestamp: int | None = None


def verify(secret: str, header: str | None, body: bytes, now: int, tolerance: int = TOLERANCE_SECONDS) -> Verdict:
    """Whether `header` signs `body` with `secret` at a time within `tolerance` of `now`."""
    if not header:
        return Verdict(False, "MissingSignature")
    if len(header) > _MAX_HEADER or not secret:
        return Verdict(False, "MalformedSignature")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            return Verdict(False, "MalformedSignature")
        if name == "t":
            if not value.isdigit() or len(value) > 12 or timestamp is not None:
                return Verdict(False, "MalformedSignature")
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return Verdict(False, "MalformedSignature")
    expected = sign(secret, timestamp, body)
    matched = False
    for candidate in candidates:  # compare against every candidate: no early exit on the first match
        matched |= hmac.compare_digest(candidate.encode(), expected.encode())
    if not matched:
        return Verdict(False, "SignatureMismatch", timestamp)
    if abs(now - timestamp) > tolerance:
        return Verdict(False, "TimestampOutsideWindow", timestamp)
    return Verdict(True, "Valid", timestamp)
