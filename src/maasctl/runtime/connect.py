"""One way to get an ApiClient: a kubeconfig file, else the in-cluster service account, else ~/.kube/config.

The proxy environment (HTTPS_PROXY, NO_PROXY, ...) is read once here, not by aiohttp on every request: a
session that trusts the environment re-reads it and stats ~/.netrc per request, a few percent of the
controller's CPU when it converges.
"""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

__all__ = ["connect"]


async def connect(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient for `kubeconfig` (and `context`); without one, the in-cluster config, falling back to
    ~/.kube/config."""
    configuration = k8s.Configuration()
    if kubeconfig:
        await k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                          client_configuration=configuration)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            await k8s_config.load_kube_config(client_configuration=configuration)
    if not configuration.proxy:
        configuration.proxy = proxy_from_environment(configuration.host or "")
    api = k8s.ApiClient(configuration)
    rest = api.rest_client
    trusting = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(connector=trusting.connector, trust_env=False,
                                              read_bufsize=2**21)  # as kubernetes_asyncio: large watch events
    trusting.detach()  # the connector now belongs to the new session
    return api


def proxy_from_environment(url: str) -> str | None:
    """The proxy the environment names for `url` (scheme proxy unless NO_PROXY exempts the host), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return proxies.get(parts.scheme) or None
