"""Tenant gateways (issue 25): a second Gateway with its own data plane (one listener), an in-cluster and an
external model routed only through it, and subscriptions bound to it or to the default Gateway. A subscription
is used only through its own Gateway; a model whose route is elsewhere is reported NotOnTenantGateway and never
served for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from e2e.conftest import MAAS, Need, World, eventually
from e2e.target import TENANT_GATEWAY
from maasctl import samples
from maasctl.api.externalmodel import GATEWAY_ANNOTATION
from maasctl.builders import names
from maasctl.builders.gatewayauth import GATEWAY_AUTH_NAME
from maasctl.reconcilers.kinds import AUTH_POLICY, GATEWAY, HTTP_ROUTE, MAAS_MODEL_REF
from maasctl.runtime import GroupVersionKind, NotFound

pytestmark = pytest.mark.local_stack


async def _subscription(world: World, name: str) -> dict[str, Any]:
    obj = await k8s.CustomObjectsApi(world.stack.api).get_namespaced_custom_object(
        "maas.opendatahub.io", "v1alpha1", world.sub_ns(), "maassubscriptions", name)
    return dict(obj)


async def _exists(world: World, gvk: GroupVersionKind, name: str, namespace: str) -> bool:
    try:
        await world.client.get(gvk, name, namespace)
    except NotFound:
        return False
    return True


async def _tenant_data_plane(world: World) -> str:
    """A gateway process serving the tenant Gateway, and the Gateway object as a gateway controller would
    report it; the process stops with the stack."""
    local = world.stack.local
    assert local is not None
    gw_ns, gw_name = TENANT_GATEWAY
    url = await local.add_gateway(world.name("tenant-gateway"), gateway=TENANT_GATEWAY)
    tenant = replace(world.stack.settings, gateway_name=gw_name, gateway_namespace=gw_ns)
    await world.client.apply(samples.gateway(tenant, int(url.rsplit(":", 1)[1])), field_manager="e2e")
    await world.client.patch(GATEWAY, gw_name, gw_ns, samples.gateway_status(), subresource="status")
    return url


async def test_subscriptions_are_used_only_through_their_tenant_gateway(world: World) -> None:
    world.require(Need.INCLUSTER_MODEL, Need.LOCAL_STACK)
    tenant_url = await _tenant_data_plane(world)

    # Closed by default on the tenant Gateway too: the controller gives it the default-deny AuthPolicy.
    async def tenant_gateway_denies() -> bool:
        return await _exists(world, AUTH_POLICY, GATEWAY_AUTH_NAME, TENANT_GATEWAY[0])

    await eventually(tenant_gateway_denies, 60, describe=lambda: "no maas-gateway-auth on the tenant Gateway")

    # A model KServe routed through the tenant Gateway only.
    # ... and the same external provider published on the tenant Gateway by a second MaaSModelRef.
    tenant_gpt = {"apiVersion": MAAS, "kind": "MaaSModelRef",
                  "metadata": {"name": "tenant-gpt", "namespace": world.namespace,
                               "annotations": {GATEWAY_ANNOTATION: "/".join(TENANT_GATEWAY)}},
                  "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}}
    await world.apply(*world.in_cluster_model("tenant-llm", gateway=TENANT_GATEWAY), *world.external_model("gpt"),
                      tenant_gpt)
    await world.mark_ready("tenant-llm", gateway_url=tenant_url)
    bound, default = world.name("tenant-a"), world.name("default-tenant")
    await world.apply(
        world.auth_policy(world.name("tenant-access"), ["tenant-llm", "gpt", "tenant-gpt"], users=("alice", "bob")),
        # Both subscriptions name both models; each has one off its Gateway, so each stays usable (Degraded).
        world.subscription(bound, {"tenant-llm": [(100000, "1m")], "gpt": [(100000, "1m")],
                                   "tenant-gpt": [(100000, "1m")]}, users=("alice",), gateway=TENANT_GATEWAY),
        world.subscription(default, {"tenant-llm": [(100000, "1m")], "gpt": [(100000, "1m")]}, users=("bob",)),
    )

    async def off_gateway(sub: str, model: str) -> bool:
        status = (await _subscription(world, sub)).get("status") or {}
        entries = {e.get("name"): e for e in status.get("modelRefStatuses") or []}
        entry = entries.get(model) or {}
        return (status.get("phase") == "Degraded" and entry.get("reason") == "NotOnTenantGateway"
                and entry.get("ready") is False)

    await eventually(lambda: off_gateway(default, "tenant-llm"), 60,
                     describe=lambda: f"{default} does not report NotOnTenantGateway for tenant-llm")
    await eventually(lambda: off_gateway(bound, "gpt"), 60,
                     describe=lambda: f"{bound} does not report NotOnTenantGateway for gpt")

    alice = (await world.mint("alice", subscription=bound))["key"]
    bob = (await world.mint("bob", subscription=default))["key"]

    async def served_through_tenant() -> bool:
        return (await world.chat("tenant-llm", alice, gateway_url=tenant_url)).status_code == 200

    await eventually(served_through_tenant, 60, describe=lambda: "the tenant gateway does not serve alice")
    answer = await world.chat("tenant-llm", alice, gateway_url=tenant_url)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "echo: hello"

    # tenant-gpt has a route and policies of its own, which the tenant gateway may load after tenant-llm's.
    last: dict[str, str] = {}

    async def external_served() -> bool:
        external = await world.chat("tenant-gpt", alice, gateway_url=tenant_url)
        last["answer"] = f"{external.status_code} {external.text[:300]}"
        return external.status_code == 200

    await eventually(external_served, 60, describe=lambda: last.get("answer", ""))

    # Bob's subscription belongs to the default Gateway: denied on the tenant one, with his key, with an
    # explicit subscription header, and with his own Kubernetes token.
    assert (await world.chat("tenant-llm", bob, gateway_url=tenant_url)).status_code == 403
    token = world.token("bob")
    assert (await world.chat("tenant-llm", token, gateway_url=tenant_url)).status_code == 403
    named = await world.chat("tenant-llm", token, gateway_url=tenant_url, headers={"X-MaaS-Subscription": default})
    assert named.status_code == 403
    # Bob's subscription works through its own Gateway.
    await world.wait_enforced("gpt", bob)
    # Alice cannot carry her tenant subscription through the default Gateway: not for the tenant's model (not
    # routed there) and not for a model her subscription names and the default Gateway serves to Bob.
    assert (await world.chat("tenant-llm", alice)).status_code in (403, 404)
    assert (await world.chat("gpt", alice)).status_code == 403
    assert (await world.chat("gpt", world.token("alice"))).status_code == 403
    assert (await world.chat("tenant-gpt", alice)).status_code in (403, 404)
    # Nothing unrouted is served by the tenant data plane either.
    stray = await world.chat("no-such-model", alice, gateway_url=tenant_url)
    assert stray.status_code in (403, 404)


async def test_an_external_model_on_an_unmanaged_gateway_is_refused_and_not_routed(world: World) -> None:
    world.require(Need.LOCAL_STACK)
    stray = {"apiVersion": MAAS, "kind": "MaaSModelRef",
             "metadata": {"name": "stray", "namespace": world.namespace,
                          "annotations": {GATEWAY_ANNOTATION: "elsewhere/not-managed"}},
             "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}}
    await world.apply(*world.external_model("gpt"), stray)

    async def failed() -> bool:
        obj = await world.client.get(MAAS_MODEL_REF, "stray", world.namespace)
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
        return status.get("phase") == "Failed" and "not a Gateway this controller manages" in ready.get("message", "")

    await eventually(failed, 60, describe=lambda: "MaaSModelRef stray is not Failed for its unmanaged Gateway")
    assert not await _exists(world, HTTP_ROUTE, names.external_route_name("stray"), world.namespace)
