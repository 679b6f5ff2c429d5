"""The Plan reconciler on the real control plane, as the billing controller's ServiceAccount: every condition
of the seed (Compiled, Drifted, AdoptionConflict, GatewayNotFound, UnsupportedField; KuadrantNotInstalled is in
test_plan_dependencies.py), drift revert, adoption conflict, pruning and the per-tenant Kueue ClusterQueues.
Every generated object is accepted by the real Kuadrant and Kueue CRDs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from .conftest import Billing, RunningBilling, eventually, wait_event

pytestmark = pytest.mark.integration

GW = ("gateway.networking.k8s.io", "v1", "gateways")
AP = ("kuadrant.io", "v1", "authpolicies")
RLP = ("kuadrant.io", "v1", "ratelimitpolicies")
TRLP = ("kuadrant.io", "v1alpha1", "tokenratelimitpolicies")
CQ = ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
RF = ("kueue.x-k8s.io", "v1beta2", "resourceflavors")
NAME = "billing-plan-priority"


def gateway(namespace: str, name: str = "demo", geo: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if geo:
        meta["labels"] = {"billing.opendatahub.io/geo": geo}
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": meta,
            "spec": {"gatewayClassName": "maasctl-local",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}


def plan(namespace: str, **limits: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "limits": limits or {"requestsPerMinute": 600, "tokensPerMinute": 2000000, "tokensPerDay": 400000000,
                             "maxConcurrency": 64},
        "modelScopes": ["llama-3-*", "granite-*"],
        "queueClass": "priority",
        "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"},
    }
    return {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
            "metadata": {"name": "priority", "namespace": namespace}, "spec": spec}


def tenant(namespace: str, name: str, org: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if org:
        meta["labels"] = {"billing.opendatahub.io/organization-id": org}
    return {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "TenantAccount", "metadata": meta,
            "spec": {"displayName": name, "planRef": {"name": "priority"}, "billingMode": "ShowbackOnly"}}


class Cluster:
    def __init__(self, api: k8s.ApiClient) -> None:
        self.custom = k8s.CustomObjectsApi(api)

    async def create(self, res: tuple[str, str, str], obj: dict[str, Any]) -> None:
        ns = obj["metadata"].get("namespace")
        if ns:
            await self.custom.create_namespaced_custom_object(*res[:2], ns, res[2], obj)
        else:
            await self.custom.create_cluster_custom_object(*res, obj)

    async def get(self, res: tuple[str, str, str], name: str, ns: str | None = None) -> dict[str, Any] | None:
        try:
            if ns:
                return await self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
                    *res[:2], ns, res[2], name)
            return await self.custom.get_cluster_custom_object(*res, name)  # type: ignore[no-any-return]
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def patch(self, res: tuple[str, str, str], name: str, ns: str, body: Any) -> None:
        await self.custom.patch_namespaced_custom_object(*res[:2], ns, res[2], name, body,
                                                         _content_type="application/merge-patch+json")

    async def delete(self, res: tuple[str, str, str], name: str, ns: str | None = None) -> None:
        if ns:
            await self.custom.delete_namespaced_custom_object(*res[:2], ns, res[2], name)
        else:
            await self.custom.delete_cluster_custom_object(*res, name)


@pytest.fixture
def cluster(kube: k8s.ApiClient) -> Cluster:
    return Cluster(kube)


async def conditions(billing: Billing, ns: str) -> dict[str, dict[str, Any]]:
    obj = await billing.get("Plan", "priority", ns)
    assert obj is not None
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def wait_condition(billing: Billing, ns: str, type_: str, status: str, reason: str | None = None
                         ) -> dict[str, Any]:
    async def check() -> dict[str, Any]:
        cond = (await conditions(billing, ns)).get(type_)
        assert cond is not None and cond["status"] == status, cond
        assert reason is None or cond["reason"] == reason, cond
        return cond

    result: dict[str, Any] = await eventually(check)
    return result


async def test_a_plan_compiles_to_policies_the_real_crds_accept_with_every_condition(
    billing: Billing, billing_controller: RunningBilling, cluster: Cluster, namespace: str, kube: k8s.ApiClient
) -> None:
    await cluster.create(GW, gateway(namespace))
    await billing.create(tenant(namespace, "ten-helix", org="helix"))
    await billing.create(plan(namespace))
    await wait_condition(billing, namespace, "Compiled", "True", "Compiled")
    conds = await conditions(billing, namespace)
    unsupported = conds["UnsupportedField"]
    assert unsupported["status"] == "True" and "maxConcurrency (64)" in unsupported["message"]
    for type_ in ("Drifted", "AdoptionConflict", "KuadrantNotInstalled", "GatewayNotFound"):
        assert conds[type_]["status"] == "False", conds[type_]
    obj = await billing.get("Plan", "priority", namespace)
    assert obj is not None
    assert obj["status"]["compiledPolicies"] == [
        {"group": "kuadrant.io", "kind": kind, "name": NAME, "namespace": namespace, "upToDate": True}
        for kind in ("AuthPolicy", "RateLimitPolicy", "TokenRateLimitPolicy")]
    rlp = await cluster.get(RLP, NAME, namespace)
    assert rlp is not None
    limit = rlp["spec"]["overrides"]["limits"][f"billing/{namespace}/priority/requests"]
    assert limit["rates"] == [{"limit": 600, "window": "1m"}] and '["helix"]' in limit["when"][0]["predicate"]
    assert rlp["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert rlp["metadata"]["annotations"]["billing.opendatahub.io/queue-class"] == "priority"
    assert await cluster.get(AP, NAME, namespace) is not None and await cluster.get(TRLP, NAME, namespace) is not None
    await wait_event(kube, namespace, "priority", "NotCompilable", "Warning")

    # A second tenant joins: the limits now apply to both organizations.
    await billing.create(tenant(namespace, "ten-acme"))

    async def both_tenants() -> bool:
        live = await cluster.get(RLP, NAME, namespace)
        assert live is not None
        when = live["spec"]["overrides"]["limits"][f"billing/{namespace}/priority/requests"]["when"][0]
        return '["helix", "ten-acme"]' in str(when["predicate"])

    await eventually(both_tenants)

    # requestsPerMinute removed: its RateLimitPolicy goes, the others stay.
    await billing.patch("Plan", "priority", namespace, {"spec": {"limits": {"requestsPerMinute": None}}})

    async def pruned() -> bool:
        return await cluster.get(RLP, NAME, namespace) is None

    await eventually(pruned)
    assert await cluster.get(TRLP, NAME, namespace) is not None


async def test_target_missing_is_gateway_not_found_until_it_appears(
    billing: Billing, billing_controller: RunningBilling, cluster: Cluster, namespace: str
) -> None:
    await billing.create(plan(namespace, requestsPerMinute=10))
    cond = await wait_condition(billing, namespace, "GatewayNotFound", "True", "TargetNotFound")
    assert f"Gateway {namespace}/demo does not exist" in cond["message"]
    await cluster.create(GW, gateway(namespace))
    await wait_condition(billing, namespace, "GatewayNotFound", "False", "TargetFound")


async def test_an_edited_policy_is_reverted_and_the_plan_says_so(
    billing: Billing, billing_controller: RunningBilling, cluster: Cluster, namespace: str, kube: k8s.ApiClient
) -> None:
    await cluster.create(GW, gateway(namespace))
    await billing.create(tenant(namespace, "ten-helix", org="helix"))
    await billing.create(plan(namespace, requestsPerMinute=600))
    await wait_condition(billing, namespace, "Compiled", "True")
    key = f"billing/{namespace}/priority/requests"
    live = await cluster.get(RLP, NAME, namespace)
    assert live is not None
    edited = copy.deepcopy(live["spec"]["overrides"]["limits"])
    edited[key]["rates"] = [{"limit": 100000, "window": "1m"}]
    edited["sneaky"] = {"rates": [{"limit": 1, "window": "1m"}]}
    await cluster.patch(RLP, NAME, namespace, {"spec": {"overrides": {"limits": edited}}})

    async def reverted() -> bool:
        now = await cluster.get(RLP, NAME, namespace)
        assert now is not None
        limits = now["spec"]["overrides"]["limits"]
        return set(limits) == {key} and limits[key]["rates"] == [{"limit": 600, "window": "1m"}]

    await eventually(reverted)
    cond = await wait_condition(billing, namespace, "Drifted", "False", "DriftReverted")
    assert "rates changed" in cond["message"] and "sneaky added" in cond["message"]
    assert "reverted" in await wait_event(kube, namespace, "priority", "DriftReverted", "Warning")


async def test_a_same_named_object_that_is_not_ours_is_never_overwritten(
    billing: Billing, billing_controller: RunningBilling, cluster: Cluster, namespace: str
) -> None:
    await cluster.create(GW, gateway(namespace))
    foreign = {"apiVersion": "kuadrant.io/v1", "kind": "RateLimitPolicy",
               "metadata": {"name": NAME, "namespace": namespace, "labels": {"team": "platform"}},
               "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"},
                        "limits": {"theirs": {"rates": [{"limit": 5, "window": "1m"}]}}}}
    await cluster.create(RLP, foreign)
    await billing.create(plan(namespace, requestsPerMinute=600, tokensPerMinute=1000))
    await wait_condition(billing, namespace, "AdoptionConflict", "True", "NameInUse")
    cond = await wait_condition(billing, namespace, "Compiled", "False", "AdoptionConflict")
    assert f"RateLimitPolicy {NAME} exists and was not generated for this Plan" in cond["message"]
    live = await cluster.get(RLP, NAME, namespace)
    assert live is not None and live["spec"]["limits"] == foreign["spec"]["limits"]
    assert live["metadata"]["labels"] == {"team": "platform"}
    obj = await billing.get("Plan", "priority", namespace)
    assert obj is not None
    refs = {r["kind"]: r["upToDate"] for r in obj["status"]["compiledPolicies"]}
    assert refs == {"AuthPolicy": True, "RateLimitPolicy": False, "TokenRateLimitPolicy": True}
    # Once the other object is gone, the Plan compiles.
    await cluster.delete(RLP, NAME, namespace)
    await wait_condition(billing, namespace, "Compiled", "True")
    await wait_condition(billing, namespace, "AdoptionConflict", "False")


async def test_gpu_quota_gives_each_tenant_a_kueue_cluster_queue(
    billing: Billing, billing_controller: RunningBilling, cluster: Cluster, namespace: str
) -> None:
    await cluster.create(GW, gateway(namespace))
    await billing.create(tenant(namespace, "ten-helix", org="helix"))
    await billing.create(tenant(namespace, "ten-acme", org="acme"))
    await billing.create(plan(namespace, gpuQuota=4))
    await wait_condition(billing, namespace, "Compiled", "True")
    names = [f"billing-{namespace}-ten-acme", f"billing-{namespace}-ten-helix"]
    for name, org in zip(names, ("acme", "helix"), strict=True):
        queue = await cluster.get(CQ, name)
        assert queue is not None
        assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"billing.opendatahub.io/tenant": org}}
        group = queue["spec"]["resourceGroups"][0]
        assert group["coveredResources"] == ["nvidia.com/gpu"]
        assert group["flavors"][0]["resources"][0]["nominalQuota"] in (4, "4")
        assert queue["metadata"]["annotations"]["billing.opendatahub.io/queue-class"] == "priority"
    assert await cluster.get(RF, "billing-gpu") is not None
    # A tenant leaving the Plan loses its queue; deleting the Plan removes the rest.
    await billing.delete("TenantAccount", "ten-acme", namespace)

    async def acme_gone() -> bool:
        return await cluster.get(CQ, names[0]) is None

    await eventually(acme_gone)
    assert await cluster.get(CQ, names[1]) is not None
    await billing.delete("Plan", "priority", namespace)

    async def helix_gone() -> bool:
        return await cluster.get(CQ, names[1]) is None

    await eventually(helix_gone)
