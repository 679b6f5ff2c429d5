"""MaaS -> Report: usage per user and subscription over a time range (1, 7, 30, 90 days, 1 year), filtered
by subscription and username, with a usage-over-time chart, and the CSV export (grouped by subscription,
user, API key or model, and by day or month) streamed from maas-api as the signed-in administrator."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from maasctl.console import usage
from maasctl.console.kube import SUBSCRIPTION, KubeError
from maasctl.console.maasapi_client import MaasApiError
from maasctl.console.web import Admin, console, kube_as, maasapi_as, render

router = APIRouter()
GROUPS = {"subscription": "Subscription", "user": "User", "key": "API key", "model": "Model"}
PERIODS = {"day": "Day", "month": "Month"}
_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _filters(range: str | None, subscription: str | None, user: str | None) -> dict[str, str]:
    """Only well-formed filters are passed on."""
    return {"range": range if range in usage.RANGES else "7d",
            "subscription": subscription if subscription and _SUB.match(subscription) else "",
            "user": (user or "").strip()[:253]}


@router.get("/admin/report")
async def report_page(request: Request, identity: Admin, range: str | None = None, subscription: str | None = None,
                      user: str | None = None) -> Response:
    f = _filters(range, subscription, user)
    api = maasapi_as(request, identity)
    query = {"subscription": f["subscription"], "user": f["user"]}
    error = None
    report: dict[str, Any] = {"data": [], "totals": {}}
    points: list[tuple[str, int]] = []
    subs: list[str] = []
    try:
        sub_ns = console(request).settings.subscription_namespace
        subs = sorted(f"{sub_ns}/{o['metadata']['name']}" for o in await kube_as(request, identity).list(
            SUBSCRIPTION, sub_ns))
    except KubeError as exc:
        error = str(exc)

    async def total(b: usage.Bucket) -> int:
        part = await api.report({**query, "from": usage.iso(b.start), "to": usage.iso(b.end)})
        return int((part.get("totals") or {}).get("totalTokens") or 0)

    try:
        report = await api.report({**query, "range": f["range"]})
        points = await usage.series(usage.buckets(f["range"], datetime.now(UTC)), total)
    except MaasApiError as exc:
        error = str(exc)
    return render(request, "admin/report.html", title="Report", f=f, report=report, points=points, subs=subs,
                  ranges=usage.RANGES, groups=GROUPS, periods=PERIODS, error=error)


@router.get("/admin/report/export")
async def export_page(request: Request, identity: Admin, range: str | None = None, subscription: str | None = None,
                      user: str | None = None) -> Response:
    """The export dialog as a page of its own (without JavaScript)."""
    return render(request, "admin/report_export.html", title="Export CSV", f=_filters(range, subscription, user),
                  groups=GROUPS, periods=PERIODS, ranges=usage.RANGES)


@router.get("/admin/report/export.csv")
async def export_csv(request: Request, identity: Admin, range: str | None = None, subscription: str | None = None,
                     user: str | None = None, group_by: str = "user", by: str = "day") -> Response:
    f = _filters(range, subscription, user)
    params = {**f, "groupBy": group_by if group_by in GROUPS else "user", "by": by if by in PERIODS else "day"}
    stack = contextlib.AsyncExitStack()
    try:
        upstream = await stack.enter_async_context(maasapi_as(request, identity).export(params))
    except MaasApiError as exc:
        await stack.aclose()
        return render(request, "error.html", 502 if exc.status >= 500 else exc.status, title="Export CSV",
                      message=str(exc))

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_bytes():
                yield chunk
        finally:
            await stack.aclose()

    headers = {"Content-Disposition": upstream.headers.get("content-disposition", 'attachment; filename="usage.csv"'),
               "Cache-Control": "no-store"}
    return StreamingResponse(body(), media_type="text/csv; charset=utf-8", headers=headers)
