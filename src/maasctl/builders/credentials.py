"""The `authentication` of a MaaS credential, shared by every AuthPolicy that answers for one: the model routes'
policies (`authpolicy`), the Gateway's default-deny (`gatewayauth`) and a billing Plan's policy
(`maasctl.billing.rules.compile`), so a caller reads one answer whatever policy a route ends up under. Kept apart from
`authpolicy` so the billing compiler, which must stay pure, imports nothing more than this.

An API key is `Authorization: Bearer sk-oai-...`, or `x-api-key: sk-oai-...` without an `Authorization` header
(Anthropic-style clients; `contract.edge.presented_credential` is the same rule in maas-api). It is taken as is
(`api-keys`): maas-api validates it in the metadata phase, and a key it refuses is 403 (as in the reference). Any
other bearer token is a Kubernetes token (`kubernetes-tokens`, a TokenReview). No credential, or a token the
TokenReview refuses: no identity, 401 "Authentication required".
"""

from __future__ import annotations

from typing import Any, Final

from maasctl.contract.cel import cel_string

__all__ = [
    "API_KEY_EXPRESSION",
    "API_KEY_PREFIX",
    "HAS_X_API_KEY",
    "IS_API_KEY",
    "X_API_KEY",
    "credential_authentication",
    "unauthenticated_response",
]

API_KEY_PREFIX: Final = "Bearer sk-oai-"
X_API_KEY: Final = 'request.headers["x-api-key"]'
HAS_X_API_KEY: Final = '"x-api-key" in request.headers'
_BEARER_KEY: Final = (
    "has(request.headers.authorization)"
    f" && request.headers.authorization.startsWith({cel_string(API_KEY_PREFIX)})"
)
_HEADER_KEY: Final = (
    f"!has(request.headers.authorization) && {HAS_X_API_KEY} && {X_API_KEY}.startsWith({cel_string('sk-oai-')})"
)
IS_API_KEY: Final = f"({_BEARER_KEY}) || ({_HEADER_KEY})"
"""CEL: the request's credential is an API key."""
API_KEY_EXPRESSION: Final = f"(({_BEARER_KEY}) ? request.headers.authorization.substring(7) : {X_API_KEY})"
"""CEL: the API key itself (when `IS_API_KEY`)."""


def credential_authentication(token_audiences: tuple[str, ...] = ()) -> dict[str, Any]:
    """The entries `api-keys` and `kubernetes-tokens` (`token_audiences`: the TokenReview's; none, the request
    host as Authorino's default)."""
    token_review: dict[str, Any] = {"audiences": list(token_audiences)} if token_audiences else {}
    return {
        "api-keys": {
            "plain": {"expression": API_KEY_EXPRESSION},
            "when": [{"predicate": IS_API_KEY}],
            "priority": 0,
        },
        "kubernetes-tokens": {
            "kubernetesTokenReview": token_review,
            "credentials": {"authorizationHeader": {"prefix": "Bearer"}},
            "when": [{"predicate": f"!({IS_API_KEY})"}],
            "priority": 1,
        },
    }


def unauthenticated_response() -> dict[str, Any]:
    """`response.unauthenticated` of every policy with `credential_authentication` (the reference's words)."""
    return {"code": 401, "message": {"value": "Authentication required"}}
