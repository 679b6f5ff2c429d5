"""The `maasctl dev` billing samples: valid models, accepted by the API server, and reconciled to the states
the samples promise (pb-launch Active, pb-standard Announced as its successor, both Plans compiled)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from maasctl.api import parse
from maasctl.billing.api import KINDS
from maasctl.billing.dev.samples import billing_samples
from maasctl.runtime import Client

from .conftest import Billing, RunningBilling, eventually
from .test_plan_reconciler import GW, Cluster, gateway, wait_condition

KIND_BY_NAME = {kind.__name__: kind for kind in KINDS}


def test_samples_are_valid_billing_objects() -> None:
    objs = billing_samples("gw-ns", "gw", datetime(2026, 1, 1, tzinfo=UTC))
    assert {o["kind"] for o in objs} == {"PriceBook", "Plan", "TenantAccount", "BudgetPolicy", "BillingConnector"}
    for obj in objs:
        parse(KIND_BY_NAME[obj["kind"]], obj)
        assert obj["metadata"]["namespace"] == "gw-ns"


def test_the_sample_books_price_the_sample_models() -> None:
    """A call of the dev stack's models (10 prompt + 5 completion tokens) is priced, at the price the banner
    prints, by both sample books: nothing the new user does is unpriced."""
    from decimal import Decimal

    from maasctl.billing.api import PriceBook
    from maasctl.billing.dev import samples
    from maasctl.billing.rules.rating import Book, RatedLine, Usage, rate

    objs = billing_samples("gw-ns", "gw", datetime(2026, 1, 1, tzinfo=UTC))
    for book in (o for o in objs if o["kind"] == "PriceBook"):
        spec = parse(PriceBook, book).spec
        for model, price in (("llm/gpt-x", samples.GPT_X_CALL), ("llm/granite", samples.GRANITE_CALL)):
            usage = Usage("r1", datetime(2026, 3, 1, tzinfo=UTC), model, input_tokens=10, output_tokens=5,
                          total_tokens=15)
            line = rate(usage, Book(book["metadata"]["name"], 1, spec))
            assert isinstance(line, RatedLine), (book["metadata"]["name"], model, line)
            assert line.amount == Decimal(price)


@pytest.mark.integration
async def test_samples_reconcile_to_the_promised_states(
    billing: Billing, billing_controller: RunningBilling, namespace: str, kube: object
) -> None:
    billing_controller.clock.set(datetime.now(UTC))
    cluster = Cluster(kube)  # type: ignore[arg-type]
    await cluster.create(GW, gateway(namespace, "local"))
    client = Client(kube)  # type: ignore[arg-type]
    for obj in billing_samples(namespace, "local", datetime.now(UTC)):
        await client.apply(obj, field_manager="tests")
    billing_controller.clock.advance(timedelta(minutes=2))  # pb-launch comes into force a minute after creation

    async def states() -> bool:
        launch = await billing.get("PriceBook", "pb-launch", namespace)
        standard = await billing.get("PriceBook", "pb-standard", namespace)
        assert launch and standard
        assert (launch.get("status") or {}).get("state") == "Active", launch.get("status")
        assert (standard.get("status") or {}).get("state") == "Announced", standard.get("status")
        assert launch["status"]["activeTenants"] == 2 and launch["status"]["grandfatheredTenants"] == ["ten-helix"]
        return True

    await eventually(states)
    await wait_condition(billing, namespace, "Compiled", "True")
