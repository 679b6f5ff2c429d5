"""The BillingConsole controller on the real control plane, run as the billing operator's ServiceAccount with the
install's RBAC (a Role in its own namespace for the console's objects): the singleton's Deployment, Service and
HTTPRoute (no Route API), each auth mode's AuthConfigured, enabled/disabled, the tenant portal flag, no write when
nothing changed; then the Route API appears (a minimal Route CRD, tests/billing/data) and a Route replaces the
HTTPRoute, RouteAdmitted follows its status, and deleting the BillingConsole garbage-collects everything; a
BillingConsole not named default (stored under a CRD without the name rule) is only told so."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api import GROUP, VERSION
from maasctl.billing.api.install import install_billing_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from tests.install.manifests import DEFAULT_SUBSCRIPTION_NS, apply_docs, identity_docs, kubectl

from .conftest import CONTROLLER_NS, SETTINGS, Billing, RunningBilling, eventually, install_route_crd, start_billing

pytestmark = pytest.mark.integration

NAME = "billing-console"
GW = ("gateway.networking.k8s.io", "v1", "httproutes")
ROUTE = ("route.openshift.io", "v1", "routes")
ROUTE_CRD_NAME = "routes.route.openshift.io"
CONSOLE_ROLES = ("billing-console-viewer", "billing-console-operator", "billing-console-admin")


async def without_route_api(cp: ControlPlane) -> None:
    """No Route CRD (another module may have installed it on this control plane)."""
    api = await connect(str(cp.kubeconfig))
    ext = k8s.ApiextensionsV1Api(api)
    try:
        if await get_or_none(ext.read_custom_resource_definition, ROUTE_CRD_NAME) is not None:
            await ext.delete_custom_resource_definition(ROUTE_CRD_NAME)

        async def gone() -> bool:
            return await get_or_none(ext.read_custom_resource_definition, ROUTE_CRD_NAME) is None

        await eventually(gone)
    finally:
        await api.close()


@pytest.fixture(scope="module")
async def operator(billing_cluster: ControlPlane) -> AsyncIterator[RunningBilling]:
    await without_route_api(billing_cluster)
    await apply_docs(billing_cluster, identity_docs(set(CONSOLE_ROLES), CONTROLLER_NS, DEFAULT_SUBSCRIPTION_NS))
    running = await start_billing(billing_cluster, dataclasses.replace(SETTINGS, console_recheck_seconds=1))
    try:
        yield running
    finally:
        await running.stop()


async def patch_console(api: k8s.ApiClient, body: dict[str, Any], name: str = "default") -> None:
    await k8s.CustomObjectsApi(api).patch_cluster_custom_object(
        GROUP, VERSION, "billingconsoles", name, body, _content_type="application/merge-patch+json")


async def condition(billing: Billing, type_: str, status: str, reason: str, name: str = "default",
                    generation: bool = True) -> dict[str, Any]:
    """The BillingConsole once its condition `type_` has this status and reason (for its current generation)."""

    async def check() -> dict[str, Any] | None:
        obj = await billing.get("BillingConsole", name)
        assert obj is not None
        st = obj.get("status") or {}
        for c in st.get("conditions") or ():
            if c["type"] == type_:
                assert (c["status"], c["reason"]) == (status, reason), c
                if generation:
                    assert st.get("observedGeneration") == obj["metadata"]["generation"]
                return obj
        return None

    found: dict[str, Any] = await eventually(check, timeout=60)
    return found


async def get_or_none(call: Any, *args: Any) -> Any:
    try:
        return await call(*args)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def deployment(api: k8s.ApiClient) -> Any:
    return await get_or_none(k8s.AppsV1Api(api).read_namespaced_deployment, NAME, CONTROLLER_NS)


async def custom(api: k8s.ApiClient, kind: tuple[str, str, str]) -> Any:
    return await get_or_none(k8s.CustomObjectsApi(api).get_namespaced_custom_object, *kind[:2], CONTROLLER_NS,
                             kind[2], NAME)


async def secret(api: k8s.ApiClient, name: str, data: dict[str, str]) -> None:
    core = k8s.CoreV1Api(api)
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name, namespace=CONTROLLER_NS),
                        data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})
    if await get_or_none(core.read_namespaced_secret, name, CONTROLLER_NS) is None:
        await core.create_namespaced_secret(CONTROLLER_NS, body)
    else:
        await core.replace_namespaced_secret(name, CONTROLLER_NS, body)


def args_of(dep: Any) -> list[str]:
    return list(dep.spec.template.spec.containers[0].args)


async def test_console_without_the_route_api(operator: RunningBilling, billing: Billing, kube: k8s.ApiClient,
                                             billing_cluster: ControlPlane) -> None:
    await billing.create({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BillingConsole", "metadata": {"name": "default"},
        "spec": {"image": "quay.io/example/maasctl:test", "replicas": 0, "route": {"host": "billing.example.com"},
                 "auth": {"mode": "OIDC", "oidc": {"issuerURL": "https://idp.example.com",
                                                   "clientSecretRef": {"name": "console-oidc"}},
                          "roles": {"admin": ["billing-admins"], "viewer": ["finance"]}}}})
    try:
        obj = await condition(billing, "AuthConfigured", "False", "SecretNotFound")
        assert obj["status"]["url"] == "https://billing.example.com"
        # Deployed: 0 of 0 replicas, once kube-controller-manager's deployment controller has observed it.
        await condition(billing, "Deployed", "True", "Available")
        await condition(billing, "RouteAdmitted", "False", "Pending")
        dep = await deployment(kube)
        assert dep.spec.replicas == 0 and dep.spec.template.spec.containers[0].image == "quay.io/example/maasctl:test"
        owner = dep.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("BillingConsole", "default",
                                                                         obj["metadata"]["uid"], True)
        assert {"--billing-admin-group=billing-admins", "--billing-viewer-group=finance", "--tenant-portal",
                "--oidc-issuer-url=https://idp.example.com"} <= set(args_of(dep))
        assert await get_or_none(k8s.CoreV1Api(kube).read_namespaced_service, NAME, CONTROLLER_NS) is not None
        route = await custom(kube, GW)
        assert route["spec"]["hostnames"] == ["billing.example.com"]
        assert route["spec"]["parentRefs"][0]["name"] == SETTINGS.console_gateway_name

        # auth.roles as RBAC: each role's ClusterRole bound to its groups (the operator may bind only those).
        async def bound() -> dict[str, list[str]]:
            rbac_api = k8s.RbacAuthorizationV1Api(kube)
            out = {}
            for role in CONSOLE_ROLES:
                b = await get_or_none(rbac_api.read_cluster_role_binding, role)
                assert b is not None, role
                assert b.metadata.owner_references[0].uid == obj["metadata"]["uid"]
                out[role] = [s.name for s in b.subjects or ()]
            return out

        assert await eventually(bound) == {"billing-console-viewer": ["finance"], "billing-console-operator": [],
                                           "billing-console-admin": ["billing-admins"]}

        def can(group: str, *question: str) -> bool:
            out = kubectl("auth", "can-i", *question, "--as=someone", f"--as-group={group}",
                          kubeconfig=billing_cluster.kubeconfig, check=False)
            return out.stdout.strip() == "yes"

        assert can("finance", "list", "tenantaccounts.billing.opendatahub.io", "-A")
        assert not can("finance", "patch", "tenantaccounts.billing.opendatahub.io", "-n", "tenants")
        assert can("billing-admins", "create", "pricebooks.billing.opendatahub.io", "-n", "tenants")
        assert not can("developers", "list", "tenantaccounts.billing.opendatahub.io", "-A")

        # The Gateway accepts the route (its controller writes the HTTPRoute's status).
        route["status"] = {"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                          "namespace": SETTINGS.console_gateway_namespace, "name": SETTINGS.console_gateway_name},
            "controllerName": "example.com/gateway",
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}]}
        await k8s.CustomObjectsApi(kube).replace_namespaced_custom_object_status(
            *GW[:2], CONTROLLER_NS, GW[2], NAME, route)
        await condition(billing, "RouteAdmitted", "True", "Accepted")

        # The OIDC client Secret (read by name, not watched): a key missing, then complete.
        await secret(kube, "console-oidc", {"client-id": "billing-console"})
        obj = await condition(billing, "AuthConfigured", "False", "MissingKeys")
        cond = next(c for c in obj["status"]["conditions"] if c["type"] == "AuthConfigured")
        assert cond["message"] == "Secret console-oidc lacks client-secret"
        await secret(kube, "console-oidc", {"client-id": "billing-console", "client-secret": "s3cr3t-value"})
        obj = await condition(billing, "AuthConfigured", "True", "OIDCConfigured")
        assert "s3cr3t-value" not in str(obj)  # never a secret value in status
        env = (await deployment(kube)).spec.template.spec.containers[0].env
        assert env[0].value_from.secret_key_ref.name == "console-oidc"

        # No write when nothing changed: a reconcile (an annotation) leaves the objects' versions alone.
        before = (await deployment(kube)).metadata.resource_version, (await custom(kube, GW))["metadata"][
            "resourceVersion"]
        applier = operator.manager.applier
        skipped = applier.skipped
        await patch_console(kube, {"metadata": {"annotations": {"example.com/touch": "1"}}})

        async def reconciled_again() -> bool:  # three reconciles of the six objects, found unchanged
            return applier.skipped >= skipped + 18

        await eventually(reconciled_again)
        after = (await deployment(kube)).metadata.resource_version, (await custom(kube, GW))["metadata"][
            "resourceVersion"]
        assert before == after

        # The other auth modes.
        await patch_console(kube, {"spec": {"auth": {"mode": "Brokered", "oidc": None,
                                                      "broker": {"deploy": True}}}})
        await condition(billing, "AuthConfigured", "False", "BrokerNotProvided")
        assert not any(a.startswith("--oidc") for a in args_of(await deployment(kube)))
        await patch_console(kube, {"spec": {"auth": {"broker": {"deploy": None,
                                                                 "existingIssuerURL": "https://sso.example.com"}}}})
        await condition(billing, "AuthConfigured", "False", "SecretNotFound")  # billing-console-broker
        await secret(kube, "billing-console-broker", {"client-id": "c", "client-secret": "s"})
        await condition(billing, "AuthConfigured", "True", "OIDCConfigured")
        assert "--oidc-issuer-url=https://sso.example.com" in args_of(await deployment(kube))
        await patch_console(kube, {"spec": {"auth": {"mode": "OpenShiftOAuth", "broker": None}}})
        await condition(billing, "AuthConfigured", "False", "NotOpenShift")

        # Disabled: everything removed; the portal off; enabled again: back.
        await patch_console(kube, {"spec": {"enabled": False}})
        obj = await condition(billing, "Deployed", "False", "Disabled")
        await condition(billing, "RouteAdmitted", "False", "Disabled")

        async def gone() -> bool:
            rbac_api = k8s.RbacAuthorizationV1Api(kube)
            return await deployment(kube) is None and await custom(kube, GW) is None and await get_or_none(
                k8s.CoreV1Api(kube).read_namespaced_service, NAME, CONTROLLER_NS) is None and all(
                [await get_or_none(rbac_api.read_cluster_role_binding, r) is None for r in CONSOLE_ROLES])

        await eventually(gone)
        assert "url" not in (await billing.get("BillingConsole", "default") or {})["status"]
        await patch_console(kube, {"spec": {"enabled": True, "tenantPortal": {"enabled": False}}})
        await condition(billing, "Deployed", "True", "Available")
        assert "--tenant-portal" not in args_of(await deployment(kube))
        assert await custom(kube, GW) is not None
    finally:
        await billing.delete("BillingConsole", "default")


async def test_a_route_when_the_route_api_is_served(operator: RunningBilling, billing: Billing,
                                                   kube: k8s.ApiClient, billing_cluster: ControlPlane) -> None:
    await billing.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BillingConsole",
                          "metadata": {"name": "default"},
                          "spec": {"replicas": 0, "auth": {"mode": "OpenShiftOAuth"}}})
    try:
        await eventually(lambda: custom(kube, GW))  # no Route API yet: an HTTPRoute
        await condition(billing, "AuthConfigured", "False", "NotOpenShift")
        await asyncio.to_thread(install_route_crd, billing_cluster)

        route = await eventually(lambda: custom(kube, ROUTE), timeout=60)  # found by itself, within seconds
        assert route["spec"]["to"] == {"kind": "Service", "name": NAME, "weight": 100}
        assert "host" not in route["spec"]  # OpenShift generates one

        async def httproute_gone() -> bool:
            return await custom(kube, GW) is None

        await eventually(httproute_gone)
        await condition(billing, "AuthConfigured", "True", "OpenShiftTokens")
        obj = await condition(billing, "RouteAdmitted", "False", "Pending")
        assert "url" not in obj["status"]

        # The router admits it with the host it generated: RouteAdmitted and the URL follow.
        route["status"] = {"ingress": [{"host": "billing-console-opendatahub.apps.example.com",
                                        "routerName": "default",
                                        "conditions": [{"type": "Admitted", "status": "True"}]}]}
        await k8s.CustomObjectsApi(kube).replace_namespaced_custom_object_status(
            *ROUTE[:2], CONTROLLER_NS, ROUTE[2], NAME, route)
        obj = await condition(billing, "RouteAdmitted", "True", "Admitted")
        assert obj["status"]["url"] == "https://billing-console-opendatahub.apps.example.com"

        async def public_url_rendered() -> bool:
            return "--public-url=https://billing-console-opendatahub.apps.example.com" in args_of(
                await deployment(kube))

        await eventually(public_url_rendered)
    finally:
        await billing.delete("BillingConsole", "default")

    async def collected() -> bool:  # kube-controller-manager's garbage collector, by the owner references
        rbac_api = k8s.RbacAuthorizationV1Api(kube)
        return await deployment(kube) is None and await custom(kube, ROUTE) is None and await get_or_none(
            k8s.CoreV1Api(kube).read_namespaced_service, NAME, CONTROLLER_NS) is None and all(
            [await get_or_none(rbac_api.read_cluster_role_binding, r) is None for r in CONSOLE_ROLES])

    await eventually(collected, timeout=90)


async def test_a_console_not_named_default_is_only_told_so(operator: RunningBilling, billing: Billing,
                                                          kube: k8s.ApiClient) -> None:
    """The CRD refuses other names (test_crds_integration); one stored before the rule existed is told so."""
    ext = k8s.ApiextensionsV1Api(kube)
    crd = await ext.read_custom_resource_definition(f"billingconsoles.{GROUP}")
    schema = crd.spec.versions[0].schema.open_apiv3_schema
    assert schema.x_kubernetes_validations, "the singleton rule"
    await ext.patch_custom_resource_definition(
        crd.metadata.name, [{"op": "remove", "path": "/spec/versions/0/schema/openAPIV3Schema/"
                                                     "x-kubernetes-validations"}],
        _content_type="application/json-patch+json")
    try:
        async def create() -> bool:
            try:
                await billing.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "BillingConsole",
                                      "metadata": {"name": "billing"}, "spec": {}})
            except k8s.ApiException as exc:
                assert exc.status != 422 or "singleton" not in str(exc.body), exc.body
                raise AssertionError(exc.body) from exc
            return True

        await eventually(create, timeout=30)  # the API server takes the new schema within moments
        obj = await condition(billing, "Deployed", "False", "NotSingleton", name="billing")
        assert len(obj["status"]["conditions"]) == 1 and "url" not in obj["status"]
        assert await deployment(kube) is None  # and nothing deployed for it
    finally:
        await billing.delete("BillingConsole", "billing")
        await install_billing_crds(kube)  # the rule back, for the modules after this one
