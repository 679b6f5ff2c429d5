"""The GPU meter as a controller: one key (`gpu-meter`), one worker, leader only. Each reconcile is one pass of
`GpuMeter.run_once`; a Workload change wakes it, and it runs again every `gpu_meter_seconds` (a running
Workload's segments fall due with time, not with changes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from maasctl.billing.api.kinds import RESOURCE_FLAVOR, WORKLOAD
from maasctl.billing.controller.gpu_meter import GpuMeter
from maasctl.billing.controller.reconcilers.context import BillingContext
from maasctl.runtime import NotFound, Request, Result

__all__ = ["GPU_METER_KEY", "GpuMeterReconciler", "flavor_reader"]

GPU_METER_KEY: Final = Request(None, "gpu-meter")


class GpuMeterReconciler:
    def __init__(self, ctx: BillingContext, meter: GpuMeter) -> None:
        self.ctx = ctx
        self.meter = meter

    async def reconcile(self, req: Request) -> Result:
        if req != GPU_METER_KEY:
            return Result.done()
        if self.ctx.missing_apis(WORKLOAD):
            # No Kueue here (yet): nothing to meter; look again as for a Plan's missing Kueue.
            return Result.requeue_after(self.ctx.settings.dependency_recheck_seconds)
        await self.meter.ledger.ensure_schema()
        await self.meter.run_once()
        return Result.requeue_after(self.ctx.settings.gpu_meter_seconds)


def flavor_reader(ctx: BillingContext) -> Callable[[str], Awaitable[Mapping[str, Any] | None]]:
    """Reads a ResourceFlavor live (the cache holds only the flavors billing made; the operator's own name SKUs
    too). None when it does not exist."""

    async def read(name: str) -> dict[str, Any] | None:
        try:
            return dict(await ctx.client.get(RESOURCE_FLAVOR, name))
        except NotFound:
            return None

    return read
