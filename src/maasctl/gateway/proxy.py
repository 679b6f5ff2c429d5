"""The upstream leg's response headers. Request headers follow `contract.edge.upstream_headers` (the header
contract); request bodies and usage reading follow `maasctl.dataplane`."""

from __future__ import annotations

from collections.abc import Iterable

from maasctl.contract.edge import HOP_BY_HOP

__all__ = ["response_header_pairs", "response_headers"]


def response_headers(upstream: Iterable[tuple[str, str]], *, body_changed: bool) -> list[tuple[bytes, bytes]]:
    """Upstream response headers for the client (hop-by-hop dropped; length dropped when we edit the body)."""
    out = []
    for name, value in upstream:
        lname = name.lower()
        if lname in HOP_BY_HOP or (body_changed and lname == "content-length"):
            continue
        out.append((lname.encode("latin-1"), value.encode("latin-1")))
    return out


def response_header_pairs(upstream: Iterable[tuple[str, str]], *, body_changed: bool) -> list[tuple[str, str]]:
    """`response_headers` as text pairs (names lowercased), for fronts that are not ASGI."""
    return [(lname, value) for name, value in upstream
            if (lname := name.lower()) not in HOP_BY_HOP and not (body_changed and lname == "content-length")]
