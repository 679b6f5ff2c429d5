"""Pass-through cost Secrets: read by name, exactly the ones PriceBooks name, never listed, watched or cached.

Least privilege: Secret names are chosen per PriceBook at run time and PriceBooks live in any namespace, so an
install-time Role with `resourceNames` cannot name them (and an operator that wrote such Roles itself would need
the `escalate`/`bind` verbs, far more power than reading a few Secrets). The billing-controller's ClusterRole
therefore has `get` on secrets and nothing else: no `list`, no `watch` (a watch needs list rights and would put
every Secret of the cluster in memory); this module GETs only the `passThrough.costSecretRef` names of the
PriceBooks in the cache. A changed Secret is picked up by the next read: the rater re-reads the named Secrets
before each pass, and the PriceBook reconciler on every reconcile and every `COST_RECHECK_SECONDS`.

A Secret that is missing, forbidden or malformed (rating.cost_data) makes its SKUs Unpriced (never a silent
zero, never a crash) and the PriceBook's `CostDataValid` condition False with an Event. Nothing here logs or
reports a cost value: messages name keys only.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import structlog

from maasctl.billing.api.kinds import SECRET
from maasctl.billing.rules import rating
from maasctl.runtime import Client
from maasctl.runtime.errors import ApiError, Forbidden, NotFound

__all__ = ["COST_RECHECK_SECONDS", "SECRET", "CostState", "ProviderCosts", "cost_secret_names", "unit_mismatches"]

log = structlog.get_logger("maasctl.billing.costs")
COST_RECHECK_SECONDS: Final = 60


def cost_secret_names(book: Mapping[str, Any]) -> set[str]:
    """The cost Secrets a PriceBook (as stored) names in its pass-through SKUs."""
    out: set[str] = set()
    for sku in (book.get("spec") or {}).get("skus") or ():
        ref = ((sku or {}).get("passThrough") or {}).get("costSecretRef") or {}
        if isinstance(ref.get("name"), str) and ref["name"]:
            out.add(ref["name"])
    return out


def unit_mismatches(book: Mapping[str, Any], secret: str, unit: str | None) -> list[str]:
    """The pass-through SKUs of `book` naming `secret` whose unit is not the one the Secret declares."""
    if unit is None:
        return []
    out = []
    for sku in (book.get("spec") or {}).get("skus") or ():
        ref = ((sku or {}).get("passThrough") or {}).get("costSecretRef") or {}
        if ref.get("name") == secret and sku.get("unit") != unit:
            out.append(f"{sku.get('sku')} ({sku.get('unit')})")
    return out


@dataclass(frozen=True)
class CostState:
    """What reading one cost Secret gave: its rates, or why there are none (`reason` is a condition reason)."""

    costs: Mapping[str, Decimal] | None
    reason: str  # Valid, SecretNotFound, SecretForbidden, MalformedCostData
    message: str
    unit: str | None = None  # the unit the Secret declares (key `unit`), if any

    @property
    def valid(self) -> bool:
        return self.costs is not None


def decode(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's `data` (base64) as text; raises CostDataError when a value is not UTF-8 text."""
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise rating.CostDataError(f"key {str(key)[:63]!r} is not UTF-8 text") from exc
    return out


class ProviderCosts:
    """The last reading of every cost Secret named by a PriceBook, by namespace and name."""

    def __init__(self, client: Client, on_change: Callable[[str, str], None] | None = None) -> None:
        self.client = client
        self.on_change = on_change  # (namespace, secret): the Secret's reading changed
        self._states: dict[tuple[str, str], CostState] = {}

    async def read(self, namespace: str, name: str, *, notify: bool = True) -> CostState:
        """GET the Secret now and remember what it gave. A transient API error keeps the last reading (a
        Secret read once stays usable through a blip); with none, its SKUs stay unpriced."""
        try:
            secret = await self.client.get(SECRET, name, namespace)
            version = str(secret["metadata"].get("resourceVersion", ""))
            data = decode(secret)
            state = CostState(rating.cost_data(data), "Valid", f"cost Secret {name} read at resourceVersion {version}",
                              rating.cost_unit(data))
        except NotFound:
            state = CostState(None, "SecretNotFound", f"cost Secret {name} does not exist in {namespace}")
        except Forbidden:
            state = CostState(None, "SecretForbidden",
                              f"the billing controller may not read cost Secret {name} (RBAC: get secrets)")
        except rating.CostDataError as exc:
            state = CostState(None, "MalformedCostData", f"cost Secret {name} is malformed: {exc}")
        except ApiError as exc:
            previous = self._states.get((namespace, name))
            log.warning("cannot read a cost Secret", namespace=namespace, secret=name, error=type(exc).__name__,
                        kept=previous is not None)
            return previous or CostState(None, "SecretUnreadable", f"cost Secret {name} could not be read")
        before = self._states.get((namespace, name))
        self._states[(namespace, name)] = state
        if before != state:
            if not state.valid:
                log.warning("cost Secret unusable", namespace=namespace, secret=name, reason=state.reason)
            if notify and self.on_change is not None:
                self.on_change(namespace, name)
        return state

    async def refresh(self, books: Iterable[Mapping[str, Any]]) -> None:
        """Read every Secret the `books` name (and forget the ones no book names any more)."""
        wanted = {(str(b["metadata"].get("namespace") or ""), n) for b in books for n in cost_secret_names(b)}
        for key in [k for k in self._states if k not in wanted]:
            del self._states[key]
        for namespace, name in sorted(wanted):
            await self.read(namespace, name)

    def units(self) -> dict[str, dict[str, str]]:
        """Namespace -> Secret name -> the unit it declares (rating.Context.provider_units)."""
        out: dict[str, dict[str, str]] = {}
        for (namespace, name), state in self._states.items():
            if state.costs is not None and state.unit is not None:
                out.setdefault(namespace, {})[name] = state.unit
        return out

    def snapshot(self) -> dict[str, dict[str, Mapping[str, Decimal]]]:
        """Namespace -> Secret name -> rates, for the usable Secrets only (rating.Context.provider_costs)."""
        out: dict[str, dict[str, Mapping[str, Decimal]]] = {}
        for (namespace, name), state in self._states.items():
            if state.costs is not None:
                out.setdefault(namespace, {})[name] = state.costs
        return out
