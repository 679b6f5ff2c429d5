"""What every reconciler gets: the cache, the client, the applier, an event recorder and the settings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from maasctl.api.admission import FINALIZER as FINALIZER  # re-exported: the reconcilers import it from here
from maasctl.builders.names import is_managed, is_opted_out
from maasctl.builders.refs import GatewayRef
from maasctl.contract.views import Views
from maasctl.runtime import (
    Applier,
    Cache,
    Change,
    Client,
    EventRecorder,
    GroupVersionKind,
    NotFound,
    add_finalizer,
    has_finalizer,
)
from maasctl.runtime.informer import InformerState
from maasctl.settings import ControllerSettings

log = structlog.get_logger("maasctl.reconcilers")

DEPENDENCY_RECHECK = 15.0
"""Seconds between checks while a dependency's CRD (Kuadrant, KServe, Gateway API) is missing."""

_CHANGES: ContextVar[tuple[tuple[str, str, str], dict[str, list[str]]] | None] = ContextVar(
    "maasctl_generated_changes", default=None)
"""The parent being reconciled in this task and the generated objects written for it so far, by verb."""


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return str(obj.get("kind")), str(meta.get("namespace")), str(meta["name"])


@dataclass(frozen=True)
class Context:
    cache: Cache
    client: Client
    applier: Applier
    events: EventRecorder
    settings: ControllerSettings
    views: Views = field(default_factory=Views)

    @property
    def gateway(self) -> GatewayRef:
        """The default Gateway (subscriptions without spec.gatewayRef are used through it)."""
        return GatewayRef(self.settings.gateway_namespace, self.settings.gateway_name)

    @property
    def tenant_gateways(self) -> tuple[GatewayRef, ...]:
        """The further Gateways this controller manages (--tenant-gateway)."""
        return tuple(GatewayRef.parse(text) for text in self.settings.tenant_gateways)

    @property
    def gateways(self) -> tuple[GatewayRef, ...]:
        """Every managed Gateway, the default one first."""
        return (self.gateway, *(gw for gw in self.tenant_gateways if gw != self.gateway))

    def in_scope(self, obj: Mapping[str, Any]) -> bool:
        """MaaSAuthPolicies and MaaSSubscriptions count only in the subscription namespace."""
        return bool(obj["metadata"]["namespace"] == self.settings.subscription_namespace)

    async def write_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Apply `status` through the /status subresource; an object deleted meanwhile ends the work."""
        try:
            await self.applier.apply_status(status_patch(obj, status))
        except NotFound:
            log.debug("status not written: object is gone", kind=obj.get("kind"), name=obj["metadata"]["name"])

    async def ensure_finalizer(self, obj: Mapping[str, Any]) -> bool:
        """Add our finalizer; True when it was added now."""
        if has_finalizer(obj, FINALIZER):
            return False
        await add_finalizer(self.client, obj, FINALIZER)
        return True

    def missing_apis(self, *gvks: GroupVersionKind) -> list[str]:
        """Kinds among `gvks` whose CRD is not installed (their informers wait for it to appear)."""
        states = self.cache.status()
        waiting = InformerState.WAITING_FOR_CRD
        return [f"{g.kind} ({g.group}/{g.version})" for g in gvks if states.get(str(g)) is waiting]

    async def event(
        self,
        regarding: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        note: str,
        action: str = "",
    ) -> None:
        await self.events.record(regarding, type_=type_, reason=reason, action=action or reason, note=note)

    async def apply_generated(self, parent: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
        """Server-side apply a generated object unless the live one opted out; True when that changed it."""
        meta = desired["metadata"]
        live = self.cache.peek(GroupVersionKind.of(desired), meta["name"], meta.get("namespace"))
        if live is not None and is_opted_out(live):
            return False
        change = await self.applier.apply_change(desired)
        if change is Change.NONE:
            return False
        await self._written(parent, change.value, f"{desired['kind']} {meta.get('namespace')}/{meta['name']}")
        return True

    @contextlib.asynccontextmanager
    async def announcing(self, parent: Mapping[str, Any]) -> AsyncIterator[None]:
        """Generated objects written for `parent` within are announced when it ends: one Normal Event per verb
        (Created, Updated, Deleted) naming them all, instead of one Event per object."""
        changes: dict[str, list[str]] = {}
        token = _CHANGES.set((_identity(parent), changes))
        try:
            yield
        finally:
            _CHANGES.reset(token)
            for verb, objects in changes.items():
                await self.event(parent, "Normal", verb, f"{verb} {', '.join(objects)}")

    async def _written(self, parent: Mapping[str, Any], verb: str, what: str) -> None:
        pending = _CHANGES.get()
        if pending is not None and pending[0] == _identity(parent):
            pending[1].setdefault(verb, []).append(what)
        else:
            await self.event(parent, "Normal", verb, f"{verb} {what}")

    async def delete_generated(
        self, parent: Mapping[str, Any], gvk: GroupVersionKind, name: str, namespace: str
    ) -> bool:
        """Delete a generated object when it is ours and not opted out; True when it deleted."""
        live = self.cache.peek(gvk, name, namespace)
        if live is None or not is_managed(live) or is_opted_out(live):
            return False
        try:
            await self.client.delete(gvk, name, namespace)
        except NotFound:
            return False
        await self._written(parent, "Deleted", f"{gvk.kind} {namespace}/{name}")
        return True


def status_patch(obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The object SSA needs to apply `status` through the /status subresource."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": dict(status),
    }
