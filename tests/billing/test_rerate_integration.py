"""`maasctl billing rerate --price-book NAME` reads the corrected PriceBook from the real control plane (the
tenant's namespace) and re-rates the period by adjustment entries; an unknown book is refused."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from maasctl.billing.controller.rater import Rater
from maasctl.billing.rules.catalog import build_catalog
from maasctl.billing.rules.rating import Book, RatedLine, rate
from maasctl.testenv import ControlPlane

from .conftest import Billing
from .test_rater import objects, record
from .test_rerate import LLAMA, MISTAKEN, _cli, _usage, book_with, stores

pytestmark = [pytest.mark.integration]


async def test_rerate_reads_the_corrected_book_from_the_cluster(
        billing: Billing, billing_cluster: ControlPlane, namespace: str, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    s = await stores(url)
    try:
        objs = book_with(objects(), generation=2, skus=[MISTAKEN])
        for kind in ("books", "plans", "tenants"):
            for obj in objs[kind]:
                obj["metadata"]["namespace"] = namespace
        tenant = f"{namespace}/ten-helix"
        batch = [record(i) for i in range(1, 4)]
        await s.store.ingest(batch, datetime.now(UTC))
        catalog = build_catalog(**objs)
        assert (await Rater(s.reader, s.ledger, lambda: catalog).run_once()).charged == 3

        fixed = copy.deepcopy(objs["books"][0])
        fixed["metadata"] = {"name": "pb-fixed", "namespace": namespace}
        fixed["spec"].update(supersedes="pb", skus=[LLAMA],
                             effectiveFrom=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        created = await billing.create(fixed)
        spec = build_catalog(books=[created], plans=[], tenants=[]).books[namespace]["pb-fixed"].book.spec
        corrected = Book("pb-fixed", int(created["metadata"]["generation"]), spec)

        period = ["--tenant", tenant, "--from", batch[0].ts.isoformat(), "--to", "2099-01-01T00:00:00Z",
                  "--reason", "INC-7", "--actor", "ops", "--kubeconfig", str(billing_cluster.kubeconfig)]
        code, out, err = await _cli(url, *period, "--price-book", "pb-fixed")
        assert code == 0, err
        assert "with pb-fixed@1" in out and "3 re-rated" in out
        expected = Decimal(0)
        for e in batch:
            line = rate(_usage(e), corrected)
            assert isinstance(line, RatedLine)
            expected += line.amount
        assert -await s.ledger.balance(tenant) == expected

        code, _, err = await _cli(url, *period, "--price-book", "no-such-book")
        assert code == 2 and f"cannot read PriceBook {namespace}/no-such-book: 404" in err
    finally:
        await s.close()
