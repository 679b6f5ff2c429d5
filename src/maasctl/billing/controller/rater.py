"""The rater: reads maas-api's new usage records, rates each against the PriceBook in force for its tenant and
writes the charges to the ledger, idempotently.

One pass (`Rater.run_once`): from the saved cursor minus a lag window, page through the records in
`(received_at, id)` order; skip those the ledger already knows (`usage:<record id>`); find each record's
tenant (the TenantAccount whose organization id the record carries; none, or one created after the record: not
charged, showback only - decided by the record's time, not by when a pass reads it), its
PriceBook at the record's time (`priceBookPin`, else the Plan's book followed through in-force successors),
its region (the Plan target's `billing.opendatahub.io/geo` label) and its month-to-date tokens; rate
(`rating.rate`, pure); then write the page's charges, the unpriced records and the new cursor in ONE database
transaction. A crash loses at most the page in flight; the next pass re-reads it and the natural keys drop
whatever had been written. The `Catalog` is a snapshot of the billing objects (`rules.catalog`, pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from maasctl.billing.controller.usage_source import UsageReader, UsageRow
from maasctl.billing.ledger import entries
from maasctl.billing.ledger.rating_book import RatingBook, Unpriced
from maasctl.billing.ledger.store import Ledger
from maasctl.billing.rules import rating
from maasctl.billing.rules.catalog import Catalog, TenantRef, fingerprints, month_start

__all__ = ["PassReport", "Rater", "RaterMetrics", "usage_of"]

log = structlog.get_logger("maasctl.billing.rater")
CURSOR = "usage"


class RaterMetrics:
    """What the rater exports (on the billing operator's /metrics): what it rated, and whether it keeps up."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.rated = Counter("maasctl_billing_rated_records_total", "Usage records rated into the ledger",
                             ["result"], registry=r)
        self.unpriced = Counter("maasctl_billing_unpriced_records_total",
                                "Usage records no SKU prices (reported, not charged)", ["namespace", "tenant"],
                                registry=r)
        self.behind = Gauge("maasctl_billing_rater_records_behind",
                            "Usage records received after the rater's cursor when it last looked (counted up "
                            "to 100,000)", registry=r)
        self.oldest_unrated = Gauge("maasctl_billing_rater_oldest_unrated_seconds",
                                    "Age of the oldest usage record the rater had not reached when it last "
                                    "looked; keeps growing while the rater makes no progress", registry=r)
        self.since_progress = Gauge("maasctl_billing_rater_seconds_since_progress",
                                    "Seconds since the rater last committed a page or finished a pass",
                                    registry=r)


def usage_of(row: UsageRow) -> rating.Usage:
    return rating.Usage(record_id=row.id, time=row.ts, model=row.model, status=row.status,
                        input_tokens=row.input_tokens, cached_tokens=row.cached_tokens,
                        output_tokens=row.output_tokens, reasoning_tokens=row.reasoning_tokens,
                        total_tokens=row.total_tokens, estimated=row.estimated,
                        estimate_reason=row.estimate_reason, termination=row.termination)


@dataclass
class PassReport:
    read: int = 0
    charged: int = 0
    unpriced: int = 0
    skipped: int = 0  # no tenant: showback only
    known: int = 0
    tenants: set[str] = field(default_factory=set)


