"""The ledger on SQLite and on a real PostgreSQL server: append-only, double-entry, idempotent by natural key,
balances derived; and (pure) every transaction balances."""

from __future__ import annotations

import itertools
import os
import stat
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from maasctl.billing.ledger import Ledger, adjustment, credit, usage_charge
from maasctl.billing.ledger.budget_book import BudgetBook, Notice
from maasctl.billing.ledger.entries import (
    FUNDING,
    REVENUE,
    Posting,
    Transaction,
    balances,
    from_micros,
    rerate_adjustment,
    to_micros,
)
from maasctl.billing.ledger.rating_book import RatingBook, Unpriced
from maasctl.billing.ledger.schema import postings, transactions
from maasctl.billing.ledger.statements import Statements

T0 = datetime(2026, 9, 1, tzinfo=UTC)
TENANT = "gw/ten-helix"


def charge(record: str, amount: str, at: datetime = T0, tokens: int = 100) -> Transaction:
    return usage_charge(f"usage:{record}", TENANT, at, Decimal(amount), currency="USD", tokens=tokens,
                        details={"record": record, "priceBook": "pb", "generation": 1})


async def test_entries_are_recorded_once_per_natural_key(ledger: Ledger) -> None:
    batch = [credit("c1", TENANT, T0, Decimal("10"), reason="welcome credit", actor="ops@example.com"),
             charge("r1", "0.250000"), charge("r2", "1.000001")]
    first = await ledger.post(batch)
    assert first.inserted == ("credit:c1", "usage:r1", "usage:r2") and not first.duplicates
    again = await ledger.post([*batch, charge("r3", "0.5")])
    assert again.inserted == ("usage:r3",) and set(again.duplicates) == {"credit:c1", "usage:r1", "usage:r2"}
    assert await ledger.balance(TENANT) == Decimal("8.249999")
    assert await ledger.count(TENANT) == 4
    assert await ledger.verify() == []


async def test_a_known_key_with_different_content_is_a_conflict_and_not_applied(ledger: Ledger) -> None:
    await ledger.post([charge("r1", "0.25")])
    result = await ledger.post([charge("r1", "0.30")])
    assert result.conflicts == ("usage:r1",) and not result.inserted
    assert await ledger.balance(TENANT) == Decimal("-0.25")


async def test_the_ledger_is_append_only(ledger: Ledger) -> None:
    await ledger.post([credit("c1", TENANT, T0, Decimal("5"), reason="r", actor="a")])
    for stmt in (update(postings).values(amount_micros=1), delete(postings),
                 update(transactions).values(reason="edited"), delete(transactions)):
        with pytest.raises((DBAPIError, IntegrityError), match="append-only"):
            async with ledger.engine.begin() as conn:
                await conn.execute(stmt)
    assert await ledger.balance(TENANT) == Decimal("5")


async def test_derived_figures(ledger: Ledger) -> None:
    await ledger.post([credit("c1", TENANT, T0, Decimal("20"), reason="top-up", actor="ops"),
                       charge("a", "1.5", T0 + timedelta(days=1), 1000),
                       charge("b", "2.25", T0 + timedelta(days=40), 2000),
                       adjustment("fix-1", TENANT, T0 + timedelta(days=41), Decimal("-0.75"),
                                  reason="correct a mistaken credit", actor="ops")])
    assert await ledger.spend(TENANT, T0, T0 + timedelta(days=31)) == Decimal("1.5")
    assert await ledger.spend(TENANT, T0) == Decimal("3.75")
    assert await ledger.tokens(TENANT, T0 + timedelta(days=31)) == 2000
    assert await ledger.balance(TENANT) == Decimal("15.5")
    shown = await ledger.entries(TENANT)
    assert [(e.key, e.amount) for e in shown] == [
        ("adjustment:fix-1", Decimal("-0.75")), ("usage:b", Decimal("-2.25")), ("usage:a", Decimal("-1.5")),
        ("credit:c1", Decimal("20"))]
    assert shown[0].reason == "correct a mistaken credit" and shown[0].actor == "ops"
    assert shown[1].details == {"record": "b", "priceBook": "pb", "generation": 1}
    assert await ledger.balances([TENANT, "gw/other"]) == {TENANT: Decimal("15.5"), "gw/other": Decimal(0)}


