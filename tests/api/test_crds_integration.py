"""The generated CRDs and admission policy on the real local control plane.

Several test modules share one control plane, so: the CRDs/policy are (re)applied idempotently with the
default subscription namespace, the subscription namespace is created if missing and never deleted, and every
object created there has a unique name and is deleted by the test.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import (
    DEFAULT_SUBSCRIPTION_NAMESPACE,
    GROUP,
    VERSION,
    BillingRate,
    Condition,
    ConditionStatus,
    ExternalModel,
    ExternalModelPhase,
    ExternalModelSpec,
    ExternalModelStatus,
    FlowControlStatus,
    GroupReference,
    KubeObject,
    MaaSAuthPolicy,
    MaaSAuthPolicySpec,
    MaaSAuthPolicyStatus,
    MaaSModelRef,
    MaaSModelRefSpec,
    MaaSModelRefStatus,
    MaaSSubscription,
    MaaSSubscriptionSpec,
    MaaSSubscriptionStatus,
    MeteringMetadata,
    ModelKind,
    ModelPhase,
    ModelReference,
    ModelSubscriptionRef,
    ModelTarget,
    ObjectMeta,
    ObjectRef,
    OwnerSpec,
    PolicyPhase,
    PoolReference,
    ResourceRefStatus,
    SecretKeyRef,
    Subjects,
    SubscriptionOrganization,
    SubscriptionPhase,
    TokenMetadata,
    TokenRateLimit,
    TokenRateLimitStatus,
    admission,
    dump,
    parse,
)
from maasctl.api.crdgen import KINDS
from maasctl.api.install import install_crds

from . import examples

pytestmark = pytest.mark.integration

SUB_NS = DEFAULT_SUBSCRIPTION_NAMESPACE
KIND_BY_NAME: dict[str, type[KubeObject]] = {k.__name__: k for k in KINDS}


@pytest.fixture
async def maas(kube: k8s.ApiClient) -> k8s.CustomObjectsApi:
    """CRDs and admission policy installed (idempotent) and the subscription namespace present."""
    await install_crds(kube)
    try:
        await k8s.CoreV1Api(kube).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=SUB_NS)))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
    return k8s.CustomObjectsApi(kube)


@pytest.fixture
async def cleanup(maas: k8s.CustomObjectsApi) -> AsyncIterator[list[tuple[str, str, str]]]:
    """Objects (plural, namespace, name) to delete after the test; the test namespace goes by itself."""
    created: list[tuple[str, str, str]] = []
    yield created
    for plural, namespace, name in created:
        try:
            await maas.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def plural(obj: dict[str, Any]) -> str:
    return KIND_BY_NAME[obj["kind"]].crd.plural


async def create(
    api: k8s.CustomObjectsApi, obj: dict[str, Any], cleanup: list[tuple[str, str, str]] | None = None, **kw: Any
) -> dict[str, Any]:
    ns = obj["metadata"]["namespace"]
    out: dict[str, Any] = await api.create_namespaced_custom_object(
        GROUP, VERSION, ns, plural(obj), obj, field_validation="Strict", **kw
    )
    if cleanup is not None and not kw.get("dry_run"):
        cleanup.append((plural(obj), ns, obj["metadata"]["name"]))
    return out


def error_message(exc: k8s.ApiException) -> str:
    try:
        return str(json.loads(exc.body or b"")["message"])
    except (ValueError, KeyError, TypeError):
        return str(exc.body)


def with_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    if out["kind"] == "MaaSSubscription":
        out["spec"].setdefault("priority", 0)
    if out["kind"] == "ExternalModel":
        for provider in (out["spec"], *out["spec"].get("fallbacks", ())):
            if "credentialRef" in provider:
                provider["credentialRef"].setdefault("key", "api-key")
    return out


# --- every seed example is accepted as written ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(examples.ALL))
async def test_seed_example_is_accepted(
    name: str, maas: k8s.CustomObjectsApi, namespace: str, cleanup: list[tuple[str, str, str]]
) -> None:
    obj = examples.example(name, model_ns=namespace)
    obj["metadata"]["name"] = unique(obj["metadata"]["name"])
    stored = await create(maas, obj, cleanup)
    assert stored["spec"] == with_defaults(obj)["spec"]
    parsed = parse(KIND_BY_NAME[obj["kind"]], stored)
    assert dump(parsed)["spec"] == stored["spec"]


# --- a corpus of invalid objects, one or more per rule ------------------------------------------------------


def sub(mutate: Callable[[dict[str, Any]], None]) -> Callable[[str], dict[str, Any]]:
    def make(model_ns: str) -> dict[str, Any]:
        obj = examples.example("seed000-premium-subscription", model_ns=model_ns)
        mutate(obj["spec"])
        return obj

    return make


def auth(mutate: Callable[[dict[str, Any]], None]) -> Callable[[str], dict[str, Any]]:
    def make(model_ns: str) -> dict[str, Any]:
        obj = examples.example("seed001-auth-policy", model_ns=model_ns)
        mutate(obj["spec"])
        return obj

    return make


def in_ns(name: str) -> Callable[[str], dict[str, Any]]:
    """An otherwise valid example created in the test namespace instead of the subscription namespace."""

    def make(model_ns: str) -> dict[str, Any]:
        obj = examples.example(name, model_ns=model_ns)
        obj["metadata"]["namespace"] = model_ns
        return obj

    return make


def model(name: str, mutate: Callable[[dict[str, Any]], None]) -> Callable[[str], dict[str, Any]]:
    def make(model_ns: str) -> dict[str, Any]:
        obj = examples.example(name, model_ns=model_ns)
        mutate(obj["spec"])
        return obj

    return make


def set_limit(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(spec: dict[str, Any]) -> None:
        spec["modelRefs"][0]["tokenRateLimits"][0][field] = value

    return mutate


def set_ref(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(spec: dict[str, Any]) -> None:
        spec["modelRefs"][0].update(changes)
        for key, value in changes.items():
            if value is None:
                del spec["modelRefs"][0][key]

    return mutate


WINDOW = "use hours instead"
UNSAFE = "must not contain quotes, backslashes or control characters"
NAMESPACE_RULE = "only accepted in the subscription namespace models-as-a-service"

FALLBACKS = "issue38-external-model-fallbacks"
INVALID: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("window-days", sub(set_limit("window", "1d")), WINDOW),
    ("window-zero", sub(set_limit("window", "0m")), WINDOW),
    ("window-5-digits", sub(set_limit("window", "10000s")), WINDOW),
    ("window-fraction", sub(set_limit("window", "1.5h")), WINDOW),
    ("window-no-unit", sub(set_limit("window", "90")), WINDOW),
    ("limit-zero", sub(set_limit("limit", 0)), "limit in body should be greater than or equal to 1"),
    ("limit-too-big", sub(set_limit("limit", 10**12 + 1)), "limit in body should be less than or equal to"),
    ("limits-and-unlimited", sub(set_ref(unlimited=True)), "either tokenRateLimits (at least one entry) or unlimited"),
    (
        "neither-limits-nor-unlimited",
        sub(set_ref(tokenRateLimits=None)),
        "either tokenRateLimits (at least one entry) or unlimited",
    ),
    (
        "unlimited-false-without-limits",
        sub(set_ref(tokenRateLimits=None, unlimited=False)),
        "either tokenRateLimits (at least one entry) or unlimited",
    ),
    ("empty-limits", sub(set_ref(tokenRateLimits=[])), "should have at least 1 items"),
    ("no-model-refs", sub(lambda s: s.update(modelRefs=[])), "should have at least 1 items"),
    # a model listed twice is refused, not deduplicated as the reference does: which entry's limits would win is
    # the administrator's decision (docs/compatibility.md)
    ("model-listed-twice", sub(lambda s: s["modelRefs"].append(copy.deepcopy(s["modelRefs"][0]))), "Duplicate value"),
    (
        "model-listed-twice-other-limits",
        sub(lambda s: s["modelRefs"].append({**copy.deepcopy(s["modelRefs"][0]),
                                             "tokenRateLimits": [{"limit": 5, "window": "1m"}]})),
        "Duplicate value",
    ),
    ("auth-model-listed-twice", auth(lambda s: s["modelRefs"].append(dict(s["modelRefs"][0]))), "Duplicate value"),
    ("org-id-empty", sub(lambda s: s.update(organization={"id": ""})), "id in body should be at least 1 chars long"),
    ("org-id-quote", sub(lambda s: s.update(organization={"id": 'a"b'})), f"organization.id {UNSAFE}"),
    ("owner-user-quote", sub(lambda s: s["owner"].update(users=['al"ice'])), f"owner.users {UNSAFE}"),
    ("owner-user-newline", sub(lambda s: s["owner"].update(users=["al\nice"])), f"owner.users {UNSAFE}"),
    ("owner-group-backslash", sub(lambda s: s["owner"].update(groups=[{"name": "a\\b"}])), f"group name {UNSAFE}"),
    (
        "cost-center-control",
        sub(lambda s: s["tokenMetadata"].update(costCenter="a\x01b")),
        f"costCenter {UNSAFE}",
    ),
    ("label-value-quote", sub(lambda s: s["tokenMetadata"].update(labels={"k": "it's"})), f"labels values {UNSAFE}"),
    ("label-key-quote", sub(lambda s: s["tokenMetadata"].update(labels={'k"': "v"})), "labels keys must be"),
    ("inference-priority-int32", sub(lambda s: s.update(inferencePriority=2**31)), "less than or equal to 2147483647"),
    ("subjects-empty", auth(lambda s: s.update(subjects={})), "subjects must list at least one group or user"),
    (
        "subjects-empty-lists",
        auth(lambda s: s.update(subjects={"groups": [], "users": []})),
        "subjects must list at least one group or user",
    ),
    ("subject-user-quote", auth(lambda s: s["subjects"].update(users=["o'brien"])), f"subjects.users {UNSAFE}"),
    ("subscription-outside-namespace", in_ns("seed001-subscription"), NAMESPACE_RULE.split(" models")[0]),
    ("auth-policy-outside-namespace", in_ns("seed001-auth-policy"), NAMESPACE_RULE.split(" models")[0]),
    (
        "model-ref-unknown-kind",
        model("seed001-model-ref", lambda s: s["modelRef"].update(kind="InferenceService")),
        "Unsupported value",
    ),
    (
        "model-ref-endpoint-override",
        model("seed001-model-ref", lambda s: s.update(endpointOverride="gw.example.com/v1")),
        "endpointOverride must be an absolute http(s) URL",
    ),
    (
        "model-ref-completion-ceiling-zero",
        model("seed001-model-ref", lambda s: s.update(maxCompletionTokens=0)),
        "maxCompletionTokens in body should be greater than or equal to 1",
    ),
    (
        "model-ref-completion-ceiling-negative",
        model("seed001-model-ref", lambda s: s.update(maxCompletionTokens=-5)),
        "maxCompletionTokens in body should be greater than or equal to 1",
    ),
    (
        "model-ref-completion-ceiling-too-big",
        model("seed001-model-ref", lambda s: s.update(maxCompletionTokens=1_000_001)),
        "maxCompletionTokens in body should be less than or equal to 1000000",
    ),
    (
        "model-ref-completion-ceiling-string",
        model("seed001-model-ref", lambda s: s.update(maxCompletionTokens="256")),
        "maxCompletionTokens in body must be of type integer",
    ),
    (
        "external-endpoint-no-scheme",
        model("seed004-external-model-no-key", lambda s: s.update(endpoint="host/v1")),
        "endpoint must be a host name",
    ),
    ("fallbacks-name-repeats", model(FALLBACKS, lambda s: s["fallbacks"].append(
        {**s["fallbacks"][0], "endpoint": "https://other.test/v1"})), "Duplicate value"),
    ("fallbacks-name-is-the-first-providers", model(FALLBACKS, lambda s: s["fallbacks"][0].update(name="openai")),
     "fallbacks[].name must differ from spec.provider"),
    ("fallbacks-too-many", model(FALLBACKS, lambda s: s.update(fallbacks=[
        {"name": f"p{i}", "provider": "openai", "endpoint": "https://p.test/v1", "targetModel": "m"}
        for i in range(8)], maxAttempts=None)), "must have at most 7 items"),
    ("fallbacks-every-weight-zero", model(FALLBACKS, lambda s: (s.update(weight=0), [
        f.update(weight=0) for f in s["fallbacks"]])), "at least one provider must have a weight above 0"),
    ("fallbacks-max-attempts-above-providers", model(FALLBACKS, lambda s: s.update(maxAttempts=4)),
     "maxAttempts must not exceed the number of providers"),
    ("single-provider-max-attempts-2", model("seed004-external-model-no-key", lambda s: s.update(maxAttempts=2)),
     "maxAttempts must not exceed the number of providers"),
    ("fallbacks-weight-too-big", model(FALLBACKS, lambda s: s["fallbacks"][0].update(weight=101)),
     "less than or equal to 100"),
    ("fallbacks-selection-unknown", model(FALLBACKS, lambda s: s.update(providerSelection="Random")),
     "Unsupported value"),
    ("fallbacks-format-unknown", model(FALLBACKS, lambda s: s["fallbacks"][0].update(apiFormat="bedrock")),
     "Unsupported value"),
    ("fallbacks-name-not-a-label", model(FALLBACKS, lambda s: s["fallbacks"][0].update(name="Claude_1")),
     "should match"),
    ("fallbacks-endpoint-no-scheme", model(FALLBACKS, lambda s: s["fallbacks"][0].update(endpoint="host/v1")),
     "endpoint must be a host name"),
    ("fallbacks-target-model-quote", model(FALLBACKS, lambda s: s["fallbacks"][0].update(targetModel="a'b")),
     f"fallbacks.targetModel {UNSAFE}"),
    ("fallbacks-without-a-name", model(FALLBACKS, lambda s: s["fallbacks"][0].pop("name")), "Required value"),
    (
        "external-target-model-quote",
        model("seed004-external-model-no-key", lambda s: s.update(targetModel='x"y')),
        f"targetModel {UNSAFE}",
    ),
]


@pytest.mark.parametrize(("make", "expected"), [(m, e) for _, m, e in INVALID], ids=[i for i, _, _ in INVALID])
async def test_invalid_object_is_rejected_with_the_rule_message(
    make: Callable[[str], dict[str, Any]], expected: str, maas: k8s.CustomObjectsApi, namespace: str
) -> None:
    obj = make(namespace)
    obj["metadata"]["name"] = unique(obj["metadata"]["name"])
    with pytest.raises(k8s.ApiException) as caught:
        await create(maas, obj, dry_run="All")
    assert caught.value.status in (403, 422), caught.value.body
    assert expected in error_message(caught.value)


async def test_namespace_rule_message_names_the_namespace(maas: k8s.CustomObjectsApi, namespace: str) -> None:
    obj = in_ns("seed001-subscription")(namespace)
    with pytest.raises(k8s.ApiException) as caught:
        await create(maas, obj, dry_run="All")
    assert f"subscription namespace {SUB_NS}, not in {namespace}" in error_message(caught.value)
    assert f"create it in {SUB_NS}, or reinstall maasctl for another subscription namespace" in error_message(
        caught.value)  # what to do about it


# --- organization.id: set once, then immutable and not removable --------------------------------------------


async def test_organization_id_can_be_set_once_then_never_changed_or_removed(
    maas: k8s.CustomObjectsApi, namespace: str, cleanup: list[tuple[str, str, str]]
) -> None:
    obj = examples.example("seed001-subscription", model_ns=namespace)
    name = obj["metadata"]["name"] = unique("legacy")
    await create(maas, obj, cleanup)

    async def replace(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        current = await maas.get_namespaced_custom_object(GROUP, VERSION, SUB_NS, "maassubscriptions", name)
        mutate(current["spec"])
        out: dict[str, Any] = await maas.replace_namespaced_custom_object(
            GROUP, VERSION, SUB_NS, "maassubscriptions", name, current
        )
        return out

    # A legacy subscription without an organization may gain one once.
    stored = await replace(lambda s: s.update(organization={"id": "org-1"}))
    assert stored["spec"]["organization"] == {"id": "org-1"}
    # Unrelated updates (and re-stating the same id) stay allowed.
    stored = await replace(lambda s: s.update(priority=3, organization={"id": "org-1"}))
    assert stored["spec"]["priority"] == 3

    with pytest.raises(k8s.ApiException) as changed:
        await replace(lambda s: s.update(organization={"id": "org-2"}))
    assert "organization.id is immutable" in error_message(changed.value)

    with pytest.raises(k8s.ApiException) as removed:
        await replace(lambda s: s.pop("organization"))
    assert "organization.id cannot be removed once set" in error_message(removed.value)

    final = await maas.get_namespaced_custom_object(GROUP, VERSION, SUB_NS, "maassubscriptions", name)
    assert final["spec"]["organization"] == {"id": "org-1"}


async def test_organization_id_set_at_creation_is_immutable(
    maas: k8s.CustomObjectsApi, namespace: str, cleanup: list[tuple[str, str, str]]
) -> None:
    obj = examples.example("seed000-premium-subscription", model_ns=namespace)
    name = obj["metadata"]["name"] = unique("org")
    await create(maas, obj, cleanup)
    patch = {"spec": {"organization": {"id": "someone-else"}}}
    with pytest.raises(k8s.ApiException) as caught:
        await maas.patch_namespaced_custom_object(
            GROUP, VERSION, SUB_NS, "maassubscriptions", name, patch, **MERGE_PATCH
        )
    assert "organization.id is immutable" in error_message(caught.value)


# --- round trip: model -> CRD -> apply -> read -> model ------------------------------------------------------

NOW = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)


def ready(reason: str) -> list[Condition]:
    return [
        Condition(
            type="Ready",
            status=ConditionStatus.TRUE,
            reason=reason,
            message="all good",
            last_transition_time=NOW,
            observed_generation=1,
        )
    ]


def rich_objects(model_ns: str) -> list[KubeObject]:
    """One object of each kind with every spec and status field set."""
    meta = ObjectMeta(namespace=model_ns)
    sub_meta = ObjectMeta(namespace=SUB_NS, annotations={"openshift.io/display-name": "Gold"})
    return [
        MaaSModelRef(
            metadata=meta.model_copy(update={"name": "granite"}),
            spec=MaaSModelRefSpec(
                model_ref=ModelTarget(kind=ModelKind.LLM_INFERENCE_SERVICE, name="granite"),
                endpoint_override="https://maas.example.com/llm/granite",
                max_completion_tokens=256,
            ),
            status=MaaSModelRefStatus(
                phase=ModelPhase.READY,
                observed_generation=1,
                endpoint="https://maas.example.com/llm/granite",
                resolved_model_alias="ibm/granite",
                http_routes=[ObjectRef(name="granite-kserve-route", namespace=model_ns)],
                gateways=[ObjectRef(name="maas-default-gateway", namespace="openshift-ingress")],
                conditions=ready("Reconciled"),
            ),
        ),
        ExternalModel(
            metadata=meta.model_copy(update={"name": "gpt"}),
            spec=ExternalModelSpec(
                provider="openai",
                endpoint="https://api.example.com/v1",
                target_model="gpt-4o",
                credential_ref=SecretKeyRef(name="openai-key", key="token"),
            ),
            status=ExternalModelStatus(
                phase=ExternalModelPhase.READY, observed_generation=1, conditions=ready("Reconciled")
            ),
        ),
        MaaSAuthPolicy(
            metadata=ObjectMeta(name=unique("policy"), namespace=SUB_NS),
            spec=MaaSAuthPolicySpec(
                model_refs=[ModelReference(name="granite", namespace=model_ns)],
                subjects=Subjects(groups=[GroupReference(name="premium-users")], users=["alice"]),
                metering_metadata=MeteringMetadata(organization_id="acme", cost_center="cc-1", labels={"team": "ml"}),
            ),
            status=MaaSAuthPolicyStatus(
                phase=PolicyPhase.ACTIVE,
                observed_generation=1,
                conditions=ready("Reconciled"),
                model_ref_statuses=[ResourceRefStatus(name="granite", namespace=model_ns, ready=True)],
                auth_policies=[ResourceRefStatus(name="maas-gateway-auth", namespace="openshift-ingress", ready=True)],
            ),
        ),
        MaaSSubscription(
            metadata=sub_meta.model_copy(update={"name": unique("gold")}),
            spec=MaaSSubscriptionSpec(
                owner=OwnerSpec(groups=[GroupReference(name="premium-users")], users=["alice", "*"]),
                organization=SubscriptionOrganization(id="acme"),
                model_refs=[
                    ModelSubscriptionRef(
                        name="granite",
                        namespace=model_ns,
                        token_rate_limits=[
                            TokenRateLimit(limit=1000, window="1m"),
                            TokenRateLimit(limit=100000, window="24h"),
                        ],
                        billing_rate=BillingRate(per_token="0.000002"),
                    ),
                    ModelSubscriptionRef(name="gpt", namespace=model_ns, unlimited=True),
                ],
                token_metadata=TokenMetadata(organization_id="acme", cost_center="cc-1", labels={"tier": "gold"}),
                priority=-3,
                inference_priority=0,
            ),
            status=MaaSSubscriptionStatus(
                phase=SubscriptionPhase.DEGRADED,
                observed_generation=1,
                conditions=ready("PartialFailure"),
                model_ref_statuses=[ResourceRefStatus(name="granite", namespace=model_ns, ready=True)],
                token_rate_limit_statuses=[
                    TokenRateLimitStatus(
                        name="maas-trlp-granite",
                        namespace=model_ns,
                        ready=False,
                        reason="NotAccepted",
                        message="waiting",
                        model="granite",
                        model_namespace=model_ns,
                    )
                ],
                flow_control_statuses=[
                    FlowControlStatus(
                        name="granite",
                        namespace=model_ns,
                        inference_pool=PoolReference(
                            group="inference.networking.k8s.io", kind="InferencePool", name="granite-pool"
                        ),
                        objective_name="gold-granite-pool",
                        ready=True,
                        reason="ObjectiveReconciled",
                    )
                ],
            ),
        ),
    ]


ROUND_TRIP_KINDS = (MaaSModelRef, ExternalModel, MaaSAuthPolicy, MaaSSubscription)


@pytest.mark.parametrize("index", range(len(ROUND_TRIP_KINDS)), ids=[k.__name__ for k in ROUND_TRIP_KINDS])
async def test_model_round_trips_through_the_api_server(
    index: int, maas: k8s.CustomObjectsApi, namespace: str, cleanup: list[tuple[str, str, str]]
) -> None:
    original = rich_objects(namespace)[index]
    kind = type(original)
    body = dump(original)
    status = body.pop("status")
    created = await create(maas, body, cleanup)
    ns, name, plural_ = original.metadata.namespace, original.metadata.name, kind.crd.plural
    assert ns is not None and name is not None
    await maas.replace_namespaced_custom_object_status(GROUP, VERSION, ns, plural_, name, {**created, "status": status})
    read_back = parse(kind, await maas.get_namespaced_custom_object(GROUP, VERSION, ns, plural_, name))
    assert read_back.model_dump(exclude={"metadata"}) == original.model_dump(exclude={"metadata"})
    assert read_back.metadata.uid and read_back.metadata.generation == 1


# --- discovery: OpenAPI v3 carries the descriptions ----------------------------------------------------------


async def openapi_v3(kube: k8s.ApiClient) -> dict[str, Any]:
    doc: dict[str, Any] = await kube.call_api(
        f"/openapi/v3/apis/{GROUP}/{VERSION}",
        "GET",
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return doc


async def test_openapi_v3_document_shows_field_descriptions(maas: k8s.CustomObjectsApi, kube: k8s.ApiClient) -> None:
    wanted = {f"io.opendatahub.maas.{VERSION}.{kind.__name__}" for kind in KINDS}
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        schemas = (await openapi_v3(kube)).get("components", {}).get("schemas", {})
        if wanted <= schemas.keys() or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.5)
    assert wanted <= schemas.keys()
    subscription = schemas[f"io.opendatahub.maas.{VERSION}.MaaSSubscription"]
    spec = subscription["properties"]["spec"]
    fields = MaaSSubscriptionSpec.model_fields
    assert spec["properties"]["inferencePriority"]["description"] == fields["inference_priority"].description
    assert spec["properties"]["priority"]["description"] == fields["priority"].description
    window = spec["properties"]["modelRefs"]["items"]["properties"]["tokenRateLimits"]["items"]["properties"]["window"]
    assert "use hours instead" in window["description"]
    users = spec["properties"]["owner"]["properties"]["users"]["description"]
    assert "every authenticated user" in users
    external = schemas[f"io.opendatahub.maas.{VERSION}.ExternalModel"]["properties"]["spec"]["properties"]
    assert "API base path" in external["endpoint"]["description"]


async def test_printer_columns_show_display_name_phase_and_priority(
    maas: k8s.CustomObjectsApi, kube: k8s.ApiClient, namespace: str, cleanup: list[tuple[str, str, str]]
) -> None:
    obj = examples.example("seed000-premium-subscription", model_ns=namespace)
    name = obj["metadata"]["name"] = unique("columns")
    await create(maas, obj, cleanup)
    table: dict[str, Any] = await kube.call_api(
        f"/apis/{GROUP}/{VERSION}/namespaces/{SUB_NS}/maassubscriptions/{name}",
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    cells = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert cells["Display Name"] == "Premium Subscription"
    assert cells["Priority"] == 10
    assert cells["Organization"] == "acme-corp"


async def test_install_is_idempotent_and_writes_nothing_when_current(
    maas: k8s.CustomObjectsApi, kube: k8s.ApiClient
) -> None:
    ext = k8s.ApiextensionsV1Api(kube)
    adm = k8s.AdmissionregistrationV1Api(kube)

    async def versions() -> list[str]:
        crds = [await ext.read_custom_resource_definition(f"{k.crd.plural}.{GROUP}") for k in KINDS]
        policy = await adm.read_validating_admission_policy(admission.POLICY_NAME)
        binding = await adm.read_validating_admission_policy_binding(admission.POLICY_NAME)
        objects: list[Any] = [*crds, policy, binding]
        return [o.metadata.resource_version for o in objects]

    before = await versions()
    await install_crds(kube)
    assert await versions() == before
    for kind in KINDS:
        crd = await ext.read_custom_resource_definition(f"{kind.crd.plural}.{GROUP}")
        assert crd.spec.versions[0].schema.open_apiv3_schema.to_dict() is not None
        assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
