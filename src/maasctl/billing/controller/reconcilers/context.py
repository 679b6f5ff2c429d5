"""What every billing reconciler gets: cache, client, applier, events, clock and settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from maasctl.billing.controller.settings import BillingSettings
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.clock import Clock
from maasctl.runtime import Applier, Cache, Client, EventRecorder, GroupVersionKind
from maasctl.runtime.informer import InformerState

log = structlog.get_logger("maasctl.billing")


@dataclass(frozen=True)
class BillingContext:
    cache: Cache
    client: Client
    applier: Applier
    events: EventRecorder
    clock: Clock
    settings: BillingSettings
    ledger: Ledger | None = None
    usage: UsageReader | None = None

    async def close(self) -> None:
        """Release the ledger's and the usage reader's database connections."""
        if self.usage is not None:
            await self.usage.close()
        if self.ledger is not None:
            await self.ledger.close()

    def now_rfc3339(self) -> str:
        return self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def missing_apis(self, *gvks: GroupVersionKind) -> list[GroupVersionKind]:
        """Kinds among `gvks` whose CRD is not installed (their informers wait for it to appear)."""
        states = self.cache.status()
        return [g for g in gvks if states.get(str(g)) is InformerState.WAITING_FOR_CRD]

    async def event(self, regarding: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str,
                    note: str) -> None:
        await self.events.record(regarding, type_=type_, reason=reason, action=reason, note=note)

    async def apply_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Server-side apply `status` through /status (skipped by the applier when nothing changed)."""
        meta = obj["metadata"]
        patch_meta = {"name": meta["name"]}
        if meta.get("namespace"):
            patch_meta["namespace"] = meta["namespace"]
        await self.applier.apply_status(
            {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": patch_meta, "status": dict(status)})
