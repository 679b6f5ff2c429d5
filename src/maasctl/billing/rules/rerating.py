"""Re-rating's pure part: in what context a charged usage record is rated again with a corrected PriceBook.

Pass-through: the provider's cost is the one in force when the record was rated, read back from its charge (each
pass-through component of a rated line keeps the `cost` read from the cost Secret and the `markupPct`), never
the Secret as it is today: a cost that changed since must not re-price old usage. The corrected SKU applies its
own markup to that cost; a dimension the charge did not pass through takes the corrected SKU's rate, as rating
does for a dimension the Secret lacks. A record whose charge recorded no cost (rated by a SKU without
pass-through, or before costs were recorded) or another provider's cannot be re-rated by a pass-through SKU:
the reason says so, and its charge stays as it is. Cost data the operator gives for the period (the Secret was
wrong, or the charges predate recorded costs) replaces what the charges recorded, for every record of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any, Final

from maasctl.billing import money
from maasctl.billing.rules import rating

__all__ = ["charged_costs", "context_for"]

_PASS_THROUGH: Final = "passThrough:"


def charged_costs(details: Mapping[str, Any]) -> tuple[str, str, dict[str, Decimal]] | None:
    """(provider, unit, cost per dimension) a charge was rated with, from its rated line's details; None when no
    component was passed through with a recorded cost, or one's cost is not a money string."""
    provider = ""
    costs: dict[str, Decimal] = {}
    components = details.get("components")
    for dim, c in (components.items() if isinstance(components, Mapping) else ()):
        if not isinstance(c, Mapping) or not str(c.get("source") or "").startswith(_PASS_THROUGH):
            continue
        cost = c.get("cost")
        if dim not in rating.COST_KEYS or not money.is_money(cost):
            return None
        provider = str(c["source"]).removeprefix(_PASS_THROUGH)
        costs[str(dim)] = money.parse(cost)
    return (provider, str(details.get("unit") or ""), costs) if costs else None


def context_for(book: rating.Book, usage: rating.Usage, charge: Mapping[str, Any], base: rating.Context
                ) -> rating.Context | str:
    """The context to rate `usage` again with `book`, given its charge's details: `base` (region, month-to-date
    tokens, committed tier, and cost data the operator gave for the period, by cost Secret name), with the
    charged provider cost when the corrected SKU passes a cost through and no cost data was given for its
    Secret; a reason when it cannot be re-rated."""
    sku = rating.find_sku(book.spec, usage.model, base.geo)
    if sku is None or sku.pass_through is None or sku.pass_through.cost_secret_ref.name in base.provider_costs:
        return base
    pt = sku.pass_through
    charged = charged_costs(charge)
    if charged is None:
        return (f"SKU {sku.sku} passes through {pt.provider}'s cost, but the record's charge kept no provider cost "
                "(rated by a SKU without pass-through, or before costs were recorded)")
    provider, unit, costs = charged
    if provider != pt.provider:
        return (f"SKU {sku.sku} passes through {pt.provider}'s cost, but the record was charged with "
                f"{provider}'s")
    name = pt.cost_secret_ref.name
    return replace(base, provider_costs={name: costs}, provider_units={name: unit} if unit else {})
