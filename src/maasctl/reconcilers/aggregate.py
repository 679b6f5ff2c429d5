"""Shared flow of the two reconcilers whose output is aggregated per model.

Kuadrant allows one AuthPolicy and one TokenRateLimitPolicy per HTTPRoute, so the policy of a model is built
from *all* MaaSAuthPolicies (or MaaSSubscriptions) that name it. Reconciling one source object therefore
re-renders every model it names now, plus every model whose generated policy still lists it (found through
an index on the generated kind's source annotation): removing a model from a spec, or deleting the source,
rebuilds that model's policy without it. Deleting sources drop out of the aggregate; invalid ones are skipped
so they can never break the policy of another source for the same model.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.cel import CelError
from maasctl.reconcilers.context import DEPENDENCY_RECHECK, FINALIZER, Context, model_keys, status_patch
from maasctl.reconcilers.kinds import HTTP_ROUTE, MAAS_MODEL_REF
from maasctl.reconcilers.routes import RouteResolution, resolve
from maasctl.runtime import (
    GroupVersionKind,
    Request,
    Result,
    has_finalizer,
    is_deleting,
    remove_finalizer,
    set_condition,
)
from maasctl.runtime.objects import FrozenObject

MODEL_INDEX = "maas.model"
SOURCE_INDEX = "maas.source"


@dataclass(frozen=True)
class ModelOutcome:
    """What happened to one referenced model, for the source's status."""

    model: ObjectRef
    found: bool
    reason: str
    message: str
    generated: ObjectRef | None = None
    generated_ready: bool = False
    generated_reason: str = ""


def source_key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def model_index(obj: FrozenObject) -> list[str]:
    """Index function: the `<ns>/<name>` of every model a source's spec references."""
    return model_keys((obj.get("spec") or {}).get("modelRefs"))


def annotation_index(annotation: str) -> Any:
    """Index function factory: source keys listed in a generated object's annotation."""

    def index(obj: FrozenObject) -> list[str]:
        value = ((obj.get("metadata") or {}).get("annotations") or {}).get(annotation, "")
        return [v for v in str(value).split(",") if v]

    return index


