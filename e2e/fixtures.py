"""The `stack` and `world` fixtures of the end-to-end journeys, for every suite that runs on the real stack.

They are registered once for the whole run by the repository's root `conftest.py` (`pytest_plugins`). A fixture
imported into several conftest files is one fixture *per file*: the e2e journeys and the security, compatibility
and metering suites each started a stack of their own (control plane, controller, maas-api, gateway, models,
guardrails engine), and all of them ran until the session ended. Now each test process starts one stack and
every suite shares it, each test in a namespace of its own (`World`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s

from e2e.cleanup import RUN_LABEL, Cleanup
from e2e.config import ConfigError, ExternalConfig
from e2e.conftest import World
from e2e.identities import IdentityError
from e2e.target import Target, external_target, local_target

__all__ = ["stack", "world"]


@pytest.fixture(scope="session")
async def stack() -> AsyncIterator[Target]:
    mode = os.environ.get("E2E_CLUSTER", "local")
    async with contextlib.AsyncExitStack() as exits:
        if mode == "local":
            target = await exits.enter_async_context(local_target())
        elif mode == "external":
            problem = ""
            try:
                target = await exits.enter_async_context(external_target(ExternalConfig.from_env()))
            except (ConfigError, IdentityError, RuntimeError) as exc:
                problem = str(exc)  # failed outside the handler: the message alone, no chained traceback
            if problem:
                pytest.fail(problem, pytrace=False)
        else:
            pytest.fail(f"E2E_CLUSTER must be local or external, not {mode!r} (kind is a recipe of external: "
                        "docs/e2e.md)", pytrace=False)
        yield target


@pytest.fixture
async def world(stack: Target) -> AsyncIterator[World]:
    suffix = uuid.uuid4().hex[:6]
    namespace = f"e2e-{suffix}"
    cleanup = Cleanup(stack.client, stack.api_url)
    cleanup.track({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(
        metadata=k8s.V1ObjectMeta(name=namespace, labels={RUN_LABEL: stack.run_id})))
    try:
        yield World(stack, namespace, suffix, cleanup)
    finally:
        problems = await cleanup.run()
        if problems:
            pytest.fail("cleanup after the journey: " + "; ".join(problems), pytrace=False)