async def test_spend_sees_re_rating_corrections_and_nothing_else(ledger: Ledger) -> None:
    """Budgets and `mtdSpend` read `spend`: a re-rating (`maasctl billing rerate`) corrects it in the period it
    is posted; a goodwill adjustment, a credit or a payment is not spend."""
    await ledger.post([credit("c1", TENANT, T0, Decimal("20"), reason="top-up", actor="ops"),
                       charge("a", "1.5", T0 + timedelta(days=1)), charge("b", "2.0", T0 + timedelta(days=2))])
    month = (T0, T0 + timedelta(days=30))
    assert await ledger.spend(TENANT, *month) == Decimal("3.5")
    fix = rerate_adjustment(TENANT, T0 + timedelta(days=3), {"a": Decimal("-0.5"), "b": Decimal("0.25")},
                            book="pb", generation=2, since=T0, until=T0 + timedelta(days=3), currency="USD",
                            reason="pb generation 1 priced llama twice", actor="ops")
    goodwill = adjustment("gw-1", TENANT, T0 + timedelta(days=4), Decimal("5"), reason="outage credit", actor="ops")
    await ledger.post([fix, goodwill])
    assert await ledger.spend(TENANT, *month) == Decimal("3.25")  # 3.5 - 0.5 + 0.25
    assert await ledger.spend(TENANT, T0, T0 + timedelta(days=3)) == Decimal("3.5")  # posted on day 3
    assert await ledger.spend(TENANT, T0 + timedelta(days=3)) == Decimal("-0.25")  # a net credit that day
    assert await ledger.balance(TENANT) == Decimal("20") - Decimal("3.25") + Decimal("5")
    # The same spend per day (the portal's runway over time): each bucket is `spend` of its day.
    days = [T0 + timedelta(days=i) for i in range(6)]
    by_day = await Statements(ledger.engine).spend_by_bucket(TENANT, days)
    assert by_day == [await ledger.spend(TENANT, a, b) for a, b in itertools.pairwise(days)]
    assert by_day == [Decimal(0), Decimal("1.5"), Decimal("2.0"), Decimal("-0.25"), Decimal(0)]
    assert await Statements(ledger.engine).spend_by_bucket("gw/another", days) == [Decimal(0)] * 5


async def test_verify_finds_an_unbalanced_transaction(ledger: Ledger) -> None:
    await ledger.post([charge("r1", "1")])
    async with ledger.engine.begin() as conn:  # bypass the writer: a leg without its counterpart
        tx_id = (await conn.execute(text("SELECT id FROM billing_ledger_transactions"))).scalar_one()
        await conn.execute(postings.insert().values(transaction_id=tx_id, account=REVENUE, tenant=TENANT,
                                                    kind="usage", occurred_at=T0, amount_micros=7))
    problems = await ledger.verify()
    assert any("usage:r1 does not balance" in p for p in problems)
    assert any("the ledger does not balance" in p for p in problems)


