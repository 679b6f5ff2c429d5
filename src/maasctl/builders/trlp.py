"""TokenRateLimitPolicy (`kuadrant.io/v1alpha1`): one per MaaSModelRef, from all subscriptions including it.

Kuadrant enforces one TRLP per target, so every subscription of a model lands in the same policy:

- name `maas-trlp-<maasmodelref-name>` in the route's namespace, targeting the model's HTTPRoute;
- one limit per subscription, keyed `<sub ns>-<sub name>-<model name>-tokens` as in the reference (unique: all
  rendered subscriptions share the subscription namespace, and a clash is refused), whose `when` matches the
  subscription identity the AuthPolicy exported
  (`auth.identity.selected_subscription_key == "<sub ns>/<sub>@<model ns>/<model>"`) and skips `/v1/models`
  listings (they carry no usage), matched on `request.url_path` (the canonical path, never the query string,
  which a client could use to look like a listing);
- every `{limit, window}` tier of the subscription is a rate of that limit, so all tiers are enforced;
- counters on `auth.identity.userid`: the quota is per user within a subscription;
- an `unlimited` subscription gets a limit with the same predicate and counter but no rates: nothing is
  enforced, yet the subscription stays visible to metering (the local gateway counts its tokens) and a model
  whose subscriptions are all unlimited still has a valid policy (the CRD requires at least one limit);
- labels `maas.opendatahub.io/gateway-namespace` / `gateway-name` when the route sits on a (tenant) gateway;
- annotation `maas.opendatahub.io/subscriptions`: the sorted, comma-joined `ns/name` of the subscriptions, as
  the reference writes it (output for people and tools; the controller never reads it back).

Invalid subscriptions are never inputs: the gatherer checks each with `subscription_problems` and drops the
ones that have problems (reporting them in that subscription's status), so one broken subscription can't break
the policy of the others. The builder raises `InvalidInputError` if one slips through anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from maasctl.api._fields import MAX_TOKEN_LIMIT as API_MAX_TOKEN_LIMIT
from maasctl.builders import names
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError, check_dns_label, check_dns_subdomain
from maasctl.contract import identity as ids
from maasctl.contract.cel import cel_string
from maasctl.contract.selection import subscription_key
from maasctl.contract.windows import is_valid_window, parse_window

__all__ = [
    "API_VERSION",
    "COUNTER_EXPRESSION",
    "KIND",
    "MAX_TOKEN_LIMIT",
    "MODELS_LISTING_PREDICATE",
    "RateTier",
    "SubscriptionLimits",
    "TokenRateLimitInput",
    "build_token_rate_limit_policy",
    "limit_name",
    "subscription_predicate",
    "subscription_problems",
]

API_VERSION: Final = "kuadrant.io/v1alpha1"
KIND: Final = "TokenRateLimitPolicy"
PART_OF: Final = "maas-subscription"
COMPONENT: Final = "token-rate-limit-policy"
MAX_TOKEN_LIMIT: Final = API_MAX_TOKEN_LIMIT
"""Largest `limit` a MaaSSubscription tier may carry: the one bound of the API types (and so of the CRD)."""

COUNTER_EXPRESSION: Final = f"auth.{ids.FILTER}.{ids.USERID}"
MODELS_LISTING_PREDICATE: Final = '!request.url_path.endsWith("/v1/models")'


@dataclass(frozen=True)
class RateTier:
    """One `{limit, window}` of a subscription's `tokenRateLimits` (window like `1m`, `24h`)."""

    limit: int
    window: str


@dataclass(frozen=True)
class SubscriptionLimits:
    """What one valid subscription contributes to a model's policy."""

    subscription: ObjectRef
    tiers: tuple[RateTier, ...] = ()
    unlimited: bool = False


@dataclass(frozen=True)
class TokenRateLimitInput:
    """Everything the policy of one MaaSModelRef depends on.

    `route` is the model's HTTPRoute (the policy lives in its namespace); `gateway` is the Gateway the route
    is attached to, recorded as labels; `subscriptions` are all valid subscriptions that include the model.
    """

    model: ObjectRef
    route: ObjectRef
    subscriptions: tuple[SubscriptionLimits, ...]
    gateway: GatewayRef | None = None


