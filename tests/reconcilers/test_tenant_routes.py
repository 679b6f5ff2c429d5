"""Whether a subscription bound to a tenant Gateway can use a resolved model (pure: no cluster)."""

from __future__ import annotations

import pytest

from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.reconcilers.routes import RouteResolution, tenant_gateway_problem

DEFAULT, TENANT, OTHER, UNMANAGED = (GatewayRef("gw", n) for n in ("default", "tenant-a", "tenant-b", "stray"))
MANAGED = (DEFAULT, TENANT, OTHER)


def resolved(*on: GatewayRef) -> RouteResolution:
    return RouteResolution(ObjectRef("llm", "m"), "Resolved", "route found", ObjectRef("llm", "m-route"),
                           gateways=on, managed=tuple(g for g in MANAGED if g in on))


@pytest.mark.parametrize(
    ("route_on", "tenant", "problem"),
    [
        pytest.param((DEFAULT,), DEFAULT, None, id="default-on-default"),
        pytest.param((TENANT,), TENANT, None, id="tenant-on-tenant"),
        pytest.param((TENANT, UNMANAGED), TENANT, "several Gateways", id="an-unmanaged-second-parent-is-ambiguous"),
        pytest.param((DEFAULT, UNMANAGED), DEFAULT, None, id="ambiguous-counts-as-default"),
        pytest.param((TENANT,), DEFAULT, "not attached to the subscription's tenant Gateway gw/default",
                     id="default-subscription-tenant-route"),
        pytest.param((DEFAULT,), TENANT, "not attached", id="tenant-subscription-default-route"),
        pytest.param((OTHER,), TENANT, "not attached", id="another-tenants-route"),
        pytest.param((DEFAULT, TENANT), DEFAULT, None, id="shared-route-counts-as-default"),
        pytest.param((DEFAULT, TENANT), TENANT, "several Gateways", id="shared-route-not-for-tenant"),
        pytest.param((TENANT, OTHER), TENANT, "several Gateways", id="two-tenants-share-a-route"),
        pytest.param((TENANT,), UNMANAGED, "not managed by this controller", id="unmanaged-tenant-gateway"),
    ],
)
def test_a_subscription_uses_a_model_only_through_its_tenant_gateway(
    route_on: tuple[GatewayRef, ...], tenant: GatewayRef, problem: str | None
) -> None:
    got = tenant_gateway_problem(resolved(*route_on), tenant, DEFAULT, MANAGED)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


def test_the_tenant_gateway_sent_with_the_selection_is_the_routes_only_managed_parent() -> None:
    assert resolved(TENANT).sole_gateway == TENANT
    assert resolved(TENANT, UNMANAGED).sole_gateway is None  # Authorino cannot tell the two apart
    assert resolved(DEFAULT, TENANT).sole_gateway is None
    assert resolved(DEFAULT, TENANT).gateway == DEFAULT  # TRLP labels: the default Gateway first
