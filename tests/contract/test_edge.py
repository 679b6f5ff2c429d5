"""The data plane's edge contract: one canonical path, and the header rules (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.edge import (
    AmbiguousPath,
    canonical_path,
    forbidden_client_header,
    server_decided,
    upstream_headers,
)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("/llm/m/v1/chat/completions", "/llm/m/v1/chat/completions"),
        ("/llm//m///v1/models", "/llm/m/v1/models"),
        ("/llm/m/./v1/models", "/llm/m/v1/models"),
        ("/llm/x/../m/v1/models", "/llm/m/v1/models"),
        ("/llm/m/v1/chat/completions/..", "/llm/m/v1/chat/"),
        ("/%6c%6Cm/m/v1/models", "/llm/m/v1/models"),
        ("/llm/m/%2e%2e/other/v1", "/llm/other/v1"),
        ("/llm/m/v1/%7Euser", "/llm/m/v1/~user"),
        ("/llm/m/v1/a%20b", "/llm/m/v1/a%20b"),
        ("/", "/"),
    ],
)
def test_canonical_path(raw: str, canonical: str) -> None:
    assert canonical_path(raw) == canonical


@pytest.mark.parametrize(
    "raw",
    [
        "/llm/m%2Fv1/models",  # encoded slash: a backend could split it differently
        "/llm/m%2f..%2fother",
        "/llm/m/%5c..%5cother",
        "/llm/m/%252e%252e/other",  # double encoding
        "/llm/m\\..\\other",
        "/../etc/passwd",
        "/llm/../../x",
        "/llm/m/%00/v1",
        "/llm/m/\x00/v1",
        "/llm/m/%0a/v1",
        "llm/m/v1",
        "/llm/m/v1/models?x=1",
        "/llm/%ff/v1",
        "/" + "a" * 5000,
    ],
)
def test_ambiguous_paths_are_refused(raw: str) -> None:
    with pytest.raises(AmbiguousPath):
        canonical_path(raw)


@given(st.text(alphabet="/.ab%2eF5c", max_size=30))
def test_canonical_paths_are_fixed_points(raw: str) -> None:
    try:
        once = canonical_path("/" + raw)
    except AmbiguousPath:
        return
    assert canonical_path(once) == once
    assert "//" not in once and "/./" not in once and "/../" not in once


@pytest.mark.parametrize(
    "name",
    ["X-MaaS-Username", "x-maas-group", "X_MAAS_KEY_ID", "Impersonate-User", "impersonate-group",
     "Impersonate-Extra-Scopes", "X-Remote-User", "x_remote_group", "X-Forwarded-User", "x-forwarded-email",
     "X-Auth-Request-User", "Remote-User", "X-LLM-D-Inference-Objective", "x_llm_d_inference_objective",
     # the inference scheduler's family: Gateway API Inference Extension keys, llm-d's, sidecar peers, SLOs, path
     "x-gateway-inference-objective", "X-Gateway-Inference-Fairness-Id", "x_gateway_destination_endpoint",
     "x-gateway-destination-endpoint-subset", "x-gateway-destination-endpoint-served",
     "x-gateway-model-name-rewrite", "x-gateway-inference-request-cost", "X-GATEWAY-WHATEVER-COMES-NEXT",
     "x-llm-d-request-dropped-reason", "x-prefiller-host-port", "x-encoder-hosts-ports",
     "x_data_parallel_host_port", "x-slo-ttft-ms", "X-Slo-Tpot-Ms", "x-original-path", "x-forwarded-path",
     " x-gateway-inference-objective"],
)
def test_server_decided_headers(name: str) -> None:
    assert server_decided(name)
    assert forbidden_client_header(["content-type", name]) == name


@pytest.mark.parametrize("name", ["X-MaaS-Subscription", "x_maas_subscription", "content-type", "x-request-id",
                                  "user-agent", "x-forwarded-for", "x-session-token", "x-gateway", "x-llm-d",
                                  "x-slo", "x-gatewayinference-objective"])
def test_client_headers_that_are_fine(name: str) -> None:
    assert not server_decided(name)


CLIENT = [
    ("authorization", "Bearer sk-oai-caller"), ("cookie", "session=1"), ("x-api-key", "caller"),
    ("content-type", "application/json"), ("x-maas-subscription", "mine"), ("x_maas_user", "root"),
    ("impersonate-user", "admin"), ("connection", "keep-alive, x-drop-me"), ("x-drop-me", "1"),
    ("host", "gw"), ("content-length", "10"), ("x-request-id", "r1"),
]


def test_no_scheduler_header_a_client_sent_reaches_the_backend_on_any_route() -> None:
    client = [("x-gateway-inference-objective", "premium"), ("x_gateway_inference_fairness_id", "other"),
              ("X-Gateway-Destination-Endpoint", "10.0.0.9:8000"), ("x-prefiller-host-port", "evil:1"),
              ("content-type", "application/json")]
    for forward in (False, True):
        out = upstream_headers(client, {"x-llm-d-inference-objective": "obj-1"}, forward_credentials=forward)
        assert dict(out) == {"content-type": "application/json", "x-llm-d-inference-objective": "obj-1"}


def test_model_routes_never_forward_credentials_or_identity() -> None:
    out = dict(upstream_headers(CLIENT, {"x-maas-subscription": "ns/sub"}, forward_credentials=False,
                                upstream_key="sk-provider"))
    assert out == {"content-type": "application/json", "x-request-id": "r1", "x-maas-subscription": "ns/sub",
                   "authorization": "Bearer sk-provider"}


@pytest.mark.parametrize("name", ["x-maas-identity", "X-MaaS-Identity"])
@pytest.mark.parametrize("forward", [False, True])
def test_the_identity_header_of_the_authorizer_never_goes_upstream(name: str, forward: bool) -> None:
    """Authorino renders `x-maas-identity` for the payload processor; on every route kind it stops here."""
    out = dict(upstream_headers([*CLIENT, ("x-maas-identity", "{}")], {name: '{"identity": {}}',
                                "x-maas-subscription": "ns/sub"}, forward_credentials=forward))
    assert "x-maas-identity" not in {k.lower() for k in out} and out["x-maas-subscription"] == "ns/sub"


def test_without_a_provider_key_no_authorization_goes_upstream() -> None:
    out = dict(upstream_headers(CLIENT, {}, forward_credentials=False))
    assert "authorization" not in out and "cookie" not in out and "x-api-key" not in out


def test_non_model_routes_keep_the_callers_credentials_but_not_identity_headers() -> None:
    out = dict(upstream_headers(CLIENT, {}, forward_credentials=True))
    assert out["authorization"] == "Bearer sk-oai-caller" and out["x-maas-subscription"] == "mine"
    assert "x_maas_user" not in out and "impersonate-user" not in out and "x-drop-me" not in out


def test_route_header_modifier_cannot_reintroduce_a_dropped_header_by_add() -> None:
    out = upstream_headers(CLIENT, {}, forward_credentials=False, set_headers=[("x-env", "prod")],
                           add_headers=[("cookie", "x"), ("x-extra", "1")], remove_headers=["x-request-id"])
    assert ("x-env", "prod") in out and ("x-extra", "1") in out
    assert all(n not in ("cookie", "x-request-id") for n, _ in out)
