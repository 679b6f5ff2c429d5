"""HTTP surface of usage metering: ingestion from the gateway, admin report and CSV export, the
per-subscription view for subscription owners, and the retention purge.

Platform administrators read all usage; organization administrators (`deps.access_of`) read the records
attributed to their organizations only (the `organization_id` the gateway stamped from the subscription's
`organization.id`, else its legacy `tokenMetadata.organizationId`), narrowed with `organization=`; naming
another organization is 403, and a filter (subscription, user) outside their organizations finds nothing.

Routes are built by `install()` from the app's own dependencies (caller identity, admin check, subscription
source), so authentication behaves exactly as on every other maas-api route. (No `from __future__ import
annotations` here: FastAPI reads the endpoints' annotations, which refer to closure-local dependencies.)
"""

import csv
import io
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import SQLAlchemyError

from maasctl.contract.selection import find
from maasctl.contract.views import SubscriptionView
from maasctl.contract.windows import InvalidWindowError, parse_window
from maasctl.maasapi.auth import Identity
from maasctl.maasapi.errors import ApiError
from maasctl.maasapi.gatewayauth import gateway_token_valid
from maasctl.maasapi.schemas import SubscriptionName
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.usage import ranges
from maasctl.maasapi.usage.metrics import UsageMetrics, for_registry
from maasctl.maasapi.usage.schemas import (
    IngestResponse,
    LimitView,
    ModelUsage,
    PurgeResponse,
    RejectedRecord,
    ReportRow,
    SubscriptionUsage,
    TokenCounts,
    UsageBatchIn,
    UsageRecordOut,
    UsageReport,
)
from maasctl.maasapi.usage.store import GROUP_COLUMNS, GroupBy, Period, Totals, UsageEntry, UsageFilter, UsageStore

log = structlog.get_logger("maasctl.maasapi")

INGEST_PATH = "/internal/v1/usage"
FUTURE_SKEW = timedelta(hours=1)
# Records are accepted only this much younger than the raw retention (at most a tenth of it): the purge may run
# on a replica whose clock is ahead by up to this much.
RAW_RETENTION_MARGIN = timedelta(days=1)
CSV_COUNTERS = ("total_tokens", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens",
                "requests", "failed_requests")
_COUNTER_INDEX = {name: i for i, name in enumerate(
    ("requests", "failed_requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens",
     "total_tokens"))}
_FLUSH_ROWS = 500


@dataclass(frozen=True)
class UsageDeps:
    """What the usage routes borrow from the app (see `maasctl.maasapi.app`)."""

    caller: Callable[..., Awaitable[Identity]]
    access: Callable[[Any, Identity], Awaitable[Any]]  # maasctl.maasapi.deps.access_of -> Access
    subscriptions: Callable[[Any], Awaitable[Sequence[SubscriptionView]]]


@dataclass
class UsageContext:
    """Per-app usage state; the store is bound to the app's database engine once the lifespan opened it."""

    app_state: Any  # maasctl.maasapi.app.AppState
    metrics: UsageMetrics
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _store: UsageStore | None = None

    @property
    def settings(self) -> MaasApiSettings:
        settings: MaasApiSettings = self.app_state.settings
        return settings

    def store(self) -> UsageStore:
        key_store = self.app_state.store
        if key_store is None:
            raise ApiError(503, "not_ready", "maas-api is starting")
        if self._store is None or self._store.engine is not key_store.engine:
            self._store = UsageStore(key_store.engine)
        return self._store


async def _context(request: Request) -> UsageContext:
    ctx: UsageContext = request.app.state.maasapi_usage
    return ctx


Ctx = Annotated[UsageContext, Depends(_context)]


