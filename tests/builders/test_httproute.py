"""ExternalModel route and backend Service."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from maasctl.builders.httproute import (
    ExternalRouteInput,
    FallbackInput,
    RelayTarget,
    build_external_model_objects,
    build_external_route,
    build_external_service,
    provider_plan,
    public_path_prefix,
    upstream_key_secret_patch,
)
from maasctl.builders.refs import GatewayRef, ObjectRef, OwnerRef
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.edge import CREDENTIAL_HEADERS, provider_headers, upstream_headers
from maasctl.contract.providers import decode_plan
from maasctl.contract.routing import BASE_INFERENCE_PATHS
from maasctl.gateway.routes import RouteTable, build_route_table

BASE = ExternalRouteInput(
    model=ObjectRef("llm", "gpt-4o"),
    external_model="openai",
    host="api.openai.com",
    gateway=GatewayRef("openshift-ingress", "maas-default-gateway"),
    credential_secret="openai-key",
)
LABELS = {
    "app.kubernetes.io/managed-by": "maas-controller",
    "app.kubernetes.io/part-of": "maas-model",
    "maas.opendatahub.io/model": "gpt-4o",
    "maas.opendatahub.io/model-namespace": "llm",
    "maas.opendatahub.io/external-model": "openai",
}


def test_exact_route() -> None:
    route = build_external_route(BASE)
    del route["spec"]["rules"][1:]  # the base-URL rules: TestBaseUrlRules
    assert route == {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": "maas-gpt-4o",
            "namespace": "llm",
            "labels": LABELS | {"app.kubernetes.io/component": "external-model-route"},
            "annotations": {
                "maas.opendatahub.io/published-model": "openai",
                "maas.opendatahub.io/target-model": "openai",
                "maas.opendatahub.io/model-aliases": "gpt-4o",
                "maas.opendatahub.io/upstream-key-secret": "openai-key",
                "maas.opendatahub.io/upstream-key-secret-key": "api-key",
            },
        },
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                            "name": "maas-default-gateway", "namespace": "openshift-ingress"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/llm/gpt-4o/v1"}}],
                    "filters": [
                        {"type": "URLRewrite", "urlRewrite": {
                            "hostname": "api.openai.com",
                            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"},
                        }},
                        {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": [
                            "authorization", "x-api-key", "api-key", "cookie", "proxy-authorization",
                            "x-maas-identity"]}},
                    ],
                    "backendRefs": [{"group": "", "kind": "Service", "name": "maas-gpt-4o", "port": 443,
                                     "weight": 1}],
                    "timeouts": {"request": "300s"},
                }
            ],
        },
    }


def test_exact_service() -> None:
    assert build_external_service(BASE) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "maas-gpt-4o",
            "namespace": "llm",
            "labels": LABELS | {"app.kubernetes.io/component": "external-model-backend"},
        },
        "spec": {
            "type": "ExternalName",
            "externalName": "api.openai.com",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "appProtocol": "https"}],
        },
    }


@pytest.mark.parametrize(
    ("base_path", "rewritten"),
    [
        pytest.param("/v1", "/v1", id="v1"),
        pytest.param("/openai/v1/", "/openai/v1", id="trailing-slash"),
        pytest.param("api/paas/v4", "/api/paas/v4", id="no-leading-slash"),
        pytest.param("", "/", id="empty-is-root"),
        pytest.param("/", "/", id="root"),
    ],
)
def test_base_path_rewrite(base_path: str, rewritten: str) -> None:
    route = build_external_route(replace(BASE, base_path=base_path))
    assert route["spec"]["rules"][0]["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"] == rewritten


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        pytest.param(None, "/llm/gpt-4o/v1", id="default"),
        pytest.param("/models/gpt", "/models/gpt/v1", id="custom"),
        pytest.param("/models/gpt/", "/models/gpt/v1", id="custom-trailing-slash"),
    ],
)
def test_public_path_prefix(prefix: str | None, expected: str) -> None:
    assert public_path_prefix(replace(BASE, path_prefix=prefix)) == expected


def test_plain_http_port_timeout_hostnames_and_owner() -> None:
    owner = OwnerRef("maas.opendatahub.io/v1alpha1", "MaaSModelRef", "gpt-4o", "uid-1")
    inp = replace(BASE, tls=False, port=8080, timeout="1h30m", hostnames=("b.example.com", "a.example.com"),
                  owner=owner, credential_secret=None)
    service, route = build_external_model_objects(inp)
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]
    assert route["spec"]["rules"][0]["backendRefs"][0]["port"] == 8080
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "1h30m"}
    assert route["spec"]["hostnames"] == ["a.example.com", "b.example.com"]
    assert not any("upstream-key" in a for a in route["metadata"]["annotations"])
    for obj in (service, route):
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef", "name": "gpt-4o",
            "uid": "uid-1", "controller": True, "blockOwnerDeletion": True,
        }]


def test_long_model_name_gives_short_service_name() -> None:
    inp = replace(BASE, model=ObjectRef("llm", "a." * 100 + "model"))
    service, route = build_external_model_objects(inp)
    assert len(service["metadata"]["name"]) <= 63
    assert route["spec"]["rules"][0]["backendRefs"][0]["name"] == service["metadata"]["name"]
    assert len(route["metadata"]["name"]) <= 253


def test_secret_patch_only_labels() -> None:
    assert upstream_key_secret_patch(BASE) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "openai-key", "namespace": "llm", "labels": {"maas.opendatahub.io/upstream-key": "true"}},
    }
    assert upstream_key_secret_patch(replace(BASE, credential_secret=None)) is None


@pytest.mark.parametrize(
    "inp",
    [
        pytest.param(replace(BASE, host="https://api.openai.com"), id="url-as-host"),
        pytest.param(replace(BASE, host="api.openai.com\r\nX-Evil: 1"), id="header-injection-host"),
        pytest.param(replace(BASE, host="-bad.example.com"), id="bad-host-label"),
        pytest.param(replace(BASE, host="a" * 64 + ".com"), id="host-label-too-long"),
        pytest.param(replace(BASE, port=0), id="port-zero"),
        pytest.param(replace(BASE, port=70000), id="port-too-large"),
        pytest.param(replace(BASE, timeout="5min"), id="bad-timeout"),
        pytest.param(replace(BASE, base_path="/v1/../admin"), id="path-traversal"),
        pytest.param(replace(BASE, base_path="/v1#frag"), id="fragment"),
        pytest.param(replace(BASE, base_path="/v 1"), id="space-in-path"),
        pytest.param(replace(BASE, path_prefix="//double"), id="double-slash-prefix"),
        pytest.param(replace(BASE, model=ObjectRef("llm", "Bad_Name")), id="bad-model-name"),
        pytest.param(replace(BASE, model=ObjectRef("Bad NS", "m")), id="bad-model-namespace"),
        pytest.param(replace(BASE, gateway=GatewayRef("ns", "")), id="empty-gateway"),
        pytest.param(replace(BASE, hostnames=("exa mple.com",)), id="bad-hostname"),
        pytest.param(replace(BASE, credential_secret="Bad/Secret"), id="bad-secret-name"),
    ],
)
def test_invalid_inputs(inp: ExternalRouteInput) -> None:
    with pytest.raises(InvalidInputError):
        build_external_model_objects(inp)


def test_wildcard_hostname_accepted() -> None:
    route = build_external_route(replace(BASE, hostnames=("*.example.com",)))
    assert route["spec"]["hostnames"] == ["*.example.com"]


def test_published_and_target_model_names() -> None:
    """The route names the model clients call (the ExternalModel) and the provider's name for it; the
    `external-model` label names the ExternalModel, never the provider's model."""
    inp = replace(BASE, external_model="company-chat", target_model="gpt-4o-2024-08-06")
    route = build_external_route(inp)
    assert route["metadata"]["labels"]["maas.opendatahub.io/external-model"] == "company-chat"
    annotations = route["metadata"]["annotations"]
    assert annotations["maas.opendatahub.io/published-model"] == "company-chat"
    assert annotations["maas.opendatahub.io/target-model"] == "gpt-4o-2024-08-06"
    assert annotations["maas.opendatahub.io/model-aliases"] == "gpt-4o"  # the MaaSModelRef's name
    same = build_external_route(replace(BASE, model=ObjectRef("llm", "openai"), external_model="openai"))
    assert "maas.opendatahub.io/model-aliases" not in same["metadata"]["annotations"]
    for bad in ("", "x" * 254, 'say "hi"', "a\nb", "back\\slash"):
        with pytest.raises(InvalidInputError):
            build_external_route(replace(BASE, target_model=bad))


