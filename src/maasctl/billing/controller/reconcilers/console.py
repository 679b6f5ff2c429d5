"""BillingConsole reconciler: the billing console's Deployment, Service and Route (or HTTPRoute), and the
resource's status (docs/billing-console.md).

Thin: the BillingConsole and what it generated come from the cache, `rules.console` decides, objects are
server-side applied (no write when nothing changed) and owned by the BillingConsole, so deleting it
garbage-collects them. Only the singleton `default` is acted on: any other name gets a condition saying so.
What it cannot watch it looks at again: the OIDC client Secret (no watch on Secrets, a GET by name, as the
cost Secrets) and whether the Route API has appeared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from maasctl.api import parse
from maasctl.billing.api.console import SINGLETON, BillingConsole, BillingConsoleSpec
from maasctl.billing.api.kinds import (
    BILLING_CONSOLE,
    CLUSTER_ROLE_BINDING,
    DEPLOYMENT,
    HTTP_ROUTE,
    ROUTE,
    SECRET,
    SERVICE,
)
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.rules import console, names
from maasctl.runtime import ApiError, GroupVersionKind, NotFound, Request, Result, set_condition, thaw
from maasctl.runtime.objects import FrozenObject

__all__ = ["CONSOLE_KINDS", "OWN_KINDS", "BillingConsoleReconciler", "console_of", "target_of"]

CONSOLE_KINDS: Final = (DEPLOYMENT, SERVICE, ROUTE)  # cached in the console namespace, ours only
OWN_KINDS: Final = (*CONSOLE_KINDS, CLUSTER_ROLE_BINDING)  # cached by our label only


def target_of(ctx: BillingContext) -> console.ConsoleTarget:
    s = ctx.settings
    ns = s.console_namespace
    return console.ConsoleTarget(
        namespace=ns, gateway_namespace=s.console_gateway_namespace, gateway_name=s.console_gateway_name,
        metrics_url=s.console_metrics_url or f"http://billing-controller-metrics.{ns}.svc:8080/metrics",
        maas_api_url=s.console_maas_api_url,
        api_url=s.console_api_url or f"http://billing-controller-api.{ns}.svc:8082")


def console_of(obj: FrozenObject) -> list[Request]:
    """A generated object -> the singleton (only ours, by label: the HTTPRoute informer holds every route)."""
    labels = obj["metadata"].get("labels") or {}
    if labels.get(console.COMPONENT_LABEL) == console.COMPONENT and \
            labels.get(names.MANAGED_BY_LABEL) == names.MANAGED_BY:
        return [Request(None, SINGLETON)]
    return []


class BillingConsoleReconciler:
    def __init__(self, ctx: BillingContext) -> None:
        self.ctx = ctx

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(BILLING_CONSOLE, req.name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return Result.done()  # its objects go with it (owner references)
        generation = int(obj["metadata"].get("generation") or 0)
        if req.name != SINGLETON:
            await self._status(obj, generation, None, [("Deployed", console.not_singleton(req.name))])
            log.info("billing console ignored: not the singleton", name=req.name)
            return Result.done()
        try:
            spec = parse(BillingConsole, thaw(obj)).spec
        except ValidationError as exc:
            bad = console.Verdict("False", "InvalidSpec", f"cannot read the spec: {exc}"[:1024])
            await self._status(obj, generation, None, [("Deployed", bad)])
            return Result.done()
        target = target_of(ctx)
        route_api = not ctx.missing_apis(ROUTE)
        gateway_api = not ctx.missing_apis(HTTP_ROUTE)
        route_kind = ROUTE if route_api else HTTP_ROUTE
        route = ctx.cache.get(route_kind, console.CONSOLE_NAME, target.namespace) if (route_api or gateway_api) \
            else None
        url = console.public_url(spec, route) if spec.enabled else None
        if spec.enabled:
            inp = console.ConsoleInput(name=req.name, uid=str(obj["metadata"].get("uid") or ""), spec=spec,
                                       route_api=route_api, url=url)
            for desired in console.console_objects(inp, target):
                if desired["kind"] == "HTTPRoute" and not gateway_api:
                    continue
                await ctx.applier.apply(desired)
            # The other route kind (the Route API appeared or went) is not wanted any more.
            await self._delete(ROUTE if not route_api else HTTP_ROUTE, target.namespace)
        else:
            for gvk in (*CONSOLE_KINDS, HTTP_ROUTE):
                await self._delete(gvk, target.namespace)
            for binding in console.role_bindings(console.ConsoleInput(req.name, "", spec, route_api)):
                await self._delete(CLUSTER_ROLE_BINDING, None, binding["metadata"]["name"])
        keys = await self._secret_keys(spec, target.namespace)
        deployment = ctx.cache.get(DEPLOYMENT, console.CONSOLE_NAME, target.namespace)
        service = ctx.cache.get(SERVICE, console.CONSOLE_NAME, target.namespace) is not None
        conditions = [
            ("Deployed", console.deployed_verdict(spec, deployment, service)),
            ("RouteAdmitted", console.route_verdict(spec, route, route_api, gateway_api, target)),
            ("AuthConfigured", console.auth_verdict(spec, keys, route_api)),
        ]
        await self._status(obj, generation, url, conditions)
        if console.oidc_client_secret(spec) is not None or not route_api:
            # The Secret is read by name, not watched; the Route API may appear (then a Route replaces the
            # HTTPRoute).
            return Result.requeue_after(ctx.settings.console_recheck_seconds)
        return Result.done()

    async def _delete(self, gvk: GroupVersionKind, namespace: str | None, name: str = console.CONSOLE_NAME) -> None:
        if self.ctx.missing_apis(gvk):
            return
        live = self.ctx.cache.get(gvk, name, namespace)
        if live is None or not console_of(live):
            return  # never a same-named object that is not ours
        with contextlib.suppress(NotFound):
            await self.ctx.client.delete(gvk, name, namespace)
        log.info("billing console object deleted", kind=gvk.kind, namespace=namespace)

    async def _secret_keys(self, spec: BillingConsoleSpec, namespace: str) -> list[str] | None:
        """Keys with a value in the OIDC client Secret (values are never kept, logged or reported)."""
        name = console.oidc_client_secret(spec)
        if name is None:
            return None
        try:
            secret = await self.ctx.client.get(SECRET, name, namespace)
        except NotFound:
            return None
        except ApiError as exc:
            log.warning("billing console: cannot read the OIDC client Secret", secret=name, error=type(exc).__name__)
            return None
        data: Mapping[str, Any] = secret.get("data") or {}
        return [k for k, v in data.items() if v]

    async def _status(self, obj: FrozenObject, generation: int, url: str | None,
                      verdicts: list[tuple[str, console.Verdict]]) -> None:
        conditions = (obj.get("status") or {}).get("conditions")
        for type_, v in verdicts:
            conditions = set_condition(conditions, type_=type_, status=v.status, reason=v.reason, message=v.message,
                                       observed_generation=generation, now=self.ctx.now_rfc3339())
        status: dict[str, Any] = {"observedGeneration": generation, "conditions": conditions}
        if url:
            status["url"] = url
        await self.ctx.apply_status(obj, status)
