"""The gateway's credential on maas-api's internal endpoints: a shared bearer token.

Authorino's metadata callbacks (key validation, subscription selection) and the gateway's usage sender
present one of `MaasApiSettings.gateway_tokens` (`Authorization: Bearer <token>`; in a cluster Authorino sends
it from a Secret through the AuthPolicy's `sharedSecretRef`). Tokens are compared in constant time, every
one of them, so timing does not reveal which matched. A missing or wrong token is 401 and counted in
`maas_api_internal_unauthenticated_total{endpoint}`; with no token configured every call is refused.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from pydantic import SecretStr

from maasctl.contract.credentials import bearer_credential

__all__ = ["gateway_token_valid"]


def gateway_token_valid(authorization: str | bytes | None, tokens: Sequence[SecretStr]) -> bool:
    """True when `authorization` is `Bearer <one of tokens>` (`contract.credentials`: any case of the scheme)."""
    credential = bearer_credential(authorization)
    if not tokens or credential is None:
        return False
    presented = credential.encode()
    matched = [hmac.compare_digest(presented, t.get_secret_value().encode()) for t in tokens]
    return any(matched)
