"""Reservation reconciler: capacity, lifecycle, Kueue quota and monthly charges, decided by `billing.rules.reservation`
(pure) from the cache (Nodes, every Reservation) and the clock.

Per reconcile (one worker: every reconcile recomputes the tenants' reservation queues from the whole cache, so two
never apply different snapshots): admit the reservation in its pool among the pool's reservations; derive its
state from the window; charge each month of the window that has begun (ledger key
`reservation:<ns>/<name>:<YYYY-MM>`, idempotent: a retry or a crash never charges twice); apply every tenant's
reservation ClusterQueue, the lender queue of unreserved GPUs and the pools' ResourceFlavors (and delete queues
of tenants without reservations);
write status (`state`, `cancelledAt`, `capacityCheck`, conditions `CapacityConfirmed`, `KueueSynced`, `Charged`)
and an Event per state change. Requeued at the next transition (window start, end, a new month) through timers,
so a ManualClock drives the whole lifecycle; siblings in the pool are enqueued when one's state changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from maasctl.api import parse
from maasctl.billing import money
from maasctl.billing.api import Reservation
from maasctl.billing.api.kinds import CLUSTER_QUEUE, KUEUE_KINDS, NODE, RESERVATION, RESOURCE_FLAVOR, TENANT_ACCOUNT
from maasctl.billing.api.reservation import ReservationClass, ReservationState
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.controller.timers import Timers
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.entries import reservation_fee
from maasctl.billing.rules import identity, names
from maasctl.billing.rules import reservation as rsv
from maasctl.billing.rules.catalog import Catalog
from maasctl.runtime import NotFound, Request, Result, set_condition, thaw
from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import FrozenObject

__all__ = ["ReservationReconciler", "reservation_state_changed"]

CAPACITY_CONFIRMED, KUEUE_SYNCED, CHARGED = "CapacityConfirmed", "KueueSynced", "Charged"
_RECHECK_SECONDS = 30
_HELD = (ReservationState.CONFIRMED.value, ReservationState.ACTIVE.value)


def reservation_state_changed(event: Event) -> bool:
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    return bool((event.old.get("status") or {}).get("state") != (event.obj.get("status") or {}).get("state"))


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class View:
    """One Reservation from the cache, as admission and the queues need it (None when it cannot be read)."""

    def __init__(self, obj: FrozenObject, model: Reservation) -> None:
        meta = obj["metadata"]
        spec = model.spec
        self.obj = obj
        self.model = model
        self.key = f"{meta.get('namespace')}/{meta['name']}"
        self.namespace = str(meta.get("namespace"))
        self.tenant = spec.tenant_ref
        self.start = spec.window.start
        self.end = rsv.window_end(spec.window.end)
        status = obj.get("status") or {}
        self.was = status.get("state")
        self.cancelled = bool((meta.get("annotations") or {}).get(rsv.CANCELLED_ANNOTATION)) or \
            self.was == ReservationState.CANCELLED.value
        self.cancelled_at = _time(status.get("cancelledAt"))
        ended = (ReservationState.EXPIRED.value, ReservationState.CANCELLED.value)
        self.confirmed = self.was in _HELD or (self.was in ended and bool(
            (status.get("capacityCheck") or {}).get("available")))
        self.ask = rsv.Ask(self.key, rsv.Pool(spec.geo, spec.sku), spec.count, self.start, self.end, spec.class_,
                           (str(meta.get("creationTimestamp") or ""), str(meta["name"])),
                           confirmed=self.was in _HELD)

    @classmethod
    def of(cls, obj: FrozenObject) -> View | None:
        try:
            return cls(obj, parse(Reservation, thaw(obj)))
        except ValidationError:
            return None


class ReservationReconciler:
    def __init__(self, ctx: BillingContext, ledger: Ledger | None, catalog: Callable[[], Catalog],
                 timers: Timers) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.catalog = catalog
        self.timers = timers

    def views(self) -> list[View]:
        return [v for v in (View.of(o) for o in self.ctx.cache.list(RESERVATION)) if v is not None]

    def decide(self, views: list[View], capacity: dict[rsv.Pool, int], now: datetime
               ) -> dict[str, tuple[ReservationState, rsv.Admission | None, bool]]:
        """Per reservation: its state now, its admission (None when not live) and whether it counts as held."""
        by_pool: dict[rsv.Pool, list[View]] = {}
        for v in views:
            by_pool.setdefault(v.ask.pool, []).append(v)
        out: dict[str, tuple[ReservationState, rsv.Admission | None, bool]] = {}
        for pool, members in by_pool.items():
            live = [v for v in members if not v.cancelled and now < v.end]
            admitted = rsv.admit(capacity.get(pool, 0), [v.ask for v in live])
            for v in members:
                adm = admitted.get(v.key)
                confirmed = v.confirmed or bool(adm and adm.available)
                state = rsv.lifecycle(cancelled=v.cancelled, confirmed=confirmed, start=v.start, end=v.end, now=now)
                out[v.key] = (state, adm, confirmed)
        return out

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        now = ctx.clock.now()
        views = self.views()
        capacity = rsv.capacities(ctx.cache.list(NODE))
        decisions = self.decide(views, capacity, now)
        kueue = await self.sync_queues(views, decisions, capacity, now)
        obj = ctx.cache.get(RESERVATION, req.name, req.namespace)
        view = next((v for v in views if v.key == req.key), None)
        if obj is None:
            self.timers.forget(req)
            return Result.done()
        if view is None:
            await ctx.event(obj, "Warning", "InvalidReservation", "cannot read this Reservation")
            return Result.done()
        state, adm, confirmed = decisions[view.key]
        spec = view.model.spec
        cancelled_at = view.cancelled_at or (now if state == ReservationState.CANCELLED else None)
        segments = rsv.month_segments(view.start, view.end, spec.monthly_price)
        charged = await self.charge(view, segments, now, cancelled_at, confirmed)
        if self._reclaimed(view, state, capacity, decisions, views, now):
            adm = rsv.Admission(False, "Reclaimed", f"Guaranteed reservations of pool {view.ask.pool.name} need its "
                                "GPUs now: its borrowable Kueue quota is reduced (Preemptible capacity is reclaimed "
                                "first)")
        status: dict[str, Any] = {
            "state": state.value,
            "observedGeneration": int(obj["metadata"].get("generation", 0)),
            "conditions": self.conditions(obj, view, state, adm, confirmed, capacity, kueue, charged, now),
        }
        if cancelled_at is not None:
            status["cancelledAt"] = _rfc3339(cancelled_at)
        if adm is not None:
            status["capacityCheck"] = {"available": adm.available or adm.reason == "Reclaimed",
                                       "pool": view.ask.pool.name}
        await ctx.apply_status(obj, status)
        if view.was != state.value:
            await ctx.event(obj, "Warning" if state == ReservationState.REQUESTED and adm and not adm.available
                            else "Normal", state.value, f"{view.was or 'new'} -> {state.value}")
            log.info("reservation state", reservation=view.key, state=state.value, previous=view.was)
        if state in (ReservationState.CANCELLED, ReservationState.EXPIRED):
            return self.timers.after(req, None)
        result = self.timers.after(req, rsv.next_transition(view.start, view.end, segments, now))
        if state == ReservationState.REQUESTED or charged[0] is False:
            return Result.requeue_after(_RECHECK_SECONDS)  # capacity may free up, the ledger may come back
        return result

    def _reclaimed(self, view: View, state: ReservationState, capacity: dict[rsv.Pool, int],
                   decisions: dict[str, tuple[ReservationState, rsv.Admission | None, bool]], views: list[View],
                   now: datetime) -> bool:
        if state != ReservationState.ACTIVE or view.ask.klass != ReservationClass.PREEMPTIBLE:
            return False
        active = [v.ask for v in views if v.ask.pool == view.ask.pool and decisions[v.key][0] ==
                  ReservationState.ACTIVE]
        return rsv.reclaim(capacity.get(view.ask.pool, 0), active).get(view.key, 0) < view.ask.count

    async def charge(self, view: View, segments: list[rsv.Segment], now: datetime, cancelled_at: datetime | None,
                     confirmed: bool) -> tuple[bool | None, str]:
        """(True: every due month charged; False: could not; None: nothing due), and a message."""
        if self.ledger is None:
            return None, "no ledger configured (--ledger-url): reservations are not charged"
        if not confirmed:
            return None, "not confirmed: nothing is charged"
        if self.ctx.cache.get(TENANT_ACCOUNT, view.tenant, view.namespace) is None:
            return False, f"TenantAccount {view.namespace}/{view.tenant} does not exist"
        owed = rsv.due(segments, now, cancelled_at)
        if not owed:
            return None, f"nothing is due before {_rfc3339(segments[0].start)}" if segments else "nothing is due"
        tenant = f"{view.namespace}/{view.tenant}"
        currency = self.currency(view, now)
        spec = view.model.spec
        txs = [reservation_fee(view.key, tenant, s.month, s.start, s.amount, currency=currency, details={
            "monthlyPrice": money.fmt(spec.monthly_price), "coveredSeconds": s.covered_seconds,
            "monthSeconds": s.month_seconds, "class": spec.class_.value, "sku": spec.sku, "geo": spec.geo,
            "count": spec.count, "rounding": "half-even to 6 places, once per month"}) for s in owed]
        try:
            await self.ledger.ensure_schema()
            result = await self.ledger.post(txs)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("reservation charge failed", reservation=view.key, error=str(exc)[:300])
            return False, f"the ledger cannot be written: {exc}"[:1024]
        if result.conflicts:
            return False, f"ledger entries {list(result.conflicts)} exist with different content: not charged again"
        total = sum((s.amount for s in owed), Decimal(0))
        return True, "charged " + ", ".join(f"{s.month}: {money.fmt(s.amount)}" for s in owed) + \
            f" (total {money.fmt(money.quantize(total))} {currency})"

    def currency(self, view: View, now: datetime) -> str:
        catalog = self.catalog()
        tenant = self.ctx.cache.get(TENANT_ACCOUNT, view.tenant, view.namespace)
        ref = catalog.tenants.get(identity.tenant_id(tenant)) if tenant is not None else None
        book = catalog.book_for(ref, now) if ref is not None else None
        return str(book.spec.currency) if book is not None else "USD"

    async def sync_queues(self, views: list[View], decisions: dict[str, tuple[ReservationState, Any, bool]],
                          capacity: dict[rsv.Pool, int], now: datetime) -> str | None:
        """Apply every tenant's reservation ClusterQueue (None: synced; else why not)."""
        ctx = self.ctx
        if ctx.missing_apis(*KUEUE_KINDS):
            return "Kueue is not installed: no ClusterQueue"
        tenants: dict[tuple[str, str], dict[rsv.Pool, tuple[int, int]]] = {}
        active_by_pool: dict[rsv.Pool, list[rsv.Ask]] = {}
        for v in views:
            tenants.setdefault((v.namespace, v.tenant), {})
            if decisions[v.key][0] == ReservationState.ACTIVE:
                active_by_pool.setdefault(v.ask.pool, []).append(v.ask)
        granted: dict[str, int] = {}
        for pool, asks in active_by_pool.items():
            granted |= rsv.reclaim(capacity.get(pool, 0), asks)
        for v in views:
            if decisions[v.key][0] != ReservationState.ACTIVE:
                continue
            quota = tenants[(v.namespace, v.tenant)]
            g, p = quota.get(v.ask.pool, (0, 0))
            if v.ask.klass == ReservationClass.GUARANTEED:
                g += v.ask.count
            else:
                p += granted.get(v.key, 0)
            quota[v.ask.pool] = (g, p)
        free = rsv.unreserved(capacity, [a for asks in active_by_pool.values() for a in asks])
        wanted = {rsv.LENDER_QUEUE}
        try:
            for pool in free:
                await self.ensure_flavor(pool)
            await ctx.applier.apply(rsv.lender_queue(free))
            for (ns, tenant), quota in sorted(tenants.items(), key=lambda t: t[0]):
                tenant_obj = ctx.cache.get(TENANT_ACCOUNT, tenant, ns)
                org = identity.tenant_id(tenant_obj) if tenant_obj is not None else tenant
                for pool in quota:
                    await self.ensure_flavor(pool)
                queue = rsv.reservation_queue(ns, tenant, org, quota)
                wanted.add(queue["metadata"]["name"])
                await ctx.applier.apply(queue)
            for live in ctx.cache.list(CLUSTER_QUEUE, labels={"app.kubernetes.io/component": "reservations",
                                                              names.MANAGED_BY_LABEL: names.MANAGED_BY}):
                if live["metadata"]["name"] not in wanted:
                    with contextlib.suppress(NotFound):
                        await ctx.client.delete(CLUSTER_QUEUE, str(live["metadata"]["name"]), None)
        except Exception as exc:  # reported on every reservation's KueueSynced; retried
            log.warning("reservation queues not synced", error=str(exc)[:300])
            return f"applying the reservation ClusterQueues failed: {exc}"[:1024]
        return None

    async def ensure_flavor(self, pool: rsv.Pool) -> None:
        flavor = rsv.reservation_flavor(pool)
        if self.ctx.cache.peek(RESOURCE_FLAVOR, flavor["metadata"]["name"]) is None:
            await self.ctx.applier.apply(flavor)

    def conditions(self, obj: FrozenObject, view: View, state: ReservationState, adm: rsv.Admission | None,
                   confirmed: bool, capacity: dict[rsv.Pool, int], kueue: str | None,
                   charged: tuple[bool | None, str], now: datetime) -> Any:
        generation = int(obj["metadata"].get("generation", 0))
        stamp = _rfc3339(now)

        def cond(conds: Any, type_: str, status: str, reason: str, message: str) -> Any:
            return set_condition(conds, type_=type_, status=status, reason=reason, message=message[:4096],
                                 observed_generation=generation, now=stamp)

        c = (obj.get("status") or {}).get("conditions")
        if adm is None:
            held = "True" if confirmed else "False"
            c = cond(c, CAPACITY_CONFIRMED, held, state.value, f"the reservation is {state.value}")
        else:
            c = cond(c, CAPACITY_CONFIRMED, "True" if adm.available else "False", adm.reason, adm.message)
        pool = capacity.get(view.ask.pool, 0)
        if kueue is not None:
            c = cond(c, KUEUE_SYNCED, "False", "KueueNotSynced", kueue)
        else:
            where = rsv.queue_name(view.namespace, view.tenant)
            active = state == ReservationState.ACTIVE
            c = cond(c, KUEUE_SYNCED, "True", "Synced",
                     f"ClusterQueue {where} " + (f"holds its {view.ask.count} GPU(s) of pool {view.ask.pool.name} "
                                                 f"({pool} in the pool)" if active else
                                                 "does not hold it (not active)"))
        done, message = charged
        c = cond(c, CHARGED, "True" if done else "False",
                 "Charged" if done else ("ChargeFailed" if done is False else "NotDue"), message)
        return c
