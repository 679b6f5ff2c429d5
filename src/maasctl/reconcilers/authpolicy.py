"""MaaSAuthPolicy -> one Kuadrant AuthPolicy per referenced model, aggregated over all policies naming it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from maasctl.builders import names
from maasctl.builders.authpolicy import (
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    build_auth_policy,
)
from maasctl.builders.celcheck import check_cel
from maasctl.builders.refs import ObjectRef
from maasctl.reconcilers.aggregate import AggregatingReconciler, ModelOutcome, source_key
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.kinds import AUTH_POLICY, MAAS_AUTH_POLICY
from maasctl.reconcilers.routes import RouteResolution
from maasctl.reconcilers.status import base_status, generated_statuses
from maasctl.runtime.objects import FrozenObject


class AuthPolicyReconciler(AggregatingReconciler):
    source = MAAS_AUTH_POLICY
    generated = AUTH_POLICY
    annotation = names.AUTH_POLICIES_ANNOTATION

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.auth_settings = AuthSettings(maas_api_url=ctx.settings.maas_api_url)

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
        policy = build_auth_policy(AuthPolicyInput(model, res.route, inputs), self.auth_settings)
        if policy is not None:
            check_cel(policy)
        return policy

    def status(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> dict[str, Any]:
        return base_status(obj, outcomes) | {"authPolicies": generated_statuses(outcomes, model_field=False)}
