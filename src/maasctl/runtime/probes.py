"""HTTP endpoints for probes (/healthz, /readyz) and Prometheus (/metrics), on aiohttp.

Bind addresses follow controller-runtime: ``":8080"`` (all interfaces), ``"127.0.0.1:0"`` (ephemeral
port, useful in tests), ``"0"`` or ``""`` (disabled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Check", "HttpServer", "parse_bind_address"]

# A check returns None when fine, or a short reason when failing.
Check = Callable[[], str | None]


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (host optional) -> (host, port); ``"0"``/``""`` -> None (disabled)."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


@dataclass(frozen=True, slots=True)
class _Named:
    name: str
    check: Check


def _run_checks(checks: list[_Named], verbose: bool, notes: Sequence[str] = ()) -> web.Response:
    lines, failed = list(notes), False
    for c in checks:
        reason = c.check()
        if reason is None:
            lines.append(f"[+]{c.name} ok")
        else:
            failed = True
            lines.append(f"[-]{c.name} failed: {reason}")
    summary = "failed" if failed else "ok"
    body = "\n".join([*lines, summary]) if verbose or failed else summary
    return web.Response(status=500 if failed else 200, text=body + "\n")


class HttpServer:
    """One aiohttp server serving any of probes and metrics."""

    def __init__(self) -> None:
        self._app = web.Application()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def add_probes(self, healthz: list[_Named], readyz: list[_Named], *, notes: Callable[[], list[str]] = list) -> None:
        async def health(request: web.Request) -> web.Response:
            return _run_checks(healthz, "verbose" in request.query)

        async def ready(request: web.Request) -> web.Response:
            return _run_checks(readyz, "verbose" in request.query, notes())

        self._app.router.add_get("/healthz", health)
        self._app.router.add_get("/readyz", ready)

    def add_metrics(self, registry: CollectorRegistry) -> None:
        async def metrics(_: web.Request) -> web.Response:
            resp = web.Response(body=generate_latest(registry))
            resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
            return resp

        self._app.router.add_get("/metrics", metrics)

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def named(name: str, check: Check) -> _Named:
    return _Named(name, check)
