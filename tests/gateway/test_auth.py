"""The generated AuthPolicy interpreted by the gateway (callbacks answered in-process, TokenReview stubbed).

Integration tests (test_gateway_e2e.py) run the same policy against the real API server; these pin the
decision table: who gets 401/403, what goes upstream, what rate limiting sees.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.refs import ObjectRef
from maasctl.contract import identity as ids
from maasctl.gateway.auth import AuthPolicyRuntime, AuthServiceUnavailable, TokenReviewer
from maasctl.gateway.authpolicy import RequestInfo, audience_of_host, compile_auth_policy
from maasctl.tls import default_tls

KEYS = {"sk-oai-good": {"valid": True, "username": "alice", "groups": ["premium-users"], "keyId": "k1",
                        "subscription": "models-as-a-service/premium"}}
TOKENS = {"tok-bob": {"authenticated": True, "user": {"username": "bob", "groups": ["free-users"]}}}


def policy() -> Any:
    obj = build_auth_policy(
        AuthPolicyInput(ObjectRef("team", "m"), ObjectRef("team", "route"),
                        (AuthPolicySource(ObjectRef("models-as-a-service", "p"),
                                          groups=("premium-users", "free-users")),)),
        AuthSettings("http://maas-api.test:8080", cache_ttl_seconds=30))
    assert obj is not None
    obj["metadata"] |= {"uid": "u", "generation": 1}
    return compile_auth_policy(obj)


class Callbacks:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != "Bearer gw":  # the gateway's shared token (sharedSecretRef)
            return httpx.Response(401, json={"error": {"code": "unauthenticated"}})
        body = json.loads(request.content)
        self.calls.append((request.url.path, body))
        if request.url.path.endswith("/validate"):
            return httpx.Response(200, json=KEYS.get(body["key"], {"valid": False}))
        requested = body["keySubscription"] or body["requestedSubscription"]
        if body["username"] == "carol" or requested == "nope":
            return httpx.Response(200, json={"error": "not_found", "message": "no subscription"})
        name = requested.split("/")[-1] or "free"
        return httpx.Response(200, json={"name": name, "namespace": "models-as-a-service"})


async def review(token: str, audiences: tuple[str, ...]) -> Mapping[str, Any] | None:
    return TOKENS.get(token)


def req(auth: str | None = None, **headers: str) -> RequestInfo:
    h = {k.replace("_", "-"): v for k, v in headers.items()}
    if auth:
        h["authorization"] = auth
    return RequestInfo("POST", "/team/m/v1/chat/completions", "gw", h)


async def test_decisions_of_the_generated_policy() -> None:
    cb = Callbacks()
    async with httpx.AsyncClient(transport=httpx.MockTransport(cb)) as http:
        rt = AuthPolicyRuntime(http, review, callback_base="http://127.0.0.1:1", callback_secret="gw")
        p = policy()

        ok = await rt.check(p, req("Bearer sk-oai-good"))
        assert ok.allowed, ok.reason
        carried = ids.decode_identity_header(ok.headers.pop(ids.HEADER))  # for the payload processor
        assert ok.headers == {"x-maas-subscription": "premium"}
        ident = ok.filters["identity"]
        assert dict(carried.identity) == ident  # the local runtime renders it as Authorino does
        assert dict(carried.filters) == {"billing": {"tenant": "", "keyLabels": {}}}
        assert ident["userid"] == "alice" and ident["keyId"] == "k1" and ident["groups_str"] == "premium-users"
        assert ident["selected_subscription_key"] == "models-as-a-service/premium@team/m"
        assert cb.calls[0] == ("/internal/v1/api-keys/validate", {"key": "sk-oai-good"})
        assert cb.calls[1][1]["keySubscription"] == "models-as-a-service/premium"

        again = await rt.check(p, req("Bearer sk-oai-good"))
        assert again.allowed and len(cb.calls) == 2  # both callbacks cached

        bad_key = await rt.check(p, req("Bearer sk-oai-revoked"))
        assert (bad_key.allowed, bad_key.status) == (False, 403)

        token = await rt.check(p, req("Bearer tok-bob", x_maas_subscription="free"))
        assert token.allowed and token.filters["identity"]["userid"] == "bob"
        assert cb.calls[-1][1]["requestedSubscription"] == "free"

        assert (await rt.check(p, req("Bearer unknown-token"))).status == 401
        assert (await rt.check(p, req())).status == 401

        spoof = await rt.check(p, req("Bearer tok-bob", x_maas_username="admin"))
        assert (spoof.allowed, spoof.status) == (False, 403) and "no-client-identity-headers" in spoof.reason

        nosub = await rt.check(p, req("Bearer tok-bob", x_maas_subscription="nope"))
        assert (nosub.allowed, nosub.status) == (False, 403) and "subscription-selected" in nosub.reason


async def test_caller_outside_the_allowed_groups_is_forbidden() -> None:
    TOKENS["tok-carol"] = {"authenticated": True, "user": {"username": "carol", "groups": ["system:authenticated"]}}
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
        out = await AuthPolicyRuntime(http, review, callback_secret="gw").check(policy(), req("Bearer tok-carol"))
    assert (out.allowed, out.status) == (False, 403) and "allowed-subjects" in out.reason


async def test_decisions_are_reused_only_for_the_same_relevant_request_attributes() -> None:
    cb = Callbacks()
    async with httpx.AsyncClient(transport=httpx.MockTransport(cb)) as http:
        rt = AuthPolicyRuntime(http, review, callback_secret="gw")
        p = policy()
        assert p.deps.header_values == {"authorization", "x-api-key", "x-maas-subscription"}
        assert p.deps.header_names
        assert not p.deps.all_headers
        first = await rt.check(p, req("Bearer sk-oai-good", content_length="10"))
        again = await rt.check(p, req("Bearer sk-oai-good", content_length="99"))
        assert first.allowed and again is first and rt.decision_hits == 1
        # a new header name (the client-identity rule reads all names) is a new decision: denied
        spoof = await rt.check(p, req("Bearer sk-oai-good", x_maas_username="admin"))
        assert spoof.status == 403
        other = await rt.check(p, req("Bearer tok-bob"))
        assert other.allowed and other.filters["identity"]["userid"] == "bob"
        assert rt.decision_hits == 1


async def test_a_simulated_identity_neither_reads_nor_fills_the_callback_cache() -> None:
    """`maasctl simulate` evaluates a user and groups without a credential: each simulation asks maas-api, and
    nothing it was answered is reused for another simulated identity or a real request."""
    cb = Callbacks()
    async with httpx.AsyncClient(transport=httpx.MockTransport(cb)) as http:
        rt = AuthPolicyRuntime(http, review, callback_secret="gw")
        p = policy()
        for user in ("alice", "carol", "alice"):
            out = await rt.check(p, req(), identity_override={"user": {"username": user,
                                                                         "groups": ["premium-users"]}})
            assert out.allowed == (user != "carol"), (user, out.reason)
        assert [body["username"] for _, body in cb.calls] == ["alice", "carol", "alice"]
        token = await rt.check(p, req("Bearer tok-bob"))  # a real request: its own selection, then cached
        again = await rt.check(p, req("Bearer tok-bob", x_request_id="2"))
        assert token.allowed and again.allowed and [b["username"] for _, b in cb.calls][3:] == ["bob"]


async def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


async def broken(request: httpx.Request) -> httpx.Response:
    return httpx.Response(502, text="bad gateway")


async def slow(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


async def review_down(token: str, audiences: tuple[str, ...]) -> Mapping[str, Any] | None:
    raise AuthServiceUnavailable("TokenReview failed")


async def test_an_unreachable_maas_api_or_token_review_is_a_503_never_a_pass_or_a_403() -> None:
    """Closed by default, and honest about it: when the services that decide cannot answer, nothing passes
    and the caller is told it is an outage (503), not a permission problem."""
    for handler in (unreachable, broken, slow):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            rt = AuthPolicyRuntime(http, review, callback_secret="gw")
            for auth in ("Bearer sk-oai-good", "Bearer tok-bob"):
                out = await rt.check(policy(), req(auth))
                assert (out.allowed, out.status) == (False, 503), (handler.__name__, auth, out)
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
        out = await AuthPolicyRuntime(http, review_down, callback_secret="gw").check(policy(), req("Bearer tok-bob"))
        assert (out.allowed, out.status) == (False, 503)
        # without the gateway's token configured the callbacks cannot be authenticated: 503, not a pass
        out = await AuthPolicyRuntime(http, review).check(policy(), req("Bearer sk-oai-good"))
        assert (out.allowed, out.status) == (False, 503)


async def test_a_callback_the_service_refuses_is_a_denial() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
        wrong = AuthPolicyRuntime(http, review, callback_secret="not-the-token")
        out = await wrong.check(policy(), req("Bearer sk-oai-good"))
        assert not out.allowed and out.status == 403


def _extending(identity: Any) -> Any:
    """A policy whose only entries resolve `identity` (plain) or a TokenReview, each extended with a mark, and
    admit only a marked identity."""
    mark = {"overrides": {"mark": {"value": True}}, "defaults": {"user": {"value": {"username": "x"}}}}
    return compile_auth_policy({
        "apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy", "metadata": {"name": "p", "namespace": "team"},
        "spec": {"rules": {
            "authentication": {
                "plain": {"plain": {"expression": json.dumps(identity)},
                          "when": [{"predicate": '"x-plain" in request.headers'}], **mark},
                "tokens": {"kubernetesTokenReview": {}, "priority": 1, **mark}},
            "authorization": {"marked": {"patternMatching": {"patterns": [{"predicate": "auth.identity.mark"}]}}},
        }}})


async def test_extended_properties_extend_an_identity_object_and_no_other_identity() -> None:
    """Authorino's `defaults`/`overrides` of an authentication entry: an object gains the properties (defaults
    only where absent); a string identity cannot be extended, so that entry establishes no identity (401)."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
        rt = AuthPolicyRuntime(http, review, decision_cache=False)
        token = await rt.check(_extending({}), req("Bearer tok-bob"))
        assert token.allowed and token.auth["identity"]["user"]["username"] == "bob"  # a default never replaces
        plain = await rt.check(_extending({"k": 1}), req(x_plain="1"))
        assert plain.allowed and plain.auth["identity"] == {"k": 1, "mark": True, "user": {"username": "x"}}
        string = await rt.check(_extending("sk-oai-x"), req(x_plain="1"))
        assert (string.allowed, string.status) == (False, 401), string
        simulated = await rt.check(_extending({}), req(), identity_override={"user": {"username": "sim"}})
        assert simulated.allowed and simulated.auth["identity"]["mark"] is True  # as its TokenReview would be


