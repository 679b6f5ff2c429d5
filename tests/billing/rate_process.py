"""A rater in its own process, for the crash test: `python -m tests.billing.rate_process USAGE_URL LEDGER_URL
OBJECTS_JSON PAGE_SIZE`. Rates until nothing is left, then exits 0 (the test kills it before that)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.catalog import build_catalog


async def main(usage_url: str, ledger_url: str, objs: dict[str, Any], page_size: int) -> None:
    catalog = build_catalog(objs["tenants"], objs["plans"], objs["books"])
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(usage_url)
    try:
        rater = Rater(reader, ledger, lambda: catalog, page_size=page_size, lag=timedelta(seconds=5))
        while True:  # each pass re-reads the lag window: stop when a pass charged nothing new
            report = await rater.run_once()
            if report.charged + report.unpriced == 0:
                break
    finally:
        await reader.close()
        await ledger.close()


if __name__ == "__main__":
    with open(sys.argv[3]) as f:
        objects = json.load(f)
    asyncio.run(main(sys.argv[1], sys.argv[2], objects, int(sys.argv[4])))
