"""Which subscription a request (or a new API key) is charged to: the one rule set.

Used by maas-api (key minting, the gateway's select callback, `/v1/models`), the local gateway through those
callbacks, `maasctl simulate` and every test; nothing else implements it.

Rules (seed 000 `priority`: higher wins among the user's subscriptions):
- Candidates are usable subscriptions (valid, not being deleted, not Failed/Invalid) that entitle the caller
  (`views.entitled`).
- An API key is bound to one subscription at mint (`bound`), and the binding wins: an `X-MaaS-Subscription` the
  caller also sends is ignored (as the reference does), so a key never switches subscription and a client
  written for the reference that always sends the header keeps working; nothing is widened.
- An explicit choice (the bound subscription, else the header of a token caller) is `namespace/name` or a bare
  name in the default namespace. It must exist and entitle the caller, else `not_found` (the two are not told
  apart, so callers learn nothing about subscriptions they cannot use); it must be usable, else
  `subscription_not_ready`; it must include the model, else `model_not_in_subscription`.
- Tenant gateways: a request arriving through a Gateway (`gateway`, `namespace/name`) can only use
  subscriptions bound to that Gateway (`spec.gatewayRef`, else `default_gateway`); an explicit choice of a
  subscription bound elsewhere -> `access_denied`. Minting and listing (`gateway` None) are not filtered.
- Otherwise the candidates that include the model (any model when `model` is None, as for minting) are ranked
  by `priority`, highest first. None -> `not_found`; one at the top -> selected; several sharing the top
  priority -> `multiple_subscriptions`, naming them, so the caller chooses with the header (or at mint).

The selected subscription and model form `<sub ns>/<sub name>@<model ns>/<model name>` (`subscription_key`),
which the AuthPolicy exports as `auth.identity.selected_subscription_key` and TokenRateLimitPolicies match.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from maasctl.contract.views import SubscriptionView

__all__ = [
    "Selection",
    "SelectionCode",
    "find",
    "format_ref",
    "parse_ref",
    "rank",
    "select_subscription",
    "subscription_key",
]


class SelectionCode(enum.StrEnum):
    """Stable outcome codes (returned to clients by maas-api and the gateway)."""

    SELECTED = "selected"
    NOT_FOUND = "not_found"
    ACCESS_DENIED = "access_denied"
    NOT_READY = "subscription_not_ready"
    MODEL_NOT_IN_SUBSCRIPTION = "model_not_in_subscription"
    MULTIPLE = "multiple_subscriptions"


@dataclass(frozen=True)
class Selection:
    """The outcome: `subscription` is set exactly when `code` is `SELECTED`; `candidates` names the
    subscriptions sharing the top priority when `code` is `MULTIPLE`."""

    code: SelectionCode
    subscription: SubscriptionView | None = None
    message: str = ""
    candidates: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is SelectionCode.SELECTED


def subscription_key(sub_namespace: str, sub_name: str, model_namespace: str, model_name: str) -> str:
    """`<sub ns>/<sub name>@<model ns>/<model name>`: what rate-limit predicates match on."""
    return f"{sub_namespace}/{sub_name}@{model_namespace}/{model_name}"


def parse_ref(text: str, default_namespace: str) -> tuple[str, str]:
    """`ns/name` -> (ns, name); a bare `name` -> (default_namespace, name)."""
    namespace, _, name = text.strip().rpartition("/")
    return (namespace or default_namespace, name)


def format_ref(namespace: str, name: str, default_namespace: str) -> str:
    """The inverse of `parse_ref`: the bare name in `default_namespace` (how the reference names a
    subscription), `ns/name` anywhere else."""
    return name if namespace == default_namespace else f"{namespace}/{name}"


def find(subs: Iterable[SubscriptionView], ref: str, default_namespace: str) -> SubscriptionView | None:
    """The subscription named `ns/name` (or a bare name in `default_namespace`), or None."""
    namespace, name = parse_ref(ref, default_namespace)
    return next((s for s in subs if s.namespace == namespace and s.name == name), None)


def rank(subs: Iterable[SubscriptionView]) -> list[SubscriptionView]:
    """Highest priority first; `namespace/name` ascending within a priority (for stable listings only:
    selection never breaks a tie silently)."""
    return sorted(subs, key=lambda s: (-s.priority, s.namespace, s.name))


@dataclass(frozen=True)
class _Gateway:
    """The Gateway a request arrived through (None: not a request, e.g. minting) and the default one."""

    request: str | None
    default: str

    def admits(self, sub: SubscriptionView) -> bool:
        return self.request is None or sub.tenant_gateway(self.default) == self.request


def _explicit(sub: SubscriptionView | None, ref: str, user: str, groups: list[str], model: str | None,
              gateway: _Gateway) -> Selection:
    if sub is None or not sub.entitles(user, groups):
        return Selection(SelectionCode.NOT_FOUND, message=f"subscription {ref!r} not found or not accessible")
    if not gateway.admits(sub):
        return Selection(SelectionCode.ACCESS_DENIED,
                         message=f"subscription {sub.key} is not used through gateway {gateway.request}")
    if not sub.usable:
        state = "being deleted" if sub.deleting else (sub.phase or "invalid") if sub.problem is None else "invalid"
        return Selection(SelectionCode.NOT_READY, message=f"subscription {sub.key} is {state}")
    if model is not None and not sub.includes(model):
        return Selection(SelectionCode.MODEL_NOT_IN_SUBSCRIPTION,
                         message=f"subscription {sub.key} does not include model {model}")
    return Selection(SelectionCode.SELECTED, sub)


def select_subscription(
    subs: Iterable[SubscriptionView],
    user: str,
    groups: Iterable[str],
    *,
    model: str | None = None,
    requested: str | None = None,
    bound: str | None = None,
    default_namespace: str = "",
    gateway: str | None = None,
    default_gateway: str = "",
) -> Selection:
    """Choose the subscription for `user`/`groups` calling `model` (`ns/name`; None = any model).

    `requested` is the caller's `X-MaaS-Subscription` (or the subscription asked for at mint), ignored when
    `bound`, the API key's subscription, is given; `gateway` the Gateway the request arrived through
    (`namespace/name`, None when the selection is not for a request) and `default_gateway` the one of
    subscriptions without `gatewayRef`.
    Deterministic: the order of `subs` does not matter.
    """
    via = _Gateway(gateway, default_gateway)
    pool = list(subs)
    group_list = list(groups)
    requested = (requested or "").strip() or None
    bound = (bound or "").strip() or None
    if bound is not None:
        return _explicit(find(pool, bound, default_namespace), bound, user, group_list, model, via)
    if requested is not None:
        return _explicit(find(pool, requested, default_namespace), requested, user, group_list, model, via)
    usable = [s for s in pool if s.usable and s.entitles(user, group_list) and (model is None or s.includes(model))
              and via.admits(s)]
    if not usable:
        scope = f" for model {model}" if model is not None else ""
        return Selection(SelectionCode.NOT_FOUND, message=f"no subscription available{scope}")
    ranked = rank(usable)
    top = [s for s in ranked if s.priority == ranked[0].priority]
    if len(top) > 1:
        names = tuple(s.key for s in top)
        return Selection(
            SelectionCode.MULTIPLE,
            message=f"several subscriptions share the highest priority ({', '.join(names)}); "
            "choose one with the X-MaaS-Subscription header",
            candidates=names,
        )
    return Selection(SelectionCode.SELECTED, ranked[0])
