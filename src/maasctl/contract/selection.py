"""Which subscription a request (or a new API key) is charged to.

Shared by maas-api (key minting and the gateway's select callback), the local gateway and `maasctl simulate`,
so that all three answer the same question the same way.

Rules:
- Entitlement: the user name is in the subscription's owner users, or one of the caller's groups is in its
  owner groups (exact, case-sensitive matches). `*` in either list entitles any authenticated user (a
  non-empty user name).
- An explicit choice (the `X-MaaS-Subscription` header of a token caller, or the subscription an API key is
  bound to) is `namespace/name` or a bare name in the default namespace. It must exist and entitle the caller,
  otherwise `not_found` (the two are not distinguished, so callers learn nothing about subscriptions they
  cannot use); it must include the model, otherwise `model_not_in_subscription`.
- Otherwise the entitled subscriptions that include the model are ranked by `priority` (higher first), ties
  broken by `namespace/name` in ascending code-point order; the first one wins. None -> `not_found`.
- Invalid or deleting subscriptions are not candidates: the caller leaves them out.

The selected subscription and model form the key `<sub ns>/<sub name>@<model ns>/<model name>`
(`subscription_key`) that the AuthPolicy exports as `auth.identity.selected_subscription_key` and the
TokenRateLimitPolicy predicates compare against.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANY_AUTHENTICATED",
    "Candidate",
    "Selection",
    "SelectionCode",
    "is_entitled",
    "parse_ref",
    "rank",
    "select_subscription",
    "subscription_key",
]

ANY_AUTHENTICATED: Final = "*"


class SelectionCode(enum.StrEnum):
    """Stable outcome codes (returned to clients by maas-api)."""

    SELECTED = "selected"
    NOT_FOUND = "not_found"
    MODEL_NOT_IN_SUBSCRIPTION = "model_not_in_subscription"


@dataclass(frozen=True)
class Candidate:
    """A valid, non-deleting subscription as selection sees it.

    `models` holds `namespace/name` of the MaaSModelRefs the subscription includes.
    """

    namespace: str
    name: str
    priority: int = 0
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Selection:
    """The outcome: `subscription` is set exactly when `code` is `SELECTED`."""

    code: SelectionCode
    subscription: Candidate | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code is SelectionCode.SELECTED


def subscription_key(sub_namespace: str, sub_name: str, model_namespace: str, model_name: str) -> str:
    """`<sub ns>/<sub name>@<model ns>/<model name>`: what rate-limit predicates match on."""
    return f"{sub_namespace}/{sub_name}@{model_namespace}/{model_name}"


def is_entitled(candidate: Candidate, user: str, groups: Iterable[str]) -> bool:
    """True if `user` (with `groups`) may use `candidate`."""
    if not user:
        return False
    if ANY_AUTHENTICATED in candidate.users or ANY_AUTHENTICATED in candidate.groups:
        return True
    return user in candidate.users or any(g in candidate.groups for g in groups)


def rank(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Best first: priority descending, then `namespace/name` ascending."""
    return sorted(candidates, key=lambda c: (-c.priority, c.namespace, c.name))


def parse_ref(text: str, default_namespace: str) -> tuple[str, str]:
    """`ns/name` -> (ns, name); a bare `name` -> (default_namespace, name)."""
    namespace, _, name = text.strip().rpartition("/")
    return (namespace or default_namespace, name)


def select_subscription(
    candidates: Sequence[Candidate],
    user: str,
    groups: Iterable[str],
    *,
    model: str | None = None,
    requested: str | None = None,
    default_namespace: str = "",
) -> Selection:
    """Choose the subscription for `user`/`groups` calling `model` (`ns/name`; None = any model).

    See the module docstring for the rules. Deterministic: the order of `candidates` does not matter.
    """
    group_list = list(groups)
    if requested:
        namespace, name = parse_ref(requested, default_namespace)
        wanted = next((c for c in candidates if c.namespace == namespace and c.name == name), None)
        if wanted is None or not is_entitled(wanted, user, group_list):
            return Selection(SelectionCode.NOT_FOUND, message=f"subscription {requested!r} is not available")
        if model is not None and model not in wanted.models:
            return Selection(
                SelectionCode.MODEL_NOT_IN_SUBSCRIPTION,
                message=f"subscription {wanted.ref} does not include model {model}",
            )
        return Selection(SelectionCode.SELECTED, wanted)
    usable = [
        c for c in candidates if is_entitled(c, user, group_list) and (model is None or model in c.models)
    ]
    if not usable:
        scope = f" for model {model}" if model is not None else ""
        return Selection(SelectionCode.NOT_FOUND, message=f"no subscription available{scope}")
    return Selection(SelectionCode.SELECTED, rank(usable)[0])
