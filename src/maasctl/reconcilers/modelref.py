"""MaaSModelRef -> the route a model is served through (generated for ExternalModels) and the model's status.

Unpublishing removes everything generated for the model (routes, AuthPolicy, TokenRateLimitPolicy); the
auth policies and subscriptions that reference it are re-enqueued by their watches and report it NotFound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maasctl.api import ExternalModel, MaaSModelRef, ModelKind, ModelPhase, parse
from maasctl.builders import names
from maasctl.builders.httproute import ExternalRouteInput, build_external_model_objects
from maasctl.builders.refs import GatewayRef, ObjectRef, OwnerRef
from maasctl.builders.validation import InvalidInputError
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, FINALIZER, Context, status_patch
from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    EXTERNAL_MODEL,
    HTTP_ROUTE,
    LLM_INFERENCE_SERVICE,
    MAAS_MODEL_REF,
    SERVICE,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.reconcilers.routes import RouteResolution, resolve, split_endpoint
from maasctl.runtime import Request, Result, has_finalizer, is_deleting, remove_finalizer, set_condition, thaw


class ModelRefReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gateway = GatewayRef(ctx.settings.gateway_namespace, ctx.settings.gateway_name)

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(MAAS_MODEL_REF, req.name, req.namespace)
        if obj is None:
            return Result.done()
        model = ObjectRef(req.namespace or "", req.name)
        if is_deleting(obj):
            if has_finalizer(obj, FINALIZER):
                await self._unpublish(obj, model)
                await remove_finalizer(ctx.client, obj, FINALIZER)
            return Result.done()
        await ctx.ensure_finalizer(obj)  # before any child exists; predicates do not re-enqueue on it

        mr = parse(MaaSModelRef, thaw(obj))
        needed = [HTTP_ROUTE]
        if mr.spec.model_ref.kind == ModelKind.LLM_INFERENCE_SERVICE:
            needed.append(LLM_INFERENCE_SERVICE)
        missing = ctx.missing_apis(*needed)
        if missing:
            note = f"required API not installed: {', '.join(missing)}; waiting for it"
            status = self._status(obj, RouteResolution(model, "DependencyMissing", note), None)
            status["phase"] = str(ModelPhase.PENDING)
            await ctx.applier.apply_status(status_patch(obj, status))
            return Result.requeue_after(DEPENDENCY_RECHECK)
        problem: str | None = None
        if mr.spec.model_ref.kind == ModelKind.EXTERNAL_MODEL:
            problem = await self._sync_external(obj, mr, model)
        else:
            await self._delete_external(obj, model)
        resolution = resolve(ctx.cache, model, self.gateway)
        status = self._status(obj, resolution, problem)
        if mr.spec.endpoint_override and status["phase"] == ModelPhase.READY:
            status["endpoint"] = str(mr.spec.endpoint_override)
        await ctx.applier.apply_status(status_patch(obj, status))
        return Result.done()

    async def _sync_external(self, obj: Mapping[str, Any], mr: MaaSModelRef, model: ObjectRef) -> str | None:
        """Render the route + backend Service of an ExternalModel; return a problem message, if any."""
        em_obj = self.ctx.cache.peek(EXTERNAL_MODEL, mr.spec.model_ref.name, model.namespace)
        if em_obj is None:
            await self._delete_external(obj, model)
            return None
        em = parse(ExternalModel, thaw(em_obj))
        host, port, tls, base_path = split_endpoint(str(em.spec.endpoint))
        meta = obj["metadata"]
        inp = ExternalRouteInput(
            model=model,
            external_model=em.spec.target_model,
            host=host,
            port=port,
            tls=tls,
            base_path=base_path,
            gateway=self.gateway,
            credential_secret=em.spec.credential_ref.name if em.spec.credential_ref else None,
            credential_key=em.spec.credential_ref.key if em.spec.credential_ref else "api-key",
            owner=OwnerRef(str(obj["apiVersion"]), str(obj["kind"]), str(meta["name"]), str(meta["uid"])),
        )
        try:
            desired = build_external_model_objects(inp)
        except InvalidInputError as exc:
            await self.ctx.event(obj, "Warning", "InvalidExternalModel", str(exc))
            return str(exc)
        for item in desired:
            await self.ctx.apply_generated(obj, item)
        return None

    async def _delete_external(self, obj: Mapping[str, Any], model: ObjectRef) -> None:
        await self.ctx.delete_generated(obj, HTTP_ROUTE, names.external_route_name(model.name), model.namespace)
        await self.ctx.delete_generated(obj, SERVICE, names.external_service_name(model.name), model.namespace)

    async def _unpublish(self, obj: Mapping[str, Any], model: ObjectRef) -> None:
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
        if res.gateways:
            status["gateways"] = [{"name": g.name, "namespace": g.namespace} for g in res.gateways]
        return status
