"""The reference's `inference.opendatahub.io` ExternalProvider and ExternalModel (issue 37).

- ExternalProvider -> its status, as the reference reports it: `Ready` (reason `Reconciled`) when maasctl can
  use it and its Secret has a non-empty `api-key`; `Failed` with `SecretNotFound` / `SecretInvalid` (the
  reference's reasons) or `Unsupported` (what maasctl cannot serve: `builders.inference.provider_problem`).
  Secrets are not cached: a live GET, looked for again every 30 s while missing; the key is never read out.
- ExternalModel -> the generated `maas.opendatahub.io` ExternalModel of the same name (`builders.inference`),
  server-side applied, controlled by it (garbage-collected with it) and labelled as generated. From there the
  existing controllers do everything (credentials, routes, policies, failover, metering): a MaaSModelRef of kind
  ExternalModel naming it publishes it as the reference's manifests do. Its status, as the reference reports
  it: `Ready` / `Reconciled` once the generated ExternalModel is Ready, `httpRouteName` the route of the first
  MaaSModelRef publishing it; `Failed` with `ReconcileFailed` when no provider can serve it (the generated
  object is then kept as it was, the reference's last-known-good), with the generated object's own reason when
  that is not Ready (a missing override Secret, an endpoint the destination rule refuses), `Unsupported` when
  maasctl would serve it differently (the generated object is deleted: never served differently), or
  `NameConflict` when a maas.opendatahub.io ExternalModel of that name exists that it did not generate (that
  one is left alone and is what MaaSModelRefs naming the name publish).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from maasctl.api import parse
from maasctl.api.inference import API_KEY_FIELD, ExternalProvider, InferenceExternalModel, InferencePhase
from maasctl.builders.inference import (
    ProviderView,
    convert,
    generated_external_model,
    provider_problem,
)
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.indexes import TARGET_INDEX
from maasctl.reconcilers.kinds import (
    EXTERNAL_MODEL,
    INFERENCE_EXTERNAL_MODEL,
    INFERENCE_EXTERNAL_PROVIDER,
    MAAS_MODEL_REF,
    SECRET,
)
from maasctl.reconcilers.routes import controlled_by
from maasctl.runtime import Cache, NotFound, Request, Result, is_deleting, set_condition, thaw
from maasctl.runtime.controller import MapFunc
from maasctl.runtime.objects import FrozenObject

RECHECK_MISSING_SECRET = 30.0
PROVIDER_INDEX = "inference.provider"


def provider_index(obj: FrozenObject) -> list[str]:
    """Index function: `<ns>/<name>` of each ExternalProvider an inference.opendatahub.io ExternalModel binds."""
    ns = obj["metadata"]["namespace"]
    refs = (obj.get("spec") or {}).get("externalProviderRefs") or ()
    return [f"{ns}/{r['ref']['name']}" for r in refs
            if isinstance(r, Mapping) and isinstance(r.get("ref"), Mapping) and r["ref"].get("name")]


def models_of_provider(cache: Cache) -> MapFunc:
    """An ExternalProvider (any change: its status says whether it is Ready) -> the ExternalModels binding it."""

    def map_to(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        return [Request.for_object(m) for m in cache.list(INFERENCE_EXTERNAL_MODEL, index=(PROVIDER_INDEX, key))]

    return map_to


def model_of_modelref(mr: FrozenObject) -> list[Request]:
    """A MaaSModelRef of kind ExternalModel -> the inference.opendatahub.io ExternalModel of that name (its
    status names the route), whether or not one exists."""
    target = (mr.get("spec") or {}).get("modelRef") or {}
    if target.get("kind") != "ExternalModel" or not target.get("name"):
        return []
    return [Request(mr["metadata"]["namespace"], str(target["name"]))]


def _status(obj: Mapping[str, Any], phase: InferencePhase, reason: str, message: str) -> dict[str, Any]:
    generation = int(obj["metadata"].get("generation", 0))
    return {
        "phase": str(phase),
        "conditions": set_condition(
            (obj.get("status") or {}).get("conditions"), type_="Ready",
            status="True" if phase == InferencePhase.READY else "False", reason=reason, message=message[:32768],
            observed_generation=generation),
    }


def _changed(obj: Mapping[str, Any], reason: str, message: str) -> bool:
    """Whether the Ready condition says something else now (one Event per change, not per recheck)."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("reason") != reason or cond.get("message") != message)
    return True


class ExternalProviderReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def reconcile(self, req: Request) -> Result:
        obj = self.ctx.cache.get(INFERENCE_EXTERNAL_PROVIDER, req.name, req.namespace)
        if obj is None or is_deleting(obj):
            return Result.done()
        phase, reason, message, recheck = await self._check(obj)
        if phase != InferencePhase.READY and _changed(obj, reason, message):
            await self.ctx.event(obj, "Warning", reason, message)
        await self.ctx.write_status(obj, _status(obj, phase, reason, message))
        return Result.requeue_after(RECHECK_MISSING_SECRET) if recheck else Result.done()

    async def _check(self, obj: FrozenObject) -> tuple[InferencePhase, str, str, bool]:
        """(phase, reason, message, look again later)."""
        try:
            ep = parse(ExternalProvider, thaw(obj))
        except ValidationError as exc:
            invalid = f"invalid ExternalProvider: {exc.errors()[0]['msg']}"
            return InferencePhase.FAILED, "ReconcileFailed", invalid, False
        problem = provider_problem(ep)
        if problem is not None:
            return InferencePhase.FAILED, "Unsupported", problem, False
        name, ns = ep.spec.auth.secret_ref.name, str(obj["metadata"]["namespace"])
        try:
            secret = await self.ctx.client.get(SECRET, name, ns)
        except NotFound:
            return InferencePhase.FAILED, "SecretNotFound", f"secret {name!r} not found in namespace {ns!r}", True
        if not (secret.get("data") or {}).get(API_KEY_FIELD):
            return (InferencePhase.FAILED, "SecretInvalid",
                    f"secret {name!r} exists but missing required {API_KEY_FIELD!r} data key", True)
        return InferencePhase.READY, "Reconciled", "provider configuration and credentials found", False


class InferenceModelReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(INFERENCE_EXTERNAL_MODEL, req.name, req.namespace)
        if obj is None or is_deleting(obj):
            return Result.done()  # the generated ExternalModel goes with it (garbage collection)
        async with ctx.announcing(obj):
            phase, reason, message = await self._sync(obj)
        if phase == InferencePhase.FAILED and _changed(obj, reason, message):
            await ctx.event(obj, "Warning", reason, message)
        status = _status(obj, phase, reason, message)
        route = self._route(obj)
        if route:
            status["httpRouteName"] = route
        await ctx.write_status(obj, status)
        return Result.done()

    async def _sync(self, obj: FrozenObject) -> tuple[InferencePhase, str, str]:
        """Convert and apply (or withdraw) the generated ExternalModel; (phase, reason, message) of the result."""
        ctx = self.ctx
        meta = obj["metadata"]
        name, ns = str(meta["name"]), str(meta["namespace"])
        live = ctx.cache.peek(EXTERNAL_MODEL, name, ns)
        mine = live is None or controlled_by(live, obj)
        try:
            model = parse(InferenceExternalModel, thaw(obj))
        except ValidationError as exc:
            refused: str | None = f"invalid ExternalModel: {exc.errors()[0]['msg']}"
            conversion = None
        else:
            conversion = convert(model, self._providers(model, ns))
            refused = conversion.refused
        if refused is not None or conversion is None:
            if live is not None and mine:
                await ctx.delete_generated(obj, EXTERNAL_MODEL, name, ns)
            return InferencePhase.FAILED, "Unsupported", f"not served by maasctl: {refused}"
        if not mine:
            return InferencePhase.FAILED, "NameConflict", (
                f"a maas.opendatahub.io ExternalModel {ns}/{name} exists that this object did not generate; "
                f"MaaSModelRefs naming {name!r} publish that one (rename one of them to publish this one)")
        skipped = "; ".join(conversion.skipped)
        if conversion.spec is None:
            return InferencePhase.FAILED, "ReconcileFailed", (
                f"ExternalModel {name!r}: no provider refs resolved successfully: {skipped}")
        desired = generated_external_model(name, ns, str(meta["uid"]), conversion.spec)
        await ctx.apply_generated(obj, desired)
        left_out = f"; left out: {skipped}" if skipped else ""
        generated = _generated_state(live, desired)
        if generated is None:
            return InferencePhase.PENDING, "Reconciling", (
                f"waiting for the generated maas.opendatahub.io ExternalModel {name} to be checked{left_out}")
        ready, gen_reason, gen_message = generated
        if not ready:
            return InferencePhase.FAILED, gen_reason, f"generated ExternalModel {name}: {gen_message}{left_out}"
        return InferencePhase.READY, "Reconciled", (
            f"served as maas.opendatahub.io ExternalModel {name} by ExternalProvider(s) "
            f"{', '.join(conversion.served)}{left_out}")

    def _providers(self, model: InferenceExternalModel, ns: str) -> dict[str, ProviderView]:
        views: dict[str, ProviderView] = {}
        for ref in model.spec.external_provider_refs:
            found = self.ctx.cache.peek(INFERENCE_EXTERNAL_PROVIDER, ref.ref.name, ns)
            if found is None or is_deleting(found):
                continue
            try:
                ep = parse(ExternalProvider, thaw(found))
            except ValidationError:
                continue  # reported on the ExternalProvider; the binding is left out as a missing one
            phase = str((found.get("status") or {}).get("phase") or "")
            views[ref.ref.name] = ProviderView(ep, ready=phase == InferencePhase.READY, phase=phase)
        return views

    def _route(self, obj: FrozenObject) -> str | None:
        """The HTTPRoute of the first MaaSModelRef (by name) publishing this model, once it has one."""
        key = f"{obj['metadata']['namespace']}/ExternalModel/{obj['metadata']['name']}"
        refs = sorted(self.ctx.cache.list(MAAS_MODEL_REF, index=(TARGET_INDEX, key)),
                      key=lambda m: str(m["metadata"]["name"]))
        for mr in refs:
            route = (mr.get("status") or {}).get("httpRouteName")
            if route and not is_deleting(mr):
                return str(route)
        return None


def _generated_state(live: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> tuple[bool, str, str] | None:
    """(ready, reason, message) the ExternalModel reconciler reported for exactly the desired spec; None while
    it has not (just applied, or not checked yet)."""
    if live is None or thaw(live).get("spec") != desired["spec"]:
        return None
    status = live.get("status") or {}
    if status.get("observedGeneration") != live["metadata"].get("generation"):
        return None
    cond = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if cond is None:
        return None
    return cond.get("status") == "True", str(cond.get("reason") or "NotReady"), str(cond.get("message") or "")


__all__ = [
    "PROVIDER_INDEX",
    "ExternalProviderReconciler",
    "InferenceModelReconciler",
    "model_of_modelref",
    "models_of_provider",
    "provider_index",
]
