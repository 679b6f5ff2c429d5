"""`serve(settings)`: run maas-api on uvicorn with the real identity and subscription sources."""

from __future__ import annotations

import structlog
import uvicorn

from maasctl.eventloop import run, tune_gc
from maasctl.httpguard import HttpGuard, HttpLimits, uvicorn_options
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import KubeAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import CachedSources
from maasctl.runtime import Client
from maasctl.runtime.connect import connect

log = structlog.get_logger("maasctl.maasapi")


async def serve_async(settings: MaasApiSettings) -> None:
    api = await connect(settings.kubeconfig)
    try:
        sources = CachedSources(Client(api), settings.subscription_namespace)
        sources.start()
        app = create_app(
            settings,
            sources,
            KubeAuthenticator(api, cache_seconds=settings.token_cache_seconds),
            model_source=sources,
        )
        limits = HttpLimits()
        config = uvicorn.Config(
            HttpGuard(app, limits),
            host=settings.host,
            port=settings.port,
            access_log=False,
            log_config=None,
            lifespan="on",
            server_header=False,
            **uvicorn_options(limits),
        )
        server = uvicorn.Server(config)
        if settings.key_pepper is None:
            log.warning("maasapi_default_pepper", hint="set a key pepper for production deployments")
        log.info(
            "maasapi_starting",
            host=settings.host,
            port=settings.port,
            database=settings.database_url.split("://", 1)[0],
        )
        tune_gc()
        try:
            await server.serve()
        finally:
            await sources.stop()
    finally:
        await api.close()


def serve(settings: MaasApiSettings) -> None:
    """Blocking entry point for `maasctl api`, on the event loop `uvicorn.run` would pick (uvloop when installed:
    `Server.serve` inside a plain `asyncio.run` ran on the slower default loop, unlike the benchmark)."""
    run(serve_async(settings))