async def test_a_claimed_firing_has_one_notice_taken_by_one_deliverer(ledger: Ledger) -> None:
    book = BudgetBook(ledger.engine)  # the budgets' bookkeeping, on the ledger's database
    notice = Notice(TENANT, "budget-1", '{"cap":"1.00"}')
    won, _ = await book.claim_firings("gw/cap", ["k50"], T0, {"k50": notice})
    assert won == {"k50"}
    won, _ = await book.claim_firings("gw/cap", ["k50"], T0 + timedelta(seconds=1), {"k50": notice})
    assert won == set()  # a retried reconcile: no second notice
    assert await book.claim_firings("gw/cap", ["k80"], T0) == ({"k80"}, {"k80": T0})  # no notice asked
    due = await book.due_notices(TENANT, T0)
    assert [(d.key, d.event_id, d.data, d.attempts) for d in due] == [("k50", "budget-1", '{"cap":"1.00"}', 0)]
    lease = T0 + timedelta(seconds=120)
    assert await book.take_notice("k50", T0, lease)
    assert not await book.take_notice("k50", T0, lease)  # a second replica: not its turn
    assert await book.due_notices(TENANT, T0) == []
    assert await book.notice_failed("k50", "PSPError (http_500)", T0 + timedelta(seconds=2)) == 1
    assert await book.notice_states("gw/cap") == {"k50": ("pending", 1, "PSPError (http_500)")}
    assert await book.take_notice("k50", T0 + timedelta(seconds=2), lease)
    assert await book.settle_notice("k50", "sent", T0 + timedelta(seconds=3))
    assert not await book.settle_notice("k50", "sent", T0 + timedelta(seconds=4))
    assert await book.notice_states("gw/cap") == {"k50": ("sent", 1, "PSPError (http_500)")}
    assert await book.due_notices(TENANT, T0 + timedelta(days=1)) == []


async def test_reads_by_key_prefix_and_usage_after_an_entry(ledger: Ledger) -> None:
    gpu = [usage_charge(f"gpu:{uid}:{start}", TENANT, T0, Decimal("1"), currency="USD", tokens=0,
                        details={"gpu": {"start": start}})
           for uid, start in (("u1", 0), ("u1", 60), ("u10", 0), ("u2", 0))]
    await ledger.post([*gpu, charge("r1", "0.25")])
    found = await ledger.details_by_prefix(["gpu:u1:", "gpu:u2:", ""])
    assert sorted(k for k, _ in found) == ["gpu:u1:0", "gpu:u1:60", "gpu:u2:0"]  # u10 is not u1's
    assert dict(found)["gpu:u1:60"] == {"gpu": {"start": 60}}
    assert await ledger.details_by_prefix([]) == []
    upto, records, cost = await ledger.usage_after(TENANT, 0)
    assert (records, cost) == (5, Decimal("4.25")) and upto == await ledger.last_id()
    assert await ledger.usage_after(TENANT, upto) == (upto, 0, Decimal("4.25"))  # nothing after it
    assert await ledger.usage_after("gw/other", 0) == (0, 0, Decimal(0))


async def test_the_rating_book_keeps_the_cursor_and_the_unpriced_report_beside_the_money(ledger: Ledger) -> None:
    book = RatingBook(ledger.engine)
    assert await book.cursor("usage") is None
    items = [Unpriced(f"r{i}", TENANT, "team/m", T0 + timedelta(seconds=i), "no SKU") for i in range(3)]
    async with ledger.engine.begin() as conn:
        await ledger.post([charge("r9", "1")], conn=conn)
        await book.mark_unpriced(items, conn=conn)
        await book.set_cursor("usage", T0, "r9", conn)
    assert await book.cursor("usage") == (T0, "r9")
    assert await book.reported(["r0", "r2", "r9"]) == {"r0", "r2"}
    assert await ledger.known(["usage:r0", "usage:r9"]) == {"usage:r9"}  # the ledger knows its entries only
    page = await book.unpriced_page([TENANT], (items[0].occurred_at, "r0"), 10)
    assert [u.record_id for u in page] == ["r1", "r2"]
    async with ledger.engine.begin() as conn:
        await book.settle_unpriced(["r1"], conn=conn)
    count, latest = await book.unpriced(TENANT, limit=1)
    assert count == 2 and latest[0].record_id == "r2"


