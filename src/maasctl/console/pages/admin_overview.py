"""MaaS -> Overview: where an administrator lands. What is published and in which phase, the subscriptions,
today's usage, and everything Failed or Degraded with its reason, so a new administrator sees where to start
and one on call sees what is broken without opening each list."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from maasctl.console import usage
from maasctl.console.kube import AUTH_POLICY, EXTERNAL_MODEL, GUARDRAIL_CONFIG, MODEL_REF, SUBSCRIPTION, KubeError
from maasctl.console.maasapi_client import MaasApiError
from maasctl.console.web import Admin, console, kube_as, maasapi_as, render

router = APIRouter()
HEALTHY = frozenset({"Ready", "Active"})
_KINDS = ((MODEL_REF, False), (EXTERNAL_MODEL, False), (SUBSCRIPTION, True), (AUTH_POLICY, True),
          (GUARDRAIL_CONFIG, True))


def phase_of(obj: dict[str, Any]) -> str:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return "Deleting" if meta.get("deletionTimestamp") else str(status.get("phase") or "Pending")


def reason_of(obj: dict[str, Any]) -> str:
    """The first condition that is not True, as `Reason: message` (what a reader needs to act on)."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("status") != "True":
            reason, message = str(cond.get("reason") or cond.get("type") or ""), str(cond.get("message") or "")
            return f"{reason}: {message}" if message else reason
    return ""


def problems(kind: str, objs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Objects in a phase that needs a look (Failed, Degraded, Invalid), with their reason."""
    out = []
    for obj in objs:
        phase = phase_of(obj)
        if phase in ("Failed", "Degraded", "Invalid"):
            meta = obj.get("metadata") or {}
            out.append({"kind": kind, "name": f"{meta.get('namespace')}/{meta.get('name')}", "phase": phase,
                        "reason": reason_of(obj)})
    return sorted(out, key=lambda p: (p["kind"], p["name"]))


@router.get("/admin/overview")
async def overview(request: Request, identity: Admin) -> Response:
    kube = kube_as(request, identity)
    sub_ns = console(request).settings.subscription_namespace
    errors: list[str] = []
    listed: dict[str, list[dict[str, Any]]] = {}
    for resource, in_sub_ns in _KINDS:
        try:
            listed[resource.kind] = await kube.list(resource, sub_ns if in_sub_ns else None)
        except KubeError as exc:
            errors.append(f"{resource.kind}: {exc}")
            listed[resource.kind] = []
    today: dict[str, Any] = {}
    try:
        start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        today = (await maasapi_as(request, identity).report({"from": usage.iso(start)})).get("totals") or {}
    except MaasApiError as exc:
        errors.append(f"usage: {exc}")
    models = listed[MODEL_REF.kind]
    subs = listed[SUBSCRIPTION.kind]
    return render(
        request, "admin/overview.html", title="Overview",
        model_phases=sorted(Counter(phase_of(o) for o in models).items()), model_count=len(models),
        sub_phases=sorted(Counter(phase_of(o) for o in subs).items()), sub_count=len(subs),
        today=today, healthy=HEALTHY,
        problems=[p for kind, objs in listed.items() for p in problems(kind, objs)], errors=errors)
