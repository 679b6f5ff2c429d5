"""Install the MaaS CRDs and the namespace admission policy into a cluster, and wait until they work.

Server-side apply with a fixed field manager makes this idempotent and safe to run on every start
(``maasctl run``, the test launcher). It returns only when the CRDs are Established and, if requested, the
admission policy is observed rejecting an object outside the subscription namespace, so callers can rely on
validation immediately.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from maasctl.api import admission, crdgen
from maasctl.api._base import DEFAULT_SUBSCRIPTION_NAMESPACE, GROUP, VERSION
from maasctl.api.authpolicy import MaaSAuthPolicy

FIELD_MANAGER = "maasctl"
APPLY = "application/apply-patch+yaml"
# The generated client accepts the content type override but its signatures do not declare it.
_SSA: dict[str, Any] = {"_content_type": APPLY, "force": True}
_POLL = 0.2


class InstallTimeout(TimeoutError):
    """The CRDs or the admission policy did not become effective within the deadline."""


async def install_crds(
    api_client: client.ApiClient,
    *,
    subscription_namespace: str | None = None,
    with_admission: bool = True,
    with_finalizer_policy: bool = False,
    namespaces: Sequence[str] = (),
    field_manager: str = FIELD_MANAGER,
    timeout: float = 60.0,
) -> None:
    """Server-side apply our CRDs (and the admission policy) and wait until they are in effect.

    ``subscription_namespace`` is the only namespace MaaSSubscription and MaaSAuthPolicy are accepted in
    (default ``models-as-a-service``); the policy is cluster-wide, so every caller sharing a cluster must pass
    the same value. ``with_finalizer_policy`` also applies the MutatingAdmissionPolicy that puts the
    controller's finalizer on new objects, where the cluster serves that API (limited to ``namespaces`` when
    the controller watches only those); it is not waited for (the controller adds a missing finalizer itself).
    Raises ``InstallTimeout`` after ``timeout`` seconds and ``ApiException`` on rejection.
    """
    namespace = subscription_namespace or DEFAULT_SUBSCRIPTION_NAMESPACE
    ext = client.ApiextensionsV1Api(api_client)
    crds = crdgen.crd_manifests()
    try:
        async with asyncio.timeout(timeout):
            for body in crds:
                await ext.patch_custom_resource_definition(
                    name=body["metadata"]["name"],
                    body=body,
                    field_manager=field_manager,
                    **_SSA,
                )
            for body in crds:
                await _wait_established(ext, body["metadata"]["name"])
            if with_admission:
                await _apply_admission(api_client, namespace, field_manager)
                await _wait_admission(api_client, namespace)
            if with_finalizer_policy:
                await apply_finalizer_policy(api_client, namespaces, field_manager)
    except TimeoutError as exc:
        raise InstallTimeout(f"MaaS CRDs/admission policy not effective after {timeout}s") from exc


async def _wait_established(ext: client.ApiextensionsV1Api, name: str) -> None:
    while True:
        crd = await ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        await asyncio.sleep(_POLL)


async def _apply_admission(api_client: client.ApiClient, namespace: str, field_manager: str) -> None:
    adm = client.AdmissionregistrationV1Api(api_client)
    policy, binding = admission.manifests(namespace)
    await adm.patch_validating_admission_policy(
        name=policy["metadata"]["name"],
        body=policy,
        field_manager=field_manager,
        **_SSA,
    )
    await adm.patch_validating_admission_policy_binding(
        name=binding["metadata"]["name"],
        body=binding,
        field_manager=field_manager,
        **_SSA,
    )


async def serves_mutating_admission_policies(api_client: client.ApiClient) -> bool:
    """Whether the cluster serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicies (Kubernetes 1.36+)."""
    try:
        resources = await client.AdmissionregistrationV1Api(api_client).get_api_resources()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.name == "mutatingadmissionpolicies" for r in resources.resources or ())


async def apply_finalizer_policy(api_client: client.ApiClient, namespaces: Sequence[str] = (),
                                 field_manager: str = FIELD_MANAGER) -> bool:
    """Apply the finalizer MutatingAdmissionPolicy and its binding; False (nothing applied) on a cluster
    without that API."""
    if not await serves_mutating_admission_policies(api_client):
        return False
    adm = client.AdmissionregistrationV1Api(api_client)
    policy, binding = admission.finalizer_manifests(namespaces)
    await adm.patch_mutating_admission_policy(
        name=policy["metadata"]["name"], body=policy, field_manager=field_manager, **_SSA)
    await adm.patch_mutating_admission_policy_binding(
        name=binding["metadata"]["name"], body=binding, field_manager=field_manager, **_SSA)
    return True


def _probe_object(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MaaSAuthPolicy",
        "metadata": {"name": "maasctl-admission-probe", "namespace": namespace},
        "spec": {
            "modelRefs": [{"name": "probe", "namespace": namespace}],
            "subjects": {"users": ["probe"]},
        },
    }


async def _wait_admission(api_client: client.ApiClient, namespace: str) -> None:
    """Dry-run create a valid MaaSAuthPolicy outside the subscription namespace until the policy denies it.

    Admission policies are compiled and bound asynchronously, so a freshly applied policy is not yet in effect
    when the apply returns.
    """
    custom = client.CustomObjectsApi(api_client)
    elsewhere = "kube-system" if namespace == "default" else "default"
    expected = f"subscription namespace {namespace}"
    while True:
        try:
            await custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                elsewhere,
                MaaSAuthPolicy.crd.plural,
                _probe_object(elsewhere),
                dry_run="All",
            )
        except ApiException as exc:
            if expected in str(exc.body):
                return
            if exc.status not in (403, 404, 422):
                raise
        await asyncio.sleep(_POLL)
