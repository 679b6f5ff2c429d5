"""Re-rating on maas-api's real usage store and the ledger (SQLite and PostgreSQL): a record left unpriced is
charged once a PriceBook prices it (once), and a mistaken PriceBook's period is corrected by adjustment entries
(`maasctl billing rerate`, its own process) so the ledger sums to the corrected rating, never twice."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.rerate import rerate
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.entries import RERATE_PREFIX, REVENUE
from maasctl.billing.rules.catalog import build_catalog
from maasctl.billing.rules.rating import Book, Context, RatedLine, rate
from maasctl.maasapi.usage.store import UsageStore

from .test_rater import NS, T0, objects, record, usage_store

TENANT = f"{NS}/ten-helix"


def book_with(objs: dict[str, list[dict[str, Any]]], *, generation: int, skus: list[dict[str, Any]]
              ) -> dict[str, list[dict[str, Any]]]:
    out = copy.deepcopy(objs)
    book = out["books"][0]
    book["metadata"]["generation"] = generation
    book["spec"]["skus"] = skus
    return out


LLAMA = {"sku": "llama", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00"}}
MYSTERY = {"sku": "mystery", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1.00", "completion_tokens": "2.00"}}


class Stores:
    def __init__(self, store: UsageStore, ledger: Ledger, reader: UsageReader) -> None:
        self.store, self.ledger, self.reader = store, ledger, reader

    async def close(self) -> None:
        await self.reader.close()
        await self.ledger.close()
        await self.store.engine.dispose()


async def stores(url: str) -> Stores:
    # Both engines before any connection: creating an engine touches a SQLite file (dbfiles), and closing a
    # descriptor of it drops the process's POSIX locks, which another process (the CLI) would then ignore.
    ledger = Ledger.from_url(url)
    store = await usage_store(url)  # maas-api's tables and the ledger share one database here
    await ledger.create_schema()
    return Stores(store, ledger, UsageReader.from_url(url))


async def test_an_unpriced_record_is_charged_once_a_pricebook_prices_it(ledger_url: str) -> None:
    s = await stores(ledger_url)
    try:
        await s.store.ingest([record(1), record(2, model="team/mystery")], datetime.now(UTC))
        catalog = build_catalog(**objects())
        rater = Rater(s.reader, s.ledger, lambda: catalog)
        assert (await rater.run_once()).unpriced == 1
        assert (await rater.revisit_unpriced()).charged == 0  # nothing prices it yet: still reported
        assert (await rater.book.unpriced(TENANT))[0] == 1
        charged_before = await s.ledger.balance(TENANT)

        catalog = build_catalog(**book_with(objects(), generation=3, skus=[LLAMA, MYSTERY]))  # the book is edited
        touched: list[set[str]] = []
        rater.on_page = lambda r: touched.append(r.tenants)
        revisit = await rater.revisit_unpriced()
        assert (revisit.charged, revisit.unpriced) == (1, 0) and touched == [{TENANT}]
        entry = (await s.ledger.entries(TENANT, kind="usage", limit=1))[0]
        assert entry.key == "usage:req-000002" and entry.details["sku"] == "mystery"
        assert entry.details["generation"] == 3 and entry.details["rerated"] == "unpriced"
        assert "no SKU of PriceBook pb prices model 'team/mystery'" in entry.details["unpricedReason"]
        line = rate(_usage(record(2, model="team/mystery")), Book("pb", 3, catalog.books[NS]["pb"].book.spec))
        assert isinstance(line, RatedLine) and line.amount > 0
        assert await s.ledger.balance(TENANT) == charged_before - line.amount
        assert (await rater.book.unpriced(TENANT))[0] == 0

        # Never twice: the same catalog changes nothing; a forced look and the rater's lag window find it known.
        assert (await rater.revisit_unpriced()).charged == 0
        rater._prints.clear()
        assert (await rater.revisit_unpriced()).charged == 0
        assert (await rater.run_once()).charged == 0
        assert await s.ledger.count(TENANT) == 2 and await s.ledger.verify() == []
    finally:
        await s.close()


async def test_a_record_before_any_pricebook_is_charged_at_the_first_that_takes_effect(ledger_url: str) -> None:
    s = await stores(ledger_url)
    try:
        early = record(1, at=T0 - timedelta(days=10))  # the book is in force from T0 - 3 days
        await s.store.ingest([early], datetime.now(UTC))
        nothing = build_catalog(**{**objects(pin=False), "books": []})
        catalog = nothing
        rater = Rater(s.reader, s.ledger, lambda: catalog)
        assert (await rater.run_once()).unpriced == 1
        assert (await rater.revisit_unpriced()).charged == 0  # no book at all
        catalog = build_catalog(**objects(pin=False))
        assert (await rater.revisit_unpriced()).charged == 1
        entry = (await s.ledger.entries(TENANT, kind="usage", limit=1))[0]
        assert entry.key == "usage:req-000001" and entry.details["priceBook"] == "pb"
        assert "no PriceBook is in force" in entry.details["unpricedReason"]
        assert (await rater.book.unpriced(TENANT))[0] == 0
    finally:
        await s.close()


def _usage(e: Any) -> Any:
    from maasctl.billing.controller.rater import usage_of
    from maasctl.billing.controller.usage_source import UsageRow

    return usage_of(UsageRow(id=e.id, ts=e.ts, received_at=e.ts, key_id=e.key_id, subscription=e.subscription,
                             organization_id=e.organization_id, model=e.model, status=e.status,
                             input_tokens=e.input_tokens, cached_tokens=e.cached_tokens,
                             output_tokens=e.output_tokens, reasoning_tokens=e.reasoning_tokens,
                             total_tokens=e.total_tokens, estimated=e.estimated, estimate_reason=e.estimate_reason,
                             termination=e.termination))


MISTAKEN = {**LLAMA, "rates": {"prompt_tokens": "25.00", "completion_tokens": "10.00"}}  # a slipped digit


def corrected_book(generation: int = 1) -> dict[str, Any]:
    book = copy.deepcopy(objects()["books"][0])
    book["metadata"].update(name="pb-fixed", generation=generation)
    book["spec"].update(supersedes="pb", skus=[LLAMA])
    return book


async def _cli(url: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "maasctl.cli", "billing", "rerate", f"--ledger-url={url}",
        f"--usage-database-url={url}", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_a_mistaken_pricebook_is_rerated_by_adjustments_to_the_corrected_rating(
        ledger_url: str, tmp_path: Path) -> None:
    s = await stores(ledger_url)
    try:
        batch = [record(i) for i in range(1, 7)]
        await s.store.ingest(batch, datetime.now(UTC))
        mistaken = build_catalog(**book_with(objects(), generation=2, skus=[MISTAKEN]))
        assert (await Rater(s.reader, s.ledger, lambda: mistaken).run_once()).charged == 6
        rows_before = await s.ledger.count(TENANT)
        wrong = -await s.ledger.balance(TENANT)

        fixed = Book("pb-fixed", 1, build_catalog(**{**objects(), "books": [corrected_book()]})
                     .books[NS]["pb-fixed"].book.spec)
        old = Book("pb", 2, mistaken.books[NS]["pb"].book.spec)

        def amount(e: Any, book: Book) -> Decimal:
            line = rate(_usage(e), book)
            assert isinstance(line, RatedLine)
            return line.amount

        # Records 2..5 fall in the period; 1 and 6 keep the mistaken price.
        since, until = batch[1].ts, batch[5].ts
        expected = sum((amount(e, fixed if since <= e.ts < until else old) for e in batch), Decimal(0))
        assert expected < wrong

        path = tmp_path / "pb-fixed.yaml"
        path.write_text(yaml.safe_dump(corrected_book()))
        period = ["--tenant", TENANT, "--from", since.isoformat(), "--to", until.isoformat(),
                  "--price-book-file", str(path), "--reason", "INC-42: prompt rate was 25.00, not 2.50",
                  "--actor", "alice", "-o", "json"]
        code, out, err = await _cli(ledger_url, *period, "--dry-run")
        assert code == 0, err
        dry = json.loads(out)
        assert (dry["records"], dry["changed"], dry["dryRun"], dry["inserted"]) == (4, 4, True, [])
        assert Decimal(dry["delta"]) == expected - wrong
        assert await s.ledger.count(TENANT) == rows_before  # a dry run posts nothing

        code, out, err = await _cli(ledger_url, *period)
        assert code == 0, err
        done = json.loads(out)
        assert len(done["inserted"]) == 1 and done["inserted"][0].startswith(RERATE_PREFIX)
        assert -await s.ledger.balance(TENANT) == expected  # the ledger sums to the corrected rating

        # The audit trail: who, when, why, with which book, record by record; the charges are untouched.
        adj = (await s.ledger.entries(TENANT, kind="adjustment", limit=5))
        assert len(adj) == 1
        assert (adj[0].actor, adj[0].reason) == ("alice", "INC-42: prompt rate was 25.00, not 2.50")
        assert adj[0].recorded_at is not None and adj[0].details["priceBook"] == "pb-fixed"
        assert sorted(adj[0].details["records"]) == [e.id for e in batch[1:5]]
        assert Decimal(adj[0].details["total"]) == expected - wrong
        charges = await s.ledger.usage_charges(TENANT, batch[0].ts, batch[5].ts + timedelta(seconds=1))
        assert sum((c.amount for c in charges.values()), Decimal(0)) == wrong  # the charge rows as they were

        # Twice adjusts once; a wider, overlapping period adjusts only what is still wrong (1 and 6).
        code, out, err = await _cli(ledger_url, *period)
        assert code == 0 and json.loads(out)["entries"] == [], err
        report = await rerate(s.ledger, s.reader, TENANT, fixed, batch[0].ts, batch[5].ts + timedelta(seconds=1),
                              reason="INC-42 rest of the month", actor="bob")
        assert (report.changed, report.unchanged, len(report.inserted)) == (2, 4, 1)
        everything = sum((amount(e, fixed) for e in batch), Decimal(0))
        assert -await s.ledger.balance(TENANT) == everything
        assert await s.ledger.verify() == []
        assert (await s.ledger.balances([TENANT]))[TENANT] == -everything
        revenue = await _account(s.ledger, REVENUE)
        assert revenue == everything  # revenue corrected too (not an equity adjustment)
    finally:
        await s.close()


async def _account(ledger: Ledger, account: str) -> Decimal:
    from sqlalchemy import func, select

    from maasctl.billing.ledger.entries import from_micros
    from maasctl.billing.ledger.schema import postings

    async with ledger.engine.connect() as conn:
        micros = (await conn.execute(select(func.sum(postings.c.amount_micros))
                                     .where(postings.c.account == account))).scalar()
    return from_micros(int(micros or 0))


async def test_rerate_refuses_bad_input(ledger_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: PriceBook\nspec: {}\n")
    base = ["--tenant", TENANT, "--reason", "r", "--actor", "a"]
    code, _, err = await _cli(ledger_url, *base, "--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z",
                              "--price-book-file", str(bad))
    assert code == 2 and "is not a PriceBook" in err
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(corrected_book()))
    code, _, err = await _cli(ledger_url, *base, "--from", "2026-11-01T00:00:00", "--to", "2026-12-01T00:00:00Z",
                              "--price-book-file", str(good))
    assert code == 2 and "no timezone" in err
    code, _, err = await _cli(ledger_url, *base, "--from", "2026-12-01T00:00:00Z", "--to", "2026-11-01T00:00:00Z",
                              "--price-book-file", str(good))
    assert code == 2 and "period is empty" in err


async def test_a_key_selected_budget_counts_the_corrections_of_its_keys_records(ledger_url: str) -> None:
    from maasctl.billing.controller.spend import selected_spend
    from maasctl.maasapi.store import KeyRecord, KeyStore

    s = await stores(ledger_url)
    try:
        keys = KeyStore(s.store.engine)
        now = datetime.now(UTC)
        for key_id, project in (("k-rag", "rag"), ("k-web", "web")):
            await keys.insert(KeyRecord(id=key_id, key_hash="x", hash_algorithm="test", name=key_id,
                                        description="", owner="alice", groups=(), subscription_namespace="s",
                                        subscription_name="sub", ephemeral=False, created_at=now,
                                        expires_at=now + timedelta(days=1), labels={"project": project}),
                              actor="test")
        batch = [record(i, key_id="k-rag" if i % 2 else "k-web") for i in range(1, 7)]
        await s.store.ingest(batch, now)
        mistaken = build_catalog(**book_with(objects(), generation=2, skus=[MISTAKEN]))
        assert (await Rater(s.reader, s.ledger, lambda: mistaken).run_once()).charged == 6
        fixed = Book("pb-fixed", 1, build_catalog(**{**objects(), "books": [corrected_book()]})
                     .books[NS]["pb-fixed"].book.spec)

        def amount(key_id: str) -> Decimal:
            lines = [rate(_usage(e), fixed) for e in batch if e.key_id == key_id]
            assert all(isinstance(line, RatedLine) for line in lines)
            return sum((line.amount for line in lines if isinstance(line, RatedLine)), Decimal(0))

        since, until = T0 - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)  # the records and the fix
        rag = await selected_spend(s.ledger, s.reader, TENANT, {"project": "rag"}, since, until)
        assert rag is not None and rag > amount("k-rag")  # the mistaken rating
        report = await rerate(s.ledger, s.reader, TENANT, fixed, T0, T0 + timedelta(days=1),
                              reason="INC-42", actor="alice")
        assert [e.details["keyId"] for e in report.entries] == ["k-rag", "k-web"]  # one key per entry
        assert await selected_spend(s.ledger, s.reader, TENANT, {"project": "rag"}, since, until) == amount("k-rag")
        assert await selected_spend(s.ledger, s.reader, TENANT, {"project": "web"}, since, until) == amount("k-web")
        assert await selected_spend(s.ledger, s.reader, TENANT, {}, since, until) == amount("k-rag") + amount("k-web")
        assert await selected_spend(s.ledger, None, TENANT, {"project": "rag"}, since, until) is None
        assert not (await rerate(s.ledger, s.reader, TENANT, fixed, T0, T0 + timedelta(days=1), reason="INC-42",
                                 actor="alice")).entries  # twice adjusts once
    finally:
        await s.close()


async def charged_with(s: Stores, n: int, catalog: Any) -> list[Any]:
    """Records 1..n ingested and charged by the rater with `catalog`."""
    batch = [record(i) for i in range(1, n + 1)]
    await s.store.ingest(batch, datetime.now(UTC))
    assert (await Rater(s.reader, s.ledger, lambda: catalog).run_once()).charged == n
    return batch


def rated_total(batch: list[Any], book: Book, ctx: Context) -> Decimal:
    lines = [rate(_usage(e), book, ctx) for e in batch]
    assert all(isinstance(line, RatedLine) for line in lines)
    return sum((line.amount for line in lines if isinstance(line, RatedLine)), Decimal(0))


PASS = {"sku": "llama", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "9.00", "completion_tokens": "9.00"},
        "passThrough": {"provider": "openai", "markupPct": "250", "costSecretRef": {"name": "openai-costs"}}}


async def test_a_pass_through_sku_is_rerated_with_the_cost_of_the_records_time_and_the_corrected_markup(
        ledger_url: str) -> None:
    s = await stores(ledger_url)
    try:
        then = {NS: {"openai-costs": {"prompt_tokens": Decimal("2.00"), "completion_tokens": Decimal("8.00")}}}
        batch = await charged_with(s, 4, build_catalog(**book_with(objects(), generation=2, skus=[PASS]),
                                                       provider_costs=then))
        wrong = -await s.ledger.balance(TENANT)
        # The Secret has changed since (the provider raised its prices): re-rating must not use today's cost.
        fixed_sku = {**PASS, "passThrough": {**PASS["passThrough"], "markupPct": "25"}}
        fixed = Book("pb-fixed", 1, build_catalog(**book_with(objects(), generation=1, skus=[fixed_sku]))
                     .books[NS]["pb"].book.spec)
        expected = rated_total(batch, fixed, Context(provider_costs=then[NS]))
        assert expected < wrong
        report = await rerate(s.ledger, s.reader, TENANT, fixed, T0, T0 + timedelta(days=1),
                              reason="INC-43: markup was 250%, not 25%", actor="alice")
        assert (report.changed, report.unpriced, len(report.inserted)) == (4, {}, 1)
        assert -await s.ledger.balance(TENANT) == expected  # cost then x 1.25, to the micro-unit
        adj = (await s.ledger.entries(TENANT, kind="adjustment", limit=5))[0]
        assert (adj.actor, adj.reason, adj.details["priceBook"]) == ("alice", "INC-43: markup was 250%, not 25%",
                                                                     "pb-fixed")
        again = await rerate(s.ledger, s.reader, TENANT, fixed, T0, T0 + timedelta(days=1), reason="INC-43",
                             actor="alice")
        assert (again.changed, again.entries) == (0, [])  # running it twice adds nothing
        assert await s.ledger.verify() == []
    finally:
        await s.close()


async def test_a_committed_use_fee_is_rerated_to_the_corrected_monthly_price(ledger_url: str) -> None:
    from maasctl.billing.ledger.entries import COMMITMENTS, RERATE_FEE_PREFIX
    from maasctl.billing.rules.catalog import COMMITTED_USE_ANNOTATION, month_start

    s = await stores(ledger_url)
    try:
        await s.store.ingest([record(i) for i in range(1, 4)], datetime.now(UTC))
        objs = book_with(objects(), generation=2, skus=[LLAMA])
        objs["books"][0]["spec"]["committedUse"] = [{"name": "starter", "tokensPerSecond": 1, "monthlyPrice": "995.00"}]
        objs["tenants"][0]["metadata"]["annotations"] = {COMMITTED_USE_ANNOTATION: "starter"}
        mistaken = build_catalog(**objs)
        assert (await Rater(s.reader, s.ledger, lambda: mistaken).run_once()).charged == 3
        assert await s.ledger.balance(TENANT) == Decimal("-995.00")  # the records' tokens are included
        month = month_start(T0)
        spent = await s.ledger.spend(TENANT, month, datetime.now(UTC) + timedelta(hours=1))

        fixed = copy.deepcopy(objs["books"][0])
        fixed["metadata"].update(name="pb-fixed", generation=1)
        fixed["spec"]["committedUse"][0]["monthlyPrice"] = "99.50"
        book = Book("pb-fixed", 1, build_catalog(**{**objs, "books": [fixed]}).books[NS]["pb-fixed"].book.spec)
        until = T0 + timedelta(days=1)
        report = await rerate(s.ledger, s.reader, TENANT, book, month, until, reason="INC-44: 995 for 99.50",
                              actor="alice")
        # The records are rated with the tier their month was charged for: still included, unchanged.
        assert (report.records, report.changed, report.unchanged) == (3, 0, 3)
        assert (report.fees, report.fees_changed, report.fee_delta) == (1, 1, Decimal("-895.50"))
        assert len(report.inserted) == 1 and report.inserted[0].startswith(f"{RERATE_FEE_PREFIX}{TENANT}:")
        assert await s.ledger.balance(TENANT) == Decimal("-99.50")
        assert await _account(s.ledger, COMMITMENTS) == Decimal("99.50")  # the fee's revenue corrected
        assert await s.ledger.spend(TENANT, month, datetime.now(UTC) + timedelta(hours=1)) == spent  # not usage
        adj = (await s.ledger.entries(TENANT, kind="adjustment", limit=5))[0]
        assert (adj.actor, adj.reason) == ("alice", "INC-44: 995 for 99.50")
        assert adj.details["fees"] == {f"commitment:{TENANT}:starter:{month:%Y-%m}": "-895.500000"}

        assert not (await rerate(s.ledger, s.reader, TENANT, book, month, until, reason="INC-44",
                                 actor="alice")).entries  # twice adjusts once
        # A period starting after the month's start leaves its fee alone; a book without the tier lists it.
        later = await rerate(s.ledger, s.reader, TENANT, book, T0, until, reason="r", actor="a", dry_run=True)
        assert later.fees == 0 and later.changed == 0
        del fixed["spec"]["committedUse"]
        bare = Book("pb-fixed", 2, build_catalog(**{**objs, "books": [fixed]}).books[NS]["pb-fixed"].book.spec)
        gone = await rerate(s.ledger, s.reader, TENANT, bare, month, until, reason="r", actor="a", dry_run=True)
        assert "has no committed-use tier 'starter'" in gone.fees_unpriced[f"commitment:{TENANT}:starter:{month:%Y-%m}"]
        assert await s.ledger.verify() == []
    finally:
        await s.close()


async def test_cost_data_given_for_the_period_replaces_a_wrong_secrets_and_bad_data_is_refused(
        ledger_url: str, tmp_path: Path) -> None:
    import base64

    s = await stores(ledger_url)
    try:
        wrong = {NS: {"openai-costs": {"prompt_tokens": Decimal("2.00"), "completion_tokens": Decimal("8.00")}}}
        batch = await charged_with(s, 3, build_catalog(**book_with(objects(), generation=2, skus=[PASS]),
                                                       provider_costs=wrong))
        fixed_sku = {**PASS, "passThrough": {**PASS["passThrough"], "markupPct": "25"}}
        book = corrected_book()
        book["spec"]["skus"] = [fixed_sku]
        (tmp_path / "pb-fixed.yaml").write_text(yaml.safe_dump(book))
        right = {"prompt_tokens": "1.00", "completion_tokens": "8.00\n"}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai-costs", "namespace": NS},
                  "data": {k: base64.b64encode(v.encode()).decode() for k, v in right.items()}}
        (tmp_path / "costs.yaml").write_text(yaml.safe_dump(secret))
        period = ["--tenant", TENANT, "--from", T0.isoformat(), "--to", (T0 + timedelta(days=1)).isoformat(),
                  "--price-book-file", str(tmp_path / "pb-fixed.yaml"), "--reason", "INC-46: prompt cost was 1.00",
                  "--actor", "alice", "-o", "json"]

        (tmp_path / "neg.yaml").write_text(yaml.safe_dump({**secret, "data": {},
                                                            "stringData": {"prompt_tokens": "-7.77"}}))
        code, _, err = await _cli(ledger_url, *period, "--cost-file", str(tmp_path / "neg.yaml"))
        assert code == 2 and "'prompt_tokens'" in err and "7.77" not in err, err  # (more in test_rerating.py)
        assert await s.ledger.count(TENANT) == 3  # nothing posted by a refused run

        code, out, err = await _cli(ledger_url, *period, "--cost-file", str(tmp_path / "costs.yaml"))
        assert code == 0, err
        assert json.loads(out)["changed"] == 3 and len(json.loads(out)["inserted"]) == 1
        costs = {"openai-costs": {"prompt_tokens": Decimal("1.00"), "completion_tokens": Decimal("8.00")}}
        fixed = Book("pb-fixed", 1, build_catalog(**{**objects(), "books": [book]}).books[NS]["pb-fixed"].book.spec)
        expected = rated_total(batch, fixed, Context(provider_costs=costs))
        assert -await s.ledger.balance(TENANT) == expected
        code, out, err = await _cli(ledger_url, *period, "--cost-file", str(tmp_path / "costs.yaml"))
        assert code == 0 and json.loads(out)["entries"] == [], err  # twice adjusts once
    finally:
        await s.close()
