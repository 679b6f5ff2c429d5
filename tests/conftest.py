"""Shared fixtures: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

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
