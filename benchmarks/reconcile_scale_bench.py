"""How fast do subscriptions reach Active, and how many writes does that take? (issue 5)

Starts its own local control plane (no kube-controller-manager), installs all CRDs, publishes M external
models, then creates N subscriptions (each over 2 models, round-robin) with the controller running and
measures the time until every subscription is Active, the controller's writes (server-side applies), and
that a restart after convergence makes zero writes. Scales 1x, 2x, 4x of 300 subscriptions over 50 models.

    .venv/bin/python benchmarks/reconcile_scale_bench.py [--scales 1,2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from typing import Any

from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.app import build_manager
from maasctl.runtime.connect import connect
from maasctl.settings import ControllerSettings
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import install_third_party_crds

SUB_NS = "models-as-a-service"
WORKERS = 5
SETTINGS = ControllerSettings(subscription_namespace=SUB_NS, gateway_name="gw", gateway_namespace="gw",
                              metrics_bind_address="0", health_probe_bind_address="0",
                              max_concurrent_reconciles=WORKERS, maas_api_url="http://127.0.0.1:1")
GROUP, VERSION = "maas.opendatahub.io", "v1alpha1"


async def create_all(custom: k8s.CustomObjectsApi, ns: str, plural: str, bodies: list[dict[str, Any]]) -> None:
    sem = asyncio.Semaphore(20)

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            await custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)

    await asyncio.gather(*(one(b) for b in bodies))


async def count_phase(custom: k8s.CustomObjectsApi, ns: str, plural: str, phase: str) -> int:
    items = (await custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural))["items"]
    return sum(1 for i in items if (i.get("status") or {}).get("phase") == phase)


async def wait_phase(custom: k8s.CustomObjectsApi, ns: str, plural: str, phase: str, n: int, limit: float) -> float:
    start = time.monotonic()
    while await count_phase(custom, ns, plural, phase) < n:
        if time.monotonic() - start > limit:
            raise TimeoutError(f"{plural}: fewer than {n} {phase} after {limit}s")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def run_scale(n_subs: int, n_models: int) -> dict[str, Any]:
    cp = ControlPlane(with_controller_manager=False)
    await asyncio.to_thread(cp.start)
    try:
        with cp.http_client() as http:
            await asyncio.to_thread(install_third_party_crds, http)
        api = await connect(str(cp.kubeconfig))
        await install_crds(api, subscription_namespace=SUB_NS)
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        for ns in (SUB_NS, "models", "gw"):
            await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        await create_all(custom, "models", "externalmodels", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ExternalModel", "metadata": {"name": "provider"},
            "spec": {"provider": "openai", "endpoint": "https://api.provider.test/v1", "targetModel": "m"}}])
        await create_all(custom, "models", "maasmodelrefs", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSModelRef", "metadata": {"name": f"m{i}"},
            "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}} for i in range(n_models)])

        manager_api = await connect(str(cp.kubeconfig))
        manager = build_manager(manager_api, SETTINGS)
        task = asyncio.create_task(manager.run())
        await wait_phase(custom, "models", "maasmodelrefs", "Ready", n_models, 300)
        writes_before = manager.applier.writes
        start = time.monotonic()
        await create_all(custom, SUB_NS, "maassubscriptions", [{
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "MaaSSubscription", "metadata": {"name": f"s{i}"},
            "spec": {"owner": {"groups": [{"name": f"team-{i}"}]}, "modelRefs": [
                {"name": f"m{(i + k) % n_models}", "namespace": "models",
                 "tokenRateLimits": [{"limit": 1000 + i, "window": "1m"}]} for k in (0, 1)]}}
            for i in range(n_subs)])
        created = time.monotonic() - start
        await wait_phase(custom, SUB_NS, "maassubscriptions", "Active", n_subs, 900)
        elapsed = time.monotonic() - start
        writes = manager.applier.writes - writes_before
        manager.stop()
        await task
        await manager_api.close()

        restarted_api = await connect(str(cp.kubeconfig))
        restarted = build_manager(restarted_api, SETTINGS)
        task = asyncio.create_task(restarted.run())
        await asyncio.sleep(1)
        await restarted.cache.wait_for_sync(deadline=60)
        await asyncio.sleep(5)
        restart_writes = restarted.applier.writes
        restarted.stop()
        await task
        await restarted_api.close()
        await api.close()
        return {"subscriptions": n_subs, "models": n_models, "create_s": created, "active_s": elapsed,
                "writes": writes, "restart_writes": restart_writes}
    finally:
        await asyncio.to_thread(cp.stop)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--workers", type=int, default=WORKERS, help="max concurrent reconciles per controller")
    args = parser.parse_args()
    global SETTINGS
    SETTINGS = dataclasses.replace(SETTINGS, max_concurrent_reconciles=args.workers)
    print("| scale | subscriptions | models | all created (s) | all Active (s) | SSA writes | writes on restart |")
    print("|---|---|---|---|---|---|---|")
    for scale in (int(s) for s in args.scales.split(",")):
        r = await run_scale(300 * scale, 50 * scale)
        print(f"| {scale}x | {r['subscriptions']} | {r['models']} | {r['create_s']:.1f} | {r['active_s']:.1f} | "
              f"{r['writes']} | {r['restart_writes']} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