def subscription_problems(limits: SubscriptionLimits) -> tuple[str, ...]:
    """Why `limits` cannot be rendered (empty when valid). The gatherer drops subscriptions with problems."""
    problems: list[str] = []
    if limits.unlimited and limits.tiers:
        problems.append("unlimited and tokenRateLimits are mutually exclusive")
    if not limits.unlimited and not limits.tiers:
        problems.append("tokenRateLimits needs at least one entry unless unlimited is set")
    for tier in limits.tiers:
        if isinstance(tier.limit, bool) or not isinstance(tier.limit, int):
            problems.append(f"limit {tier.limit!r} is not an integer")
        elif not 1 <= tier.limit <= MAX_TOKEN_LIMIT:
            problems.append(f"limit {tier.limit} is outside 1..{MAX_TOKEN_LIMIT}")
        if not is_valid_window(tier.window):
            problems.append(f"window {tier.window!r} is not 1-9999 followed by s, m or h")
    return tuple(problems)


def limit_name(subscription: ObjectRef, model: ObjectRef) -> str:
    """The `spec.limits` key of a subscription in a model's policy: `<sub ns>-<sub name>-<model>-tokens`
    (the reference's name)."""
    return f"{subscription.namespace}-{subscription.name}-{model.name}-tokens"


def subscription_predicate(subscription: ObjectRef, model: ObjectRef) -> str:
    """CEL: the request was charged to `subscription` for `model` (the AuthPolicy exports this identity)."""
    key = subscription_key(subscription.namespace, subscription.name, model.namespace, model.name)
    return f"auth.{ids.FILTER}.{ids.SELECTED_SUBSCRIPTION_KEY} == {cel_string(key)}"


def _limit(limits: SubscriptionLimits, model: ObjectRef) -> dict[str, Any]:
    rates = [
        {"limit": tier.limit, "window": tier.window}
        for tier in sorted(limits.tiers, key=lambda t: (parse_window(t.window), t.limit))
    ]
    return {
        "rates": rates,
        "counters": [{"expression": COUNTER_EXPRESSION}],
        "when": [
            {"predicate": subscription_predicate(limits.subscription, model)},
            {"predicate": MODELS_LISTING_PREDICATE},
        ],
    }


def build_token_rate_limit_policy(inp: TokenRateLimitInput) -> dict[str, Any] | None:
    """The desired TRLP of `inp.model`, or None when no subscription includes it (delete the policy).

    Raises:
        InvalidInputError: an invalid or duplicated subscription, or an invalid route/model name.
    """
    check_dns_subdomain(inp.model.name, "MaaSModelRef name")
    check_dns_subdomain(inp.route.name, "HTTPRoute name")
    check_dns_label(inp.route.namespace, "HTTPRoute namespace")
    if not inp.subscriptions:
        return None
    limits: dict[str, Any] = {}
    for sub in sorted(inp.subscriptions, key=lambda s: s.subscription):
        if "/" in sub.subscription.namespace or "/" in sub.subscription.name:
            raise InvalidInputError(f"subscription {sub.subscription.key!r} contains '/'")
        problems = subscription_problems(sub)
        if problems:
            raise InvalidInputError(f"subscription {sub.subscription.key}: {'; '.join(problems)}")
        key = limit_name(sub.subscription, inp.model)
        if key in limits:
            raise InvalidInputError(f"limit {key} would be rendered twice (subscription {sub.subscription.key})")
        limits[key] = _limit(sub, inp.model)

    labels = names.model_labels(inp.model, PART_OF, COMPONENT)
    if inp.gateway is not None:
        labels |= names.gateway_labels(inp.gateway)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": names.trlp_name(inp.model.name),
            "namespace": inp.route.namespace,
            "labels": labels,
            "annotations": {names.SUBSCRIPTIONS_ANNOTATION: ",".join(
                sorted(sub.subscription.key for sub in inp.subscriptions))},
        },
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": inp.route.name},
            "limits": limits,
        },
    }
