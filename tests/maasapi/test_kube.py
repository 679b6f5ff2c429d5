"""Identity and subscriptions against the real control plane: TokenReview, SubjectAccessReview and
MaaSSubscription objects read through the API server."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s
from pydantic import SecretStr

from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import ADMIN_GROUP, ADMIN_RESOURCE, Identity, KubeAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import CachedSources
from maasctl.runtime import Client
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents
from tests.error_fields import error_code
from tests.install.manifests import maas_api_api
from tests.maasapi.conftest import GATEWAY_TOKEN, GW

pytestmark = pytest.mark.integration

SUB_NS = "models-as-a-service"
CRD_FILE = Path(__file__).resolve().parents[2] / "manifests" / "crds" / "maas.opendatahub.io_maassubscriptions.yaml"


@pytest.fixture(scope="session")
def subscription_crd(control_plane: ControlPlane) -> None:
    with control_plane.http_client() as http:
        (name,) = apply_documents(http, load_documents([CRD_FILE]), field_manager="maasapi-tests")
        deadline = time.monotonic() + 60
        while True:  # status.conditions may still be null right after creation
            obj = http.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                return
            assert time.monotonic() < deadline, "MaaSSubscription CRD not Established"
            time.sleep(0.1)


@pytest.fixture
async def sub_namespace(kube: k8s.ApiClient) -> str:
    core = k8s.CoreV1Api(kube)
    try:
        await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=SUB_NS)))
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
    return SUB_NS


async def grant_admin(kube: k8s.ApiClient, namespace: str, user: str) -> str:
    rbac = k8s.RbacAuthorizationV1Api(kube)
    name = f"maas-admin-{user}-{uuid.uuid4().hex[:6]}"
    await rbac.create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name=name),
        rules=[k8s.V1PolicyRule(api_groups=[ADMIN_GROUP], resources=[ADMIN_RESOURCE], verbs=["create"])]))
    await rbac.create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name=name),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[k8s.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")]))
    return name


async def drop_admin(kube: k8s.ApiClient, namespace: str, name: str) -> None:
    rbac = k8s.RbacAuthorizationV1Api(kube)
    await rbac.delete_namespaced_role_binding(name, namespace)
    await rbac.delete_namespaced_role(name, namespace)


async def eventually_admin(authn: KubeAuthenticator, who: Identity, namespace: str) -> bool:
    for _ in range(50):  # RBAC reaches the authorizer through an informer: allow a moment
        if await authn.is_admin(who, namespace):
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.fixture
async def maas_api_kube(control_plane: ControlPlane) -> AsyncIterator[k8s.ApiClient]:
    """maas-api's own identity: its ServiceAccount with the RBAC of manifests/ (never cluster-admin), so a
    permission the install lacks fails these tests."""
    api = await maas_api_api(control_plane)
    try:
        yield api
    finally:
        await api.close()


async def test_token_review(maas_api_kube: k8s.ApiClient, control_plane: ControlPlane) -> None:
    authn = KubeAuthenticator(maas_api_kube, cache_seconds=0)
    alice = await authn.authenticate_token(control_plane.users["alice"].token)
    assert alice is not None and alice.username == "alice" and alice.via == "token"
    assert {"premium-users", "system:authenticated"} <= set(alice.groups)
    bob = await authn.authenticate_token(control_plane.users["bob"].token)
    assert bob is not None and "free-users" in bob.groups
    assert await authn.authenticate_token("not-a-real-token") is None
    assert await authn.authenticate_token(control_plane.users["alice"].token + "x") is None


async def test_subject_access_review_decides_admin(
    kube: k8s.ApiClient, maas_api_kube: k8s.ApiClient, control_plane: ControlPlane, namespace: str,
) -> None:
    authn = KubeAuthenticator(maas_api_kube, cache_seconds=0)
    alice = await authn.authenticate_token(control_plane.users["alice"].token)
    bob = await authn.authenticate_token(control_plane.users["bob"].token)
    assert alice is not None and bob is not None
    assert not await authn.is_admin(alice, namespace)
    await grant_admin(kube, namespace, "alice")
    assert await eventually_admin(authn, alice, namespace)
    assert not await authn.is_admin(bob, namespace)
    assert not await authn.is_admin(Identity("alice", alice.groups, "api_key"), namespace)


def subscription_body(name: str, *, users: list[str] | None = None, groups: list[str] | None = None,
                      priority: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
        "metadata": {"name": name},
        "spec": {"owner": {"users": users or [], "groups": [{"name": g} for g in groups or []]},
                 "priority": priority,
                 "modelRefs": [{"name": "granite", "namespace": "llm",
                                "tokenRateLimits": [{"limit": 100, "window": "1m"}]}]},
    }


@pytest.fixture
async def subscriptions(kube: k8s.ApiClient, sub_namespace: str, subscription_crd: None) -> AsyncIterator[str]:
    """Two MaaSSubscriptions for alice's group (different priorities) and one for bob; Active status."""
    api = k8s.CustomObjectsApi(kube)
    prefix = f"t{uuid.uuid4().hex[:6]}"
    bodies = [subscription_body(f"{prefix}-gold", groups=["premium-users"], priority=5),
              subscription_body(f"{prefix}-basic", groups=["premium-users"], priority=1),
              subscription_body(f"{prefix}-bob", users=["bob"])]
    for body in bodies:
        await api.create_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", sub_namespace,
                                                  "maassubscriptions", body)
        await api.patch_namespaced_custom_object_status(
            "maas.opendatahub.io", "v1alpha1", sub_namespace, "maassubscriptions", body["metadata"]["name"],
            {"status": {"phase": "Active"}}, _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    try:
        yield prefix
    finally:
        for body in bodies:
            await api.delete_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", sub_namespace,
                                                      "maassubscriptions", body["metadata"]["name"])