async def test_a_plain_decision_of_the_gateway_runs_without_cel_python(cel_interpreted: list[str]) -> None:
    """The gateway's own activations (request attributes, callback answers) stay on the compiled CEL path: a
    decision interpreted by cel-python costs 40-180 ms (BENCHMARKS.md, Performance II part 4)."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
        rt = AuthPolicyRuntime(http, review, callback_base="http://127.0.0.1:1", callback_secret="gw")
        for request in (req("Bearer sk-oai-good"), req("Bearer tok-bob"),
                        req("Bearer tok-bob", x_maas_subscription="free"), req(x_api_key="sk-oai-good")):
            outcome = await rt.check(policy(), request)
            assert outcome.allowed, outcome.reason
    assert cel_interpreted == []


# --- the decision cache key: everything a decision reads of the request ----------------------------------

HOST_A = "a.example.com"


class AudienceReview:
    """A TokenReview as the API server answers it: `tok-a` is valid for the audience `a.example.com` only."""

    def __init__(self, user: Mapping[str, Any] | None = None) -> None:
        self.user = user or {"username": "alice", "groups": ["free-users"]}
        self.calls: list[tuple[str, ...]] = []

    async def __call__(self, token: str, audiences: tuple[str, ...]) -> Mapping[str, Any] | None:
        self.calls.append(audiences)
        return {"authenticated": True, "user": self.user} if (token, audiences) == ("tok-a", (HOST_A,)) else None


def token_policy(audiences: list[str] | None = None, **spec: Any) -> Any:
    """A policy that authenticates by TokenReview (no audiences named: the host is the audience) and allows."""
    review = {"audiences": audiences} if audiences else {}
    rules = {"authentication": {"k8s": {"kubernetesTokenReview": review}}, **spec.pop("rules", {})}
    return compile_auth_policy({"apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy", "metadata": {
        "name": "p", "namespace": "n", "uid": "u", "generation": 1}, "spec": {"rules": rules, **spec}})


def at(host: str, token: str = "tok-a", **headers: str) -> RequestInfo:
    h = {"authorization": f"Bearer {token}", "host": host, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return RequestInfo("POST", "/team/m/v1/chat/completions", host, h)


def runtime(http: httpx.AsyncClient, review: AudienceReview, from_host: bool = True) -> AuthPolicyRuntime:
    """The gateway's runtime: its own TokenReview cache (`TokenReviewer`) in front of the review."""
    return AuthPolicyRuntime(http, TokenReviewer(review), callback_secret="gw", audiences_from_host=from_host)


