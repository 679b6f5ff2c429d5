"""What a budget counts: a tenant's spend in a period, all of it or only that of the API keys carrying a
selector's labels. One rule for the budget reconciler and the tenant portal (docs/billing.md, "Budgets").

The ledger gives spend per key id (usage charges by their record's key, re-rating corrections by the key of the
records they correct); maas-api's `api_key_labels` say which keys a selector covers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger

__all__ = ["selected_spend"]


async def selected_spend(ledger: Ledger, keys: UsageReader | None, tenant: str, selector: Mapping[str, str],
                         since: datetime, until: datetime) -> Decimal | None:
    """The tenant's spend in [since, until), only its keys matching `selector` when there is one; None when a
    selector cannot be evaluated (no maas-api database to read key labels from)."""
    if not selector:
        return await ledger.spend(tenant, since, until)
    if keys is None:
        return None
    by_key = await ledger.spend_by_key(tenant, since, until)
    covered = await keys.keys_matching(list(by_key), selector)
    return sum((amount for key, amount in by_key.items() if key in covered), Decimal(0))