async def test_full_api_with_real_identity(
    kube: k8s.ApiClient, maas_api_kube: k8s.ApiClient, control_plane: ControlPlane, subscriptions: str,
    sub_namespace: str, tmp_path: Path,
) -> None:
    """Mint/list/revoke with real user tokens; admin decided by a real SubjectAccessReview; subscriptions from
    the informer cache (the production source); maas-api acting as its ServiceAccount."""
    settings = MaasApiSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
                               subscription_namespace=sub_namespace, gateway_tokens=(SecretStr(GATEWAY_TOKEN),))
    authn = KubeAuthenticator(maas_api_kube, cache_seconds=0)
    sources = CachedSources(Client(maas_api_kube), sub_namespace)
    app = create_app(settings, sources, authn)
    tok = {u: {"Authorization": f"Bearer {control_plane.users[u].token}"} for u in ("alice", "bob", "carol")}
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
        r = await c.post("/v1/api-keys", json={"name": "k"}, headers=tok["alice"])
        assert r.status_code == 201, r.text
        key = r.json()
        # highest priority among alice's (other tests' subscriptions may exist: only ours are Active+owned)
        assert key["subscription"] == f"{subscriptions}-gold"
        r = await c.post("/v1/api-keys", json={"name": "k", "subscription": f"{subscriptions}-bob"},
                         headers=tok["alice"])
        assert r.status_code == 400 and error_code(r) == "invalid_subscription"
        assert (await c.get(f"/v1/api-keys/{key['id']}", headers=tok["carol"])).status_code == 404
        r = await c.get("/v1/api-keys", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        grant = await grant_admin(kube, sub_namespace, "carol")
        try:
            carol = Identity("carol", ("system:authenticated",))
            assert await eventually_admin(authn, carol, sub_namespace)
            r = await c.delete(f"/v1/api-keys/{key['id']}", headers=tok["carol"])
            assert r.status_code == 200 and r.json()["revokedBy"] == "carol"
        finally:
            await drop_admin(kube, sub_namespace, grant)
        v = (await c.post("/internal/v1/api-keys/validate", json={"key": key["key"]}, headers=GW)).json()
        assert v["valid"] is False and v["reason"] == "revoked"
    await sources.stop()


async def test_cached_sources_see_creates_and_deletes(
    kube: k8s.ApiClient, maas_api_kube: k8s.ApiClient, subscriptions: str
) -> None:
    sources = CachedSources(Client(maas_api_kube), SUB_NS)
    try:
        subs = {s.name: s for s in await sources.list_subscriptions()}
        gold = subs[f"{subscriptions}-gold"]
        assert (gold.namespace, gold.priority, gold.phase, gold.groups) == (
            SUB_NS, 5, "Active", {"premium-users"})
        assert gold.models[0].key == "llm/granite" and gold.models[0].tiers[0].limit == 100
        assert subs[f"{subscriptions}-bob"].users == {"bob"}

        api = k8s.CustomObjectsApi(kube)
        extra = subscription_body(f"{subscriptions}-late", users=["carol"])
        await api.create_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", SUB_NS,
                                                  "maassubscriptions", extra)
        for _ in range(100):
            if f"{subscriptions}-late" in {s.name for s in await sources.list_subscriptions()}:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the cache never saw the new subscription")
        await api.delete_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", SUB_NS,
                                                  "maassubscriptions", f"{subscriptions}-late")
        for _ in range(100):
            if f"{subscriptions}-late" not in {s.name for s in await sources.list_subscriptions()}:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the cache never saw the deletion")
    finally:
        await sources.stop()