# -- the caller's credentials never reach the provider ------------------------------------------------------


def _header_filter(route: dict[str, object]) -> dict[str, object]:
    rules = route["spec"]["rules"]  # type: ignore[index]
    return next(f for f in rules[0]["filters"] if f["type"] == "RequestHeaderModifier")


@pytest.mark.parametrize("inp", [
    pytest.param(BASE, id="with-upstream-key"),
    pytest.param(replace(BASE, credential_secret=None), id="without-upstream-key"),
    pytest.param(replace(BASE, host="localhost", tls=False, port=8000), id="local-provider"),
])
def test_route_removes_every_caller_credential(inp: ExternalRouteInput) -> None:
    """Envoy forwards whatever the route does not remove, and the endpoint is a namespace admin's choice: the
    route itself removes every header the edge contract counts as a caller credential."""
    modifier = _header_filter(build_external_route(inp))["requestHeaderModifier"]
    assert set(modifier["remove"]) >= CREDENTIAL_HEADERS  # type: ignore[index]
    assert set(modifier) == {"remove"}  # nothing set or added: no value of ours is ever in the route  # type: ignore[arg-type]


def test_local_data_plane_applies_the_removal_and_still_injects_the_provider_key() -> None:
    """The local gateway reads the generated route: the caller's credentials are gone, the provider key (injected
    after the route's filters) arrives, and other headers pass."""
    service, route = build_external_model_objects(replace(BASE, host="localhost", tls=False, port=8000))
    table = build_route_table([route], lambda ns, name: service if name == service["metadata"]["name"] else None,
                              ("maas-default-gateway", "openshift-ingress"))
    match = table.match("gw.example", "/llm/gpt-4o/v1/chat/completions", "POST", {})
    assert match is not None
    rule = match.rule
    client = [("Authorization", "Bearer sk-oai-caller"), ("X-Api-Key", "sk-oai-caller"), ("Cookie", "s=1"),
              ("Proxy-Authorization", "Basic eA=="), ("Api-Key", "k"), ("Content-Type", "application/json")]
    sent = upstream_headers(client, {}, forward_credentials=True, set_headers=rule.set_headers,
                            add_headers=rule.add_headers, remove_headers=rule.remove_headers,
                            upstream_key="provider-secret")
    assert ("authorization", "Bearer provider-secret") in sent
    assert ("content-type", "application/json") in sent
    credentials = {"cookie", "x-api-key", "api-key", "proxy-authorization"}
    leaked = [(n, v) for n, v in sent if "caller" in v or n in credentials]
    assert leaked == []


