"""PriceBook lifecycle on the real control plane, driven by the controller's clock: Draft (no notice),
Announced -> Active at effectiveFrom, Superseded while pinned tenants stay, Retired when none is left.

The clock is a ManualClock: moving it re-queues exactly the books whose next transition has come, so
nothing here touches an object to make time pass, and nothing polls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from .conftest import Billing, RunningBilling, eventually, wait_event

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
RATES = [{"sku": "granite-8b", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1.00"}}]


def rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def book(namespace: str, name: str, effective: datetime, notice_days: int, supersedes: str | None = None
         ) -> dict[str, Any]:
    spec: dict[str, Any] = {"currency": "EUR", "effectiveFrom": rfc3339(effective), "noticeDays": notice_days,
                            "skus": RATES}
    if supersedes:
        spec["supersedes"] = supersedes
    return {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "PriceBook",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def tenant(namespace: str, name: str, pin: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"displayName": name, "planRef": {"name": "standard"}, "billingMode": "ShowbackOnly"}
    if pin:
        spec["priceBookPin"] = pin
    return {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "TenantAccount",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def plan(namespace: str, price_book: str) -> dict[str, Any]:
    return {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
            "metadata": {"name": "standard", "namespace": namespace},
            "spec": {"limits": {}, "priceBookRef": price_book,
                     "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "nowhere"}}}


async def status_of(billing: Billing, namespace: str, name: str) -> dict[str, Any]:
    obj = await billing.get("PriceBook", name, namespace)
    assert obj is not None
    return dict(obj.get("status") or {})


async def wait_state(billing: Billing, namespace: str, name: str, state: str, **expect: Any) -> dict[str, Any]:
    """Until the book is in `state` with the `expect`ed status fields (tenant counts follow tenant events, which
    may reach the controller after the state changed)."""

    async def check() -> dict[str, Any]:
        status = await status_of(billing, namespace, name)
        assert status.get("state") == state, status
        assert all(status.get(k) == v for k, v in expect.items()), status
        return status

    result: dict[str, Any] = await eventually(check)
    return result


async def created_at(billing: Billing, namespace: str, name: str) -> datetime:
    obj = await billing.get("PriceBook", name, namespace)
    assert obj is not None
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


async def test_without_enough_notice_a_book_stays_draft_with_a_condition_and_an_event(
    billing: Billing, billing_controller: RunningBilling, namespace: str, kube: k8s.ApiClient
) -> None:
    clock = billing_controller.clock
    clock.set(datetime.now(UTC))
    await billing.create(book(namespace, "hasty", clock.now() + 3 * DAY, notice_days=30))
    status = await wait_state(billing, namespace, "hasty", "Draft")
    cond = next(c for c in status["conditions"] if c["type"] == "NoticeValid")
    assert cond["status"] == "False" and cond["reason"] == "NoticeTooShort"
    assert "less than 30 days of notice" in cond["message"]
    await wait_event(kube, namespace, "hasty", "NoticeTooShort", "Warning")
    clock.advance(60 * DAY)
    await billing.patch("PriceBook", "hasty", namespace, {"metadata": {"labels": {"poke": "1"}}})
    status = await wait_state(billing, namespace, "hasty", "Draft")
    assert status["observedGeneration"] == 1


async def test_announced_book_becomes_active_when_the_clock_reaches_effective_from(
    billing: Billing, billing_controller: RunningBilling, namespace: str, kube: k8s.ApiClient
) -> None:
    clock = billing_controller.clock
    clock.set(datetime.now(UTC))
    await billing.create(book(namespace, "v1", clock.now() + 31 * DAY, notice_days=30))
    created = await created_at(billing, namespace, "v1")
    status = await wait_state(billing, namespace, "v1", "Announced")
    assert status["activeTenants"] == 0
    assert next(c for c in status["conditions"] if c["type"] == "NoticeValid")["status"] == "True"
    clock.set(created + 30 * DAY)  # not yet
    await wait_state(billing, namespace, "v1", "Announced")
    clock.set(created + 32 * DAY)  # past effectiveFrom: the pending timer fires, no object changes
    await wait_state(billing, namespace, "v1", "Active")
    await wait_event(kube, namespace, "v1", "Announced")
    await wait_event(kube, namespace, "v1", "Activated")


async def test_successor_supersedes_grandfathers_pinned_tenants_then_retires(
    billing: Billing, billing_controller: RunningBilling, namespace: str
) -> None:
    clock = billing_controller.clock
    clock.set(datetime.now(UTC))
    start = clock.now()
    await billing.create(book(namespace, "v1", start + 2 * DAY, notice_days=1))
    await billing.create(plan(namespace, "v1"))
    await billing.create(tenant(namespace, "follower"))
    await billing.create(tenant(namespace, "loyal", pin="v1"))
    clock.set(start + 3 * DAY)
    await wait_state(billing, namespace, "v1", "Active", activeTenants=2, grandfatheredTenants=["loyal"])

    await billing.create(book(namespace, "v2", start + 10 * DAY, notice_days=5, supersedes="v1"))
    await wait_state(billing, namespace, "v2", "Announced")
    await wait_state(billing, namespace, "v1", "Active")
    clock.set(start + 11 * DAY)
    await wait_state(billing, namespace, "v1", "Superseded", activeTenants=1, grandfatheredTenants=["loyal"])

    async def follower_moved() -> bool:
        return (await status_of(billing, namespace, "v2")).get("activeTenants") == 1

    await eventually(follower_moved)
    await billing.patch("TenantAccount", "loyal", namespace, {"spec": {"priceBookPin": None}})
    await wait_state(billing, namespace, "v1", "Retired", activeTenants=0, grandfatheredTenants=[])
    await wait_state(billing, namespace, "v2", "Active", activeTenants=2)
