"""`/v1/subscriptions` carries the billing Plan limits and tenant state of each listed subscription's
organization (maasctl's `billing`), for that subscription only: a caller never learns of another organization's
tenant, and of a wallet only its state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from maasctl.contract.billing_terms import ORGANIZATION_LABEL
from maasctl.contract.views import SubscribedModel, SubscriptionView, Tier
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import BillingObjects, StaticSources
from tests.maasapi.conftest import NS, USERS, auth

GW_NS = "openshift-ingress"  # MaasApiSettings' default Gateway: openshift-ingress/maas-default-gateway


class Billing:
    def __init__(self, objects: BillingObjects | None) -> None:
        self.objects = objects

    def billing_objects(self) -> BillingObjects | None:
        return self.objects


def _tenant(name: str, org: str, state: str, plan: str = "basic") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": GW_NS, "labels": {ORGANIZATION_LABEL: org}},
            "spec": {"planRef": {"name": plan}, "billingMode": "Prepaid", "displayName": name},
            "status": {"state": state, "balance": "-12.500000", "mtdSpend": "99.000000"}}


PLANS = [{"metadata": {"name": "basic", "namespace": GW_NS},
          "spec": {"limits": {"requestsPerMinute": 30, "tokensPerDay": 1000}, "modelScopes": ["gpt-*"],
                   "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                 "name": "maas-default-gateway"}}}]
TENANTS = [_tenant("ten-acme", "acme", "Frozen"), _tenant("ten-helix", "helix", "Active")]
MODELS = (SubscribedModel("llm", "gpt-x", (Tier(1000, "1m"),)),)
SUBSCRIPTIONS = [
    SubscriptionView(NS, "acme-team", groups=frozenset(("premium-users",)), phase="Active", models=MODELS,
                     organization_id="acme"),
    SubscriptionView(NS, "helix-team", users=frozenset(("bob",)), phase="Active", models=MODELS,
                     organization_id="helix"),
    SubscriptionView(NS, "no-org", groups=frozenset(("premium-users",)), phase="Active", models=MODELS),
    SubscriptionView(NS, "acme-elsewhere", groups=frozenset(("premium-users",)), phase="Active", models=MODELS,
                     organization_id="acme", gateway="tenant-gw/other"),
]


@pytest.fixture(params=["known", "unknown"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, bool]]:
    known = request.param == "known"
    settings = MaasApiSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    app = create_app(settings, StaticSources(SUBSCRIPTIONS), StaticAuthenticator(USERS),
                     billing_source=Billing((TENANTS, PLANS) if known else None))
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as client:
        yield client, known


async def test_each_subscription_carries_its_own_organizations_terms(api: tuple[httpx.AsyncClient, bool]) -> None:
    client, known = api
    alice = {s["subscription_id_header"]: s for s in (await client.get("/v1/subscriptions",
                                                                       headers=auth("alice"))).json()}
    assert set(alice) == {"acme-team", "no-org", "acme-elsewhere"}
    if not known:  # billing not installed (or not read yet): the field is absent, not an empty list
        assert all("billing" not in s for s in alice.values())
        return
    (terms,) = alice["acme-team"]["billing"]
    assert terms == {"organization_id": "acme", "tenant": "ten-acme", "tenant_namespace": GW_NS, "state": "Frozen",
                     "enforced": True, "billing_mode": "Prepaid", "plan": "basic", "plan_found": True,
                     "limits": [{"kind": "requests", "limit": 30, "window": "1m",
                                 "name": f"billing/{GW_NS}/basic/requests"},
                                {"kind": "tokens", "limit": 1000, "window": "24h",
                                 "name": f"billing/{GW_NS}/basic/tokens"}],
                     "model_scopes": ["gpt-*"]}
    assert alice["no-org"]["billing"] == [] and alice["acme-elsewhere"]["billing"] == []  # showback / other Gateway
    body = str(alice)
    assert "helix" not in body and "12.5" not in body and "99.0" not in body and "balance" not in body
    by_model = (await client.get("/v1/model/gpt-x/subscriptions", headers=auth("bob"))).json()
    assert [(s["subscription_id_header"], [t["tenant"] for t in s["billing"]]) for s in by_model] == [
        ("helix-team", ["ten-helix"])]
    assert (await client.get("/v1/subscriptions", headers=auth("carol"))).json() == []