# -- the provider host is a destination the gateway may be sent to -------------------------------------------


@pytest.mark.parametrize("host", [
    "169.254.169.254", "169.254.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "10.1",
    "granite-kserve-workload-svc.llm-team-b.svc.cluster.local", "maas-api.opendatahub.svc",
    "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "kubernetes", "kubernetes.default",
    "x.other.svc.cluster.local", "a-b-c-d.llm.pod.cluster.local",
])
def test_provider_host_must_be_a_permitted_destination(host: str) -> None:
    with pytest.raises(InvalidInputError, match="provider host"):
        build_external_model_objects(replace(BASE, host=host))


@pytest.mark.parametrize("host", [
    "api.openai.com", "localhost", "127.0.0.1", "10.0.0.1", "192.168.1.20", "vllm.internal.example",
    "granite-workload.llm.svc.cluster.local", "granite-workload.llm.svc",
])
def test_ordinary_local_private_and_own_namespace_hosts_still_work(host: str) -> None:
    service, route = build_external_model_objects(replace(BASE, host=host))
    assert service["spec"]["externalName"] == host
    assert route["spec"]["rules"][0]["filters"][0]["urlRewrite"]["hostname"] == host


class TestBaseUrlRules:
    """The one base URL: each base path, matched with the model header, rewritten to the provider's path."""

    def test_exact_rules(self) -> None:
        rules = build_external_route(BASE)["spec"]["rules"]
        prefix_rule, door_rule = rules[0], rules[1]
        assert len(rules) == 2 + len(BASE_INFERENCE_PATHS)
        assert door_rule["matches"] == [{"path": {"type": "Exact", "value": "/llm/gpt-4o/v1/messages"}}]
        assert door_rule["filters"][0]["urlRewrite"]["path"] == {"type": "ReplaceFullPath",
                                                                 "replaceFullPath": "/v1/chat/completions"}
        for api_path, rule in zip(BASE_INFERENCE_PATHS, rules[2:], strict=True):
            provider_path = "/v1/chat/completions" if api_path == "/v1/messages" else api_path
            assert rule["matches"] == [
                {"path": {"type": "Exact", "value": api_path},
                 "headers": [{"type": "Exact", "name": "x-gateway-model-name", "value": "openai"}]},
                {"path": {"type": "Exact", "value": api_path},
                 "headers": [{"type": "Exact", "name": "x-gateway-model-name", "value": "gpt-4o"}]},
            ]
            assert rule["filters"][0] == {"type": "URLRewrite", "urlRewrite": {
                "hostname": "api.openai.com", "path": {"type": "ReplaceFullPath", "replaceFullPath": provider_path}}}
            assert rule["filters"][1:] == prefix_rule["filters"][1:]
            assert rule["backendRefs"] == prefix_rule["backendRefs"]
            assert rule["timeouts"] == prefix_rule["timeouts"]

    def test_same_names_match_once(self) -> None:
        rules = build_external_route(replace(BASE, external_model="gpt-4o"))["spec"]["rules"]
        assert all(len(r["matches"]) == 1 for r in rules)

    @pytest.mark.parametrize(("base_path", "upstream"), [("/v1", "/v1/chat/completions"),
                                                          ("/openai/v1/", "/openai/v1/chat/completions"),
                                                          ("", "/chat/completions"),
                                                          ("api/paas/v4", "/api/paas/v4/chat/completions")])
    def test_provider_base_path(self, base_path: str, upstream: str) -> None:
        rules = build_external_route(replace(BASE, base_path=base_path))["spec"]["rules"]
        assert rules[2]["filters"][0]["urlRewrite"]["path"]["replaceFullPath"] == upstream
        assert rules[1]["filters"][0]["urlRewrite"]["path"]["replaceFullPath"] == upstream  # the Messages door

    @pytest.mark.parametrize(("path", "header", "served", "upstream"), [
        ("/v1/chat/completions", "openai", True, "/v1/chat/completions"),
        ("/v1/embeddings", "gpt-4o", True, "/v1/embeddings"),
        ("/v1/responses", "openai", True, "/v1/responses"),
        ("/v1/messages", "openai", True, "/v1/chat/completions"),
        ("/llm/gpt-4o/v1/messages", None, True, "/v1/chat/completions"),
        ("/v1/messages", "other", False, None),
        ("/v1/chat/completions", "other", False, None),
        ("/v1/chat/completions", None, False, None),
        ("/v1/models", "openai", False, None),
        ("/v1/chat/completions/x", "openai", False, None),
        ("/llm/gpt-4o/v1/chat/completions", None, True, "/v1/chat/completions"),
        ("/llm/gpt-4o/v1/chat/completions", "other", True, "/v1/chat/completions"),
    ])
    def test_the_gateway_route_table_matches_them(self, path: str, header: str | None, served: bool,
                                                  upstream: str | None) -> None:
        service, route = build_external_model_objects(replace(BASE, base_path="/v1"))
        route["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        table = build_route_table([route], lambda ns, name: service if name == "maas-gpt-4o" else None,
                                  ("maas-default-gateway", "openshift-ingress"))
        headers = {"x-gateway-model-name": header} if header is not None else {}
        match = table.match("gw.example.com", path, "POST", headers)
        assert (match is not None) == served
        if match is not None:
            assert match.upstream_path == upstream
            assert match.rule.model == "llm/gpt-4o"
            assert match.rule.backends[0].base_url == "https://api.openai.com"

    def test_two_models_are_told_apart_by_the_header(self) -> None:
        objs = []
        for name in ("alpha", "beta"):
            service, route = build_external_model_objects(
                replace(BASE, model=ObjectRef("llm", name), external_model=name, host=f"{name}.example.com"))
            objs += [service, route]
        services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
        table = build_route_table([o for o in objs if o["kind"] == "HTTPRoute"],
                                  lambda ns, name: services.get(name), ("maas-default-gateway", "openshift-ingress"))
        for name in ("alpha", "beta"):
            match = table.match("h", "/v1/completions", "POST", {"x-gateway-model-name": name})
            assert match is not None and match.rule.model == f"llm/{name}"


