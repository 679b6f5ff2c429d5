"""Guardrails: the engine (NeMo Guardrails) and the status of the settings and the configurations.

One reconcile keyed by the singleton (`<subscription namespace>/default`): every GuardrailsSettings,
GuardrailConfig and MaaSSubscription change maps to it, because the engine serves all configurations at once.

1. Each GuardrailConfig is validated: the pure checks of `builders.guardrails.config_problems`, then — when
   `--guardrails-check-command` is set — the real engine loads it (`maasctl/guardrails_check.py`, run with the
   engine's Python; results cached by content hash). A configuration that fails is `Invalid` (condition
   `Valid` False with the engine's message) and never reaches the engine.
2. Enabled settings: the engine's ConfigMap, Deployment and Service are applied with the valid configurations
   (`builders.guardrails.build_engine`). Disabled (or no settings object): they are deleted, and nothing is
   exported to the data plane (the MaaSModelRef reconciler renders no `guardrails` filter).
3. Status: each configuration's phase, `Valid` and `Deployed` conditions, `usedBy` (subscription models that
   attach it) and `configHash`; the settings' phase (Disabled / Enabled / Degraded), engine URL, deployed
   configurations and every attached subscription model.

Which requests are guarded is rendered into each model's AuthPolicy (`modelpolicies.guardrails_attachment`);
a configuration is offered to the data plane as ready only while its status says Ready for its current
content hash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import structlog

from maasctl.builders.guardrails import (
    ENGINE_NAME,
    EngineInput,
    build_engine,
    config_hash,
    config_problems,
    engine_config_yaml,
    engine_url,
)
from maasctl.contract.guardrails import SETTINGS_NAME, ConfigView, SettingsView, config_view, settings_view
from maasctl.contract.views import SubscriptionView
from maasctl.reconcilers.context import Context, status_patch
from maasctl.reconcilers.kinds import CONFIG_MAP, DEPLOYMENT, GUARDRAIL_CONFIG, GUARDRAILS_SETTINGS, MAAS_SUBSCRIPTION
from maasctl.reconcilers.kinds import SERVICE as SERVICE_KIND
from maasctl.runtime import NotFound, Request, Result, set_condition
from maasctl.runtime.objects import FrozenObject

log = structlog.get_logger("maasctl.reconcilers.guardrails")

CHECK_TIMEOUT = 120.0
CHECK_RETRY = 30.0

__all__ = ["GuardrailsReconciler", "attachments", "engine_endpoint", "singleton_request"]


def singleton_request(ctx: Context) -> Request:
    return Request(ctx.settings.subscription_namespace, SETTINGS_NAME)


def engine_endpoint(ctx: Context) -> str:
    """The URL the data plane calls the engine at."""
    return ctx.settings.guardrails_engine_url or engine_url(ctx.settings.subscription_namespace)


def current_settings(ctx: Context) -> SettingsView:
    ns = ctx.settings.subscription_namespace
    obj = ctx.cache.get(GUARDRAILS_SETTINGS, SETTINGS_NAME, ns)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return SettingsView(ns, SETTINGS_NAME)
    return settings_view(obj)


def attachments(subs: Sequence[SubscriptionView]) -> dict[str, list[tuple[str, str]]]:
    """Config ID -> [(subscription key, model key)] of every live subscription model that enables it."""
    out: dict[str, list[tuple[str, str]]] = {}
    for sub in subs:
        if sub.problem is not None or sub.deleting:
            continue
        for model in sub.models:
            if model.guardrails:
                out.setdefault(model.guardrails, []).append((sub.key, model.key))
    return out


def config_ready(obj: FrozenObject | None) -> bool:
    """True when the controller validated this configuration's current content (status phase Ready)."""
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    view = config_view(obj)
    if view.problem is not None or config_problems(view):
        return False
    status = obj.get("status") or {}
    return bool(status.get("phase") == "Ready" and status.get("configHash") == config_hash(view))


class GuardrailsReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._checks: dict[str, str | None] = {}  # config hash -> the engine's error (None: it loads)
        self._engine_digest: str | None = None
        self._engine_present: bool | None = None  # unknown at start: a disabled start deletes once

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        ns = ctx.settings.subscription_namespace
        settings_obj = ctx.cache.get(GUARDRAILS_SETTINGS, SETTINGS_NAME, ns)
        settings = current_settings(ctx)
        subs = [ctx.views.subscription(o) for o in ctx.cache.list(MAAS_SUBSCRIPTION, ns)]
        used = attachments(subs)
        objs = sorted(ctx.cache.list(GUARDRAIL_CONFIG, ns), key=lambda o: str(o["metadata"]["name"]))
        requeue: float | None = None
        valid: list[ConfigView] = []
        verdicts: dict[str, tuple[str, str, str]] = {}  # name -> (phase, reason, message)
        for obj in objs:
            view = config_view(obj)
            if view.deleting:
                continue
            problems = config_problems(view)
            if problems:
                verdicts[view.name] = ("Invalid", "InvalidConfig", "; ".join(problems))
                continue
            error, pending = await self._engine_check(view)
            if pending:
                verdicts[view.name] = ("Pending", "EngineCheckUnavailable", error or "")
                requeue = CHECK_RETRY
            elif error is not None:
                verdicts[view.name] = ("Invalid", "EngineRejected", f"the engine cannot load it: {error}")
            else:
                verdicts[view.name] = ("Ready", "Valid", "the engine loads this configuration")
                valid.append(view)
        await self._sync_engine(settings, valid)
        for obj in objs:
            name = str(obj["metadata"]["name"])
            if name in verdicts:
                await self._config_status(obj, settings, verdicts[name], used.get(name, []))
        if settings_obj is not None:
            await self._settings_status(settings_obj, settings, valid, verdicts, used)
        return Result.requeue_after(requeue) if requeue else Result.done()

    # -- validation by the real engine -------------------------------------------------------------------

    async def _engine_check(self, view: ConfigView) -> tuple[str | None, bool]:
        """(error, pending): the engine's verdict on `view`; pending when the check itself could not run."""
        command = self.ctx.settings.guardrails_check_command
        if not command:
            return None, False
        digest = config_hash(view)
        if digest in self._checks:
            return self._checks[digest], False
        request = json.dumps({
            "name": view.name, "config_yaml": engine_config_yaml(view), "rails_co": view.rails_co,
            "env": [f"GUARDRAILS_{view.name}_{m.type}_API_KEY".upper().replace("-", "_")
                    for m in view.models if m.secret_name],
        }).encode()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            log.warning("guardrails engine check cannot start", error=type(exc).__name__)
            return f"the engine check cannot start ({type(exc).__name__})", True
        try:
            out, err = await asyncio.wait_for(proc.communicate(request), CHECK_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return "the engine check timed out", True
        try:
            answer = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            log.warning("guardrails engine check failed", returncode=proc.returncode,
                        stderr=err.decode(errors="replace")[-300:])
            return "the engine check failed", True
        verdict = None if answer.get("ok") else str(answer.get("error") or "rejected")[:900]
        self._checks[digest] = verdict
        log.info("guardrail config checked by the engine", config=view.name, ok=verdict is None)
        return verdict, False

    # -- the engine ----------------------------------------------------------------------------------------

    async def _sync_engine(self, settings: SettingsView, valid: Sequence[ConfigView]) -> None:
        ctx = self.ctx
        ns = ctx.settings.subscription_namespace
        if settings.active:
            desired = build_engine(EngineInput(ns, ctx.settings.guardrails_engine_image, tuple(valid)))
            digest = json.dumps(desired, sort_keys=True)
            if digest != self._engine_digest:
                for obj in desired:
                    await ctx.applier.apply(obj)
                self._engine_digest = digest
                self._engine_present = True
                log.info("guardrails engine applied", configs=[c.name for c in valid])
            return
        if self._engine_present is False:
            return
        for gvk in (DEPLOYMENT, SERVICE_KIND, CONFIG_MAP):
            with contextlib.suppress(NotFound):
                await ctx.client.delete(gvk, ENGINE_NAME, ns)
        self._engine_present = False
        self._engine_digest = None

    # -- status --------------------------------------------------------------------------------------------

    async def _config_status(self, obj: FrozenObject, settings: SettingsView, verdict: tuple[str, str, str],
                             used: list[tuple[str, str]]) -> None:
        phase, reason, message = verdict
        generation = int(obj["metadata"].get("generation", 0))
        conditions = (obj.get("status") or {}).get("conditions")
        conditions = set_condition(conditions, type_="Valid",
                                   status={"Ready": "True", "Invalid": "False"}.get(phase, "Unknown"),
                                   reason=reason, message=message[:4096], observed_generation=generation)
        if phase != "Ready":
            deployed = ("False", "NotValid", "not deployed: the configuration is not valid")
        elif not settings.active:
            deployed = ("False", "GuardrailsDisabled", "guardrails are disabled globally (GuardrailsSettings)")
        else:
            deployed = ("True", "Deployed", f"served by the engine {ENGINE_NAME}")
        conditions = set_condition(conditions, type_="Deployed", status=deployed[0], reason=deployed[1],
                                   message=deployed[2], observed_generation=generation)
        status: dict[str, Any] = {
            "phase": phase, "observedGeneration": generation, "conditions": conditions,
            "usedBy": [{"subscription": s, "model": m} for s, m in sorted(used)],
        }
        if phase == "Ready":
            status["configHash"] = config_hash(config_view(obj))
        await self.ctx.write_status(obj, status)

    async def _settings_status(self, obj: FrozenObject, settings: SettingsView, valid: Sequence[ConfigView],
                               verdicts: dict[str, tuple[str, str, str]],
                               used: dict[str, list[tuple[str, str]]]) -> None:
        generation = int(obj["metadata"].get("generation", 0))
        attached = sorted((s, m, c) for c, pairs in used.items() for s, m in pairs)
        problems = [f"{s} model {m}: configuration {c} " + ("not found" if c not in verdicts else "is not valid")
                    for s, m, c in attached if verdicts.get(c, ("",))[0] != "Ready"]
        if settings.problem is not None:
            phase, status, reason, message = "Degraded", "False", "InvalidSettings", settings.problem
        elif not settings.enabled:
            phase, status, reason = "Disabled", "False", "GuardrailsDisabled"
            message = "guardrails are disabled: no request is checked"
            if attached:
                message += f"; guardrail settings on {len(attached)} subscription model(s) have no effect"
        elif problems:
            phase, status, reason = "Degraded", "False", "AttachmentProblems"
            message = "; ".join(problems)
        else:
            phase, status, reason = "Enabled", "True", "EngineRendered"
            message = f"engine {ENGINE_NAME} serves {len(valid)} configuration(s)"
        conditions = set_condition((obj.get("status") or {}).get("conditions"), type_="Ready", status=status,
                                   reason=reason, message=message[:4096], observed_generation=generation)
        body: dict[str, Any] = {
            "phase": phase, "observedGeneration": generation, "conditions": conditions,
            "deployedConfigs": [c.name for c in valid] if settings.active else [],
            "attached": [{"subscription": s, "model": m} for s, m, _ in attached],
        }
        if settings.active:
            body["engineUrl"] = engine_endpoint(self.ctx)
        with contextlib.suppress(NotFound):
            await self.ctx.applier.apply_status(status_patch(obj, body))
