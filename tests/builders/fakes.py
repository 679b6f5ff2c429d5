"""Fake maas-api and TokenReview callbacks for the AuthPolicy interpreter (tests only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from maasctl.builders.authpolicy import SELECT_PATH, VALIDATE_PATH
from maasctl.contract.selection import select_subscription
from maasctl.contract.views import SubscriptionView


@dataclass
class FakeMaasApi:
    """`keys`: raw key -> validate response; `subscriptions`: selection candidates."""

    subscriptions: Sequence[SubscriptionView] = ()
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    default_namespace: str = "maas"
    default_gateway: str = "gw/default"

    def http(self, url: str, body: Any) -> dict[str, Any]:
        if url.endswith(VALIDATE_PATH):
            return self.keys.get(body["key"], {"valid": False, "reason": "unknown key"})
        assert url.endswith(SELECT_PATH), url
        result = select_subscription(
            self.subscriptions,
            body["username"],
            body["groups"],
            model=body["requestedModel"],
            requested=body["requestedSubscription"],
            bound=body["keySubscription"],
            default_namespace=self.default_namespace,
            gateway=body.get("gateway") or self.default_gateway,  # as maas-api: absent -> the default Gateway
            default_gateway=self.default_gateway,
        )
        if result.subscription is None:
            return {"error": str(result.code), "message": result.message}
        sub = result.subscription
        out: dict[str, Any] = {"name": sub.name, "namespace": sub.namespace, "organizationId": sub.organization_id}
        if sub.cost_center:
            out["costCenter"] = sub.cost_center
        if sub.labels:  # as maas-api answers: absent when the subscription has none
            out["labels"] = dict(sub.labels)
        return out

    def token_review(self, token: str) -> dict[str, Any] | None:
        user = self.tokens.get(token)
        return None if user is None else {"authenticated": True, "user": user}