class TestCompletionCeiling:
    def test_absent_by_default(self) -> None:
        assert "maas.opendatahub.io/max-completion-tokens" not in build_external_route(BASE)["metadata"]["annotations"]

    def test_carried_and_read_by_the_gateway(self) -> None:
        service, route = build_external_model_objects(replace(BASE, max_completion_tokens=256))
        assert route["metadata"]["annotations"]["maas.opendatahub.io/max-completion-tokens"] == "256"
        table = build_route_table([route], lambda ns, name: service, ("maas-default-gateway", "openshift-ingress"))
        assert {r.completion_ceiling for r in table.rules} == {256}

    @pytest.mark.parametrize("value", [0, -1, 1_000_001, True])
    def test_out_of_range_is_refused(self, value: int) -> None:
        with pytest.raises(InvalidInputError, match="maxCompletionTokens"):
            build_external_route(replace(BASE, max_completion_tokens=value))


@pytest.mark.parametrize("inp", [
    pytest.param(BASE, id="with-upstream-key"),
    pytest.param(replace(BASE, credential_secret=None), id="without-upstream-key"),
    pytest.param(replace(BASE, host="localhost", tls=False, port=8000), id="local-provider"),
])
def test_a_processor_owning_credentials_keeps_only_authorization(inp: ExternalRouteInput) -> None:
    """Envoy removes a route's headers after ext_proc: with the processor in the path (it removes the caller's
    `authorization` and sets the provider key there) the route must not remove `authorization`, and still
    removes every other caller credential."""
    modifier = _header_filter(build_external_route(replace(inp, processor_sets_authorization=True)))
    removed = set(modifier["requestHeaderModifier"]["remove"])  # type: ignore[index]
    assert removed == (CREDENTIAL_HEADERS - {"authorization"}) | {"x-maas-identity"}
    every_rule = build_external_route(replace(inp, processor_sets_authorization=True))["spec"]["rules"]
    for rule in every_rule:  # the per-model paths and the base-URL rules alike
        [mod] = [f for f in rule["filters"] if f["type"] == "RequestHeaderModifier"]
        assert "authorization" not in mod["requestHeaderModifier"]["remove"]


