"""Request priority (`inferencePriority` -> InferenceObjective) against the real control plane.

Every flowControlStatuses reason of seed 000 is produced by setting up its situation with real objects: an
LLMInferenceService whose status names its InferencePool, the KServe HTTPRoute, the pool, foreign objects,
a ResourceQuota that makes the API server refuse objectives, and the llm-d CRD removed and re-installed.
Subscriptions created here are deleted at the end; their key cleanup Jobs are run by the test Job runner with
a no-op command (the cleanup itself is tested in test_deletion.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl.builders.inferenceobjective import objective_name
from maasctl.builders.refs import ObjectRef
from maasctl.reconcilers.cleanup import JOB
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.runtime.objects import FrozenObject
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import apply_documents, load_documents, third_party_crd_files, wait_established
from maasctl.testenv.jobrunner import DEFAULT_MANAGED_BY, JobRunner
from tests.reconcilers.conftest import (
    GATEWAY_NAME,
    GATEWAY_NS,
    SETTINGS,
    SUB_NS,
    Objects,
    RunningController,
    ensure_namespace,
    eventually,
    start_controller,
)
from tests.reconcilers.test_core_flow import publish_external, uid
from tests.reconcilers.test_llmisvc import controller_ref

CONTROLLER_NS = "maas-controller-test"
OBJECTIVES = ("llm-d.ai", "v1alpha2", "inferenceobjectives")
POOLS = ("inference.networking.k8s.io", "v1", "inferencepools")
LLMISVC = ("serving.kserve.io", "v1alpha2", "llminferenceservices")
ROUTES = ("gateway.networking.k8s.io", "v1", "httproutes")
OBJECTIVE_CRD = "inferenceobjectives.llm-d.ai"


def runner_settings(**changes: Any) -> ControllerSettings:
    """Controller settings whose cleanup Jobs are handed to the test Job runner."""
    return dataclasses.replace(SETTINGS, leader_election_namespace=CONTROLLER_NS,
                               cleanup_job_managed_by=DEFAULT_MANAGED_BY, cleanup_retry_base_seconds=1.0,
                               **changes)


@contextlib.asynccontextmanager
async def controller_and_runner(
    cp: ControlPlane, settings: ControllerSettings, runner_env: dict[str, str] | None = None,
    commands: dict[str, tuple[str, ...]] | None = None, accepts: Callable[[FrozenObject], bool] | None = None,
) -> AsyncIterator[tuple[RunningController, JobRunner]]:
    admin = await connect(str(cp.kubeconfig))  # the runner stands in for the Job controller and kubelet
    await ensure_namespace(k8s.CoreV1Api(admin), settings.leader_election_namespace)
    running = await start_controller(cp, settings)
    runner = JobRunner(Client(admin), namespace=settings.leader_election_namespace, env=runner_env or {})
    if commands is not None:
        runner.commands = commands
    if accepts is not None:
        runner.accepts = accepts
    task = asyncio.create_task(runner.run())
    try:
        yield running, runner
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await running.stop()
        await admin.close()


@pytest.fixture
async def controller(maas_cluster: ControlPlane) -> AsyncIterator[RunningController]:
    """The controller, with cleanup Jobs completed by the runner through a no-op command."""
    async with controller_and_runner(maas_cluster, runner_settings(), commands={"maasctl": ("true",)}) as (c, _):
        yield c


# -- objects ----------------------------------------------------------------------------------------------


async def create(kube: k8s.ApiClient, gvp: tuple[str, str, str], ns: str, obj: dict[str, Any]) -> None:
    await k8s.CustomObjectsApi(kube).create_namespaced_custom_object(*gvp[:2], ns, gvp[2], obj)


async def get(kube: k8s.ApiClient, gvp: tuple[str, str, str], ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
            *gvp[:2], ns, gvp[2], name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def priority_subscription(name: str, models: list[tuple[str, str]], priority: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"owner": {"groups": [{"name": "free-users"}]},
                            "modelRefs": [{"namespace": ns, "name": n, "tokenRateLimits": [{"limit": 100,
                                                                                             "window": "1m"}]}
                                          for ns, n in models]}
    if priority is not None:
        spec["inferencePriority"] = priority
    return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
            "metadata": {"name": name, "namespace": SUB_NS}, "spec": spec}


async def publish_llm(objs: Objects, ns: str, model: str, *, scheduler: bool = True) -> None:
    """A MaaSModelRef naming an LLMInferenceService (no status yet: its pool is not known)."""
    router: dict[str, Any] = {"route": {}, "gateway": {}}
    if scheduler:
        router["scheduler"] = {}
    await objs.create({"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                       "metadata": {"name": f"{model}-llm", "namespace": ns},
                       "spec": {"model": {"uri": "hf://org/model", "name": model}, "router": router}})
    await objs.create({"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
                       "metadata": {"name": model, "namespace": ns},
                       "spec": {"modelRef": {"kind": "LLMInferenceService", "name": f"{model}-llm"}}})


async def serve_through_pool(
    kube: k8s.ApiClient, objs: Objects, ns: str, model: str, *, gateway: tuple[str, str] = (GATEWAY_NS, GATEWAY_NAME),
    group_members: int = 0,
) -> str:
    """What KServe would create: the InferencePool, the router HTTPRoute and the status naming the pool."""
    llm, pool = f"{model}-llm", f"{model}-llm-inference-pool"
    await create(kube, POOLS, ns, {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": pool, "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": llm}}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": f"{llm}-epp-service", "port": {"number": 9002}}}})
    owner = await objs.get("LLMInferenceService", ns, llm)
    assert owner is not None
    await create(kube, ROUTES, ns, {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": f"{llm}-kserve-route", "namespace": ns, "ownerReferences": controller_ref(owner),
                     "labels": {"app.kubernetes.io/name": llm,
                                "app.kubernetes.io/component": "llminferenceservice-router",
                                "app.kubernetes.io/part-of": "llminferenceservice"}},
        # KServe's router route matches the model's own path: a rule without matches would be a catch-all on the
        # shared Gateway, and a later file's gateway would route every unknown path to it while this namespace
        # is still being emptied (test_simulate_equals_gateway's "no route" got 403 from it in a whole run).
        "spec": {"parentRefs": [{"name": gateway[1], "namespace": gateway[0]}],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{ns}/{llm}"}}],
                            "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                             "name": pool}]}]}})
    router: dict[str, Any] = {"scheduler": {"inferencePool": {"group": "inference.networking.k8s.io",
                                                              "kind": "InferencePool", "name": pool}}}
    if group_members:
        router["group"] = {"name": f"{model}-group",
                           "members": [{"name": f"{model}-{i}", "weight": 50} for i in range(group_members)]}
    await objs.patch_status("LLMInferenceService", ns, llm, {"status": {
        "router": router,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    return pool


# -- status reading ---------------------------------------------------------------------------------------


async def status_of(objs: Objects, sub: str) -> dict[str, Any]:
    obj = await objs.get("MaaSSubscription", SUB_NS, sub)
    assert obj is not None
    status: dict[str, Any] = obj.get("status") or {}
    assert status.get("observedGeneration") == obj["metadata"]["generation"]
    return status


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


async def flow_entry(objs: Objects, sub: str, reason: str, model: str | None = None) -> dict[str, Any]:
    """Wait until the flowControlStatuses entry (of `model`, or the only one) has `reason`; return the status."""

    async def check() -> dict[str, Any]:
        status = await status_of(objs, sub)
        entries = status.get("flowControlStatuses") or []
        entry = next(e for e in entries if model is None or e["name"] == model)
        assert entry["reason"] == reason, entry
        return status

    result: dict[str, Any] = await eventually(check, timeout=45)
    return result


async def delete_subscription(objs: Objects, sub: str) -> None:
    await objs.delete("MaaSSubscription", SUB_NS, sub)

    async def gone() -> bool:
        return await objs.get("MaaSSubscription", SUB_NS, sub) is None

    await eventually(gone, timeout=45)


# -- tests ------------------------------------------------------------------------------------------------


async def test_pool_pending_then_reconciled_and_priority_set_unset_set(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_llm(objs, namespace, "m")
    sub = f"prio-{uid()}"
    await objs.create(priority_subscription(sub, [(namespace, "m")], 5))

    status = await flow_entry(objs, sub, "PoolPending")
    entry = status["flowControlStatuses"][0]
    assert entry["ready"] is False and "objectiveName" not in entry and "inferencePool" not in entry
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "PoolPending"
    assert status["phase"] != "Degraded"  # pending states never change the phase

    pool = await serve_through_pool(kube, objs, namespace, "m")
    name = objective_name(ObjectRef(SUB_NS, sub), ObjectRef(namespace, pool))
    status = await flow_entry(objs, sub, "ObjectiveReconciled")
    entry = status["flowControlStatuses"][0]
    assert entry == {"name": "m", "namespace": namespace, "ready": True, "reason": "ObjectiveReconciled",
                     "message": entry["message"], "objectiveName": name,
                     "inferencePool": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                       "name": pool}}
    assert status["phase"] == "Active"
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "True"
    objective = await get(kube, OBJECTIVES, namespace, name)
    assert objective is not None
    assert objective["spec"] == {"poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                             "name": pool}, "priority": 5}
    assert "ownerReferences" not in objective["metadata"]
    labels = objective["metadata"]["labels"]
    assert labels["maas.opendatahub.io/subscription"] == sub
    assert labels["maas.opendatahub.io/subscription-namespace"] == SUB_NS
    assert labels["app.kubernetes.io/managed-by"] == "maas-controller"

    # A new priority keeps the name.
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"inferencePriority": -3}})

    async def priority_is(value: int) -> bool:
        obj = await get(kube, OBJECTIVES, namespace, name)
        return bool(obj and obj["spec"].get("priority") == value)

    await eventually(lambda: priority_is(-3))
    status = await flow_entry(objs, sub, "ObjectiveReconciled")
    assert status["flowControlStatuses"][0]["objectiveName"] == name

    # Unset: no objective, the name is still published, the condition is removed.
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"inferencePriority": None}})
    status = await flow_entry(objs, sub, "PriorityUnset")
    assert status["flowControlStatuses"][0]["objectiveName"] == name
    assert status["flowControlStatuses"][0]["ready"] is True
    assert condition(status, "InferenceObjectivesReady") is None
    assert status["phase"] == "Active"

    async def objective_gone() -> bool:
        return await get(kube, OBJECTIVES, namespace, name) is None

    await eventually(objective_gone)

    # Explicit 0 creates an objective with priority 0.
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"inferencePriority": 0}})
    await eventually(lambda: priority_is(0))
    status = await flow_entry(objs, sub, "ObjectiveReconciled")
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "True"

    # ... and unset once more removes both again.
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"inferencePriority": None}})
    status = await flow_entry(objs, sub, "PriorityUnset")
    assert condition(status, "InferenceObjectivesReady") is None
    await eventually(objective_gone)
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"inferencePriority": 2}})
    await eventually(lambda: priority_is(2))

    # Deleting the subscription removes its objective (labels, not ownerReferences, link them).
    await delete_subscription(objs, sub)
    await eventually(objective_gone)


async def test_foreign_objective_conflicts_and_opt_out_is_unmanaged(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_llm(objs, namespace, "c")
    pool = await serve_through_pool(kube, objs, namespace, "c")
    sub = f"conflict-{uid()}"
    name = objective_name(ObjectRef(SUB_NS, sub), ObjectRef(namespace, pool))
    await create(kube, OBJECTIVES, namespace, {
        "apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolRef": {"name": pool}, "priority": 99}})
    await objs.create(priority_subscription(sub, [(namespace, "c")], 7))

    status = await flow_entry(objs, sub, "ObjectiveConflict")
    assert status["phase"] == "Degraded"  # access is kept
    ready = condition(status, "Ready")
    assert ready is not None and ready["status"] == "False" and ready["reason"] == "RequestPriorityDegraded"
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "ObjectiveConflict"
    foreign = await get(kube, OBJECTIVES, namespace, name)
    assert foreign is not None and foreign["spec"]["priority"] == 99 and not foreign["metadata"].get("labels")

    # The owner of the object opts out: its priority is theirs, the subscription is Active again.
    await k8s.CustomObjectsApi(kube).patch_namespaced_custom_object(
        *OBJECTIVES[:2], namespace, OBJECTIVES[2], name,
        {"metadata": {"annotations": {"opendatahub.io/managed": "false"}}},
        _content_type="application/merge-patch+json")
    status = await flow_entry(objs, sub, "Unmanaged")
    assert status["flowControlStatuses"][0]["ready"] is True
    assert status["phase"] == "Active"
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "True"
    foreign = await get(kube, OBJECTIVES, namespace, name)
    assert foreign is not None and foreign["spec"]["priority"] == 99

    await delete_subscription(objs, sub)
    assert await get(kube, OBJECTIVES, namespace, name) is not None  # never ours to delete


async def test_not_applicable_not_on_gateway_and_unsupported(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await publish_external(objs, kube, namespace, "ext")
    await publish_llm(objs, namespace, "direct", scheduler=False)
    await publish_llm(objs, namespace, "elsewhere")
    await serve_through_pool(kube, objs, namespace, "elsewhere", gateway=("other-gateways", "private"))
    await publish_llm(objs, namespace, "split")
    await serve_through_pool(kube, objs, namespace, "split", group_members=2)
    sub = f"mixed-{uid()}"
    models = ["ext", "direct", "elsewhere", "split"]
    await objs.create(priority_subscription(sub, [(namespace, m) for m in models], 1))

    await flow_entry(objs, sub, "NotApplicable", "ext")
    await flow_entry(objs, sub, "NotApplicable", "direct")
    await flow_entry(objs, sub, "NotOnTenantGateway", "elsewhere")
    status = await flow_entry(objs, sub, "Unsupported", "split")
    by_model = {e["name"]: e for e in status["flowControlStatuses"]}
    assert by_model["ext"]["ready"] is True and "objectiveName" not in by_model["ext"]
    assert by_model["elsewhere"]["ready"] is False and by_model["split"]["ready"] is False
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "NotOnTenantGateway"
    assert status["phase"] == "Degraded"

    # With only the ExternalModel left the condition is True and the subscription Active.
    await objs.patch("MaaSSubscription", SUB_NS, sub, {"spec": {"modelRefs": [
        {"namespace": namespace, "name": "ext", "tokenRateLimits": [{"limit": 100, "window": "1m"}]}]}})

    async def only_external() -> dict[str, Any]:
        st = await status_of(objs, sub)
        assert [e["reason"] for e in st["flowControlStatuses"]] == ["NotApplicable"]
        return st

    status = await eventually(only_external)
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["status"] == "True"
    assert status["phase"] == "Active"
    await delete_subscription(objs, sub)


async def test_refused_objective_is_reconcile_failed_and_retried(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    await core.create_namespaced_resource_quota(namespace, k8s.V1ResourceQuota(
        metadata=k8s.V1ObjectMeta(name="no-objectives"),
        spec=k8s.V1ResourceQuotaSpec(hard={"count/inferenceobjectives.llm-d.ai": "0"})))
    await publish_llm(objs, namespace, "q")
    await serve_through_pool(kube, objs, namespace, "q")
    sub = f"quota-{uid()}"
    await objs.create(priority_subscription(sub, [(namespace, "q")], 3))

    status = await flow_entry(objs, sub, "ReconcileFailed")
    assert status["phase"] == "Degraded"
    assert "retry" in status["flowControlStatuses"][0]["message"]
    cond = condition(status, "InferenceObjectivesReady")
    assert cond is not None and cond["reason"] == "ReconcileFailed"

    await core.delete_namespaced_resource_quota("no-objectives", namespace)
    status = await flow_entry(objs, sub, "ObjectiveReconciled")
    assert status["phase"] == "Active"
    await delete_subscription(objs, sub)


def _objective_crd_docs() -> list[dict[str, Any]]:
    files = [p for p in third_party_crd_files() if p.name == f"llm-d.ai_{OBJECTIVES[2]}.yaml"]
    assert files, "the llm-d InferenceObjective CRD file is missing"
    return load_documents(files)


def _crd_served(http: httpx.Client) -> bool:
    return http.get(f"/apis/{OBJECTIVES[0]}/{OBJECTIVES[1]}").status_code == 200


async def test_missing_objective_api_is_reported_and_recovers_when_installed(
    maas_cluster: ControlPlane, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    http = maas_cluster.http_client()
    docs = _objective_crd_docs()

    def remove_crd() -> None:
        http.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{OBJECTIVE_CRD}")

    def install_crd() -> None:
        wait_established(http, apply_documents(http, docs, field_manager="maasctl-testenv"))

    try:
        await asyncio.to_thread(remove_crd)

        async def crd_gone() -> bool:
            return not await asyncio.to_thread(_crd_served, http)

        await eventually(crd_gone, timeout=60)
        async with controller_and_runner(maas_cluster, runner_settings(),
                                         commands={"maasctl": ("true",)}):
            await publish_llm(objs, namespace, "api")
            pool = await serve_through_pool(kube, objs, namespace, "api")
            sub = f"noapi-{uid()}"
            await objs.create(priority_subscription(sub, [(namespace, "api")], 4))
            status = await flow_entry(objs, sub, "InferenceObjectiveAPIUnavailable")
            assert status["phase"] == "Active"  # a missing API never changes the phase
            cond = condition(status, "InferenceObjectivesReady")
            assert cond is not None and cond["reason"] == "InferenceObjectiveAPIUnavailable"

            await asyncio.to_thread(install_crd)
            status = await flow_entry(objs, sub, "ObjectiveReconciled")
            name = status["flowControlStatuses"][0]["objectiveName"]
            assert name == objective_name(ObjectRef(SUB_NS, sub), ObjectRef(namespace, pool))
            objective = await get(kube, OBJECTIVES, namespace, name)
            assert objective is not None and objective["spec"]["priority"] == 4
            await delete_subscription(objs, sub)
    finally:
        if not await asyncio.to_thread(_crd_served, http):
            await asyncio.to_thread(install_crd)
        http.close()


async def test_cleanup_job_has_no_owner_and_runs_the_revoke_command(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """Sanity check of the Job the deletion path creates (the revocation itself: test_deletion.py)."""
    sub = f"job-{uid()}"
    await objs.create(priority_subscription(sub, [(namespace, "none")], None))

    async def has_finalizer() -> bool:
        obj = await objs.get("MaaSSubscription", SUB_NS, sub)
        return bool(obj and "maas.opendatahub.io/finalizer" in obj["metadata"].get("finalizers", []))

    await eventually(has_finalizer)
    await delete_subscription(objs, sub)
    jobs = [j for j in controller.manager.cache.list(JOB, CONTROLLER_NS)
            if j["metadata"]["annotations"].get("maas.opendatahub.io/subscriptions") == f"{SUB_NS}/{sub}"]
    assert len(jobs) == 1
    job = jobs[0]
    assert "ownerReferences" not in job["metadata"]
    assert job["spec"]["backoffLimit"] <= 3 and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert list(job["spec"]["template"]["spec"]["containers"][0]["command"]) == [
        "maasctl", "keys", "revoke-subscription", "--subscription", f"{SUB_NS}/{sub}",
        "--maas-api-url", SETTINGS.maas_api_url]




async def test_auth_policy_carries_the_objective_name_even_without_priority(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    """Seed 000: the objective name is published whenever the pool is known, so requests can always carry it;
    the generated AuthPolicy injects it for the selected subscription."""
    from tests.reconcilers.test_core_flow import auth_policy

    await publish_llm(objs, namespace, "hdr")
    sub, pol = f"hdr-{uid()}", f"hdr-ap-{uid()}"
    await objs.create(priority_subscription(sub, [(namespace, "hdr")], None))
    await objs.create(auth_policy(pol, [(namespace, "hdr")], ["free-users"]))
    pool = await serve_through_pool(kube, objs, namespace, "hdr")
    name = objective_name(ObjectRef(SUB_NS, sub), ObjectRef(namespace, pool))

    async def header_in_policy() -> dict[str, Any] | None:
        ap = await objs.get("AuthPolicy", namespace, "maas-auth-hdr")
        headers = (((ap or {}).get("spec") or {}).get("rules") or {}).get("response", {}).get("success", {}) \
            .get("headers", {})
        entry = headers.get("x-llm-d-inference-objective")
        picker = headers.get("x-gateway-inference-objective")  # the name the endpoint picker reads
        return entry if entry and name in str(entry) and entry == picker else None

    entry = await eventually(header_in_policy)
    assert f"{SUB_NS}/{sub}" in str(entry)
    assert await get(kube, OBJECTIVES, namespace, name) is None  # no priority: no objective object
    await delete_subscription(objs, sub)
    await objs.delete("MaaSAuthPolicy", SUB_NS, pol)
