"""maas-api on the gateway: its HTTPRoute and AuthPolicy, as installed by `manifests/base/maas-api/` (a test
keeps the two equal) and by the local stack (`maasctl dev`, the e2e suite), so both serve the same paths.

- `/maas-api/v1/...` -> maas-api's `/v1/...` (the public API: keys, subscriptions, the model listing);
- `/maas-api/health` -> `/health`;
- `GET /v1/models` -> maas-api's `/v1/models`: the model listing on the one base URL an OpenAI SDK is pointed
  at (`contract.routing.MODELS_LISTING_PATH`), next to the model routes' base-URL rules. Exact, so no other
  `/v1/...` path reaches maas-api unasked.

The `/internal` endpoints are never routed. maas-api authenticates every request itself, so the route keeps
the caller's credentials (`maas.opendatahub.io/forward-credentials`; the local data plane removes them on any
other non-model route). The AuthPolicy checks Kubernetes tokens with a TokenReview and passes API keys on
(maas-api validates them); `/maas-api/health` is public.
"""

from __future__ import annotations

from typing import Any, Final

from maasctl.builders.refs import GatewayRef
from maasctl.contract.edge import FORWARD_CREDENTIALS_ANNOTATION
from maasctl.contract.routing import MODELS_LISTING_PATH

__all__ = ["HEALTH_PATH", "NAME", "maas_api_auth_policy", "maas_api_route"]

NAME: Final = "maas-api"
PREFIX: Final = "/maas-api/v1"
HEALTH_PATH: Final = "/maas-api/health"
PORT: Final = 8080
_KEY_IN_AUTHORIZATION: Final = ("'authorization' in request.headers && "
                                "request.headers['authorization'].startsWith(\"Bearer sk-oai-\")")
_KEY_IN_X_API_KEY: Final = ("!('authorization' in request.headers) && 'x-api-key' in request.headers && "
                            "request.headers['x-api-key'].startsWith(\"sk-oai-\")")
_API_KEY: Final = f"({_KEY_IN_AUTHORIZATION}) || ({_KEY_IN_X_API_KEY})"
_NOT_HEALTH: Final = f'request.path != "{HEALTH_PATH}"'


def _rule(match: dict[str, Any], rewrite: dict[str, Any]) -> dict[str, Any]:
    return {"matches": [match], "filters": [{"type": "URLRewrite", "urlRewrite": {"path": rewrite}}],
            "backendRefs": [{"name": NAME, "port": PORT}]}


def maas_api_route(namespace: str, gateway: GatewayRef) -> dict[str, Any]:
    """maas-api's HTTPRoute on `gateway` (the Service `maas-api` in `namespace`)."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": NAME, "namespace": namespace,
                     "annotations": {FORWARD_CREDENTIALS_ANNOTATION: "true"}},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name,
                            "namespace": gateway.namespace}],
            "rules": [
                _rule({"path": {"type": "PathPrefix", "value": PREFIX}},
                      {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}),
                _rule({"path": {"type": "Exact", "value": HEALTH_PATH}},
                      {"type": "ReplaceFullPath", "replaceFullPath": "/health"}),
                _rule({"path": {"type": "Exact", "value": MODELS_LISTING_PATH}, "method": "GET"},
                      {"type": "ReplaceFullPath", "replaceFullPath": MODELS_LISTING_PATH}),
            ],
        },
    }


def maas_api_auth_policy(namespace: str, audiences: tuple[str, ...] = ("https://kubernetes.default.svc",)
                         ) -> dict[str, Any]:
    """The AuthPolicy of maas-api's route. `audiences` () lets the data plane pick the TokenReview audiences
    (the local one uses the API server's own)."""
    review: dict[str, Any] = {"audiences": list(audiences)} if audiences else {}
    return {
        "apiVersion": "kuadrant.io/v1",
        "kind": "AuthPolicy",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": NAME},
            "rules": {"authentication": {
                "kubernetes-token": {
                    "kubernetesTokenReview": review,
                    "credentials": {"authorizationHeader": {"prefix": "Bearer"}},
                    "when": [{"predicate": _NOT_HEALTH}, {"predicate": f"!({_KEY_IN_AUTHORIZATION})"},
                             {"predicate": f"!({_KEY_IN_X_API_KEY})"}],
                },
                "api-key": {"anonymous": {}, "when": [{"predicate": _NOT_HEALTH}, {"predicate": _API_KEY}]},
                "health": {"anonymous": {}, "when": [{"predicate": f'request.path == "{HEALTH_PATH}"'}]},
            }},
        },
    }
