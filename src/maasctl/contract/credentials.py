"""How an `Authorization` header is read, once, for the gateway and maas-api alike.

RFC 9110 §11.1: the authentication scheme is case-insensitive and separated from the credential by one or
more spaces, so `Bearer x`, `bearer x` and `BEARER  x` present the same credential `x`. A bearer credential
is a single token (token68): a value with whitespace or a comma inside (two `Authorization` headers folded
into one, `Bearer a, Bearer b`) presents no credential, never the first or the last of them.

The gateway rewrites the header to `canonical_authorization(...)` (`Bearer <credential>`) before its
AuthPolicy reads it, so the policy's predicates (written for `Bearer `, as Authorino compares it) see what
maas-api sees.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["BEARER", "bearer_credential", "canonical_authorization"]

BEARER: Final = "Bearer"
_INNER_SEPARATOR: Final = re.compile(r"[\s,]")


def bearer_credential(authorization: str | bytes | None, scheme: str = BEARER) -> str | None:
    """The credential of `Authorization: <scheme> <credential>`, or None (absent, another scheme, empty, or
    not a single token). `scheme` is compared case-insensitively."""
    if authorization is None:
        return None
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    given, sep, rest = authorization.strip(" \t").partition(" ")
    if not sep or given.lower() != scheme.lower():
        return None
    credential = rest.lstrip(" ")
    if not credential or _INNER_SEPARATOR.search(credential):
        return None
    return credential


def canonical_authorization(authorization: str) -> str:
    """`Bearer <credential>` when `authorization` presents a bearer credential in any spelling; otherwise the
    value unchanged (another scheme is not ours to rewrite)."""
    credential = bearer_credential(authorization)
    return authorization if credential is None else f"{BEARER} {credential}"
