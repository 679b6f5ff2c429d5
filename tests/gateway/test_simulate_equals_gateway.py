"""`simulate` and the gateway give the same verdict: for every refusal class the data plane has, and for the
allowed case, one request goes to `simulate` (in process, and through `/_gateway/simulate` where the body fits
that endpoint) and then the same request to the real gateway over HTTP; status and error code must agree, and
be the class's own (so a class that silently became "200 both" fails).

Real local control plane, the real controller's AuthPolicies and TokenRateLimitPolicies, real TokenReview,
counters in real Redis (the module's `redis_server`). One world per module: the model `gpt` (an ExternalModel
served by the test model), the in-cluster model `granite` on a KServe-owned route (no model label of ours: the
route simulate once could not find), a route no AuthPolicy covers, and one subscription per class with a user
of its own (API keys of the maas-api stand-in), so the counters one class uses up touch no other.

Billing classes (Plan RateLimitPolicy, Plan token limit, frozen tenant, budget throttle, budget freeze): the
gateway sees only the Kuadrant objects the billing operator applies, so those are written directly, produced by
the billing compiler itself (`billing.rules.compile.compile_plan`, the pure function `maasctl billing run` applies),
targeting the Gateway; no Plan or TenantAccount object and no billing operator (e2e/test_billing*.py run that
whole path). Guardrail classes: the controller exports a `guardrails` filter only while GuardrailsSettings are
enabled (a cluster-wide singleton other tests share), so the filter the AuthPolicy builder renders
(`builders.guardrails.guardrails_filter`) for one subscription and a GuardrailConfig that does not exist is
merged in by a Gateway-level AuthPolicy override, as a Plan's filters are; the engine is never reached (the
verdicts do not depend on it: unreadable input, configuration not ready).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.api.tenant import TenantState
from maasctl.billing.rules.compile import BudgetAction, PlanInput, Tenant, compile_plan
from maasctl.billing.rules.wallet import denial_message
from maasctl.builders import authpolicy as maas_auth
from maasctl.builders.guardrails import GuardrailsAttachment, guardrails_filter
from maasctl.builders.refs import ObjectRef
from maasctl.contract.guardrails import FILTER_NAME as GUARDRAILS_FILTER
from maasctl.contract.guardrails import SettingsView
from maasctl.gateway import Gateway, SimulateRequest, format_report, simulate, simulate_remote
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.gateway.server import HttpServer, start_http
from maasctl.gateway.simulate import SIMULATE_BODY_LIMIT
from maasctl.gateway.usage import MemorySink
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.redis import RedisServer
from maasctl.testmodel import ModelServerConfig, create_app
from maasctl.tls import default_tls
from tests.gateway.conftest import Stack, open_stack, serve_external_locally
from tests.reconcilers.conftest import GATEWAY_NAME, GATEWAY_NS, SUB_NS, Objects, eventually, start_controller
from tests.reconcilers.test_core_flow import publish_external

U = uuid.uuid4().hex[:6]
GROUP = f"eq-users-{U}"
MODEL = f"eq-{U}"  # the published name is unique on the Gateway: the base URL routes by it
GRANITE_SERVED = f"eq-granite-{U}"  # the in-cluster model's served name (spec.model.name), unique the same way
BIG = 10 * 1024 * 1024 + 1  # past the gateway's max_request_bytes (10 MiB)
SUBS = ("main", "tight", "rpm", "tpm", "frozen", "throttle", "freeze", "guard")
KUADRANT = {"AuthPolicy": ("kuadrant.io", "v1", "authpolicies"),
            "RateLimitPolicy": ("kuadrant.io", "v1", "ratelimitpolicies"),
            "TokenRateLimitPolicy": ("kuadrant.io", "v1alpha1", "tokenratelimitpolicies")}


def org(sub: str) -> str:
    return f"org-{sub}-{U}"


def key(sub: str) -> str:
    return f"sk-oai-eq-{sub}-{U}"


OTHER_GATEWAY = f"eq-gw-{U}"  # a Gateway the controller does not manage: no default-deny AuthPolicy on it


@dataclass
class World:
    stack: Stack
    ns: str
    token: dict[str, str]  # test user -> Kubernetes token
    other: Gateway  # the local data plane of OTHER_GATEWAY
    other_url: str


def _subscription(sub: str, ns: str) -> dict[str, Any]:
    limit = 10 if sub == "tight" else 1_000_000  # tight: one answer (15 tokens) goes over
    gpt: dict[str, Any] = {"namespace": ns, "name": MODEL, "tokenRateLimits": [{"limit": limit, "window": "1m"}]}
    granite = {"namespace": ns, "name": "granite", "tokenRateLimits": [{"limit": 1_000_000, "window": "1m"}]}
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
            "metadata": {"name": f"eq-{sub}-{U}", "namespace": SUB_NS},
            "spec": {"owner": {"groups": [{"name": GROUP}]}, "organization": {"id": org(sub)},
                     "modelRefs": [gpt, granite]}}


def _plans() -> list[dict[str, Any]]:
    """The Kuadrant objects of three Plans on the Gateway, as the billing operator would apply them."""
    def plan(name: str, limits: dict[str, int], tenants: tuple[Tenant, ...], **extra: Any) -> list[dict[str, Any]]:
        spec = parse(Plan, {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
                            "metadata": {"name": name, "namespace": GATEWAY_NS},
                            "spec": {"limits": limits, "targetRef": {"group": "gateway.networking.k8s.io",
                                                                     "kind": "Gateway", "name": GATEWAY_NAME}}}).spec
        compiled = compile_plan(PlanInput(GATEWAY_NS, name, "", spec, tenants,
                                          fallback_denial=(maas_auth.DENIAL_MESSAGE, maas_auth.DENIAL_REASON),
                                          **extra))
        return [o for o in compiled.objects if o["kind"] in KUADRANT]

    frozen = denial_message(f"ten-frozen-{U}", org("frozen"), TenantState.FROZEN)
    guard = guardrails_filter(GuardrailsAttachment(
        SettingsView(SUB_NS, "default", enabled=True), "http://127.0.0.1:9", ((ObjectRef(SUB_NS, f"eq-guard-{U}"),
                                                                               f"missing-{U}"),), frozenset()))
    guarded = {"apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy",
               "metadata": {"name": f"eq-guardrails-{U}", "namespace": GATEWAY_NS},
               "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY_NAME},
                        "overrides": {"strategy": "merge", "rules": {"response": {"success": {"filters": {
                            GUARDRAILS_FILTER: guard}}}}}}}
    return [
        guarded,
        *plan(f"eq-rpm-{U}", {"requestsPerMinute": 1}, (Tenant(f"ten-rpm-{U}", org("rpm")),)),
        *plan(f"eq-tpm-{U}", {"tokensPerMinute": 10}, (Tenant(f"ten-tpm-{U}", org("tpm")),)),
        *plan(f"eq-wallet-{U}", {"requestsPerMinute": 1000},
              (Tenant(f"ten-frozen-{U}", org("frozen"), frozen), Tenant(f"ten-throttle-{U}", org("throttle")),
               Tenant(f"ten-freeze-{U}", org("freeze"))),
              denials=((org("frozen"), frozen),),
              budgets=(BudgetAction(f"b-throttle-{U}", org("throttle"), (), "Throttle"),
                       BudgetAction(f"b-freeze-{U}", org("freeze"), (), "Freeze", "budget frozen"))),
    ]


async def _granite(objs: Objects, kube: k8s.ApiClient, ns: str, model_url: str, gateway_url: str) -> None:
    """The sample in-cluster model: an LLMInferenceService whose route KServe made (no model label), and a
    route to the same workload that only the gateway's default-deny covers, and one on OTHER_GATEWAY that no
    AuthPolicy covers at all."""
    await k8s.CoreV1Api(kube).create_namespaced_service(ns, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "granite-workload", "annotations": {LOCAL_URL_ANNOTATION: model_url}},
        "spec": {"ports": [{"name": "http", "port": 8000}], "selector": {"app": "granite"}}})
    await objs.create({"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                       "metadata": {"name": "granite", "namespace": ns},
                       "spec": {"model": {"uri": "hf://example/granite", "name": GRANITE_SERVED},
                                "router": {"route": {"http": {"refs": [{"name": "granite-kserve-route"}]}}}}})
    kserve = {"app.kubernetes.io/name": "granite", "app.kubernetes.io/component": "llminferenceservice-router",
              "app.kubernetes.io/part-of": "llminferenceservice"}
    for name, labels, gateway in (("granite-kserve-route", kserve, GATEWAY_NAME), ("bare", {}, GATEWAY_NAME),
                                  ("bare", {}, OTHER_GATEWAY)):
        prefix = f"/{ns}/granite" if name != "bare" else f"/{ns}/bare"
        await objs.create({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name if gateway == GATEWAY_NAME else "bare-other", "namespace": ns,
                         "labels": labels},
            "spec": {"parentRefs": [{"name": gateway, "namespace": GATEWAY_NS}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                                "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
                                    "type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                                "backendRefs": [{"name": "granite-workload", "port": 8000}]}]}})
    await objs.create({"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
                       "metadata": {"name": "granite", "namespace": ns},
                       "spec": {"modelRef": {"kind": "LLMInferenceService", "name": "granite"}}})
    await objs.patch_status("LLMInferenceService", ns, "granite", {"status": {
        "url": f"{gateway_url}/{ns}/granite",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})


async def _publish(objs: Objects, kube: k8s.ApiClient, stack: Stack, ns: str, granite_url: str) -> None:
    await publish_external(objs, kube, ns, MODEL)
    await serve_external_locally(kube, ns, MODEL, stack.model_url)
    await _granite(objs, kube, ns, granite_url, stack.url)
    await objs.create({"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSAuthPolicy",
                       "metadata": {"name": f"eq-ap-{U}", "namespace": SUB_NS},
                       "spec": {"modelRefs": [{"namespace": ns, "name": MODEL}, {"namespace": ns, "name": "granite"}],
                                "subjects": {"groups": [{"name": GROUP}]}}})
    for sub in SUBS:
        await objs.create(_subscription(sub, ns))
        stack.maas_api.keys[key(sub)] = {"valid": True, "username": f"eq-{sub}-{U}", "keyId": f"key-{sub}",
                                         "groups": [GROUP], "subscription": f"{SUB_NS}/eq-{sub}-{U}"}


async def _enforced(stack: Stack, ns: str) -> bool:
    """Every route, policy and limit of the world (the Plans' merged in) is in the gateway's snapshot."""
    snap = stack.gateway.state.snapshot()
    gpt = next((r for r in snap.table.rules if r.model == f"{ns}/{MODEL}"), None)
    if gpt is None or not gpt.backends or gpt.route_key not in snap.auth or gpt.route_key not in snap.requests:
        return False
    names = {limit.name for limit in getattr(snap.limits.get(gpt.route_key), "limits", ())}
    wanted = {f"billing/{GATEWAY_NS}/eq-tpm-{U}/tokens", f"billing/{GATEWAY_NS}/eq-wallet-{U}/budget/b-throttle-{U}"}
    granite = f"{ns}/granite-kserve-route"
    if not (wanted <= names and len(names) >= len(SUBS) + 2 and granite in snap.auth and granite in snap.limits
            and GRANITE_SERVED in snap.in_cluster):  # its AuthPolicy names it for the base URL
        return False
    guard = await simulate(stack.gateway, SimulateRequest(model=f"{ns}/{MODEL}", key=key("guard")))
    return guard.guardrails is not None  # the merged policies are the ones compiled


async def _other_routes(other: Gateway, ns: str) -> bool:
    return f"{ns}/bare-other" in other.state.snapshot().table.routes()


async def _kuadrant(kube: k8s.ApiClient, obj: dict[str, Any], *, delete: bool = False) -> None:
    group, version, plural = KUADRANT[obj["kind"]]
    custom = k8s.CustomObjectsApi(kube)
    if delete:
        try:
            await custom.delete_namespaced_custom_object(group, version, GATEWAY_NS, plural, obj["metadata"]["name"])
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
        return
    await custom.create_namespaced_custom_object(group, version, GATEWAY_NS, plural, obj)


@pytest.fixture(scope="module")
async def world(maas_cluster: ControlPlane, redis_server: RedisServer) -> AsyncIterator[World]:
    controller = await start_controller(maas_cluster)
    kube = await connect(str(maas_cluster.kubeconfig))
    objs = Objects(kube)
    ns = f"t-eq-{U}"
    core = k8s.CoreV1Api(kube)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    plans = _plans()
    servers: list[HttpServer] = []
    other: Gateway | None = None
    gateways = k8s.CustomObjectsApi(kube)
    await gateways.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", GATEWAY_NS, "gateways", {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": OTHER_GATEWAY, "namespace": GATEWAY_NS},
        "spec": {"gatewayClassName": "maasctl-local", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}]}})
    try:
        async with open_stack(maas_cluster, redis_url=redis_server.url) as stack:
            try:
                servers.append(await start_http(create_app(ModelServerConfig(models=("granite", GRANITE_SERVED)))))
                other = Gateway(replace(stack.gateway.settings, gateway_name=OTHER_GATEWAY), Client(kube),
                                sink=MemorySink())
                await other.start()
                servers.append(await start_http(other))
                await _publish(objs, kube, stack, ns, servers[0].url)
                for obj in plans:
                    await _kuadrant(kube, obj)
                await eventually(lambda: _enforced(stack, ns), timeout=90)
                await eventually(lambda: _other_routes(other, ns))
                yield World(stack, ns, {u: maas_cluster.users[u].token for u in ("carol",)}, other, servers[1].url)
            finally:
                for obj in plans:
                    await _kuadrant(kube, obj, delete=True)
                await objs.delete("MaaSAuthPolicy", SUB_NS, f"eq-ap-{U}")
                for sub in SUBS:
                    await objs.delete("MaaSSubscription", SUB_NS, f"eq-{sub}-{U}")
                for server in reversed(servers):
                    await server.stop()
                if other is not None:
                    await other.stop()
    finally:
        await gateways.delete_namespaced_custom_object("gateway.networking.k8s.io", "v1", GATEWAY_NS, "gateways",
                                                       OTHER_GATEWAY)
        await core.delete_namespace(ns)
        await controller.stop()
        await kube.close()


@dataclass(frozen=True)
class Case:
    """One request (`model`: ns-relative model name, a path below /<ns>/, or "//" and a path from the root),
    as simulate and the gateway get it; `spend` requests go to the gateway first (200 each) to use a limit up;
    `expect` is the class's verdict."""

    expect: tuple[int, str]
    model: str = MODEL
    sub: str | None = "main"  # whose API key (None: `token`)
    token: str | None = None  # a test user whose Kubernetes token is sent (else the text itself)
    user: str | None = None  # simulated as this user (no groups); the gateway gets the user's token
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    spend: int = 0
    spend_headers: dict[str, str] = field(default_factory=dict)
    spend_body: Any = None
    other_gateway: bool = False  # sent to OTHER_GATEWAY's data plane


def chat(model: str = "gpt-x", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


CASES = {
    "allowed": Case((200, "")),
    "allowed in-cluster model by name": Case((200, ""), model="granite", body=chat("granite")),
    "allowed on the one base URL": Case((200, ""), model="//v1/chat/completions", body=chat(MODEL)),
    "in-cluster model on the one base URL": Case((200, ""), model="//v1/chat/completions",
                                                 body=chat(GRANITE_SERVED)),
    "in-cluster model on the one base URL, unentitled": Case((403, "forbidden"), model="//v1/chat/completions",
                                                             body=chat(GRANITE_SERVED), sub=None, token="carol"),
    "base URL without a model": Case((400, "model_required"), model="//v1/chat/completions",
                                     body={"messages": []}),
    "base URL, a model nobody publishes": Case((404, "route_not_found"), model="//v1/chat/completions",
                                               body=chat(f"none-{U}")),
    "no route": Case((404, "route_not_found"), model="/nowhere/v1/chat/completions"),
    "no AuthPolicy": Case((403, "no_auth_policy"), model="/bare/v1/chat/completions", body=chat("granite"),
                          other_gateway=True),
    # the Plans' overrides reach every route of the Gateway, and the newest Plan's policy stands alone on a route
    # only the default-deny covers: it keeps the default-deny's answers (issue 37), for a key, a token, a user
    "only the gateway's default-deny and the Plans": Case((403, "forbidden"), model="/bare/v1/chat/completions",
                                                          body=chat("granite")),
    "only the default-deny and the Plans, a token": Case((403, "forbidden"), model="/bare/v1/chat/completions",
                                                         body=chat("granite"), sub=None, token="carol"),
    "only the default-deny and the Plans, a user": Case((403, "forbidden"), model="/bare/v1/chat/completions",
                                                        body=chat("granite"), sub=None, user="carol"),
    "only the default-deny and the Plans, no valid token": Case(
        (401, "unauthenticated"), model="/bare/v1/chat/completions", body=chat("granite"), sub=None,
        token="not-a-token"),
    "unentitled": Case((403, "forbidden"), sub=None, token="carol"),
    "subscription window used up": Case((429, "rate_limited"), sub="tight", spend=1),
    "Plan RateLimitPolicy": Case((429, "rate_limited"), sub="rpm", spend=1),
    "Plan token limit": Case((429, "rate_limited"), sub="tpm", spend=1),
    "frozen tenant": Case((403, "forbidden"), sub="frozen"),
    # one answer without usage is charged its bound (prompt + max_tokens), past the throttle's 1000 per minute
    "budget throttle": Case((429, "rate_limited"), sub="throttle", spend=1,
                            spend_headers={"x-testmodel-usage": "omit"}, spend_body=chat(max_tokens=1500)),
    "budget freeze": Case((403, "forbidden"), sub="freeze"),
    "guardrail configuration not ready": Case((503, "guardrails_config_unavailable"), sub="guard"),
    "guardrails cannot read the input": Case((400, "guardrails_unreadable"), sub="guard",
                                             body=chat(messages=[{"role": "user", "content": {"x": 1}}])),
    "body too large": Case((413, "body_too_large"), body={"model": "gpt-x", "pad": "x" * BIG}),
    "forbidden header": Case((403, "forbidden_header"), headers={"x-maas-identity": "e30"}),
}


def _code(response: httpx.Response) -> str:
    if response.status_code == 200:
        return ""
    return str(response.json()["error"]["code"])


@pytest.mark.parametrize("name", list(CASES))
async def test_simulate_gives_the_gateways_verdict(world: World, name: str) -> None:
    case = CASES[name]
    ns = world.ns
    gateway, url = (world.other, world.other_url) if case.other_gateway else (world.stack.gateway, world.stack.url)
    credential = key(case.sub) if case.sub is not None else world.token.get(str(case.token or case.user),
                                                                             str(case.token))
    path = case.model[1:] if case.model.startswith("//") else \
        f"/{ns}{case.model}" if case.model.startswith("/") else f"/{ns}/{case.model}/v1/chat/completions"
    sim_model = path if case.model.startswith("/") else f"{ns}/{case.model}"
    body = chat() if case.body is None else case.body
    caller = {"user": case.user} if case.user else {"key": credential} if case.sub else {"token": credential}
    request = SimulateRequest(model=sim_model, **caller, headers=tuple(case.headers.items()), body=body)
    async with httpx.AsyncClient(base_url=url, timeout=60, verify=default_tls()) as http:
        auth = {"Authorization": f"Bearer {credential}"}
        for _ in range(case.spend):
            spent = await http.post(path, json=case.spend_body or chat(), headers={**auth, **case.spend_headers})
            assert spent.status_code == 200, spent.text
        report = await simulate(gateway, request)
        if len(json.dumps(request.to_json())) < SIMULATE_BODY_LIMIT and not case.user:  # a user: an admin's
            remote = await simulate_remote(url, request)
            assert (remote.status, remote.code) == (report.status, report.code), remote
            assert [(x["limit_name"], x["used"]) for x in remote.request_limits] == [
                (x["limit_name"], x["used"]) for x in report.request_limits]
        answer = await http.post(path, content=json.dumps(body).encode(),
                                 headers={**auth, "content-type": "application/json", **case.headers})
    assert (report.status, report.code) == (answer.status_code, _code(answer)) == case.expect, (report, answer.text)
    if case.sub == "rpm":  # the Plan's RateLimitPolicy and its counter: the spent request, no room for this one
        assert report.request_limit_policy is not None, report
        [limit] = report.request_limits
        assert (limit["limit"], limit["window"], limit["used"], limit["remaining"], limit["over"]) == (
            1, "1m", 1, 0, True)
        assert "request limits:" in format_report(report) and "used 1, remaining 0" in format_report(report)