class Rater:
    """Rates new usage records into the ledger, one page per database transaction."""

    def __init__(self, reader: UsageReader, ledger: Ledger, catalog: Callable[[], Catalog], *,
                 page_size: int = 500, lag: timedelta = timedelta(seconds=30),
                 on_page: Callable[[PassReport], None] | None = None,
                 metrics: RaterMetrics | None = None) -> None:
        self.reader = reader
        self.ledger = ledger
        self.book = RatingBook(ledger.engine)  # its cursor and unpriced records: the ledger's database
        self.catalog = catalog
        self.page_size = page_size
        self.lag = lag
        self.on_page = on_page
        self.metrics = metrics or RaterMetrics()
        self.progress_at = time.monotonic()
        self.behind = 0
        self.oldest_unrated: datetime | None = None
        self.metrics.since_progress.set_function(self._idle)
        self.metrics.oldest_unrated.set_function(self._oldest_unrated_age)
        self._prints: dict[str, str] = {}  # revisit_unpriced: namespace -> fingerprint last seen

    def _oldest_unrated_age(self) -> int:
        """Whole seconds (billing has no floats; a gauge needs no finer grain)."""
        if self.oldest_unrated is None:
            return 0
        return max(0, int((datetime.now(UTC) - self.oldest_unrated).total_seconds()))

    def _idle(self) -> int:
        return int(time.monotonic() - self.progress_at)

    def stalled(self, after: int) -> str | None:
        """A reason when the rater has made no progress (no page committed, no pass finished) for `after`
        seconds, else None. Work that is due but not done reads as failing, never as idle."""
        idle = self._idle()
        if idle <= after:
            return None
        oldest = f", the oldest received {self._oldest_unrated_age()} s ago" if self.oldest_unrated else ""
        return (f"the rater has made no progress for {idle} s ({self.behind} usage records behind when it "
                f"last looked{oldest})")

    async def _look_behind(self, cursor: tuple[datetime, str] | None) -> None:
        self.behind, self.oldest_unrated = await self.reader.backlog(cursor)
        self.metrics.behind.set(self.behind)

    async def run_once(self, max_pages: int | None = None) -> PassReport:
        """Rate every record not rated yet (up to `max_pages` pages); return what happened."""
        report = PassReport()
        saved = await self.book.cursor(CURSOR)
        await self._look_behind(saved)
        after = (saved[0] - self.lag, "") if saved is not None else None
        pages = 0
        months: dict[tuple[str, datetime], int] = {}
        while max_pages is None or pages < max_pages:
            rows = await self.reader.page(after, self.page_size)
            if not rows:
                break
            pages += 1
            after = (rows[-1].received_at, rows[-1].id)
            page = await self._rate_page(rows, months)
            newest = max(r.received_at for r in rows)
            async with self.ledger.engine.begin() as conn:
                await self.ledger.post(page.txs, conn=conn)
                await self.book.mark_unpriced(page.unpriced, conn=conn)
                if saved is None or (newest, rows[-1].id) > saved:  # the last row read: where the backlog starts
                    await self.book.set_cursor(CURSOR, newest, rows[-1].id, conn)
                    saved = (newest, rows[-1].id)
            self.progress_at = time.monotonic()
            report.read += len(rows)
            report.charged += page.charged
            report.unpriced += len(page.unpriced)
            report.skipped += page.skipped
            report.known += page.known
            report.tenants |= page.tenants
            self.metrics.rated.labels("charged").inc(page.charged)
            self.metrics.rated.labels("unpriced").inc(len(page.unpriced))
            if self.on_page is not None and page.tenants:
                self.on_page(PassReport(len(rows), page.charged, len(page.unpriced), page.skipped, page.known,
                                        set(page.tenants)))
            if len(rows) < self.page_size:
                break
        await self._look_behind(saved)
        self.progress_at = time.monotonic()
        if report.charged or report.unpriced:
            log.info("rated usage", read=report.read, charged=report.charged, unpriced=report.unpriced,
                     tenants=len(report.tenants))
        return report

    async def _rate_page(self, rows: Sequence[UsageRow], months: dict[tuple[str, datetime], int]) -> _Page:
        page = _Page()
        async with self.ledger.engine.connect() as conn:  # charged, or reported unpriced: known either way
            known = await self.ledger.known([f"usage:{r.id}" for r in rows], conn=conn)
            known |= {f"usage:{i}" for i in await self.book.reported([r.id for r in rows], conn=conn)}
        catalog = self.catalog()
        for row in rows:
            if f"usage:{row.id}" in known:
                page.known += 1
                continue
            tenant = catalog.tenant_for(row.organization_id)
            if tenant is None or tenant.predates(row.ts):
                page.skipped += 1
                continue
            page.tenants.add(tenant.key)
            book = catalog.book_for(tenant, row.ts)
            if book is None:
                page.unpriced.append(Unpriced(row.id, tenant.key, row.model, row.ts,
                                              f"no PriceBook is in force for tenant {tenant.name} at "
                                              f"{row.ts.isoformat()}"))
                self.metrics.unpriced.labels(tenant.namespace, tenant.name).inc()
                continue
            month = (tenant.key, month_start(row.ts))
            if month not in months:
                months[month] = await self.ledger.tokens(tenant.key, month[1], month[1] + timedelta(days=32))
            ctx = rating.Context(geo=tenant.geo, month_tokens_before=months[month],
                                 committed_tier=tenant.committed_tier,
                                 provider_costs=catalog.provider_costs.get(tenant.namespace, {}),
                                 provider_units=catalog.provider_units.get(tenant.namespace, {}))
            line = rating.rate(usage_of(row), book, ctx)
            if isinstance(line, rating.Unpriced):
                page.unpriced.append(Unpriced(row.id, tenant.key, row.model, row.ts, line.reason))
                self.metrics.unpriced.labels(tenant.namespace, tenant.name).inc()
                continue
            months[month] += line.tokens
            page.txs.append(entries.usage_charge(f"usage:{row.id}", tenant.key, row.ts, line.amount,
                                                 currency=line.currency, tokens=line.tokens,
                                                 details={**line.details(), "keyId": row.key_id}))
            if tenant.committed_tier is not None:
                fee = rating.committed_fee(book.spec, tenant.committed_tier)
                if fee is not None:
                    page.txs.append(entries.commitment_fee(
                        tenant.key, tenant.committed_tier, month[1].strftime("%Y-%m"), month[1], fee,
                        currency=line.currency, book=book.name))
            page.charged += 1
        return page

    async def charge_commitments(self, now: datetime) -> int:
        """Post this month's committed-use fee of every committed tenant, used or not: the fee is what the
        tenant agreed to pay for the month, so a month without a rated record still owes it. The same natural
        key as the fee posted beside a month's first record (`commitment:<tenant>:<tier>:<YYYY-MM>`), so it
        is charged once whichever comes first. The book in force now prices it. Returns the fees posted."""
        catalog = self.catalog()
        month = month_start(now)
        txs = []
        for tenant in catalog.tenants.values():
            if tenant.committed_tier is None:
                continue
            book = catalog.book_for(tenant, now)
            fee = rating.committed_fee(book.spec, tenant.committed_tier) if book is not None else None
            if book is None or fee is None:
                continue
            txs.append(entries.commitment_fee(tenant.key, tenant.committed_tier, month.strftime("%Y-%m"), month, fee,
                                              currency=book.spec.currency.value, book=book.name))
        if not txs:
            return 0
        known = await self.ledger.known([tx.key for tx in txs])
        fresh = [tx for tx in txs if tx.key not in known]
        if fresh:
            await self.ledger.post(fresh)
        return len(fresh)

    # -- re-rating what was left unpriced (docs/billing.md, "Re-rating") ---------------------------------------

    async def revisit_unpriced(self, now: datetime | None = None) -> PassReport:
        """Charge the unpriced records a PriceBook now prices. Runs when the billing objects of a namespace
        changed since the last look (a book added, edited, taking effect; a cost Secret read differently; a
        tenant's pin or Plan): its tenants' unpriced records are rated again, each against the book in force
        at its time, else the tenant's book now (the first that takes effect after it). A charge is the same
        `usage:<record id>` entry the rater would have written (never twice), posted in one transaction with
        the removal of the record from the unpriced report."""
        now = now or datetime.now(UTC)
        catalog = self.catalog()
        prints = fingerprints(catalog, now)
        changed = {ns for ns, p in prints.items() if self._prints.get(ns) != p}
        self._prints = prints
        report = PassReport()
        tenants = {t.key: t for t in catalog.tenants.values() if t.namespace in changed}
        after: tuple[datetime, str] | None = None
        while tenants:
            items = await self.book.unpriced_page(sorted(tenants), after, self.page_size)
            if not items:
                break
            after = (items[-1].occurred_at, items[-1].record_id)
            rows = {r.id: r for r in await self.reader.records([u.record_id for u in items])}
            txs: list[entries.Transaction] = []
            settled: list[str] = []
            for item in items:
                row = rows.get(item.record_id)
                if row is None:
                    continue  # maas-api no longer has it: it stays reported
                tenant = tenants[item.tenant]
                book, line = await self._rate_again(catalog, tenant, row, now)
                if book is None or line is None:
                    continue
                txs.append(entries.usage_charge(
                    f"usage:{row.id}", tenant.key, row.ts, line.amount, currency=line.currency, tokens=line.tokens,
                    details={**line.details(), "keyId": row.key_id, "rerated": "unpriced",
                             "unpricedReason": item.reason[:256]}))
                if tenant.committed_tier is not None:
                    fee = rating.committed_fee(book.spec, tenant.committed_tier)
                    month = month_start(row.ts)
                    if fee is not None:
                        txs.append(entries.commitment_fee(tenant.key, tenant.committed_tier, month.strftime("%Y-%m"),
                                                          month, fee, currency=line.currency, book=book.name))
                settled.append(row.id)
                report.tenants.add(tenant.key)
            async with self.ledger.engine.begin() as conn:
                result = await self.ledger.post(txs, conn=conn)
                await self.book.settle_unpriced(settled, conn=conn)
            self.progress_at = time.monotonic()  # a long revisit is progress, not a stall
            report.read += len(items)
            charged = sum(1 for k in result.inserted if k.startswith("usage:"))
            report.charged += charged
            report.unpriced += len(items) - len(settled)
            self.metrics.rated.labels("charged").inc(charged)
            if len(items) < self.page_size:
                break
        if report.charged:
            log.info("charged usage left unpriced", charged=report.charged, still_unpriced=report.unpriced,
                     tenants=len(report.tenants))
        if self.on_page is not None and report.tenants:
            self.on_page(report)
        return report

    async def _rate_again(self, catalog: Catalog, tenant: TenantRef, row: UsageRow, now: datetime
                          ) -> tuple[rating.Book | None, rating.RatedLine | None]:
        before = await self.ledger.tokens(tenant.key, month_start(row.ts), row.ts)
        ctx = rating.Context(geo=tenant.geo, month_tokens_before=before, committed_tier=tenant.committed_tier,
                             provider_costs=catalog.provider_costs.get(tenant.namespace, {}),
                             provider_units=catalog.provider_units.get(tenant.namespace, {}))
        then = catalog.book_for(tenant, row.ts)
        current = catalog.book_for(tenant, now)
        books = [then] if then is not None else []
        if current is not None and (then is None or (current.name, current.generation) != (then.name,
                                                                                           then.generation)):
            books.append(current)
        for book in books:
            line = rating.rate(usage_of(row), book, ctx)
            if isinstance(line, rating.RatedLine):
                return book, line
        return None, None


@dataclass
class _Page:
    txs: list[entries.Transaction] = field(default_factory=list)
    unpriced: list[Unpriced] = field(default_factory=list)
    tenants: set[str] = field(default_factory=set)
    charged: int = 0
    skipped: int = 0
    known: int = 0