# -- provider API formats and key schemes (issue 38) ---------------------------------------------------------

ANTHROPIC = replace(BASE, external_model="claude", host="api.anthropic.com", provider="anthropic",
                    api_format="messages", credential_secret="anthropic-key")


def test_a_messages_provider_is_served_as_chat_completions_only() -> None:
    """Only chat completions have a Messages counterpart: they and the Messages door, on the model's path and
    the base URL, go to the provider's `/v1/messages`; no other OpenAI path reaches it (no route: 404) but for
    the model listing (GET only), which the data plane answers (TestModelListingRule)."""
    route = build_external_route(ANTHROPIC)
    annotations = route["metadata"]["annotations"]
    assert annotations["maas.opendatahub.io/api-format"] == "messages"
    assert annotations["maas.opendatahub.io/upstream-auth"] == "x-api-key"
    rewrites = [(m["path"]["type"], m["path"]["value"], m.get("method"), [h["value"] for h in m.get("headers", [])],
                 rule["filters"][0]["urlRewrite"]["path"])
                for rule in route["spec"]["rules"] for m in rule["matches"]]
    messages = {"type": "ReplaceFullPath", "replaceFullPath": "/v1/messages"}
    listing = {"type": "ReplaceFullPath", "replaceFullPath": "/v1/models"}
    assert [r[:2] + r[3:] for r in rewrites] == [
                        ("Exact", "/llm/gpt-4o/v1/chat/completions", [], messages),
                        ("Exact", "/llm/gpt-4o/v1/messages", [], messages),
                        ("Exact", "/llm/gpt-4o/v1/models", [], listing),
                        ("Exact", "/v1/chat/completions", ["claude"], messages),
                        ("Exact", "/v1/chat/completions", ["gpt-4o"], messages),
                        ("Exact", "/v1/messages", ["claude"], messages),
                        ("Exact", "/v1/messages", ["gpt-4o"], messages)]
    assert [r[2] for r in rewrites] == [None, None, "GET", None, None, None, None]
    service, _ = build_external_model_objects(replace(ANTHROPIC, host="localhost", tls=False, port=8000))
    table = build_route_table([route], lambda ns, name: service, ("maas-default-gateway", "openshift-ingress"))
    chat = table.match("gw", "/llm/gpt-4o/v1/chat/completions", "POST", {})
    assert chat is not None and chat.upstream_path == "/v1/messages"
    assert (chat.rule.api_format, chat.rule.key_scheme) == ("messages", "x-api-key")
    door = table.match("gw", "/llm/gpt-4o/v1/messages", "POST", {})
    assert door is not None and door.upstream_path == "/v1/messages"
    for other in ("/llm/gpt-4o/v1/embeddings", "/llm/gpt-4o/v1/completions", "/llm/gpt-4o/v1/models",
                  "/llm/gpt-4o/v1/messages/count_tokens", "/llm/gpt-4o/v1/chat/completions/x"):
        assert table.match("gw", other, "POST", {}) is None, other