def test_manual_entries_need_a_reason_and_an_actor() -> None:
    with pytest.raises(ValueError, match="reason"):
        credit("c", TENANT, T0, Decimal(1), reason=" ", actor="ops")
    with pytest.raises(ValueError, match="actor"):
        adjustment("a", TENANT, T0, Decimal(1), reason="why", actor="")
    with pytest.raises(ValueError, match="positive"):
        credit("c", TENANT, T0, Decimal(0), reason="r", actor="a")
    with pytest.raises(ValueError, match="balance"):
        Transaction("k", "adjustment", TENANT, T0, (Posting("a", Decimal(1)), Posting("b", Decimal(-2))))
    with pytest.raises(ValueError, match="decimal places"):
        Posting("a", Decimal("0.0000001"))


amounts = st.decimals(min_value=Decimal("-1000000"), max_value=Decimal("1000000"), places=6,
                      allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(st.sampled_from(["credit", "usage", "adjustment"]), amounts.map(abs), st.booleans()),
                max_size=40))
def test_property_every_transaction_and_the_books_balance(ops: list[tuple[str, Decimal, bool]]) -> None:
    txs = []
    for i, (kind, amount, negative) in enumerate(ops):
        if kind == "usage":
            txs.append(charge(str(i), str(amount)))
        elif kind == "credit" and amount > 0:
            txs.append(credit(str(i), TENANT, T0, amount, reason="r", actor="a"))
        elif kind == "adjustment" and amount > 0:
            txs.append(adjustment(str(i), TENANT, T0, -amount if negative else amount, reason="r", actor="a"))
    books = balances(txs)
    assert sum(books.values(), Decimal(0)) == 0
    assert all(isinstance(v, Decimal) for v in books.values())
    wallet = books.get(f"wallet:{TENANT}", Decimal(0))
    assert wallet == -(books.get(REVENUE, Decimal(0)) + books.get(FUNDING, Decimal(0))
                       + books.get("equity:adjustments", Decimal(0)))


@given(amounts)
def test_property_micro_units_round_trip_exactly(amount: Decimal) -> None:
    assert from_micros(to_micros(amount)) == amount


@settings(max_examples=10, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 12), amounts.map(abs)), min_size=1, max_size=25),
       cuts=st.lists(st.integers(1, 8), min_size=1, max_size=6))
def test_property_retried_batches_never_double_charge(tmp_path_factory: pytest.TempPathFactory,
                                                      ops: list[tuple[int, Decimal]], cuts: list[int]) -> None:
    import asyncio

    async def run() -> None:
        path = tmp_path_factory.mktemp("ledger") / "l.db"
        ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
        await ledger.create_schema()
        try:
            txs = [charge(str(rec), str(amount)) for rec, amount in ops]
            first: dict[str, Transaction] = {}
            for t in txs:
                first.setdefault(t.key, t)  # the first content posted under a key is the one recorded
            expected = balances(list(first.values()))
            # post in overlapping batches (a retry re-sends what may already be there)
            start = 0
            for cut in cuts * 4:
                await ledger.post(txs[max(0, start - 2): start + cut])
                start += cut
            await ledger.post(txs)
            assert await ledger.balance(TENANT) == expected.get(f"wallet:{TENANT}", Decimal(0))
            assert await ledger.verify() == []
        finally:
            await ledger.close()

    asyncio.run(run())


@pytest.mark.parametrize(("existing", "umask"), [(None, 0o022), (None, 0o000), (0o644, 0o022), (0o666, 0o000)])
async def test_the_sqlite_ledger_file_is_readable_by_its_owner_only(tmp_path: Path, existing: int | None,
                                                                     umask: int) -> None:
    """Like maas-api's database: created 0600 whatever the umask, and an older 0644 file is tightened."""
    path = tmp_path / "billing-ledger.db"
    if existing is not None:
        path.touch()
        path.chmod(existing)
    old = os.umask(umask)
    try:
        ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
        await ledger.create_schema()
        await ledger.post([credit("c1", TENANT, T0, Decimal("5"), reason="r", actor="a")])
        assert await ledger.balance(TENANT) == Decimal("5")
        files = sorted(tmp_path.iterdir())
        await ledger.close()
    finally:
        os.umask(old)
    assert path in files
    for file in files:  # the database and whatever journal SQLite kept beside it
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
