"""URL origins: where credentials may be sent is decided by (scheme, host, port), compared the same way by
maas-api (model probes) and the console (its ready-to-paste commands)."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["Origin", "origin"]

Origin = tuple[str, str, int]


def origin(url: str) -> Origin | None:
    """(scheme, lower-case host, port with 80/443 filled in) of an http(s) URL, or None for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.scheme, parts.hostname.lower(), port