def test_a_messages_provider_under_a_base_path() -> None:
    """Every rule goes to the provider's `<base>/messages`; the listing rule, never forwarded while the payload
    processor is in the path (it answers), to the provider's own listing, which refuses a request without key."""
    route = build_external_route(replace(ANTHROPIC, base_path="/anthropic/v1"))
    assert [rule["filters"][0]["urlRewrite"]["path"]["replaceFullPath"] for rule in route["spec"]["rules"]] == [
        "/anthropic/v1/messages", "/anthropic/v1/messages", "/anthropic/v1/models", *["/anthropic/v1/messages"] * 2]


@pytest.mark.parametrize(("inp", "scheme", "header"), [
    pytest.param(BASE, None, "authorization", id="openai"),
    pytest.param(replace(BASE, provider="vllm"), None, "authorization", id="vllm"),
    pytest.param(replace(BASE, provider="azure"), "api-key", "api-key", id="azure"),
    pytest.param(replace(BASE, provider="azure-openai"), "api-key", "api-key", id="azure-openai"),
    pytest.param(ANTHROPIC, "x-api-key", "x-api-key", id="anthropic"),
])
def test_the_provider_key_goes_where_the_provider_takes_it(inp: ExternalRouteInput, scheme: str | None,
                                                           header: str) -> None:
    """The scheme rides on the route; with the processor in the path the route keeps exactly that header (the
    processor sets the key there after removing the caller's) and still removes every other credential."""
    route = build_external_route(inp)
    assert route["metadata"]["annotations"].get("maas.opendatahub.io/upstream-auth") == scheme
    owned = build_external_route(replace(inp, processor_sets_authorization=True))
    for rule in owned["spec"]["rules"]:
        [mod] = [f for f in rule["filters"] if f["type"] == "RequestHeaderModifier"]
        assert set(mod["requestHeaderModifier"]["remove"]) == (CREDENTIAL_HEADERS - {header}) | {"x-maas-identity"}
    service, local = build_external_model_objects(replace(inp, host="localhost", tls=False, port=8000))
    table = build_route_table([local], lambda ns, name: service, ("maas-default-gateway", "openshift-ingress"))
    match = table.match("gw", "/llm/gpt-4o/v1/chat/completions", "POST", {})
    assert match is not None
    client = [("authorization", "Bearer caller"), ("x-api-key", "caller"), ("api-key", "caller")]
    sent = upstream_headers(client, {}, forward_credentials=False, upstream_key="provider-key",
                            key_scheme=match.rule.key_scheme)
    expected = "Bearer provider-key" if header == "authorization" else "provider-key"
    assert sent == [(header, expected)]


def test_an_unknown_api_format_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="apiFormat"):
        build_external_route(replace(BASE, api_format="bedrock"))


@pytest.mark.parametrize(("provider", "api_format", "key", "expected"), [
    ("openai", "openai-chat", "k", {"authorization": "Bearer k"}),
    ("azure", "openai-chat", "k", {"api-key": "k"}),
    ("anthropic", "messages", "k", {"x-api-key": "k", "anthropic-version": "2023-06-01"}),
    ("anthropic", "messages", "", {"anthropic-version": "2023-06-01"}),
    ("openai", "openai-chat", "", {}),
])
def test_provider_headers_as_the_console_lists_models(provider: str, api_format: str, key: str,
                                                      expected: dict[str, str]) -> None:
    assert provider_headers(provider, api_format, key) == expected


