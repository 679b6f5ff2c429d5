"""Shared fixtures: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

import asyncio
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings
from kubernetes_asyncio import client as k8s

from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.jobrunner import JOB_ENV_MARKER
from maasctl.testenv.redis import RedisServer, start_redis
from maasctl.testenv.seed import third_party_seed

from .cel_shadow import cel_fast_path_agrees_with_cel_python, cel_interpreted  # noqa: F401 - fixtures for every test

# Property tests check behaviour, not speed: no per-example deadline (the machine is shared with the control
# plane and other suites, and a slow example is not a wrong one). Benchmarks measure speed.
settings.register_profile("maasctl", deadline=None)
settings.load_profile("maasctl")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager with all third-party CRDs installed."""
    keep = os.environ.get("MAASCTL_KEEP_CONTROL_PLANE") == "1"
    cp = ControlPlane(etcd_seed=third_party_seed())
    cp.start()
    try:
        yield cp
    finally:
        if not keep:
            cp.stop()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    """A throwaway Redis server per test module (token counters shared by gateway replicas)."""
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


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
    """Live (non-zombie) descendant processes of this one: pid -> command name, read from /proc. Runs twice per
    test over every process of the machine: raw reads, no text decoding (a third of the CPU of open().read())."""
    parents: dict[int, tuple[int, bytes, bytes]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:
            continue
        end = stat.rindex(b")")  # "pid (name) state ppid ...": the name may hold spaces and parentheses
        parents[int(entry)] = (int(stat[end + 4: stat.index(b" ", end + 4)]), stat[end + 2: end + 3],
                               stat[stat.index(b"(") + 1: end])
    me = os.getpid()
    out: dict[int, str] = {}
    for pid, (_, state, name) in parents.items():
        seen, cur = set(), pid
        while cur in parents and cur not in seen and cur != me:
            seen.add(cur)
            cur = parents[cur][0]
        if cur == me and pid != me and state != b"Z":
            out[pid] = name.decode(errors="replace")
    return out


def _runs_a_job(pid: int) -> bool:
    """A Job's process started by a JobRunner (its fixture owns it, as it owns the runner's tasks)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{JOB_ENV_MARKER}=".encode() in f.read()
    except OSError:
        return False


_PARENTS: weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Task[Any] | None] = weakref.WeakKeyDictionary()


def _track_parents(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    """Task factory remembering which task created each task (to tell a test's own tasks apart from what a
    longer-lived fixture's tasks spawn later)."""
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
    _PARENTS[task] = asyncio.current_task(loop)
    return task


def _descends_from(task: asyncio.Task[Any], roots: set[asyncio.Task[Any]]) -> bool:
    seen: set[int] = set()
    cur: asyncio.Task[Any] | None = task
    while cur is not None and id(cur) not in seen:
        if cur in roots:
            return True
        seen.add(id(cur))
        cur = _PARENTS.get(cur)
    return False


@pytest.fixture(autouse=True)
async def no_leaks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fails the test that leaves an asyncio task or a child process running after its own fixtures are torn
    down. Higher-scoped fixtures are set up before this one, so what they start (and what their tasks spawn
    later) is not counted; a test marked `restarts_shared_processes` (it restarts the session's API server)
    is not checked for processes."""
    loop = asyncio.get_running_loop()
    if loop.get_task_factory() is not _track_parents:
        loop.set_task_factory(_track_parents)
    tasks = asyncio.all_tasks()
    procs = set(_descendants())
    check_processes = request.node.get_closest_marker("restarts_shared_processes") is None
    yield
    deadline = loop.time() + 5
    while True:
        await asyncio.sleep(0)
        me = asyncio.current_task()
        leaked_tasks = [t for t in asyncio.all_tasks() - tasks
                        if t is not me and not t.done() and not _descends_from(t, tasks)]
        leaked_procs = {pid: name for pid, name in _descendants().items()
                        if pid not in procs and check_processes and not _runs_a_job(pid)}
        if not (leaked_tasks or leaked_procs) or loop.time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert not leaked_tasks, f"the test left asyncio tasks running: {[t.get_name() for t in leaked_tasks]}"
    assert not leaked_procs, f"the test left child processes running: {leaked_procs}"