def kuadrant_ready(obj: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(ready, reason) from Kuadrant's Accepted/Enforced conditions; not reported yet is not ready."""
    if obj is None:
        return False, "NotFound"
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
    for type_ in ("Accepted", "Enforced"):
        cond = conditions.get(type_)
        if cond is None:
            return False, f"{type_}Unknown"
        if cond.get("status") != "True":
            return False, str(cond.get("reason") or f"Not{type_}")
    return True, "Enforced"


class AggregatingReconciler(abc.ABC):
    source: GroupVersionKind
    generated: GroupVersionKind
    annotation: str

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.gateway = GatewayRef(ctx.settings.gateway_namespace, ctx.settings.gateway_name)

    # -- what differs between the two kinds -----------------------------------------------------------
    @abc.abstractmethod
    def generated_name(self, model: ObjectRef) -> str: ...

    @abc.abstractmethod
    def problems(self, source: FrozenObject, model: ObjectRef) -> list[str]:
        """Why `source` cannot contribute to `model`'s policy (empty: it can)."""

    @abc.abstractmethod
    def render(self, model: ObjectRef, res: RouteResolution, sources: Sequence[FrozenObject]) -> dict[str, Any] | None:
        """The desired generated object (pure builders), or None to delete it."""

    @abc.abstractmethod
    def status(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> dict[str, Any]: ...

    async def on_deleting(self, obj: FrozenObject) -> Result | None:
        """Extra cleanup before the finalizer goes; return a Result to keep the finalizer for now."""
        return None

    async def after_sync(self, obj: FrozenObject, outcomes: Sequence[ModelOutcome]) -> Result:
        return Result.done()

    def dependency_status(self, obj: FrozenObject, missing: list[str]) -> dict[str, Any]:
        generation = int(obj["metadata"].get("generation", 0))
        message = f"required API not installed: {', '.join(missing)}; waiting for it"
        return {
            "phase": "Pending",
            "observedGeneration": generation,
            "conditions": set_condition((obj.get("status") or {}).get("conditions"), type_="Ready", status="False",
                                        reason="DependencyMissing", message=message,
                                        observed_generation=generation),
        }

    # -- the shared flow --------------------------------------------------------------------------------
    def in_scope(self, obj: Mapping[str, Any]) -> bool:
        return bool(obj["metadata"]["namespace"] == self.ctx.settings.subscription_namespace)

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(self.source, req.name, req.namespace)
        if obj is None:
            return Result.done()
        deleting = is_deleting(obj)
        if deleting and not has_finalizer(obj, FINALIZER):
            return Result.done()
        if not deleting:
            await ctx.ensure_finalizer(obj)
        missing = [] if deleting else ctx.missing_apis(self.generated, HTTP_ROUTE)
        if missing:
            await ctx.applier.apply_status(status_patch(obj, self.dependency_status(obj, missing)))
            return Result.requeue_after(DEPENDENCY_RECHECK)
        key = source_key(obj)
        wanted = set() if deleting or not self.in_scope(obj) else set(model_index(obj))
        listed = {m.key for m in await self._models_of_generated(obj, key)}
        outcomes = [await self.sync_model(obj, ObjectRef(*k.split("/", 1))) for k in sorted(wanted | listed)]
        if deleting:
            held = await self.on_deleting(obj)
            if held is not None:
                return held
            await remove_finalizer(ctx.client, obj, FINALIZER)
            return Result.done()
        await ctx.applier.apply_status(status_patch(obj, self.status(obj, [o for o in outcomes
                                                                           if o.model.key in wanted])))
        return await self.after_sync(obj, outcomes)

    async def _models_of_generated(self, parent: FrozenObject, key: str) -> list[ObjectRef]:
        """Models whose generated object still lists `key`; generated objects of vanished models are removed."""
        found: list[ObjectRef] = []
        for gen in self.ctx.cache.list(self.generated, index=(SOURCE_INDEX, key)):
            ns, name = gen["metadata"]["namespace"], gen["metadata"]["name"]
            models = [ObjectRef(ns, m["metadata"]["name"]) for m in self.ctx.cache.list(MAAS_MODEL_REF, ns)
                      if self.generated_name(ObjectRef(ns, m["metadata"]["name"])) == name]
            if models:
                found.extend(models)
            else:
                await self.ctx.delete_generated(parent, self.generated, name, ns)
        return found

    def contributing(self, model: ObjectRef) -> list[FrozenObject]:
        return sorted(
            (s for s in self.ctx.cache.list(self.source, index=(MODEL_INDEX, model.key))
             if not is_deleting(s) and self.in_scope(s) and not self.problems(s, model)),
            key=source_key,
        )

    async def sync_model(self, parent: FrozenObject, model: ObjectRef) -> ModelOutcome:
        ctx = self.ctx
        res = resolve(ctx.cache, model, self.gateway)
        name = self.generated_name(model)
        sources = self.contributing(model)
        if not res.resolved or not sources:
            await ctx.delete_generated(parent, self.generated, name, model.namespace)
            found = res.reason not in ("ModelNotFound",)
            return ModelOutcome(model, found, res.reason if not res.resolved else "NoValidSources", res.message)
        own = self.problems(parent, model)
        try:
            desired = self.render(model, res, sources)
        except (InvalidInputError, CelError) as exc:
            await ctx.event(parent, "Warning", "RenderFailed", f"{self.generated.kind} for {model.key}: {exc}")
            return ModelOutcome(model, True, "RenderFailed", str(exc))
        if desired is None:
            await ctx.delete_generated(parent, self.generated, name, model.namespace)
            return ModelOutcome(model, True, "NothingToEnforce", "no limits to enforce")
        await ctx.apply_generated(parent, desired)
        ready, reason = kuadrant_ready(ctx.cache.peek(self.generated, name, model.namespace))
        if own:
            return ModelOutcome(model, True, "Invalid", "; ".join(own), ObjectRef(model.namespace, name), False,
                                reason)
        return ModelOutcome(model, True, "Valid", res.message, ObjectRef(model.namespace, name), ready, reason)