class TestFallbacks:
    """Several providers (issue 38): the route goes to the provider relay and carries the plan."""

    MULTI = replace(
        BASE, provider="openai", target_model="gpt-4o", weight=2, provider_selection="Weighted", max_attempts=2,
        relay=RelayTarget("maas-payload-processor.opendatahub.svc.cluster.local", 9005),
        fallbacks=(FallbackInput("claude", "anthropic", "api.anthropic.com", "claude-x", api_format="messages",
                                 credential_secret="anthropic-key"),
                   FallbackInput("azure-eu", "azure", "eu.azure.test", "gpt-4o-eu", port=8443, base_path="/openai/v1",
                                 credential_secret="azure-key", credential_key="token", weight=0)))

    def test_the_service_names_the_relay(self) -> None:
        svc = build_external_service(self.MULTI)
        assert svc["spec"]["externalName"] == "maas-payload-processor.opendatahub.svc.cluster.local"
        assert svc["spec"]["ports"] == [{"name": "http", "port": 9005, "protocol": "TCP", "appProtocol": "http"}]

    def test_the_route_serves_chat_and_the_door_at_the_relay(self) -> None:
        for sets in (False, True):  # the relay sets each key: every caller credential goes, processor or not
            route = build_external_route(replace(self.MULTI, processor_sets_authorization=sets))
            rules = route["spec"]["rules"]
            assert [m["path"]["value"] for r in rules for m in r["matches"]] == [
                "/llm/gpt-4o/v1/chat/completions", "/llm/gpt-4o/v1/messages", "/llm/gpt-4o/v1/models",
                "/v1/chat/completions", "/v1/chat/completions", "/v1/messages", "/v1/messages"]
            assert [m.get("method") for r in rules for m in r["matches"]] == [None, None, "GET", *[None] * 4]
            for rule in rules:
                rewrite, strip = rule["filters"]
                assert rewrite["urlRewrite"] == {
                    "hostname": "maas-payload-processor.opendatahub.svc.cluster.local",
                    "path": {"type": "ReplaceFullPath", "replaceFullPath": "/v1/chat/completions"}}
                assert set(strip["requestHeaderModifier"]["remove"]) >= CREDENTIAL_HEADERS
                assert rule["backendRefs"][0]["port"] == 9005

    def test_the_plan_names_every_provider_and_never_a_key_field_of_a_single_route(self) -> None:
        annotations = build_external_route(self.MULTI)["metadata"]["annotations"]
        assert not {"maas.opendatahub.io/upstream-key-secret", "maas.opendatahub.io/api-format",
                    "maas.opendatahub.io/upstream-auth"} & set(annotations)
        plan = decode_plan(annotations["maas.opendatahub.io/providers"])
        assert plan == provider_plan(self.MULTI)
        assert (plan.selection, plan.max_attempts) == ("weighted", 2)
        assert [(p.name, p.base_url, p.target_model, p.api_format, p.key_scheme, p.secret, p.secret_key, p.weight)
                for p in plan.providers] == [
            ("openai", "https://api.openai.com/v1", "gpt-4o", "openai-chat", "bearer", "openai-key", "api-key", 2),
            ("claude", "https://api.anthropic.com/v1", "claude-x", "messages", "x-api-key", "anthropic-key",
             "api-key", 1),
            ("azure-eu", "https://eu.azure.test:8443/openai/v1", "gpt-4o-eu", "openai-chat", "api-key", "azure-key",
             "token", 0)]
        # without maxAttempts: every provider with a weight
        assert provider_plan(replace(self.MULTI, max_attempts=None)).max_attempts == 2

    def test_the_local_gateway_reads_the_plan_from_the_route(self) -> None:
        service, route = build_external_model_objects(self.MULTI)
        table = build_route_table([route], lambda ns, name: service, ("maas-default-gateway", "openshift-ingress"))
        match = table.match("", "/llm/gpt-4o/v1/chat/completions", "POST", {})
        assert match is not None and match.rule.providers == provider_plan(self.MULTI)
        assert match.upstream_path == "/v1/chat/completions"

    @pytest.mark.parametrize(("change", "why"), [
        ({"relay": None}, "relay"),
        ({"fallbacks": (FallbackInput("openai", "openai", "b.test", "m"),)}, "repeat"),
        ({"fallbacks": (FallbackInput("b", "openai", "169.254.169.254", "m"),)}, "link-local"),
        ({"fallbacks": (FallbackInput("b", "openai", "kubernetes.default.svc", "m"),)}, "API server"),
        ({"fallbacks": (FallbackInput("b", "openai", "m.other-ns.svc.cluster.local", "m"),)}, "namespace"),
        ({"fallbacks": (FallbackInput("b", "openai", "b.test", 'm"'),)}, "model"),
        ({"fallbacks": (FallbackInput("b", "openai", "b.test", "m", api_format="bedrock"),)}, "apiFormat"),
        ({"fallbacks": (FallbackInput("B_", "openai", "b.test", "m"),)}, "fallback name"),
        ({"fallbacks": tuple(FallbackInput(f"b{i}", "openai", "b.test", "m") for i in range(8))}, "at most 7"),
        ({"weight": 0, "fallbacks": (FallbackInput("b", "openai", "b.test", "m", weight=0),)}, "weight"),
        ({"max_attempts": 4}, "maxAttempts"),
        ({"provider_selection": "Random"}, "providerSelection"),
    ])
    def test_nonsense_is_refused(self, change: dict[str, object], why: str) -> None:
        with pytest.raises(InvalidInputError, match=why):
            build_external_route(replace(self.MULTI, **change))  # type: ignore[arg-type]


