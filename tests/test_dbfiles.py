"""`private_sqlite_file` on a database this process already has open keeps that connection's locks (closing a
descriptor of a file drops all of the process's POSIX locks on it, so another process could write past them)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from maasctl.dbfiles import private_sqlite_file

_TRY_WRITE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=0.2)
try:
    db.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print("locked" if "locked" in str(exc) else exc)
else:
    print("got the write lock")
"""


def _other_process_writes(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", _TRY_WRITE, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_an_open_databases_write_lock_survives_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")  # this process holds the write lock
    assert _other_process_writes(path) == "locked"
    private_sqlite_file(f"sqlite:///{path}")
    assert _other_process_writes(path) == "locked"  # still held
    holder.execute("ROLLBACK")
    assert _other_process_writes(path) == "got the write lock"
    holder.close()


def test_a_new_file_is_created_private_and_an_existing_one_made_private(tmp_path: Path) -> None:
    new = tmp_path / "new.db"
    private_sqlite_file(f"sqlite+aiosqlite:///{new}")
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600
    old = tmp_path / "old.db"
    old.write_bytes(b"")
    old.chmod(0o644)
    private_sqlite_file(f"sqlite:///{old}")
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o600