@pytest.mark.parametrize("host,audience", [
    ("a.example.com", "a.example.com"), ("A.Example.COM", "a.example.com"), ("a.example.com:8443", "a.example.com"),
    (" A.example.com:80", "a.example.com"), ("[::1]:8080", "[::1]"), ("[FE80::1]", "[fe80::1]"), ("", "")])
def test_the_audience_of_a_host_is_its_lower_case_name_without_port(host: str, audience: str) -> None:
    assert audience_of_host(host) == audience


class TestDecisionCacheKey:
    @pytest.mark.parametrize("generated", [False, True], ids=["token-policy", "generated-policy"])
    async def test_a_token_for_host_a_is_not_allowed_on_host_b_from_the_cache(self, generated: bool) -> None:
        review = AudienceReview()
        async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as http:
            rt = runtime(http, review)
            p = policy() if generated else token_policy()
            assert (await rt.check(p, at(HOST_A))).allowed
            on_b = await rt.check(p, at("b.example.com"))
            assert (on_b.allowed, on_b.status) == (False, 401)  # as a fresh check: the token is not for b
            assert review.calls == [(HOST_A,), ("b.example.com",)]
            again = await rt.check(p, at(HOST_A))
            assert again.allowed and rt.decision_hits == 1
            rt.clear_caches()
            fresh = await runtime(http, AudienceReview()).check(p, at("b.example.com"))
            assert fresh.status == on_b.status

    async def test_a_host_differing_only_by_case_or_port_shares_the_decision(self) -> None:
        review = AudienceReview()
        hosts = [HOST_A, "A.Example.COM", "a.example.com:8443", "A.EXAMPLE.com:80"]
        async with httpx.AsyncClient(verify=default_tls()) as http:
            rt = runtime(http, review)
            p = token_policy()
            assert len({repr(p.deps.key(at(h), audience_from_host=True)) for h in hosts}) == 1
            for host in hosts:
                out = await rt.check(p, at(host))
                assert out.allowed, (host, out.reason)
            assert rt.decision_hits == 3 and review.calls == [(HOST_A,)]
            # the host is no part of the key when it is not the audience: named audiences, or the flag off
            named = token_policy(audiences=[HOST_A])
            assert named.deps.key(at(HOST_A), audience_from_host=True) == named.deps.key(
                at("b.example.com"), audience_from_host=True)
            assert p.deps.key(at(HOST_A)) == p.deps.key(at("b.example.com"))

    @pytest.mark.parametrize("spec,good,bad", [
        ({"patterns": {"internal": {"allOf": [{"selector": "request.headers.x-team", "operator": "eq", "value": "a"}]}},
          "rules": {"authorization": {"team": {"patternMatching": {"patterns": [{"patternRef": "internal"}]}}}}},
         at(HOST_A, x_team="a"), at(HOST_A, x_team="b")),
        ({"rules": {"authorization": {"team": {"patternMatching": {"patterns": [
            {"predicate": 'request . headers["x-team"] == "a"'}]}}}}},
         at(HOST_A, x_team="a"), at(HOST_A, x_team="b")),
        ({"rules": {"authorization": {"team": {"patternMatching": {"patterns": [
            {"predicate": 'request["headers"]["x-team"] == "a"'}]}}}}},
         at(HOST_A, x_team="a"), at(HOST_A, x_team="b")),
        ({"rules": {"authorization": {"team": {"patternMatching": {"patterns": [
            {"predicate": 'request.\n  path.startsWith("/team/")'}]}}}}},
         at(HOST_A), RequestInfo("POST", "/other/v1/chat/completions", HOST_A, at(HOST_A).headers)),
    ], ids=["patternRef", "blank-around-dot", "indexed-request", "newline-after-dot"])
    async def test_every_request_input_a_pattern_reads_is_in_the_key(
            self, spec: dict[str, Any], good: RequestInfo, bad: RequestInfo) -> None:
        async with httpx.AsyncClient(verify=default_tls()) as http:
            rt = runtime(http, AudienceReview(), from_host=False)
            p = token_policy(audiences=[HOST_A], **spec)
            assert (await rt.check(p, good)).allowed
            denied = await rt.check(p, bad)
            fresh = await runtime(http, AudienceReview(), from_host=False).check(p, bad)
            assert (fresh.allowed, fresh.status) == (False, 403)
            assert (denied.allowed, denied.status) == (False, 403), "allowed from the cache, denied when fresh"