class TestModelListingRule:
    """maas-api lists a model when `GET <model path>/v1/models` answers 2xx/405 through the model's AuthPolicy. A
    Messages provider and several providers (the relay) have no OpenAI listing: their route gets an Exact,
    GET-only rule there, which the data plane answers itself (`RouteRule.listing`, `gateway.pipeline`)."""

    ROUTES = [pytest.param(BASE, False, id="openai"), pytest.param(ANTHROPIC, True, id="messages"),
              pytest.param(TestFallbacks.MULTI, True, id="several-providers")]

    @staticmethod
    def table(inp: ExternalRouteInput) -> RouteTable:
        service, route = build_external_model_objects(replace(inp, target_model="provider-model-name"))
        route["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
        return build_route_table([route], lambda ns, name: service, ("maas-default-gateway", "openshift-ingress"))

    @pytest.mark.parametrize(("inp", "answered"), ROUTES)
    def test_only_a_provider_without_an_openai_listing_gets_the_rule(self, inp: ExternalRouteInput,
                                                                    answered: bool) -> None:
        rules = build_external_route(inp)["spec"]["rules"]
        listing = [m for r in rules for m in r["matches"] if m.get("method")]
        assert listing == ([{"path": {"type": "Exact", "value": "/llm/gpt-4o/v1/models"}, "method": "GET"}]
                           if answered else [])
        match = self.table(inp).match("gw", "/llm/gpt-4o/v1/models", "GET", {})
        assert match is not None
        # a single OpenAI provider: its own listing under its base path (the PathPrefix rule), as before
        assert (match.rule.listing is not None) is answered
        assert match.rule.path_type == ("Exact" if answered else "PathPrefix")

    @pytest.mark.parametrize(("inp", "answered"), ROUTES[1:])
    def test_the_answer_names_the_published_model_and_nothing_of_the_provider(self, inp: ExternalRouteInput,
                                                                             answered: bool) -> None:
        match = self.table(inp).match("gw", "/llm/gpt-4o/v1/models", "GET", {})
        assert match is not None and match.rule.listing is not None
        assert json.loads(match.rule.listing) == {"object": "list", "data": [
            {"id": inp.external_model, "object": "model", "created": 1767323045, "owned_by": "llm/gpt-4o"}]}
        text = match.rule.listing.decode()
        for secret in ("provider-model-name", "claude-x", "gpt-4o-eu", "key", "api.", "https"):
            assert secret not in text, secret
        # every other rule of the route: no listing
        assert [r for r in self.table(inp).rules if r.listing is not None] == [match.rule]

    @pytest.mark.parametrize("inp", [ANTHROPIC, TestFallbacks.MULTI], ids=["messages", "several-providers"])
    @pytest.mark.parametrize(("method", "path"), [
        ("POST", "/llm/gpt-4o/v1/models"), ("PUT", "/llm/gpt-4o/v1/models"), ("DELETE", "/llm/gpt-4o/v1/models"),
        ("PATCH", "/llm/gpt-4o/v1/models"), ("HEAD", "/llm/gpt-4o/v1/models"), ("OPTIONS", "/llm/gpt-4o/v1/models"),
        ("GET", "/llm/gpt-4o/v1/models/"), ("GET", "/llm/gpt-4o/v1/models/provider-model-name"),
        ("GET", "/llm/gpt-4o/v1/modelsx"), ("GET", "/llm/gpt-4o/v1/Models"), ("GET", "/llm/gpt-4o/models"),
        ("GET", "/llm/gpt-4o/v1/models/../chat/completions"), ("GET", "/v1/models"),
    ])
    def test_nothing_else_reaches_the_rule(self, inp: ExternalRouteInput, method: str, path: str) -> None:
        """Other methods and other paths find no rule (404), or (a dot segment the data plane does not resolve
        here: `contract.edge.canonical_path` does, before matching) not the listing."""
        match = self.table(inp).match("gw", path, method, {"x-gateway-model-name": inp.external_model})
        assert match is None or match.rule.listing is None
