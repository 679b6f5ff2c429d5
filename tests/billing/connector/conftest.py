"""Fixtures of the psp-connector integration tests: Stripe's own mock (stripe-mock, built from the Go module
proxy and cached) and, per test module, a PostgreSQL ledger, the billing controller and one connector replica."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest

from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.clock import ManualClock
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer
from maasctl.testenv.stripemock import StripeMock, running_stripe_mock

from ..conftest import SETTINGS, start_billing
from .psp import Setup, start_connector


@pytest.fixture(scope="session")
def stripe_mock() -> Iterator[StripeMock]:
    with running_stripe_mock() as mock:
        yield mock


@pytest.fixture(scope="module")
async def psp(billing_cluster: ControlPlane, billing_pg: PostgresServer, stripe_mock: StripeMock
              ) -> AsyncIterator[Setup]:
    url = await billing_pg.acreate_database(f"p_{uuid.uuid4().hex[:10]}")
    running = await start_billing(billing_cluster, dataclasses.replace(SETTINGS, ledger_url=url,
                                                                       wallet_resync_seconds=2))
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    connector = await start_connector(billing_cluster, url, clock, stripe_mock.url)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Setup(running, connector, clock, ledger, url, billing_cluster, stripe_mock.url)
    finally:
        await connector.stop()
        await ledger.close()
        await running.stop()