@pytest.mark.parametrize(("text", "values", "names", "full"), [
    ('request.headers.exists(h, h.startsWith("x-auth-request-"))', set(), True, False),
    ('"request" in request.headers', set(), True, False),
    ("'request.headers' == request.headers['x-a']", set(), False, True),
    ('request.headers["x-a"] == "request"', {"x-a"}, False, False),
    ('"a\\"request" + request.headers.authorization', {"authorization"}, False, False),
    ('request.headers["x-a"] + string(request)', {"x-a"}, False, True),
    ('r"\\" + request.headers.x + "request"', {"x"}, False, True),  # a raw literal: read conservatively
    ('"""request""" == request.headers["x-b"]', {"x-b"}, False, True),
])
def test_what_a_policy_reads_ignores_words_inside_string_literals(
        text: str, values: set[str], names: bool, full: bool) -> None:
    """The decision cache keys on what a policy reads: `request` inside a literal is no reference (the header
    contract's prefix list names `x-auth-request-`), so the cache is not keyed on every header; a reference
    outside literals still is, and unusual literals are read conservatively."""
    from maasctl.gateway.authpolicy import _request_deps

    deps = _request_deps([text], [], set(), False)
    assert (set(deps.header_values), deps.header_names, deps.all_headers) == (values, names, full)
