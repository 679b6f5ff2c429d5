"""The tenant portal's read of one tenant's invoices (`billing.ledger.invoice_book`) on SQLite and PostgreSQL,
from rows written by the psp-connector's own writer (`UsageBook`) into its own schema: each invoice's amount is
exactly the usage pushed in its period, a page or a key never returns another tenant's invoice, and an amount that
cannot be derived exactly is said to be unknown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from maasctl.billing.connector.payments import Payments, UsageBook
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.invoice_book import InvoiceBook

T0 = datetime(2026, 9, 1, tzinfo=UTC)
NORTH, SOUTH, MIXED = "gw/ten-north", "gw/ten-south", "gw/ten-mixed"


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


async def test_a_tenant_sees_its_invoices_with_the_usage_pushed_for_each_and_never_another_s(ledger: Ledger) -> None:
    payments = Payments(ledger)
    await payments.ensure_schema()  # the connector's schema history creates the tables
    usage = UsageBook(payments)
    for key, tenant, upto, amount, currency, when in [
            ("p1", NORTH, 2, "1.23", "EUR", at(1)), ("p2", NORTH, 3, "0.5", "EUR", at(2)),
            ("s1", SOUTH, 4, "9.99", "USD", at(2)), ("p3", NORTH, 7, "2", "EUR", at(30)),
            ("p4", NORTH, 9, "0.01", "EUR", at(40)),  # pushed, not invoiced yet
            ("m1", MIXED, 1, "1", "EUR", at(1)), ("m2", MIXED, 2, "1", "USD", at(2))]:
        await usage.record(key, "psp/conn", tenant, upto, 1, Decimal(amount), currency, "", when)
    for key, tenant, invoice_id, when in [("i1", NORTH, "in_north_1", at(2)), ("s", SOUTH, "in_south", at(2)),
                                          ("i2", NORTH, "in_north_2", at(30)), ("m", MIXED, "in_mixed", at(2))]:
        assert await usage.record_invoice(key, "psp/conn", tenant, invoice_id, when)
    book = InvoiceBook(ledger.engine)

    page = await book.page(NORTH)
    assert page is not None
    assert [(i.invoice_id, i.status, i.at, i.period_start, i.amount, i.currency, i.unknown, i.records,
             i.entries_after, i.entries_upto) for i in page] == [
        ("in_north_2", "finalized", at(30), at(2), Decimal("2"), "EUR", "", 1, 3, 7),
        ("in_north_1", "finalized", at(2), None, Decimal("1.73"), "EUR", "", 2, 0, 3)]
    # Pages of one: the same invoices, derived the same way across the page boundary.
    first = await book.page(NORTH, limit=1)
    assert first == page[:1]
    assert await book.page(NORTH, before=page[0].key, limit=1) == page[1:]
    assert await book.page(NORTH, before=page[1].key) == []
    assert await book.invoice(NORTH, "i1") == page[1]

    south = await book.invoice(SOUTH, "s")
    assert south is not None and (south.amount, south.currency, south.invoice_id) == (Decimal("9.99"), "USD",
                                                                                      "in_south")
    # Another tenant's key is not found, as a cursor or as an invoice; nor is a tenant with no invoice.
    assert await book.invoice(NORTH, "s") is None and await book.page(NORTH, before="s") is None
    assert await book.invoice(SOUTH, "i1") is None and await book.page(SOUTH) == [south]
    assert await book.page("gw/ten-none") == []

    mixed = await book.invoice(MIXED, "m")
    assert mixed is not None and mixed.amount is None and mixed.currency is None
    assert "more than one currency" in mixed.unknown


async def test_without_the_connector_s_tables_nobody_has_an_invoice(ledger: Ledger) -> None:
    """A database the psp-connector never migrated (every tenant Prepaid): no invoice, no error."""
    await ledger.create_schema()
    book = InvoiceBook(ledger.engine)
    assert await book.page(NORTH) == [] and await book.page(NORTH, before="i1") is None
    assert await book.invoice(NORTH, "i1") is None
