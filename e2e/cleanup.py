"""Leave the cluster as it was, also when a journey fails: on someone else's cluster that matters.

Every object a journey applies carries the label `e2e.maasctl.opendatahub.io/run=<run id>`. A journey's
teardown revokes the API keys it minted, deletes what it applied outside its own namespace (MaaSSubscriptions
and MaaSAuthPolicies live in the shared subscription namespace) and then its namespace. At the end of an
external session the suite deletes whatever still carries the run's label and waits until it is gone, so a
subscription stuck on its finalizer (a cleanup Job that never ran) fails the run instead of lingering.
By hand: `kubectl delete ns,maassubscriptions,maasauthpolicies,configmaps -A -l e2e.maasctl.opendatahub.io/run`
(the ConfigMaps: organization-admin mappings in the subscription namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from maasctl.reconcilers.kinds import CONFIG_MAP, MAAS_AUTH_POLICY, MAAS_SUBSCRIPTION
from maasctl.runtime import ApiError, Client, GroupVersionKind, NotFound
from maasctl.tls import default_tls

__all__ = ["RUN_LABEL", "Cleanup", "labelled", "sweep"]

RUN_LABEL = "e2e.maasctl.opendatahub.io/run"
NAMESPACE = GroupVersionKind("", "v1", "Namespace")
SWEPT = (NAMESPACE, MAAS_SUBSCRIPTION, MAAS_AUTH_POLICY, CONFIG_MAP)


def labelled(obj: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A copy of `obj` carrying the run label."""
    meta = dict(obj.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), RUN_LABEL: run_id}
    return {**obj, "metadata": meta}


@dataclass
class Cleanup:
    """What one journey created, undone in reverse order."""

    client: Client
    api_url: str
    keys: list[tuple[str, str]] = field(default_factory=list)  # (owner's token, key id)
    objects: list[tuple[GroupVersionKind, str | None, str]] = field(default_factory=list)

    def track(self, obj: dict[str, Any]) -> None:
        ref = (GroupVersionKind.of(obj), obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if ref not in self.objects:
            self.objects.append(ref)

    async def run(self) -> list[str]:
        """Undo everything; the problems met (nothing is raised half-way)."""
        problems: list[str] = []
        async with httpx.AsyncClient(base_url=self.api_url, timeout=15, verify=default_tls()) as http:
            for token, key_id in self.keys:
                try:
                    resp = await http.delete(f"/v1/api-keys/{key_id}", headers={"Authorization": f"Bearer {token}"})
                except httpx.HTTPError as exc:
                    problems.append(f"revoking key {key_id}: {exc!r}")
                    continue
                if resp.status_code not in (200, 204, 404, 410):
                    problems.append(f"revoking key {key_id}: {resp.status_code} {resp.text[:200]}")
        for gvk, namespace, name in reversed(self.objects):
            try:
                await self.client.delete(gvk, name, namespace, propagation_policy="Background")
            except NotFound:
                pass
            except ApiError as exc:
                problems.append(f"deleting {gvk.kind} {namespace}/{name}: {exc}")
        return problems


async def _remaining(client: Client, run_id: str, namespaces: Iterable[str | None]) -> list[str]:
    found: list[str] = []
    for gvk in SWEPT:
        scopes = [None] if gvk == NAMESPACE else list(namespaces)
        for ns in scopes:
            with contextlib.suppress(NotFound):  # a kind not installed has nothing left
                items = (await client.list(gvk, ns, label_selector=f"{RUN_LABEL}={run_id}")).items
                found += [f"{gvk.kind} {ns + '/' if ns else ''}{o['metadata']['name']}" for o in items]
    return found


async def sweep(client: Client, run_id: str, subscription_namespace: str, timeout: float) -> list[str]:
    """Delete what still carries this run's label; what is left after `timeout` seconds."""
    for gvk in SWEPT:
        ns = None if gvk == NAMESPACE else subscription_namespace
        with contextlib.suppress(NotFound):
            for obj in (await client.list(gvk, ns, label_selector=f"{RUN_LABEL}={run_id}")).items:
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                with contextlib.suppress(NotFound):
                    await client.delete(gvk, obj["metadata"]["name"], ns, propagation_policy="Background")
    deadline = asyncio.get_running_loop().time() + timeout
    while left := await _remaining(client, run_id, [subscription_namespace]):
        if asyncio.get_running_loop().time() > deadline:
            return left
        await asyncio.sleep(1)
    return []
