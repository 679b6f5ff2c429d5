"""SQLite database files readable by their owner only.

A local database holds what must not be world-readable (maas-api's key hashes and usage, the billing ledger's
money and the webhook notices it signs), so its file is created 0600 before SQLite opens it, and an existing
file is brought to 0600; SQLite gives its journal, WAL and shared-memory files the database file's mode.
"""

from __future__ import annotations

import contextlib
import os

from sqlalchemy.engine import make_url

__all__ = ["private_sqlite_file"]


def private_sqlite_file(url: str) -> None:
    """For a `sqlite...:///path` URL: create `path` (0600) if missing and make it 0600; other URLs: nothing."""
    parsed = make_url(url)
    database = parsed.database
    if not parsed.drivername.startswith("sqlite") or not database or database == ":memory:" \
            or database.startswith("file:"):
        return
    # An existing file is never opened here: closing any descriptor of a file drops every POSIX lock this process
    # holds on it (SQLite's fcntl locks, those of the process's other connections included).
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.chmod(database, 0o600)
