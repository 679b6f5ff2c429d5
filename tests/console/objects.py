"""Objects an operator would apply with kubectl, for tests that start from an existing setup."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes_asyncio import client as k8s

from tests.console.conftest import ConsoleWorld

MAAS = "maas.opendatahub.io/v1alpha1"


def suffix() -> str:
    return uuid.uuid4().hex[:6]


async def namespace(world: ConsoleWorld, prefix: str) -> str:
    name = f"{prefix}-{suffix()}"
    await k8s.CoreV1Api(world.stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def external_model(world: ConsoleWorld, ns: str, name: str, target: str = "gpt-x") -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-key", "namespace": ns},
         "stringData": {"api-key": world.stack.options.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": name, "namespace": ns},
         "spec": {"provider": "openai", "endpoint": f"{world.stack.model_url}/v1", "targetModel": target,
                  "credentialRef": {"name": f"{name}-key"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": name, "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": name}}},
    ]


def access(world: ConsoleWorld, name: str, ns: str, models: list[str], users: list[str],
           tiers: list[tuple[int, str]]) -> list[dict[str, Any]]:
    sub_ns = world.stack.settings.subscription_namespace
    refs = [{"name": m, "namespace": ns} for m in models]
    return [
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": name, "namespace": sub_ns},
         "spec": {"modelRefs": refs, "subjects": {"users": users}}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription", "metadata": {"name": name, "namespace": sub_ns},
         "spec": {"owner": {"users": users}, "modelRefs": [
             {**r, "tokenRateLimits": [{"limit": limit, "window": w} for limit, w in tiers]} for r in refs]}},
    ]


async def apply(world: ConsoleWorld, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        await world.client.apply(obj, field_manager="console-tests-operator")