async def test_cached_sources_read_the_billing_kinds_as_maas_api(kube: k8s.ApiClient,
                                                                maas_api_kube: k8s.ApiClient) -> None:
    """Plans and TenantAccounts through maas-api's informers, as its ServiceAccount with the install's RBAC:
    unknown (None) until both are listed, then what the API server holds, status (the tenant's state) included."""
    from maasctl.billing.api.install import install_billing_crds
    from maasctl.contract.billing_terms import ORGANIZATION_LABEL, terms_for

    await install_billing_crds(kube)
    ns = f"billing-{uuid.uuid4().hex[:6]}"
    await k8s.CoreV1Api(kube).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    api = k8s.CustomObjectsApi(kube)
    group, version = "billing.opendatahub.io", "v1alpha1"
    await api.create_namespaced_custom_object(group, version, ns, "plans", {
        "apiVersion": f"{group}/{version}", "kind": "Plan", "metadata": {"name": "basic"},
        "spec": {"limits": {"requestsPerMinute": 30}, "targetRef": {
            "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}})
    await api.create_namespaced_custom_object(group, version, ns, "tenantaccounts", {
        "apiVersion": f"{group}/{version}", "kind": "TenantAccount",
        "metadata": {"name": "ten-acme", "labels": {ORGANIZATION_LABEL: "acme"}},
        "spec": {"displayName": "Acme", "planRef": {"name": "basic"}, "billingMode": "ShowbackOnly"}})
    await api.patch_namespaced_custom_object_status(
        group, version, ns, "tenantaccounts", "ten-acme", {"status": {"state": "Suspended"}},
        _content_type="application/merge-patch+json")  # type: ignore[call-arg]
    sources = CachedSources(Client(maas_api_kube), SUB_NS)
    try:
        sources.start()
        for _ in range(300):
            objects = sources.billing_objects()
            if objects is not None:
                (terms,) = terms_for("acme", f"{ns}/gw", *objects) or (None,)
                if terms is not None and terms.state == "Suspended":
                    break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"maas-api never read the tenant: {sources.cache.status()}")
        assert terms.enforced and [(x.kind, x.limit) for x in terms.limits] == [("requests", 30)]
    finally:
        await sources.stop()
        await k8s.CoreV1Api(kube).delete_namespace(ns)
