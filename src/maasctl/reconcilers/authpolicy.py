"""MaaSAuthPolicy -> one Kuadrant AuthPolicy per referenced model, aggregated over all policies naming it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from maasctl.builders import names
from maasctl.builders.authpolicy import (
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    ObjectiveBinding,
    build_auth_policy,
)
from maasctl.builders.celcheck import check_cel
from maasctl.builders.refs import ObjectRef
from maasctl.reconcilers.aggregate import MODEL_INDEX, AggregatingReconciler, ModelOutcome, source_key
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.flowcontrol import FlowControl, subscription_ref
from maasctl.reconcilers.kinds import AUTH_POLICY, MAAS_AUTH_POLICY, MAAS_SUBSCRIPTION
from maasctl.reconcilers.routes import RouteResolution
from maasctl.reconcilers.status import base_status, generated_statuses
from maasctl.runtime import is_deleting
from maasctl.runtime.objects import FrozenObject


class AuthPolicyReconciler(AggregatingReconciler):
    source = MAAS_AUTH_POLICY
    generated = AUTH_POLICY
    annotation = names.AUTH_POLICIES_ANNOTATION

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.auth_settings = AuthSettings(maas_api_url=ctx.settings.maas_api_url)
        self.flow = FlowControl(ctx, self.gateway)

    def objectives(self, model: ObjectRef) -> tuple[ObjectiveBinding, ...]:
        """The InferenceObjective name of every subscription of `model` whose pool is known (seed 000: the
        name is published, and carried by requests, even while `inferencePriority` is unset)."""
        out = []
        for sub in self.ctx.cache.list(MAAS_SUBSCRIPTION, index=(MODEL_INDEX, model.key)):
            if is_deleting(sub) or not self.in_scope(sub):
                continue
            name = self.flow.facts(sub, model).objective_name
            if name is not None:
                out.append(ObjectiveBinding(subscription_ref(sub), name))
        return tuple(sorted(out, key=lambda b: b.subscription.key))

    def generated_name(self, model: ObjectRef) -> str:
        return names.authpolicy_name(model.name)

    def problems(self, source: FrozenObject, model: ObjectRef) -> list[str]:
        subjects = (source.get("spec") or {}).get("subjects") or {}
        if not subjects.get("groups") and not subjects.get("users"):
            return ["subjects has no groups and no users"]
        return []

    def render(self, model: ObjectRef, res: RouteResolution, sources: Sequence[FrozenObject]) -> dict[str, Any] | None:
        assert res.route is not None
        inputs = tuple(
            AuthPolicySource(
                policy=ObjectRef(*source_key(s).split("/", 1)),
                users=tuple((s["spec"].get("subjects") or {}).get("users") or ()),
                groups=tuple(g["name"] for g in (s["spec"].get("subjects") or {}).get("groups") or ()),
            )
            for s in sources
        )
        policy = build_auth_policy(AuthPolicyInput(model, res.route, inputs, self.objectives(model)),
                                   self.auth_settings)
        if policy is not None:
            check_cel(policy)
        return policy

    def status(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
        return base_status(obj, outcomes) | {"authPolicies": generated_statuses(outcomes, model_field=False)}
