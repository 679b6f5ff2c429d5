"""Shared fixtures: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import install_third_party_crds


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager with all third-party CRDs installed."""
    keep = os.environ.get("MAASCTL_KEEP_CONTROL_PLANE") == "1"
    cp = ControlPlane()
    cp.start()
    try:
        with cp.http_client() as http:
            install_third_party_crds(http)
        yield cp
    finally:
        if not keep:
            cp.stop()


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[k8s.ApiClient]:
    """An admin ApiClient (client certificate in system:masters)."""
    api = await connect(str(control_plane.kubeconfig))
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
async def user_api(control_plane: ControlPlane) -> AsyncIterator[Callable[[str], Awaitable[k8s.ApiClient]]]:
    """`await user_api("alice")`: an ApiClient authenticated with that user's bearer token."""
    opened: list[k8s.ApiClient] = []

    async def make(name: str) -> k8s.ApiClient:
        api = await connect(str(control_plane.kubeconfig_for(name)))
        opened.append(api)
        return api

    try:
        yield make
    finally:
        for api in opened:
            await api.close()


@pytest.fixture
async def namespace(kube: k8s.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted afterwards (the namespace controller empties it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = k8s.CoreV1Api(kube)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        try:
            await core.delete_namespace(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


# --- nothing outlives its test ----------------------------------------------------------------------------


def _descendants() -> dict[int, str]:
    """Live (non-zombie) descendant processes of this one: pid -> command name, read from /proc."""
    parents: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry)] = (int(fields[1]), fields[0], name)
    me = os.getpid()
    out: dict[int, str] = {}
    for pid, (_, state, name) in parents.items():
        seen, cur = set(), pid
        while cur in parents and cur not in seen and cur != me:
            seen.add(cur)
            cur = parents[cur][0]
        if cur == me and pid != me and state != "Z":
            out[pid] = name
    return out


@pytest.fixture(autouse=True)
async def no_leaks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fails the test that leaves an asyncio task or a child process running after its own fixtures are torn
    down. Higher-scoped fixtures are set up before this one, so what they start is not counted; a test marked
    `restarts_shared_processes` (it restarts the session's API server) is not checked for processes."""
    tasks = asyncio.all_tasks()
    procs = set(_descendants())
    check_processes = request.node.get_closest_marker("restarts_shared_processes") is None
    yield
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        await asyncio.sleep(0)
        me = asyncio.current_task()
        leaked_tasks = [t for t in asyncio.all_tasks() - tasks if t is not me and not t.done()]
        leaked_procs = {pid: name for pid, name in _descendants().items()
                        if pid not in procs and check_processes}
        if not (leaked_tasks or leaked_procs) or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    for task in leaked_tasks:
        task.cancel()
    assert not leaked_tasks, f"the test left asyncio tasks running: {[t.get_name() for t in leaked_tasks]}"
    assert not leaked_procs, f"the test left child processes running: {leaked_procs}"