async def _gateway(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> None:
    """The gateway authenticates with its shared bearer token (`maasapi.gatewayauth`)."""
    if not gateway_token_valid(authorization, ctx.settings.gateway_tokens):
        ctx.app_state.metrics.internal_unauthenticated.labels("usage").inc()
        raise ApiError(401, "unauthenticated", "a valid gateway token is required")


GatewayAuth = Annotated[None, Depends(_gateway)]


def oldest_accepted(now: datetime, raw_retention: timedelta) -> datetime:
    """The oldest record timestamp ingestion accepts.

    The raw row of a record is what makes its resend a duplicate, and the purge deletes raw rows by the
    record's own timestamp. A record older than the raw retention could be stored, purged, and then counted
    again when resent (a spool replay, a retry racing the purge). Accepting only records younger than the
    retention minus a margin means a record can never arrive after its raw row is gone."""
    return now - raw_retention + min(RAW_RETENTION_MARGIN, raw_retention / 10)


def _too_old(entries: Sequence[UsageEntry], oldest: datetime) -> list[RejectedRecord]:
    """The records timestamped before `oldest`, each with a reason the gateway can log."""
    message = (f"timestamped before {oldest.isoformat()}, outside the raw retention window: a resend could no "
               "longer be recognised as a duplicate, so it is not stored (resending cannot succeed)")
    return [RejectedRecord(index=i, request_id=e.id, code="timestamp_too_old", message=message)
            for i, e in enumerate(entries) if e.ts < oldest]


def _refuse_too_old(ctx: UsageContext, entries: list[UsageEntry], now: datetime
                    ) -> tuple[list[UsageEntry], list[RejectedRecord]]:
    """(the entries to store, the ones refused as too old). Refused per record, not per batch: the gateway
    forgets a batch maas-api answered 2xx, so a refused record is not resent again and again, and the rest of
    its batch is stored."""
    rejected = _too_old(entries, oldest_accepted(now, ctx.settings.usage_raw_retention))
    if not rejected:
        return entries, []
    ctx.metrics.records.labels("rejected").inc(len(rejected))
    log.warning("usage_records_rejected", code="timestamp_too_old", count=len(rejected),
                request_ids=[r.request_id for r in rejected[:20]])
    refused = {r.index for r in rejected}
    return [e for i, e in enumerate(entries) if i not in refused], rejected


def _range(ctx: UsageContext, name: str | None, start: datetime | None, end: datetime | None,
           whole_days: bool = False) -> ranges.TimeRange:
    try:
        return ranges.resolve(ctx.clock(), name, start, end, whole_days=whole_days)
    except ranges.RangeError as exc:
        raise ApiError(400, exc.code, str(exc)) from exc


MAX_RECENT_WINDOW = 3600


def _window_seconds(window: str) -> int:
    """Seconds of a subscription window up to an hour (longer ones are reports at hour resolution)."""
    try:
        seconds = parse_window(window)
    except InvalidWindowError as exc:
        raise ApiError(400, "invalid_window", str(exc)) from exc
    if seconds > MAX_RECENT_WINDOW:
        raise ApiError(400, "invalid_window", f"window {window!r} is longer than 1h: ask for a range instead")
    return seconds


def _counts(t: Totals) -> dict[str, int]:
    return t.as_dict()


def _sub_ref(value: str | None, default_ns: str) -> str | None:
    if not value:
        return None
    ns, _, name = value.rpartition("/")
    return f"{ns or default_ns}/{name}"


def _csv_line(values: Sequence[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(values)
    return buf.getvalue()


def _period_bounds(period: Period, value: Any) -> tuple[str, str]:
    if period == "day":
        day = value if isinstance(value, date) else date.fromisoformat(str(value))
        first, after = day, day + timedelta(days=1)
    else:
        year, month = str(value).split("-")
        first = date(int(year), int(month), 1)
        after = ranges.next_month(first)
    return f"{first.isoformat()}T00:00:00Z", f"{after.isoformat()}T00:00:00Z"


async def _csv_stream(first: tuple[Any, ...] | None, rows: AsyncGenerator[tuple[Any, ...], None], header: list[str],
                      group_by: GroupBy, period: Period) -> AsyncIterator[str]:
    width = len(GROUP_COLUMNS[group_by])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(header)

    def write(row: tuple[Any, ...]) -> None:
        counters = row[1 + width:]
        writer.writerow([*_period_bounds(period, row[0]), *row[1:1 + width],
                         *(int(counters[_COUNTER_INDEX[c]] or 0) for c in CSV_COUNTERS)])

    try:
        if first is not None:
            write(first)
            n = 1
            async for row in rows:
                write(row)
                n += 1
                if n % _FLUSH_ROWS == 0:
                    yield buf.getvalue()
                    buf.seek(0)
                    buf.truncate()
        yield buf.getvalue()
    finally:
        await rows.aclose()  # also when the client went away: releases the cursor and connection


def install(app: FastAPI, deps: UsageDeps) -> None:
    """Add the usage routes to `app` (whose `state.maasapi` is the AppState)."""
    state = app.state.maasapi
    settings: MaasApiSettings = state.settings
    app.state.maasapi_usage = UsageContext(
        state,
        for_registry(state.metrics.registry, per_user=settings.usage_metrics_per_user,
                     max_series=settings.usage_metrics_max_series),
    )
    Caller = Annotated[Identity, Depends(deps.caller)]
    RangeQ = Annotated[ranges.RangeName | None, Query(alias="range", description="last 1d, 7d, 30d, 90d or 1y")]
    FromQ = Annotated[datetime | None, Query(alias="from", description="start (UTC when no offset is given)")]
    ToQ = Annotated[datetime | None, Query(alias="to", description="end, exclusive (default: now)")]
    SubQ = Annotated[SubscriptionName | None, Query(description="namespace/name (or a name in the default "
                                                                "subscription namespace)")]
    UserQ = Annotated[str | None, Query(max_length=253, description="case-insensitive username search")]
    OrgQ = Annotated[str | None, Query(min_length=1, max_length=253, description="one organization id (exact); "
                                       "organization admins read only their own organizations")]
    errors: dict[int | str, dict[str, Any]] = {
        s: {"description": d} for s, d in ((401, "Unauthenticated"), (403, "Forbidden"), (404, "Not found"),
                                            (413, "Too large"), (503, "Unavailable"))
    }

    async def require_admin(ctx: UsageContext, caller: Identity, what: str) -> None:
        if not (await deps.access(ctx.app_state, caller)).platform:
            raise ApiError(403, "forbidden", f"only admins can {what}")

    async def organizations_for(ctx: UsageContext, caller: Identity, what: str,
                                organization: str | None) -> frozenset[str] | None:
        """The organizations whose usage the caller may read here (None: all, a platform admin)."""
        access = await deps.access(ctx.app_state, caller)
        if access.platform:
            return None if organization is None else frozenset((organization,))
        if not access.organizations:
            raise ApiError(403, "forbidden", f"only admins can {what}")
        if organization is None:
            return frozenset(access.organizations)
        if organization not in access.organizations:
            raise ApiError(403, "forbidden", "you do not administer that organization")
        return frozenset((organization,))

    @app.post(INGEST_PATH, response_model=IngestResponse, response_model_exclude_none=True, tags=["gateway"],
              responses=errors)
    async def ingest_usage(body: UsageBatchIn, ctx: Ctx, _: GatewayAuth) -> IngestResponse:
        """Append a batch of usage records from the gateway, atomically and idempotently (by record id).
        Records older than the raw retention window (less a margin) are refused one by one and listed in
        `rejected`; a total below input + output tokens is stored as input + output."""
        s = ctx.settings
        if len(body.records) > s.usage_max_batch_records:
            ctx.metrics.rejected.labels("batch_too_large").inc()
            raise ApiError(413, "batch_too_large", f"a batch holds at most {s.usage_max_batch_records} records")
        now = ctx.clock()
        entries = [r.entry() for r in body.records]
        future = [i for i, e in enumerate(entries) if e.ts > now + FUTURE_SKEW]
        if future:
            ctx.metrics.rejected.labels("timestamp_in_future").inc()
            raise ApiError(400, "timestamp_in_future", "records are timestamped in the future",
                           [{"field": f"records.{i}.timestamp"} for i in future[:20]])
        entries, rejected = _refuse_too_old(ctx, entries, now)
        try:
            result = await ctx.store().ingest(entries, now)
        except (SQLAlchemyError, OSError) as exc:
            ctx.metrics.rejected.labels("usage_store_unavailable").inc()
            raise ApiError(503, "usage_store_unavailable", "usage records cannot be stored now; retry") from exc
        ctx.metrics.observe(result.inserted, result.duplicates)
        return IngestResponse(accepted=len(result.inserted), duplicates=result.duplicates, rejected=rejected or None)

    @app.get("/v1/usage/report", response_model=UsageReport, tags=["usage"], responses=errors)
    async def usage_report(
        ctx: Ctx,
        caller: Caller,
        range_: RangeQ = None,
        start: FromQ = None,
        end: ToQ = None,
        subscription: SubQ = None,
        user: UserQ = None,
        limit: Annotated[int | None, Query(ge=1, description="at most this many rows (largest first)")] = None,
        organization: OrgQ = None,
    ) -> UsageReport:
        """Usage per user and subscription over a time range (admins, and organization admins for their
        organizations; hour resolution)."""
        orgs = await organizations_for(ctx, caller, "read usage reports", organization)
        rng = _range(ctx, range_, start, end)
        f = UsageFilter(subscription=_sub_ref(subscription, ctx.settings.subscription_namespace), user_search=user,
                        organizations=orgs)
        grouped = await ctx.store().report(rng, ("username", "subscription"), f)
        totals = Totals()
        for t in grouped.values():
            totals.add(t.as_dict()[c] for c in _COUNTER_INDEX)
        rows = sorted(grouped.items(), key=lambda kv: (-kv[1].total_tokens, kv[0]))
        cap = min(limit or ctx.settings.usage_report_max_rows, ctx.settings.usage_report_max_rows)
        return UsageReport(
            start=rng.start,
            end=rng.end,
            data=[ReportRow(username=k[0], subscription=k[1], **_counts(t)) for k, t in rows[:cap]],
            totals=TokenCounts(**_counts(totals)),
            has_more=len(rows) > cap,
        )

    @app.get("/v1/usage/records", response_model=list[UsageRecordOut], tags=["usage"], responses=errors)
    async def usage_records(
        ctx: Ctx,
        caller: Caller,
        subscription: SubQ = None,
        username: Annotated[str | None, Query(max_length=253)] = None,
        key_id: Annotated[str | None, Query(alias="keyId", max_length=64)] = None,
        since: Annotated[datetime | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        organization: OrgQ = None,
    ) -> list[UsageRecordOut]:
        """Raw usage records, newest first (admins, and organization admins for their organizations): the
        audit view behind reports and billing."""
        orgs = await organizations_for(ctx, caller, "read raw usage records", organization)
        sub = _sub_ref(subscription, ctx.settings.subscription_namespace)
        rows = await ctx.store().records(UsageFilter(subscription=sub, username=username, organizations=orgs),
                                         key_id=key_id, since=since, limit=limit)
        return [UsageRecordOut.model_validate(r) for r in rows]

    @app.get("/v1/usage/export", tags=["usage"], responses={
        **errors, 200: {"description": "CSV", "content": {"text/csv": {}}}})
    async def usage_export(
        ctx: Ctx,
        caller: Caller,
        group_by: Annotated[GroupBy, Query(alias="groupBy")] = "user",
        by: Annotated[Period, Query(description="time grouping")] = "day",
        range_: RangeQ = None,
        start: FromQ = None,
        end: ToQ = None,
        subscription: SubQ = None,
        user: UserQ = None,
        organization: OrgQ = None,
    ) -> StreamingResponse:
        """CSV of usage grouped by subscription, user, API key or model and by UTC day or month (admins, and
        organization admins for their organizations). Whole UTC days; streamed from the daily rollup. Columns:
        period_start, period_end, the group columns, total/input/cached/output/reasoning tokens, requests,
        failed_requests."""
        orgs = await organizations_for(ctx, caller, "export usage", organization)
        rng = _range(ctx, range_, start, end, whole_days=True)
        f = UsageFilter(subscription=_sub_ref(subscription, ctx.settings.subscription_namespace), user_search=user,
                        organizations=orgs)
        rows = ctx.store().export(ranges.as_date(rng.start), ranges.as_date(rng.end), group_by, by, f)
        try:
            first: tuple[Any, ...] | None = await rows.__anext__()
        except StopAsyncIteration:
            first = None
        except (SQLAlchemyError, OSError) as exc:
            raise ApiError(503, "usage_store_unavailable", "usage cannot be read now") from exc
        header = ["period_start", "period_end", *GROUP_COLUMNS[group_by], *CSV_COUNTERS]
        name = f"usage-{group_by}-{by}-{rng.start.date().isoformat()}-{rng.end.date().isoformat()}.csv"
        return StreamingResponse(
            _csv_stream(first, rows, header, group_by, by),
            media_type="text/csv; charset=utf-8",
            headers={
                "Content-Disposition": f'attachment; filename="{name}"',
                "X-Usage-From": rng.start.isoformat(),
                "X-Usage-To": rng.end.isoformat(),
                "Cache-Control": "no-store",
            },
        )

    @app.get("/v1/usage/subscriptions/{namespace}/{name}", response_model=SubscriptionUsage,
             tags=["usage"], responses=errors)
    async def subscription_usage(
        ctx: Ctx,
        caller: Caller,
        namespace: Annotated[str, Path(max_length=63)],
        name: Annotated[str, Path(max_length=253)],
        range_: RangeQ = None,
        start: FromQ = None,
        end: ToQ = None,
        user: Annotated[str | None, Query(max_length=253, description="exact username (admins only)")] = None,
        window: Annotated[str | None, Query(description="a limit window up to 1h (`1m`, `30s`): usage of the "
                                            "last window, read from the records (instead of from/to/range)")] = None,
    ) -> SubscriptionUsage:
        """Usage of one subscription by model, with its configured limits beside it. Subscription owners see
        their own usage; admins (and the admins of the subscription's organization) see everyone's (or one
        user's). `window` answers "how much of a per-minute limit did I use": the last window, at the records'
        resolution (reports otherwise have hour resolution)."""
        ref = f"{namespace}/{name}"
        subs = await deps.subscriptions(ctx.app_state)
        sub = find(subs, ref, ctx.settings.subscription_namespace)
        access = await deps.access(ctx.app_state, caller)
        orgs: frozenset[str] | None = None
        admin = access.platform or (
            sub is not None and sub.organization is not None and sub.organization in access.organizations)
        if admin:
            username = user
            if not access.platform:  # only the records of the organization's own history
                orgs = frozenset((sub.organization,)) if sub is not None and sub.organization else frozenset()
        else:
            allowed = (caller.key_subscription == ref) if caller.via == "api_key" else (
                sub is not None and sub.entitles(caller.username, caller.groups))
            if sub is None or not allowed:
                raise ApiError(404, "subscription_not_found", "subscription not found or not accessible")
            if user is not None and user != caller.username:
                raise ApiError(403, "forbidden", "only admins can read other users' usage")
            username = caller.username
        usage_filter = UsageFilter(subscription=ref, username=username, organizations=orgs)
        if window is not None:
            if range_ is not None or start is not None or end is not None:
                raise ApiError(400, "invalid_range", "window cannot be combined with range, from or to")
            seconds = _window_seconds(window)
            now = ctx.clock()
            rng = ranges.TimeRange(now - timedelta(seconds=seconds), now)
            grouped = await ctx.store().recent_by_model(rng.start, usage_filter)
        else:
            rng = _range(ctx, range_, start, end)
            grouped = await ctx.store().report(rng, ("model",), usage_filter)
        models: list[ModelUsage] = []
        seen: set[str] = set()
        totals = Totals()
        for m in sub.models if sub is not None else ():
            t = grouped.get((m.key,), Totals())
            seen.add(m.key)
            models.append(ModelUsage(
                model=m.key, unlimited=m.unlimited, in_subscription=True,
                token_rate_limits=[LimitView(limit=x.limit, window=x.window) for x in m.tiers],
                **_counts(t)))
        for (model,), t in sorted(grouped.items()):
            if model not in seen:
                models.append(ModelUsage(model=model, in_subscription=False, token_rate_limits=[], **_counts(t)))
        for t in grouped.values():
            totals.add(t.as_dict()[c] for c in _COUNTER_INDEX)
        return SubscriptionUsage(subscription=ref, username=username, start=rng.start, end=rng.end, models=models,
                                 totals=TokenCounts(**_counts(totals)))

    @app.post("/internal/v1/usage/purge", response_model=PurgeResponse, tags=["gateway"], responses=errors)
    async def purge_usage(ctx: Ctx, caller: Caller) -> PurgeResponse:
        """Retention: deletes raw usage records (and hourly rollups) older than the configured retention."""
        if caller.via != "token":
            raise ApiError(403, "api_key_not_allowed", "use your user token")
        await require_admin(ctx, caller, "purge usage records")
        now = ctx.clock()
        s = ctx.settings
        raw_cutoff = now - s.usage_raw_retention
        hourly_cutoff = now - s.usage_hourly_retention if s.usage_hourly_retention is not None else None
        raw, hourly = await ctx.store().purge(raw_cutoff, hourly_cutoff)
        return PurgeResponse(raw_purged=raw, hourly_purged=hourly, raw_cutoff=raw_cutoff,
                             hourly_cutoff=hourly_cutoff)
