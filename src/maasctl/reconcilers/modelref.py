"""MaaSModelRef -> everything generated for one model: its route (for ExternalModels), its AuthPolicy and
its TokenRateLimitPolicy (from all the MaaSAuthPolicies and MaaSSubscriptions that name it, see
`modelpolicies`), and the model's status. It is the one writer of those objects.

Unpublishing removes everything generated for the model; the auth policies and subscriptions that reference
it are re-enqueued by their watches and report it NotFound.

Status also carries `resolvedModelAlias` (the name clients send as `model`, `routes.model_alias`) and the
informational condition `ModelIdentityUnique` (the reference's): False with reason `ModelNameConflict`, and a
Warning Event, while another MaaSModelRef publishes the same name; the model keeps being served. When the
conflict clears, a Normal `ModelNameConflictResolved` Event says so (as the reference does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maasctl.api import ExternalModel, MaaSModelRef, ModelKind, ModelPhase, parse
from maasctl.api.externalmodel import GATEWAY_ANNOTATION
from maasctl.builders import names
from maasctl.builders.httproute import ExternalRouteInput, RelayTarget, build_external_model_objects
from maasctl.builders.refs import GatewayRef, ObjectRef, OwnerRef
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.cel import CelError
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, FINALIZER, Context
from maasctl.reconcilers.indexes import ALIAS_INDEX
from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    EXTERNAL_MODEL,
    GATEWAY,
    HTTP_ROUTE,
    LLM_INFERENCE_SERVICES,
    MAAS_MODEL_REF,
    SERVICE,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.reconcilers.modelpolicies import ModelPolicies
from maasctl.reconcilers.processorwiring import processor_owns_credentials
from maasctl.reconcilers.routes import (
    RouteResolution,
    UnsafeDestinationError,
    fallback_input,
    model_alias,
    provider_endpoint,
    resolve,
)
from maasctl.runtime import Request, Result, finalize, is_deleting, set_condition, thaw
from maasctl.runtime.objects import FrozenObject

ROUTE_CACHE_RECHECK = 2.0
"""Seconds until a reconcile that applied an external model's route retries if the route's own event is lost."""


class ModelRefReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gateway = ctx.gateway
        self.policies = ModelPolicies(ctx)

    async def reconcile(self, req: Request) -> Result:
        obj = self.ctx.cache.get(MAAS_MODEL_REF, req.name, req.namespace)
        if obj is None:
            return Result.done()
        async with self.ctx.announcing(obj):  # the route, Service and policies written: one Event per verb
            return await finalize(self.ctx.client, obj, FINALIZER, apply=self._publish, cleanup=self._unpublish)

    async def _publish(self, obj: FrozenObject) -> Result:
        ctx = self.ctx
        model = ObjectRef(str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
        mr = parse(MaaSModelRef, thaw(obj))
        missing = ctx.missing_apis(HTTP_ROUTE)
        if mr.spec.model_ref.kind == ModelKind.LLM_INFERENCE_SERVICE:
            absent = ctx.missing_apis(*LLM_INFERENCE_SERVICES)
            if len(absent) == len(LLM_INFERENCE_SERVICES):  # served in neither version
                missing += absent
        if missing:
            note = f"required API not installed: {', '.join(missing)}; waiting for it"
            status = self._status(obj, RouteResolution(model, "DependencyMissing", note), None)
            status["phase"] = str(ModelPhase.PENDING)
            await ctx.write_status(obj, status)
            return Result.requeue_after(DEPENDENCY_RECHECK)
        problem: str | None = None
        if mr.spec.model_ref.kind == ModelKind.EXTERNAL_MODEL:
            problem = await self._sync_external(obj, mr, model)
        else:
            await self._delete_external(obj, model)
        resolution = resolve(ctx.cache, model, self.gateway, ctx.tenant_gateways)
        if problem is None and resolution.external and resolution.reason == "RouteNotFound":
            # the route was applied just now and the cache has not seen it yet: its event brings this reconcile
            # back (we own it); a status saying "not generated yet" would be a write with no information
            return Result.requeue_after(ROUTE_CACHE_RECHECK)
        requeue = await self._sync_policies(obj, model, resolution)
        status = self._status(obj, resolution, problem)
        if mr.spec.endpoint_override and status["phase"] == ModelPhase.READY:
            status["endpoint"] = str(mr.spec.endpoint_override)
        await self._identity(obj, status)
        await ctx.write_status(obj, status)
        return Result.requeue_after(requeue) if requeue else Result.done()

    async def _identity(self, obj: FrozenObject, status: dict[str, Any]) -> None:
        """`resolvedModelAlias` and `ModelIdentityUnique`: does another MaaSModelRef publish the same name?"""
        alias = model_alias(self.ctx.cache, obj)
        me = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        others = sorted(
            f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in self.ctx.cache.list(MAAS_MODEL_REF, index=(ALIAS_INDEX, alias))
            if (o["metadata"]["namespace"], o["metadata"]["name"]) != me and not is_deleting(o)
        )
        generation = int(obj["metadata"].get("generation", 0))
        was = next((c for c in (obj.get("status") or {}).get("conditions") or ()
                    if c.get("type") == "ModelIdentityUnique"), None)
        if others:
            listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            message = f"model name {alias!r} is also published by {listed}; clients cannot tell them apart"
            if was is None or was.get("status") != "False" or was.get("message") != message:
                await self.ctx.event(obj, "Warning", "ModelNameConflict", message)
            state, reason = "False", "ModelNameConflict"
        else:
            state, reason, message = "True", "UniqueIdentity", f"no other MaaSModelRef publishes {alias!r}"
            if was is not None and was.get("status") == "False":
                await self.ctx.event(obj, "Normal", "ModelNameConflictResolved",
                                     f"model name {alias!r} is no longer published by another MaaSModelRef")
        status["resolvedModelAlias"] = alias
        status["conditions"] = set_condition(status.get("conditions"), type_="ModelIdentityUnique", status=state,
                                             reason=reason, message=message, observed_generation=generation)

    async def _sync_policies(self, obj: FrozenObject, model: ObjectRef, res: RouteResolution) -> float | None:
        """Apply (or delete) the model's AuthPolicy and TokenRateLimitPolicy; a requeue delay while Kuadrant's
        CRDs are missing. A render failure keeps the last applied policies and says why in a Warning Event."""
        ctx = self.ctx
        if ctx.missing_apis(AUTH_POLICY, TOKEN_RATE_LIMIT_POLICY):
            return DEPENDENCY_RECHECK
        auth_name, trlp_name = names.authpolicy_name(model.name), names.trlp_name(model.name)
        if not res.resolved:
            await ctx.delete_generated(obj, AUTH_POLICY, auth_name, model.namespace)
            await ctx.delete_generated(obj, TOKEN_RATE_LIMIT_POLICY, trlp_name, model.namespace)
            return None
        try:
            rendered = self.policies.render(model, res)
        except (InvalidInputError, CelError) as exc:
            await ctx.event(obj, "Warning", "RenderFailed", f"policies of {model.key}: {exc}")
            return None
        for gvk, name, desired in ((AUTH_POLICY, auth_name, rendered.auth_policy),
                                   (TOKEN_RATE_LIMIT_POLICY, trlp_name, rendered.trlp)):
            if desired is None:
                await ctx.delete_generated(obj, gvk, name, model.namespace)
            else:
                await ctx.apply_generated(obj, desired)
        return None

    async def _sync_external(self, obj: Mapping[str, Any], mr: MaaSModelRef, model: ObjectRef) -> str | None:
        """Render the route + backend Service of an ExternalModel; return a problem message, if any."""
        em_obj = self.ctx.cache.peek(EXTERNAL_MODEL, mr.spec.model_ref.name, model.namespace)
        if em_obj is None:
            await self._delete_external(obj, model)
            return None
        em = parse(ExternalModel, thaw(em_obj))
        try:
            shared = self.ctx.settings.provider_service_namespaces
            host, port, tls, base_path = provider_endpoint(str(em.spec.endpoint), em.metadata.annotations,
                                                           model.namespace, shared)
            fallbacks = tuple(fallback_input(f, model.namespace, shared) for f in em.spec.fallbacks or ())
        except UnsafeDestinationError as exc:
            # a route generated before this rule existed must not keep sending traffic there
            await self.ctx.event(obj, "Warning", "UnsafeDestination", str(exc))
            await self._delete_external(obj, model)
            return str(exc)
        except ValueError as exc:
            await self.ctx.event(obj, "Warning", "InvalidExternalModel", str(exc))
            return str(exc)
        meta = obj["metadata"]
        try:
            gateway = self._route_gateway(meta.get("annotations") or {})
        except ValueError as exc:
            await self.ctx.event(obj, "Warning", "InvalidGateway", str(exc))
            await self._delete_external(obj, model)
            return str(exc)
        inp = ExternalRouteInput(
            model=model,
            external_model=str(em_obj["metadata"]["name"]),
            target_model=em.spec.target_model,
            host=host,
            port=port,
            tls=tls,
            base_path=base_path,
            gateway=gateway,
            credential_secret=em.spec.credential_ref.name if em.spec.credential_ref else None,
            credential_key=em.spec.credential_ref.key if em.spec.credential_ref else "api-key",
            owner=OwnerRef(str(obj["apiVersion"]), str(obj["kind"]), str(meta["name"]), str(meta["uid"])),
            shared_service_namespaces=self.ctx.settings.provider_service_namespaces,
            max_completion_tokens=mr.spec.max_completion_tokens,
            provider=em.spec.provider,
            api_format=em.spec.api_format or "openai-chat",
            weight=1 if em.spec.weight is None else em.spec.weight,
            fallbacks=fallbacks,
            provider_selection=em.spec.provider_selection or "Ordered",
            max_attempts=em.spec.max_attempts,
            relay=RelayTarget(*self.ctx.settings.provider_relay_address) if fallbacks else None,
            processor_sets_authorization=processor_owns_credentials(
                self.ctx.cache.get(GATEWAY, gateway.name, gateway.namespace),
                self.ctx.settings.payload_processor_fail_open),
        )
        try:
            desired = build_external_model_objects(inp)
        except InvalidInputError as exc:
            await self.ctx.event(obj, "Warning", "InvalidExternalModel", str(exc))
            return str(exc)
        for item in desired:
            await self.ctx.apply_generated(obj, item)
        return None

    def _route_gateway(self, annotations: Mapping[str, str]) -> GatewayRef:
        """The managed Gateway an ExternalModel's route attaches to (GATEWAY_ANNOTATION, else the default).

        Raises:
            ValueError: the annotation names no Gateway this controller manages.
        """
        text = str(annotations.get(GATEWAY_ANNOTATION, "")).strip()
        if not text:
            return self.gateway
        chosen = GatewayRef.parse(text)
        if chosen not in self.ctx.gateways:
            managed = ", ".join(gw.key for gw in self.ctx.gateways)
            raise ValueError(f"annotation {GATEWAY_ANNOTATION} names {text[:300]!r}, not a Gateway this controller "
                             f"manages ({managed})")
        return chosen

    async def _delete_external(self, obj: Mapping[str, Any], model: ObjectRef) -> None:
        await self.ctx.delete_generated(obj, HTTP_ROUTE, names.external_route_name(model.name), model.namespace)
        await self.ctx.delete_generated(obj, SERVICE, names.external_service_name(model.name), model.namespace)

    async def _unpublish(self, obj: FrozenObject) -> None:
        model = ObjectRef(str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
        await self._delete_external(obj, model)
        await self.ctx.delete_generated(obj, AUTH_POLICY, names.authpolicy_name(model.name), model.namespace)
        await self.ctx.delete_generated(obj, TOKEN_RATE_LIMIT_POLICY, names.trlp_name(model.name), model.namespace)

    def _status(self, obj: Mapping[str, Any], res: RouteResolution, problem: str | None) -> dict[str, Any]:
        generation = int(obj["metadata"].get("generation", 0))
        old = (obj.get("status") or {}).get("conditions")
        if problem is not None:
            phase, reason, message = ModelPhase.FAILED, "InvalidBackend", problem
        elif res.reason == "Resolved":
            phase = ModelPhase.READY if res.backend_ready else ModelPhase.UNHEALTHY
            reason = "Ready" if res.backend_ready else "BackendNotReady"
            message = res.message if res.backend_ready else "the model backend is not Ready"
        elif res.reason in ("RouteNotFound", "BackendNotFound"):
            phase, reason, message = ModelPhase.PENDING, res.reason, res.message
        else:
            phase, reason, message = ModelPhase.FAILED, res.reason, res.message
        ready = "True" if phase == ModelPhase.READY else "False"
        status: dict[str, Any] = {
            "phase": str(phase),
            "observedGeneration": generation,
            "conditions": set_condition(old, type_="Ready", status=ready, reason=reason, message=message,
                                        observed_generation=generation),
        }
        if phase == ModelPhase.READY and res.endpoint:
            status["endpoint"] = res.endpoint
        if res.route is not None:
            status["httpRoutes"] = [{"name": res.route.name, "namespace": res.route.namespace}]
            status["httpRouteName"], status["httpRouteNamespace"] = res.route.name, res.route.namespace
        if res.gateways:
            status["gateways"] = [{"name": g.name, "namespace": g.namespace} for g in res.gateways]
            status["httpRouteGatewayName"] = res.gateways[0].name
            status["httpRouteGatewayNamespace"] = res.gateways[0].namespace
        return status
