"""The local stack's JobRunner (it plays the Job controller and kubelet for the key-cleanup Jobs): one Job it
cannot finish never stops it, a transient error on a status write is retried, a Job deleted meanwhile is the
end of that Job. A runner that died with one Job left every later subscription deletion waiting for good."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import Client
from maasctl.testenv.jobrunner import DEFAULT_MANAGED_BY, JOB, JobRunner
from tests.runtime.helpers import eventually

pytestmark = pytest.mark.integration


def job(name: str, namespace: str, *argv: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"managedBy": DEFAULT_MANAGED_BY, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "local", "command": list(argv)}]}}}}


class FlakyStatus(Client):
    """A status write for the Jobs named in `fail` fails that many times (an API server under load)."""

    def __init__(self, api: k8s.ApiClient, fail: dict[str, int]) -> None:
        super().__init__(api)
        self.fail = fail

    async def patch(self, gvk: Any, name: str, namespace: str | None, patch: Any, **kw: Any) -> Any:
        if kw.get("subresource") == "status" and self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise RuntimeError("the server was unable to return a response in the time allotted")
        return await super().patch(gvk, name, namespace, patch, **kw)


@contextlib.asynccontextmanager
async def running(runner: JobRunner) -> AsyncIterator[JobRunner]:
    task = asyncio.create_task(runner.run())
    try:
        yield runner
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def succeeded(client: Client, name: str, namespace: str) -> bool:
    return bool(((await client.get(JOB, name, namespace)).get("status") or {}).get("succeeded") == 1)


async def test_a_job_it_cannot_finish_is_recorded_and_the_next_jobs_still_run(kube: k8s.ApiClient,
                                                                              namespace: str) -> None:
    client = Client(kube)
    flaky = FlakyStatus(kube, {"transient": 3, "broken": 1_000})
    runner = JobRunner(flaky, namespace=namespace, status_attempts=4)
    runner.commands = {}
    async with running(runner):
        await client.create(job("transient", namespace, "true"))  # three failed writes, then written
        await eventually(lambda: succeeded(client, "transient", namespace))
        await client.create(job("broken", namespace, "true"))  # its status can never be written
        await eventually(lambda: bool(runner.errors), timeout=60)
        assert "broken" in runner.errors[0]
        await client.create(job("after", namespace, "true"))  # the runner goes on
        await eventually(lambda: succeeded(client, "after", namespace))
    assert [r.name for r in runner.runs].count("after") == 1


async def test_a_job_deleted_while_it_runs_ends_quietly(kube: k8s.ApiClient, namespace: str) -> None:
    client = Client(kube)
    runner = JobRunner(client, namespace=namespace)
    runner.commands = {}
    async with running(runner):
        await client.create(job("gone", namespace, "sleep", "1"))
        await eventually(lambda: _started(client, "gone", namespace))
        await client.delete(JOB, "gone", namespace)
        await eventually(lambda: any(r.name == "gone" for r in runner.runs), timeout=30)
        await client.create(job("next", namespace, "true"))
        await eventually(lambda: succeeded(client, "next", namespace))
    assert runner.errors == []


async def _started(client: Client, name: str, namespace: str) -> bool:
    return bool(((await client.get(JOB, name, namespace)).get("status") or {}).get("active") == 1)
