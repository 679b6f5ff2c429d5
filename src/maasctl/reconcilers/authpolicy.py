"""MaaSAuthPolicy -> its status: for each model it names, is it found, routed, and is the model's AuthPolicy
(rendered by the MaaSModelRef reconciler from every MaaSAuthPolicy naming it) there and enforced.

A MaaSAuthPolicy has nothing to clean up on deletion (the model's reconcile drops it from the AuthPolicy
when the delete event arrives), so it carries no finalizer; one left by an older version is removed.
"""

from __future__ import annotations

from maasctl.builders import names
from maasctl.builders.refs import ObjectRef
from maasctl.contract.views import AuthPolicyView
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, FINALIZER, Context
from maasctl.reconcilers.indexes import kuadrant_ready, model_index
from maasctl.reconcilers.kinds import AUTH_POLICY, HTTP_ROUTE, MAAS_AUTH_POLICY
from maasctl.reconcilers.routes import MODEL_NOT_FOUND, resolve
from maasctl.reconcilers.status import ModelOutcome, base_status, dependency_status, generated_statuses
from maasctl.runtime import Request, Result, has_finalizer, is_deleting, remove_finalizer
from maasctl.runtime.objects import FrozenObject


class AuthPolicyReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(MAAS_AUTH_POLICY, req.name, req.namespace)
        if obj is None:
            return Result.done()
        if is_deleting(obj):
            if has_finalizer(obj, FINALIZER):
                await remove_finalizer(ctx.client, obj, FINALIZER)
            return Result.done()
        missing = ctx.missing_apis(AUTH_POLICY, HTTP_ROUTE)
        if missing:
            await ctx.write_status(obj, dependency_status(obj, missing))
            return Result.requeue_after(DEPENDENCY_RECHECK)
        view = ctx.views.auth_policy(obj)
        outcomes = [self.outcome(obj, view, ObjectRef(*key.split("/", 1))) for key in model_index(obj)]
        await ctx.write_status(obj, base_status(obj, outcomes) | {
            "authPolicies": generated_statuses(outcomes, model_field=False)})
        return Result.done()

    def outcome(self, obj: FrozenObject, view: AuthPolicyView, model: ObjectRef) -> ModelOutcome:
        if not self.ctx.in_scope(obj):
            return ModelOutcome(model, False, "Invalid",
                                f"MaaSAuthPolicies count only in namespace {self.ctx.settings.subscription_namespace}")
        res = resolve(self.ctx.cache, model, self.ctx.gateway, self.ctx.tenant_gateways)
        if not res.resolved:
            return ModelOutcome(model, res.reason != MODEL_NOT_FOUND, res.reason, res.message)
        name = names.authpolicy_name(model.name)
        generated = ObjectRef(model.namespace, name)
        ready, reason = kuadrant_ready(self.ctx.cache.peek(AUTH_POLICY, name, model.namespace))
        if not view.grants:
            return ModelOutcome(model, True, "Invalid", view.problem or "subjects has no groups and no users",
                                generated, False, reason)
        return ModelOutcome(model, True, "Valid", res.message, generated, ready, reason)
