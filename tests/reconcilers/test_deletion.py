"""Safe deletion of a MaaSSubscription against the real control plane and a real maas-api.

maas-api runs in-process on a local port (SQLite, static token authenticator); the cleanup Job's container
command (`maasctl keys revoke-subscription ...`) is run locally by the test Job runner with a token file that
stands in for the pod's service-account token. A failing cleanup is produced by pointing the controller at a
maas-api that is not running yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from kubernetes_asyncio import client as k8s
from pydantic import SecretStr

from maasctl.builders.refs import ObjectRef
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import Identity, StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import CachedSources
from maasctl.reconcilers.cleanup import JOB, JobState, build_cleanup_job, job_name, job_state, retry_delay
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.runtime.objects import FrozenObject
from maasctl.testenv import ControlPlane
from maasctl.testenv.controlplane import free_port
from maasctl.tls import default_tls
from tests.reconcilers.conftest import SETTINGS, SUB_NS, Objects, eventually
from tests.reconcilers.test_core_flow import publish_external, uid
from tests.reconcilers.test_priority import CONTROLLER_NS, controller_and_runner, priority_subscription, runner_settings

CLEANUP_SA = f"system:serviceaccount:{CONTROLLER_NS}:maas-key-cleanup"
TOKENS = {
    "bob-token": Identity("bob", ("free-users", "system:authenticated")),
    "cleanup-token": Identity(CLEANUP_SA, ("system:serviceaccounts",)),
}
GW = {"Authorization": "Bearer gw-token"}


@contextlib.asynccontextmanager
async def maas_api(port: int, tmp_path: Path, cp: ControlPlane) -> AsyncIterator[httpx.AsyncClient]:
    """maas-api on 127.0.0.1:`port` reading the cluster's subscriptions (as production does: it must see a
    subscription being deleted before the cleanup identity may revoke its keys), plus a client for it. The
    cleanup identity is no maas-api admin."""
    kube = await connect(str(cp.kubeconfig))
    subs = CachedSources(Client(kube), SUB_NS)
    settings = MaasApiSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / f'maas-api-{port}.db'}",
                               max_expiration=timedelta(days=30), metrics_enabled=False,
                               gateway_tokens=(SecretStr("gw-token"),), key_cleanup_users=(CLEANUP_SA,))
    app = create_app(settings, subs, StaticAuthenticator(TOKENS))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", verify=default_tls()) as client:
            async def up() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return (await client.get("/health")).status_code == 200
                return False

            await eventually(up, timeout=20)
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)
        await subs.stop()
        await kube.close()


async def mint(client: httpx.AsyncClient, subscription: str) -> str:
    body = {"name": f"key-{subscription}", "subscription": f"{SUB_NS}/{subscription}"}
    r = await client.post("/v1/api-keys", json=body, headers={"Authorization": "Bearer bob-token"})
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


async def valid(client: httpx.AsyncClient, key: str) -> bool:
    r = await client.post("/internal/v1/api-keys/validate", json={"key": key}, headers=GW)
    assert r.status_code == 200, r.text
    return bool(r.json()["valid"])


async def create_with_finalizer(objs: Objects, name: str, model_ns: str = "llm", active: bool = False) -> None:
    await objs.create(priority_subscription(name, [(model_ns, "m")], None))

    async def ready() -> bool:
        obj = await objs.get("MaaSSubscription", SUB_NS, name)
        return bool(obj and "maas.opendatahub.io/finalizer" in obj["metadata"].get("finalizers", [])
                    and (not active or (obj.get("status") or {}).get("phase") == "Active"))

    await eventually(ready)


async def gone(objs: Objects, name: str) -> bool:
    return await objs.get("MaaSSubscription", SUB_NS, name) is None


def token_env(tmp_path: Path) -> dict[str, str]:
    token = tmp_path / "sa-token"
    token.write_text("cleanup-token\n")
    return {"MAASCTL_MAAS_API_TOKEN_FILE": str(token)}


def own_jobs(*names: str) -> Callable[[FrozenObject], bool]:
    """The runner runs the cleanup Jobs of this test's subscriptions only: the shared control plane holds other
    tests' subscriptions left Terminating, and this test's controller gives each a Job too."""
    wanted = {f"{SUB_NS}/{n}" for n in names}
    return lambda job: (job["metadata"].get("annotations") or {}).get(
        "maas.opendatahub.io/subscriptions") in wanted


async def warning_events(kube: k8s.ApiClient, name: str) -> list[dict[str, Any]]:
    events = await k8s.EventsV1Api(kube).list_namespaced_event(SUB_NS)
    return [{"reason": e.reason, "note": e.note} for e in events.items
            if e.regarding and e.regarding.name == name and e.type == "Warning"]


async def test_deletion_revokes_only_the_deleted_subscriptions_keys(
    maas_cluster: ControlPlane, objs: Objects, kube: k8s.ApiClient, tmp_path: Path, namespace: str
) -> None:
    port = free_port()
    doomed, kept = f"doomed-{uid()}", f"kept-{uid()}"
    settings = runner_settings(maas_api_url=f"http://127.0.0.1:{port}")
    async with maas_api(port, tmp_path, maas_cluster) as api, \
            controller_and_runner(maas_cluster, settings, token_env(tmp_path),
                                  accepts=own_jobs(doomed, kept)) as (running, runner):
        await publish_external(objs, kube, namespace, "m")  # keys are minted for Active subscriptions only
        await create_with_finalizer(objs, doomed, namespace, active=True)
        await create_with_finalizer(objs, kept, namespace, active=True)
        doomed_key, kept_key = await mint(api, doomed), await mint(api, kept)
        assert await valid(api, doomed_key) and await valid(api, kept_key)
        # The cleanup identity's only power: revoking the keys of a subscription that is being deleted.
        early = await api.delete(f"/internal/v1/subscriptions/{SUB_NS}/{kept}/api-keys",
                                 headers={"Authorization": "Bearer cleanup-token"})
        assert early.status_code == 403 and await valid(api, kept_key)

        await objs.delete("MaaSSubscription", SUB_NS, doomed)
        await eventually(lambda: gone(objs, doomed), timeout=60)

        assert not await valid(api, doomed_key)
        assert await valid(api, kept_key)  # same user, same tenant, other subscription: untouched
        [run] = [r for r in runner.runs if f"{SUB_NS}/{doomed}" in r.argv]
        assert run.returncode == 0 and "revoked 1 API key(s)" in run.output
        assert run.argv[1:] == ("keys", "revoke-subscription", "--subscription", f"{SUB_NS}/{doomed}",
                                "--maas-api-url", f"http://127.0.0.1:{port}")
        jobs = [j for j in running.manager.cache.list(JOB, CONTROLLER_NS)
                if j["metadata"]["annotations"]["maas.opendatahub.io/subscriptions"] == f"{SUB_NS}/{doomed}"]
        assert len(jobs) == 1 and "ownerReferences" not in jobs[0]["metadata"]
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in jobs[0]["status"]["conditions"])

        await objs.delete("MaaSSubscription", SUB_NS, kept)
        await eventually(lambda: gone(objs, kept), timeout=60)
        assert not await valid(api, kept_key)


async def test_failing_cleanup_keeps_subscription_terminating_until_a_retry_succeeds(
    maas_cluster: ControlPlane, objs: Objects, kube: k8s.ApiClient, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens here until maas-api is started below
    name = f"stuck-{uid()}"
    settings = runner_settings(maas_api_url=f"http://127.0.0.1:{port}")
    async with controller_and_runner(maas_cluster, settings, token_env(tmp_path),
                                     accepts=own_jobs(name)) as (running, runner):
        await create_with_finalizer(objs, name)
        await objs.delete("MaaSSubscription", SUB_NS, name)

        async def two_failed_attempts() -> list[dict[str, Any]]:
            events = [e for e in await warning_events(kube, name) if e["reason"] == "APIKeyCleanupFailed"]
            assert {"attempt 1" in e["note"] for e in events} == {True, False}, events
            return events

        events = await eventually(two_failed_attempts, timeout=60)
        assert any("attempt 2" in e["note"] for e in events)
        obj = await objs.get("MaaSSubscription", SUB_NS, name)
        assert obj is not None and obj["metadata"].get("deletionTimestamp")  # still Terminating
        assert obj["status"]["phase"] == "Terminating"  # the phase (and kubectl's Phase column) says so
        assert "maas.opendatahub.io/finalizer" in obj["metadata"]["finalizers"]
        cond = next(c for c in obj["status"]["conditions"] if c["type"] == "APIKeysRevoked")
        assert cond["status"] == "False" and cond["reason"] in ("CleanupFailed", "CleanupRunning")
        failed_runs = [r for r in runner.runs if f"{SUB_NS}/{name}" in r.argv]
        assert failed_runs and all(r.returncode != 0 for r in failed_runs)
        assert "unreachable" in failed_runs[0].output

        async with maas_api(port, tmp_path, maas_cluster):
            await eventually(lambda: gone(objs, name), timeout=90)
        attempts = sorted(int(j["metadata"]["annotations"]["maas.opendatahub.io/cleanup-attempt"])
                          for j in running.manager.cache.list(JOB, CONTROLLER_NS)
                          if j["metadata"]["annotations"]["maas.opendatahub.io/subscriptions"] == f"{SUB_NS}/{name}")
        assert attempts[-1] >= 3 and len(attempts) <= 3  # retried with new attempts; old failures pruned


# -- pure parts of the cleanup (no cluster) ------------------------------------------------------------------


def test_job_names_are_deterministic_short_and_per_incarnation() -> None:
    sub = ObjectRef(SUB_NS, "A-very-long-Subscription.name-" + "x" * 200)
    first = job_name(sub, "uid-1", 1)
    assert first == job_name(sub, "uid-1", 1)
    assert len(job_name(sub, "uid-1", 999)) <= 63
    assert first != job_name(sub, "uid-2", 1)  # a re-created subscription never reuses an old Job
    assert first != job_name(sub, "uid-1", 2)
    assert job_name(sub, "uid-1", 12).endswith("-12")


def test_retry_delay_grows_and_is_capped() -> None:
    assert [retry_delay(n, 10, 600) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert retry_delay(50, 10, 600) == 600


def test_job_state_reads_terminal_conditions() -> None:
    meta = {"annotations": {"maas.opendatahub.io/cleanup-attempt": "3"}}
    assert job_state({"metadata": meta}) == JobState(3, "Running")
    failed = job_state({"metadata": meta, "status": {"conditions": [
        {"type": "FailureTarget", "status": "True"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "boom",
         "lastTransitionTime": "2026-01-02T03:04:05Z"}]}})
    assert (failed.phase, failed.attempt, failed.message) == ("Failed", 3, "BackoffLimitExceeded: boom")
    assert failed.finished_at is not None and failed.finished_at.hour == 3
    done = job_state({"metadata": meta, "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
    assert done.phase == "Succeeded"


def test_cleanup_job_shape() -> None:
    settings = runner_settings(maas_api_url="http://maas-api:8080")
    job = build_cleanup_job(ObjectRef(SUB_NS, "gold"), "u-1", 2, settings)
    assert job["metadata"]["namespace"] == CONTROLLER_NS and "ownerReferences" not in job["metadata"]
    assert job["metadata"]["annotations"] == {"maas.opendatahub.io/subscriptions": f"{SUB_NS}/gold",
                                              "maas.opendatahub.io/cleanup-attempt": "2"}
    assert job["metadata"]["labels"]["maas.opendatahub.io/subscription-uid"] == "u-1"
    assert job["spec"]["managedBy"] == settings.cleanup_job_managed_by
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == settings.cleanup_job_service_account
    assert pod["containers"][0]["command"] == ["maasctl", "keys", "revoke-subscription", "--subscription",
                                               f"{SUB_NS}/gold", "--maas-api-url", "http://maas-api:8080"]
    production = build_cleanup_job(ObjectRef(SUB_NS, "gold"), "u-1", 2, SETTINGS)
    assert "managedBy" not in production["spec"]  # the real Job controller runs it
