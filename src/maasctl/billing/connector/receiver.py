"""The webhook receiver: `POST /webhooks/<namespace>/<connector>`.

Per delivery, in this order: the connector must be registered (404 otherwise: its reconciler has read its
Secret); the body at most `MAX_BODY` bytes (413); the signature valid for the connector's secret, with the replay
window (400, counted as a signature failure); the body a readable event (400); then the event is applied once
(`Payments.apply`: a redelivered or replayed event id is a duplicate, answered 200 so the PSP stops retrying, and
changes nothing). Every delivery is logged in `billing_psp_webhooks` (the connector's `received24h` and
`signatureFailures`) and counted in `maasctl_billing_psp_webhooks_total{outcome}`; the answer never says more
than the outcome, and nothing of the body or the secret is logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import structlog
from aiohttp import web
from prometheus_client import Counter

from maasctl.billing.connector.payments import Applied, Payments
from maasctl.billing.connector.providers import Provider
from maasctl.billing.rules.clock import Clock
from maasctl.billing.rules.psp_events import MAX_BODY, BadEvent
from maasctl.httpguard import start_aiohttp

__all__ = ["DELIVERIES", "Receiver", "Registered", "Registry"]

log = structlog.get_logger("maasctl.billing.connector")
DELIVERIES: Final = Counter("maasctl_billing_psp_webhooks", "Webhook deliveries to the psp-connector by outcome",
                            ["outcome"])


@dataclass
class Registered:
    key: str  # namespace/name of the BillingConnector
    provider: Provider
    version: str  # the credentials Secret's resourceVersion it was built from


@dataclass
class Registry:
    """The connectors whose credentials are loaded (by the BillingConnector reconciler)."""

    connectors: dict[str, Registered] = field(default_factory=dict)

    def get(self, key: str) -> Registered | None:
        return self.connectors.get(key)

    async def put(self, entry: Registered) -> None:
        old = self.connectors.get(entry.key)
        self.connectors[entry.key] = entry
        if old is not None and old.provider is not entry.provider:
            await old.provider.close()

    async def drop(self, key: str) -> None:
        old = self.connectors.pop(key, None)
        if old is not None:
            await old.provider.close()

    async def close(self) -> None:
        for key in list(self.connectors):
            await self.drop(key)


class Receiver:
    def __init__(self, registry: Registry, payments: Payments, clock: Clock,
                 tenant_of_connector: Callable[[str, str | None], str | None],
                 on_applied: Callable[[str, Applied], None]) -> None:
        self.registry = registry
        self.payments = payments
        self.clock = clock
        self.tenant_of_connector = tenant_of_connector  # the named tenant, if the connector serves it
        self.on_applied = on_applied
        self.runner: web.AppRunner | None = None
        self.port: int | None = None
        self._lock = asyncio.Lock()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/webhooks/{namespace}/{name}", self.handle)
        app.router.add_get("/healthz", self.health)
        return app

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def start(self, bind: str) -> int:
        self.runner, self.port = await start_aiohttp(self.app(), bind)
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @property
    def serving(self) -> bool:
        return self.runner is not None

    async def _outcome(self, connector: str, outcome: str) -> None:
        DELIVERIES.labels(outcome).inc()
        await self.payments.log_delivery(connector, outcome, self.clock.now())

    async def handle(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        entry = self.registry.get(key)
        if entry is None:
            DELIVERIES.labels("unknown_connector").inc()
            return web.json_response({"error": "unknown connector"}, status=404)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            await self._outcome(key, "too_large")
            return web.json_response({"error": "body too large"}, status=413)
        now = self.clock.now()
        verdict = entry.provider.verify(body, request.headers.get(entry.provider.signature_header_name()),
                                        int(now.timestamp()))
        if verdict != "Valid":
            await self._outcome(key, "signature_failure")
            log.warning("webhook signature refused", connector=key, reason=verdict)
            return web.json_response({"error": "signature verification failed"}, status=400)
        try:
            inbound = entry.provider.parse(body)
        except BadEvent as exc:
            await self._outcome(key, "invalid")
            log.warning("webhook body refused", connector=key, reason=str(exc))
            return web.json_response({"error": "not a readable event"}, status=400)
        applied = await self.payments.apply(key, inbound, now, self.tenant_of_connector(key, inbound.tenant))
        await self._outcome(key, applied.outcome)
        log.info("webhook applied", connector=key, event_id=inbound.event_id, type=inbound.type,
                 outcome=applied.outcome, tenant=applied.tenant)
        self.on_applied(key, applied)
        return web.json_response({"received": True, "outcome": applied.outcome})
