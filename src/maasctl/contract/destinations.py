"""Where the data plane (and the console, fetching a provider's model list) may be sent: the rule, written once.

The gateway sits inside the cluster, so a namespace admin choosing an ExternalModel's destination must not be able
to aim it at what only the gateway's network position reaches (cloud metadata, the API server, another
namespace's Services); the console, importing a provider, asks its model list from the same position and so
follows the same rule (docs/security.md, "Where the gateway may be sent").
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from typing import Final

__all__ = ["destination_problem"]

# A last label resolvers read as a number (inet_aton, the WHATWG URL parser): the whole name is then an address.
_NUMERIC_LABEL_RE: Final = re.compile(r"0x[0-9a-f]*|[0-9]+")
_API_SERVER_NAMES: Final = frozenset({"kubernetes", "kubernetes.default", "kubernetes.default.svc"})
# Cloud metadata services known by name or by an address outside the link-local ranges.
_METADATA_NAMES: Final = frozenset({"metadata.google.internal", "metadata"})
_METADATA_ADDRESSES: Final = frozenset({ipaddress.ip_address("fd00:ec2::254")})
# IPv6 forms that carry an IPv4 address in their last 32 bits (mapped, NAT64, the deprecated compatible form).
_EMBEDDING_V4: Final = (ipaddress.ip_network("::ffff:0:0/96"), ipaddress.ip_network("64:ff9b::/96"),
                        ipaddress.ip_network("::/96"))


def _bare_host(host: str) -> str:
    """The host as resolvers compare it: lowercase, no IPv6 brackets, no trailing root dot."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name.rstrip(".")


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form routes to; `::` and `::1` are IPv6's own (unspecified, loopback)."""
    if address in (ipaddress.IPv6Address("::"), ipaddress.IPv6Address("::1")):
        return None
    if any(address in net for net in _EMBEDDING_V4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Link-local (169.254.0.0/16, fe80::/10; cloud metadata lives there) and known metadata addresses are refused;
    loopback and private ranges are not (local development and in-cluster providers use them)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_v4(address)
        if embedded is not None:
            return _address_problem(embedded)
    if address.is_link_local:
        return "is a link-local address (cloud metadata and node-local services live there)"
    if address in _METADATA_ADDRESSES:
        return "is a cloud metadata service"
    return None


def _cluster_name_problem(labels: list[str], namespace: str | None, shared: Collection[str]) -> str | None:
    """In-cluster DNS names: `<svc>.<ns>.svc[.<cluster domain>]` only for the caller's own namespace or one the
    operator shares (`shared`: another namespace's Service needs a ReferenceGrant, which an ExternalName
    destination bypasses); pod names (`<a-b-c-d>.<ns>.pod...`) never, since they resolve to whatever address
    they spell."""
    for index, label in enumerate(labels[1:], start=1):
        if label == "pod":
            return "is an in-cluster pod DNS name (it resolves to the address it spells)"
        if label != "svc":
            continue
        owner = labels[index - 1] if index >= 2 else None
        if owner is None:
            return "is an in-cluster DNS name without a Service"
        if namespace is not None and owner != namespace and owner not in shared:
            return f"is a Service of namespace {owner!r}; only Services of namespace {namespace!r} may be named"
    return None


def destination_problem(host: str, namespace: str | None = None, shared: Collection[str] = ()) -> str | None:
    """Why the data plane must not be sent to `host`, None when it may.

    Refused: link-local and metadata addresses (also as IPv4-mapped/NAT64 IPv6), numeric hosts that are not a
    canonical dotted quad (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`: resolvers read them as addresses the
    other rules would not recognise), the API server's names, pod DNS names, and Service names of a namespace other
    than `namespace` and the `shared` ones (None: the namespace is not known, that rule is skipped). Loopback,
    private addresses and
    ordinary DNS names pass. Names are not resolved: a public name pointing at a refused address is the egress
    policy's to stop (docs/security.md, Known limits).
    """
    name = _bare_host(host)
    if not name:
        return "is empty"
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    if address is not None:
        return _address_problem(address)
    labels = name.split(".")
    if _NUMERIC_LABEL_RE.fullmatch(labels[-1]):
        return "is a numeric address that is not a canonical dotted quad (e.g. 10.0.0.1)"
    if name in _API_SERVER_NAMES or name.startswith("kubernetes.default.svc."):
        return "is the Kubernetes API server"
    if name in _METADATA_NAMES:
        return "is a cloud metadata service"
    return _cluster_name_problem(labels, namespace, shared)
