"""The upstream leg's response headers. Request headers follow `contract.edge.upstream_headers` (the header
contract); request bodies and usage reading follow `contract.usage`."""

from __future__ import annotations

from collections.abc import Iterable

from maasctl.contract.edge import HOP_BY_HOP

__all__ = ["response_headers"]


def response_headers(upstream: Iterable[tuple[str, str]], *, body_changed: bool) -> list[tuple[bytes, bytes]]:
    """Upstream response headers for the client (hop-by-hop dropped; length dropped when we edit the body)."""
    out = []
    for name, value in upstream:
        lname = name.lower()
        if lname in HOP_BY_HOP or (body_changed and lname == "content-length"):
            continue
        out.append((lname.encode("latin-1"), value.encode("latin-1")))
    return out
