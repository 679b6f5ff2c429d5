"""Re-rating a period with a corrected PriceBook, by adjustment entries (`maasctl billing rerate`).

The ledger is append-only: a mistaken price is never fixed by rewriting a charge. For every usage record of the
tenant charged in [since, until), the record (from maas-api's usage store) is rated again, purely
(`rating.rate`), against the corrected book; the difference between that and what the ledger has charged it so
far (its `usage:<id>` entry plus earlier re-ratings of it) is the record's delta. The non-zero deltas are posted
as `adjustment:rerate:...` entries (`entries.rerate_adjustment`, up to `CHUNK` records of one API key each, the
key id kept as the usage charges keep it) between the wallet and revenue:usage, with the actor, the reason and
the per-record deltas. A second run finds every delta zero and posts nothing, so running it twice never adjusts
twice, and overlapping periods are safe.

Committed-use fees: the fee of every month starting in [since, until) is set to the corrected book's
`monthlyPrice` of the tier it was charged for, by an `adjustment:rerate-fee:...` entry between the wallet and
revenue:commitments (a fee is not usage: its correction is not spend); its records are rated with that tier
unless one is given.

A pass-through SKU re-rates with the provider cost in force when the record was rated, as its charge recorded
it, and the corrected markup (`rerating.context_for`). Records the corrected book does not price (no SKU, an
unknown unit, a pass-through SKU for a charge that kept no cost) are left as charged and reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final

from maasctl.billing.controller.rater import usage_of
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.entries import Transaction, rerate_adjustment, rerate_fee_adjustment
from maasctl.billing.ledger.store import Fee
from maasctl.billing.rules import rating, rerating
from maasctl.billing.rules.catalog import month_start

__all__ = ["CHUNK", "RerateReport", "rerate"]

CHUNK: Final = 500


@dataclass
class RerateReport:
    records: int = 0  # charged usage records in the period
    changed: int = 0  # records whose charge the corrected book changes
    unchanged: int = 0
    unpriced: dict[str, str] = field(default_factory=dict)  # record id -> why the corrected book does not price it
    missing: list[str] = field(default_factory=list)  # records maas-api no longer has
    delta: Decimal = Decimal(0)  # total added to the tenant's charges (negative: refunded)
    fees: int = 0  # committed-use fees of months starting in the period
    fees_changed: int = 0
    fees_unpriced: dict[str, str] = field(default_factory=dict)  # fee key -> why the corrected book does not price it
    fee_delta: Decimal = Decimal(0)  # total added to the tenant's committed-use fees
    entries: list[Transaction] = field(default_factory=list)
    inserted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


async def rerate(ledger: Ledger, reader: UsageReader, tenant: str, book: rating.Book, since: datetime,
                 until: datetime, *, reason: str, actor: str, geo: str | None = None,
                 committed_tier: str | None = None, dry_run: bool = False, now: datetime | None = None,
                 costs: Mapping[str, Mapping[str, Decimal]] | None = None,
                 cost_units: Mapping[str, str] | None = None) -> RerateReport:
    """Re-rate `tenant`'s usage charged in [since, until) with `book`; post the adjustments unless `dry_run`.
    `geo` is the region of the tenant's requests (default: the region of the SKU each charge was rated with);
    `costs`/`cost_units` the pass-through cost data to use for the period, by cost Secret name (default: the
    cost each charge recorded)."""
    if until <= since:
        raise ValueError("the period is empty: --to must be after --from")
    now = now or datetime.now(UTC)
    report = RerateReport()
    charged = await ledger.usage_charges(tenant, since, until)
    before = await ledger.rerated(tenant)
    fees = await ledger.commitment_fees(tenant, month_start(since), until)
    tiers = {fee.month: fee.tier for fee in fees.values()}  # the tier each month was charged for
    rows = await reader.records(sorted(charged))
    found = {r.id: r for r in rows}
    report.records = len(charged)
    report.missing = sorted(set(charged) - set(found))
    months: dict[datetime, int] = {}
    deltas: dict[str, Decimal] = {}
    for row in sorted(found.values(), key=lambda r: (r.ts, r.id)):
        month = month_start(row.ts)
        if month not in months:
            months[month] = await ledger.tokens(tenant, month, row.ts)  # before the first record of the period
        charge = charged[row.id]
        usage = usage_of(row)
        ctx = rerating.context_for(book, usage, charge.details, rating.Context(
            geo=geo if geo is not None else charge.geo, month_tokens_before=months[month],
            committed_tier=committed_tier if committed_tier is not None else tiers.get(month),
            provider_costs=costs or {}, provider_units=cost_units or {}))
        line = rating.rate(usage, book, ctx) if isinstance(ctx, rating.Context) else rating.Unpriced(
            row.id, row.model, book.name, ctx)
        if isinstance(line, rating.Unpriced):
            report.unpriced[row.id] = line.reason
            continue
        months[month] += line.tokens
        delta = line.amount - charge.amount - before.get(row.id, Decimal(0))
        if delta:
            deltas[row.id] = delta
            report.changed += 1
        else:
            report.unchanged += 1
    report.delta = sum(deltas.values(), Decimal(0))
    currency = book.spec.currency.value
    by_key: dict[str, list[str]] = {}
    for rid in sorted(deltas):
        by_key.setdefault(found[rid].key_id, []).append(rid)
    for key_id, ids in sorted(by_key.items()):  # one key per entry: budgets with a key selector count it
        for i in range(0, len(ids), CHUNK):
            part = {rid: deltas[rid] for rid in ids[i: i + CHUNK]}
            # (posted even when the part's deltas cancel out: the per-record deltas matter to the next re-rating)
            report.entries.append(rerate_adjustment(tenant, now, part, book=book.name, generation=book.generation,
                                                    since=since, until=until, currency=currency, reason=reason,
                                                    actor=actor, key_id=key_id))
    fee_deltas = await _fee_deltas(ledger, tenant, book, {k: f for k, f in fees.items() if f.month >= since},
                                   report)
    if fee_deltas:
        report.entries.append(rerate_fee_adjustment(tenant, now, fee_deltas, book=book.name,
                                                    generation=book.generation, since=since, until=until,
                                                    currency=currency, reason=reason, actor=actor))
    if not dry_run and report.entries:
        result = await ledger.post(report.entries)
        report.inserted = list(result.inserted)
        report.conflicts = list(result.conflicts)
    return report



async def _fee_deltas(ledger: Ledger, tenant: str, book: rating.Book, fees: dict[str, Fee], report: RerateReport
                      ) -> dict[str, Decimal]:
    """Fee key -> the corrected monthly price of its tier less what the ledger charged for it so far (the fee
    plus earlier fee re-ratings), non-zero only. A tier the corrected book lacks leaves its fee as charged."""
    before = await ledger.rerated(tenant, fees=True)
    out: dict[str, Decimal] = {}
    report.fees = len(fees)
    for key, fee in sorted(fees.items()):
        price = rating.committed_fee(book.spec, fee.tier)
        if price is None:
            report.fees_unpriced[key] = f"PriceBook {book.name} has no committed-use tier {fee.tier!r}"
            continue
        delta = price - fee.amount - before.get(key, Decimal(0))
        if delta:
            out[key] = delta
    report.fees_changed = len(out)
    report.fee_delta = sum(out.values(), Decimal(0))
    return out
