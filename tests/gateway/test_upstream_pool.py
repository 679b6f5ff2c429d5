"""The gateway's upstream connection pool drops an idle connection before the model server would: a request
that reuses a connection at the instant the server closes it fails (aiohttp's ServerDisconnectedError, a 503 to
the caller), so the pool must never hold a connection as long as a server keeps it."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client as k8s

from maasctl.gateway import Gateway, GatewaySettings, start_http
from maasctl.gateway.usage import MemorySink
from maasctl.httpguard import HttpLimits
from maasctl.runtime import Client
from maasctl.testmodel import ModelServerConfig
from maasctl.testmodel import create_app as model_app


def test_the_default_pool_lets_go_before_our_own_servers_do() -> None:
    assert GatewaySettings(gateway_name="gw", gateway_namespace="ns").upstream_keepalive_seconds < \
        HttpLimits().keep_alive_timeout


async def test_an_idle_upstream_connection_is_closed_by_the_gateway_first() -> None:
    model = await start_http(model_app(ModelServerConfig(models=("m",))),
                             limits=HttpLimits(keep_alive_timeout=30, header_timeout=30))
    api = k8s.ApiClient()
    gateway = Gateway(GatewaySettings(gateway_name="gw", gateway_namespace="ns", upstream_keepalive_seconds=0.5),
                      Client(api), sink=MemorySink())
    try:
        async with gateway.upstream.post(f"{model.url}/v1/chat/completions",
                                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}) as r:
            assert r.status == 200
            await r.read()
        connections = model.server.server_state.connections
        assert len(connections) == 1  # kept alive for the next request
        for _ in range(50):  # the server would keep it 30 s; the gateway lets go after 0.5 s
            if not connections:
                break
            await asyncio.sleep(0.1)
        assert not connections
    finally:
        await gateway.stop()
        await api.close()
        await model.stop()
