"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timing rules.

Expected flow: ``acquire`` tries every ``retry_period`` until the lease is free or expired, then takes it;
meanwhile it watches the Lease, so a holder's ``release`` (on clean shutdown) hands over at once instead of at
the next try. ``hold`` renews every ``retry_period`` and raises ``LeaderElectionLost`` when no renewal
succeeded for ``renew_deadline``; ``release`` clears the holder so a successor need not wait for expiry.

Guarantees: a candidate takes over only after observing no change to the lease for ``lease_duration``,
measured on its own monotonic clock (never trusting other machines' timestamps). ``is_leader`` turns False
as soon as ``renew_deadline`` passed since the last successful renewal, even if the renew loop is stuck, so
a write gate built on it stops a deposed leader from writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from maasctl.runtime.client import Client
from maasctl.runtime.errors import ApiError, Conflict, LeaderElectionLost, NotFound
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.metrics import Metrics

__all__ = ["LEASE", "LeaderElectionOptions", "LeaderElector"]

LEASE = GroupVersionKind("coordination.k8s.io", "v1", "Lease")
log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, kw_only=True)
class LeaderElectionOptions:
    """Leader election settings; timings are controller-runtime's defaults (15 s / 10 s / 2 s)."""

    enabled: bool = False
    namespace: str = "default"
    name: str = "maasctl-leader"
    identity: str = ""  # empty: hostname plus a random suffix
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > 1.2 * self.retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Competes for one Lease. ``client`` must be ungated (the lease writes are what make us leader)."""

    def __init__(self, client: Client, options: LeaderElectionOptions, *, metrics: Metrics | None = None) -> None:
        self._client = client
        self.options = options
        self.identity = options.identity or default_identity()
        self._metrics = metrics
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew: float | None = None

    @property
    def is_leader(self) -> bool:
        """True while we hold the lease and renewed it within ``renew_deadline``."""
        return self._last_renew is not None and time.monotonic() - self._last_renew < self.options.renew_deadline

    def _set_leader(self, leader: bool) -> None:
        if not leader:
            self._last_renew = None
        if self._metrics is not None:
            self._metrics.leader_election_master_status.labels(self.options.name).set(1 if leader else 0)

    def _sleep_time(self) -> float:
        return self.options.retry_period * random.uniform(1.0, 1.2)

    async def acquire(self, *, while_waiting: Callable[[], Awaitable[None]] | None = None) -> None:
        """Return once this candidate holds the lease (cancel to give up); ``while_waiting`` runs once, after the
        first try that did not get it."""
        freed = asyncio.Event()
        watcher = asyncio.create_task(self._watch_for_release(freed), name="leader-lease-watch")
        try:
            while True:
                freed.clear()
                if await self._try_acquire_or_renew():
                    log.info("acquired leader lease", extra={"lease": self.options.name, "identity": self.identity})
                    return
                if while_waiting is not None:
                    await while_waiting()
                    while_waiting = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._sleep_time()):
                        await freed.wait()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _watch_for_release(self, freed: asyncio.Event) -> None:
        """Set ``freed`` whenever the Lease has no holder or is deleted. Only a shortcut: when the watch fails
        (e.g. an install whose Role lacks ``watch`` on leases) the tries every ``retry_period`` still take over."""
        warned = False
        while True:
            try:
                async for event in self._client.watch(
                    LEASE, self.options.namespace, resource_version="",
                    field_selector=f"metadata.name={self.options.name}", bookmarks=False,
                ):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "DELETED" or (kind in ("ADDED", "MODIFIED")
                                             and not (obj.get("spec") or {}).get("holderIdentity")):
                        freed.set()  # an ERROR event carries a Status, not a lease: it frees nothing
                pause = 1.0  # the server ended the stream (its timeout): open the next one
            except Exception as exc:  # forbidden, unreachable, a broken stream: the tries go on without it
                if not warned:
                    log.warning("cannot watch the leader lease; taking over at the next try only",
                                extra={"lease": self.options.name, "error": str(exc)})
                    warned = True
                pause = self.options.lease_duration
            await asyncio.sleep(pause)

    async def hold(self) -> None:
        """Renew forever. Raises ``LeaderElectionLost`` when renewal fails for ``renew_deadline``."""
        while True:
            await asyncio.sleep(self.options.retry_period)
            ok = False
            try:
                async with asyncio.timeout(self.options.retry_period):
                    ok = await self._try_acquire_or_renew()
            except TimeoutError:
                ok = False
            if not ok and not self.is_leader:
                self._set_leader(False)
                log.error("leader lease lost", extra={"lease": self.options.name, "identity": self.identity})
                raise LeaderElectionLost(f"lost lease {self.options.namespace}/{self.options.name}")

    async def release(self) -> None:
        """Give the lease up if we hold it (best effort, on clean shutdown)."""
        was_leader = self.is_leader
        self._set_leader(False)
        if not was_leader:
            return
        try:
            lease = await self._client.get(LEASE, self.options.name, self.options.namespace)
            if lease["spec"].get("holderIdentity") != self.identity:
                return
            now = _micro_time()
            lease["spec"].update(
                {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
            )
            async with asyncio.timeout(self.options.retry_period):
                await self._client.replace(lease)
            log.info("released leader lease", extra={"lease": self.options.name})
        except (ApiError, TimeoutError) as exc:
            log.warning("could not release leader lease", extra={"error": str(exc)})

    async def _try_acquire_or_renew(self) -> bool:
        opts = self.options
        now = _micro_time()
        mine = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(opts.lease_duration),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        try:
            lease = await self._client.get(LEASE, opts.name, opts.namespace)
        except NotFound:
            body = {
                "apiVersion": LEASE.api_version,
                "kind": LEASE.kind,
                "metadata": {"name": opts.name, "namespace": opts.namespace},
                "spec": mine,
            }
            try:
                created = await self._client.create(body)
            except ApiError:
                return False
            self._observe(created["spec"])
            self._renewed()
            return True
        except ApiError as exc:
            log.warning("reading leader lease failed", extra={"error": str(exc)})
            return False
        spec: dict[str, Any] = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observe(spec)
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or opts.lease_duration)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else and not expired
        if holder == self.identity:
            mine["acquireTime"] = spec.get("acquireTime") or now
            mine["leaseTransitions"] = spec.get("leaseTransitions") or 0
        else:
            mine["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = mine
        try:
            updated = await self._client.replace(lease)  # resourceVersion = optimistic lock
        except Conflict:
            return False
        except ApiError as exc:
            log.warning("updating leader lease failed", extra={"error": str(exc)})
            return False
        self._observe(updated["spec"])
        self._renewed()
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        self._observed_spec = spec
        self._observed_at = time.monotonic()

    def _renewed(self) -> None:
        self._last_renew = time.monotonic()
        self._set_leader(True)
