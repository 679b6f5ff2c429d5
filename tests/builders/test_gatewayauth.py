"""The Gateway's default-deny `maas-gateway-auth`: closed by default, with the MaaS answers (issue 37). It takes
the credentials the model routes' policies take, by the same entries, and refuses every one of them: no
credential or a token nobody accepts 401, an API key or a valid token 403. Evaluated by the local data plane's
Authorino (`gateway.auth`), with an in-process TokenReview."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.celcheck import check_cel
from maasctl.builders.credentials import credential_authentication, unauthenticated_response
from maasctl.builders.gatewayauth import DENY_MESSAGE, GATEWAY_AUTH_NAME, build_gateway_default_auth
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import RequestInfo, compile_auth_policy

GATEWAY = GatewayRef("openshift-ingress", "maas-default-gateway")


def test_shape() -> None:
    policy = build_gateway_default_auth(GATEWAY)
    assert policy["metadata"]["name"] == GATEWAY_AUTH_NAME and policy["metadata"]["namespace"] == GATEWAY.namespace
    assert policy["spec"]["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                           "name": GATEWAY.name}
    defaults = policy["spec"]["defaults"]
    assert defaults["strategy"] == "atomic"  # a route's own policy replaces it entirely
    rules = defaults["rules"]
    assert rules["authentication"] == credential_authentication()
    assert rules["response"]["unauthenticated"] == unauthenticated_response()
    assert rules["response"]["unauthorized"] == {"code": 403, "message": {"value": DENY_MESSAGE}}
    check_cel(policy)


def test_the_credential_entries_are_the_model_policies_own() -> None:
    """Same names, same content: a caller is authenticated alike whether a MaaSAuthPolicy covers the route."""
    model = build_auth_policy(AuthPolicyInput(ObjectRef("llm", "m"), ObjectRef("llm", "m-route"), (
        AuthPolicySource(ObjectRef("maas", "p"), users=("alice",)),)), AuthSettings("http://maas-api:8080"))
    assert model is not None
    deny = build_gateway_default_auth(GATEWAY)["spec"]["defaults"]["rules"]
    assert model["spec"]["rules"]["authentication"] == deny["authentication"]
    assert model["spec"]["rules"]["response"]["unauthenticated"] == deny["response"]["unauthenticated"]


async def _review(token: str, audiences: tuple[str, ...]) -> dict[str, Any] | None:
    return {"authenticated": True, "user": {"username": "alice", "groups": []}} if token == "t-alice" else None


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401),
    ({"authorization": "Bearer not-a-token"}, 401),
    ({"authorization": "Basic YWxpY2U6cHc="}, 401),
    ({"x-api-key": "not-a-maas-key"}, 401),
    ({"authorization": "Bearer t-alice"}, 403),
    ({"authorization": "Bearer sk-oai-anything"}, 403),  # validity is not the question: nothing is admitted
    ({"x-api-key": "sk-oai-anything"}, 403),
])
async def test_everyone_is_refused_with_the_maas_answer(headers: dict[str, str], status: int) -> None:
    def no_callbacks(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"the default-deny calls nothing: {request.url}")

    async with httpx.AsyncClient(transport=httpx.MockTransport(no_callbacks)) as http:
        runtime = AuthPolicyRuntime(http, _review, decision_cache=False)
        outcome = await runtime.check(compile_auth_policy(build_gateway_default_auth(GATEWAY)),
                                      RequestInfo("POST", "/llm/m/v1/chat/completions", "gw", headers))
    assert (outcome.allowed, outcome.status) == (False, status), outcome
    assert outcome.message == (DENY_MESSAGE if status == 403 else "Authentication required")
