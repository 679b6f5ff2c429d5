"""One way to get an ApiClient: a kubeconfig file, else the in-cluster service account, else ~/.kube/config."""

from __future__ import annotations

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
    return k8s.ApiClient(configuration)
