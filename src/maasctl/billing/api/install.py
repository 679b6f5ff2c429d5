"""Install the billing CRDs into a cluster and wait until they are Established (idempotent, server-side apply)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from maasctl.api import crdgen
from maasctl.api.install import _wait_established
from maasctl.billing.api import KINDS

FIELD_MANAGER = "maasctl"
_SSA: dict[str, Any] = {"_content_type": "application/apply-patch+yaml", "force": True}


async def install_billing_crds(api_client: client.ApiClient, *, field_manager: str = FIELD_MANAGER,
                               timeout: int = 60) -> None:
    """Server-side apply the seven billing CRDs and return once the API server serves them all.

    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    ext = client.ApiextensionsV1Api(api_client)
    bodies = [crdgen.crd(kind) for kind in KINDS]
    async with asyncio.timeout(timeout):
        for body in bodies:
            await ext.patch_custom_resource_definition(
                name=body["metadata"]["name"], body=body, field_manager=field_manager, **_SSA)
        for body in bodies:
            await _wait_established(ext, body["metadata"]["name"])
