"""The objects that bring a PSP's webhook deliveries to the psp-connector, for a BillingConnector with
`webhookIngress` (pure: the connector's reconciler applies them).

An Ingress routes to a Service of its own namespace only. The connector's Service (`psp-connector`, installed in
the connector's namespace) serves a BillingConnector of that namespace as it is. For one in another namespace
the connector generates, beside the Ingress, a Service of type ExternalName in the BillingConnector's namespace
that names the installed Service's cluster DNS name; both are owned by the BillingConnector, so the garbage
collector deletes them with it. The ExternalName is built from the connector's settings only, never from the
BillingConnector's spec: whoever writes a BillingConnector cannot point a generated Service anywhere else.
Ingress controllers that do not follow ExternalName backends need their own route to `psp-connector`
(docs/install.md).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MANAGED_BY", "WebhookRoute", "service_name", "webhook_objects"]

MANAGED_BY: Final = "psp-connector"
_PREFIX: Final = "psp-webhook-"
_DNS_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class WebhookRoute:
    """Where the connector's own webhook Service is: its namespace (empty: unknown, every Ingress routes to
    `name` in its own namespace, as before the connector generated Services), name and port."""

    namespace: str
    name: str = "psp-connector"
    port: int = 8443


def service_name(connector: str) -> str:
    """The generated Service's name: `psp-webhook-<connector>` when that is a DNS-1035 label (what a Service
    name must be), else `psp-webhook-` and a hash of the connector's name (a BillingConnector's name may hold
    dots or be longer than 63 characters)."""
    plain = f"{_PREFIX}{connector}"
    if _DNS_LABEL.fullmatch(plain):
        return plain
    return f"{_PREFIX}{hashlib.sha256(connector.encode()).hexdigest()[:32]}"


def webhook_objects(connector: Mapping[str, Any], host: str, tls_secret: str | None, path: str,
                    route: WebhookRoute) -> tuple[dict[str, Any], ...]:
    """The Service (only for a BillingConnector outside `route.namespace`) and the Ingress, in apply order."""
    meta = connector["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    owned = {"labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
             "ownerReferences": [{"apiVersion": connector["apiVersion"], "kind": "BillingConnector",
                                  "name": name, "uid": meta["uid"], "controller": True}]}
    out: list[dict[str, Any]] = []
    backend = route.name
    if route.namespace and namespace != route.namespace:
        backend = service_name(name)
        out.append({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": backend, "namespace": namespace, **owned},
                    "spec": {"type": "ExternalName",
                             "externalName": f"{route.name}.{route.namespace}.svc.cluster.local",
                             "ports": [{"name": "webhook", "port": route.port, "protocol": "TCP"}]}})
    spec: dict[str, Any] = {"rules": [{"host": host, "http": {"paths": [{
        "path": path, "pathType": "Exact",
        "backend": {"service": {"name": backend, "port": {"number": route.port}}}}]}}]}
    if tls_secret is not None:
        spec["tls"] = [{"hosts": [host], "secretName": tls_secret}]
    out.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": f"{_PREFIX}{name}"[:253], "namespace": namespace, **owned}, "spec": spec})
    return tuple(out)
