"""maasctl: a Models-as-a-Service control plane for Kubernetes."""

from maasctl import lazy_kube_client

__version__ = "0.1.0"

lazy_kube_client.install()  # before any module of the package imports kubernetes-asyncio
