"""Fixtures for runtime integration tests (the control plane fixtures live in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import Client, GroupVersionKind, Metrics, NotFound

from .helpers import eventually, widget_crd

CRD = GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")


@pytest.fixture
def client(kube: k8s.ApiClient) -> Client:
    return Client(kube, metrics=Metrics())


@pytest.fixture
async def widget(client: Client) -> AsyncIterator[GroupVersionKind]:
    """A fresh namespaced CRD (``Widget``, with a status subresource) served for one test."""
    group = f"w{uuid.uuid4().hex[:8]}.example.test"
    gvk = GroupVersionKind(group, "v1", "Widget")
    await client.create(widget_crd(group))

    async def served() -> bool:
        client.mapper.refresh(gvk.group_version)
        return await client.mapper.is_served(gvk)

    try:
        await eventually(served, timeout=30, every=0.2)
        await asyncio.sleep(0.5)  # the CRD handler may lag discovery briefly
        yield gvk
    finally:
        with contextlib.suppress(NotFound):
            await client.delete(CRD, f"widgets.{group}")
