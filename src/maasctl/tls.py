"""The system's trust store, loaded once per process.

`httpx` loads the CA bundle into a new `ssl.SSLContext` for every client it creates (20-60 ms of CPU each), so
code that opens a short-lived client per call (a console page, a probe, a test's request) passes this shared
context as `verify=` instead. An SSLContext is safe to share between clients; nothing changes it after this.
"""

from __future__ import annotations

import functools
import ssl

__all__ = ["default_tls"]


@functools.cache
def default_tls() -> ssl.SSLContext:
    """Verifying TLS with the CA bundle httpx itself would load (certifi), built on first use."""
    import httpx

    return httpx.create_ssl_context()
