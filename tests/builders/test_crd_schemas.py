"""Builder output against the real third-party CRD schemas (structural schema + evaluable CEL rules)."""

from __future__ import annotations

from typing import Any

import pytest

from maasctl.builders.authpolicy import (
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    ObjectiveBinding,
    build_auth_policy,
)
from maasctl.builders.httproute import ExternalRouteInput, build_external_route
from maasctl.builders.inferenceobjective import InferenceObjectiveInput, build_inference_objective
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.builders.validation import is_dns_subdomain

from .crdschema import CRDS, validate_object

MODEL = ObjectRef("llm", "granite")
ROUTE = ObjectRef("llm", "granite-route")


def _auth() -> dict[str, Any] | None:
    return build_auth_policy(
        AuthPolicyInput(MODEL, ROUTE, (AuthPolicySource(ObjectRef("maas", "p"), ("alice",), ("premium",)),),
                        (ObjectiveBinding(ObjectRef("maas", "premium"), "maas-premium-0123456789"),)),
        AuthSettings("https://maas-api.opendatahub.svc:8443", ("https://kubernetes.default.svc",)),
    )


def _trlp() -> dict[str, Any] | None:
    return build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, (
        SubscriptionLimits(ObjectRef("maas", "free"), (RateTier(100, "1m"), RateTier(5000, "24h"))),
        SubscriptionLimits(ObjectRef("maas", "vip"), unlimited=True),
    ), GatewayRef("gw-ns", "gw")))


def _unlimited_only_trlp() -> dict[str, Any] | None:
    return build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, (
        SubscriptionLimits(ObjectRef("maas", "vip"), unlimited=True),
    )))


def _route() -> dict[str, Any]:
    return build_external_route(ExternalRouteInput(
        MODEL, "openai", "api.openai.com", GatewayRef("gw-ns", "gw"), hostnames=("maas.example.com",),
        credential_secret="key",
    ))


def _objective() -> dict[str, Any]:
    return build_inference_objective(InferenceObjectiveInput(ObjectRef("maas", "premium"), ObjectRef("llm", "pool"),
                                                             MODEL, -3))


@pytest.mark.parametrize(
    ("crd_file", "build"),
    [
        pytest.param("kuadrant-operator-v1.5.2/kuadrant.io_authpolicies.yaml", _auth, id="authpolicy"),
        pytest.param("kuadrant-operator-v1.5.2/kuadrant.io_tokenratelimitpolicies.yaml", _trlp, id="trlp"),
        pytest.param("kuadrant-operator-v1.5.2/kuadrant.io_tokenratelimitpolicies.yaml", _unlimited_only_trlp,
                     id="trlp-unlimited-only"),
        pytest.param("gateway-api-v1.6.1/gateway.networking.k8s.io_httproutes.yaml", _route, id="httproute"),
        pytest.param("llm-d-router-v0.10.0/llm-d.ai_inferenceobjectives.yaml", _objective, id="inferenceobjective"),
    ],
)
def test_output_matches_crd(crd_file: str, build: Any) -> None:
    if not (CRDS / crd_file).exists():
        pytest.skip(f"{CRDS / crd_file} not present")  # integration tests validate against the API server too
    obj = build()
    assert obj is not None
    assert validate_object(crd_file, obj) == []
    meta = obj["metadata"]
    assert is_dns_subdomain(meta["name"])
    assert all(len(v) <= 63 for v in meta["labels"].values())


def test_checker_catches_mistakes() -> None:
    """The schema check itself can fail: a misspelt field, a bad window and a broken CEL rule are reported."""
    trlp = _trlp()
    assert trlp is not None
    trlp["spec"]["limits"]["maas-free-granite-tokens"]["rates"][0]["window"] = "1d"
    trlp["spec"]["limits"]["maas-free-granite-tokens"]["counter"] = []
    errors = validate_object("kuadrant-operator-v1.5.2/kuadrant.io_tokenratelimitpolicies.yaml", trlp)
    assert any("1d" in e for e in errors) and any("counter" in e for e in errors)
    route = _route()
    route["spec"]["rules"][0]["matches"].append({"path": {"type": "PathPrefix", "value": "/other"}})
    errors = validate_object("gateway-api-v1.6.1/gateway.networking.k8s.io_httproutes.yaml", route)
    assert errors, "ReplacePrefixMatch with two matches must violate the HTTPRoute CEL rule"
