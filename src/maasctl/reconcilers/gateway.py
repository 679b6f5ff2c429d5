"""Each managed Gateway (the default one, every --tenant-gateway) -> its default-deny AuthPolicy: closed by
default (`builders.gatewayauth`), and its payload-processor wiring with the `PayloadProcessorWired` condition
(`reconcilers.processorwiring`).

Applied while the Gateway exists and Kuadrant's AuthPolicy CRD is served; re-applied when someone edits it
(drift), left alone when annotated `opendatahub.io/managed: "false"`.
"""

from __future__ import annotations

from maasctl.builders.gatewayauth import build_gateway_default_auth
from maasctl.builders.refs import GatewayRef
from maasctl.builders.validation import InvalidInputError
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, Context
from maasctl.reconcilers.kinds import AUTH_POLICY, GATEWAY
from maasctl.reconcilers.processorwiring import wire_gateway
from maasctl.runtime import Request, Result


class GatewayReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def serves(self, req: Request) -> bool:
        return GatewayRef(req.namespace or "", req.name) in self.ctx.gateways

    async def reconcile(self, req: Request) -> Result:
        if not self.serves(req):
            return Result.done()
        gateway = self.ctx.cache.get(GATEWAY, req.name, req.namespace)
        if gateway is None:
            return Result.done()
        wiring_settled = await wire_gateway(self.ctx, gateway)
        if self.ctx.missing_apis(AUTH_POLICY):
            return Result.requeue_after(DEPENDENCY_RECHECK)
        try:
            desired = build_gateway_default_auth(GatewayRef(req.namespace or "", req.name))
        except InvalidInputError as exc:
            await self.ctx.event(gateway, "Warning", "RenderFailed", f"default AuthPolicy: {exc}")
            return Result.done()
        await self.ctx.apply_generated(gateway, desired)
        return Result.done() if wiring_settled else Result.requeue_after(DEPENDENCY_RECHECK)
