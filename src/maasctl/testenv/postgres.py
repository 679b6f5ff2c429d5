"""A throwaway PostgreSQL server for tests and benchmarks.

Default: the Debian `postgresql` package binaries (initdb + pg_ctl) with a cluster in a temporary
directory, listening on a free loopback port and a unix socket inside that directory. Root is refused by
PostgreSQL, so as root the cluster is owned by and run as the `postgres` OS user. With
`MAASCTL_PG=testcontainers` and a reachable Docker engine, a `postgres` container is used instead.
Nothing here is a fake: callers get a real server and an asyncpg/SQLAlchemy URL for a fresh database.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maasctl.testenv.controlplane import free_port

PG_USER = "maas"
PG_PASSWORD = "maas-test-password"
DEFAULT_DB = "maas"


class PostgresUnavailable(RuntimeError):
    """No way to start PostgreSQL here (binaries missing and not installable, no Docker)."""


def find_bindir() -> Path | None:
    """Directory holding initdb/pg_ctl/postgres of the newest installed Debian PostgreSQL."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for cand in reversed(candidates):
        if (Path(cand) / "initdb").is_file() and (Path(cand) / "pg_ctl").is_file():
            return Path(cand)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    return None


def _install_debian_package() -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PostgresUnavailable("PostgreSQL binaries missing and cannot apt-get install as non-root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"],
        check=True,
        env=env,
        capture_output=True,
    )


@dataclass
class PostgresServer:
    """A running PostgreSQL server; `url` is a SQLAlchemy asyncpg URL for database `database`."""

    host: str
    port: int
    user: str
    password: str
    database: str
    _stop: Any = field(repr=False, default=None)

    @property
    def url(self) -> str:
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        return f"postgresql+asyncpg://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        """libpq/asyncpg DSN (no SQLAlchemy driver suffix)."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"

    def create_database(self, name: str) -> str:
        """Create another empty database on the same server and return its SQLAlchemy URL."""
        import asyncio

        import asyncpg

        async def _create() -> None:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()

        # Run in a private loop in a worker thread so callers inside a running loop can use it too.
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _create()).result()
        return self.url_for(name)

    async def acreate_database(self, name: str) -> str:
        """Async variant of `create_database` for callers already on an event loop."""
        import asyncpg

        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url_for(name)

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def _run_as(user: pwd.struct_passwd | None, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    if user is None:
        return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)
    return subprocess.run(
        argv,
        check=True,
        capture_output=True,
        text=True,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        **kw,
    )


def start_debian(timeout: float = 60.0) -> PostgresServer:
    """initdb into a temp dir and start postgres on a free loopback port; returns the server handle."""
    bindir = find_bindir()
    if bindir is None:
        _install_debian_package()
        bindir = find_bindir()
        if bindir is None:
            raise PostgresUnavailable("postgresql installed but initdb not found")
    runner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            runner = pwd.getpwnam("postgres")
        except KeyError as exc:
            raise PostgresUnavailable("running as root and no 'postgres' OS user exists") from exc
    tmp = Path(tempfile.mkdtemp(prefix="maasctl-pg-"))
    data = tmp / "data"
    sockdir = tmp / "sock"
    pwfile = tmp / "pw"
    sockdir.mkdir()
    pwfile.write_text(PG_PASSWORD + "\n")
    if runner is not None:
        for p in (tmp, sockdir, pwfile):
            os.chown(p, runner.pw_uid, runner.pw_gid)
    port = free_port()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        _run_as(
            runner,
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                PG_USER,
                f"--pwfile={pwfile}",
                "-A",
                "scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            env=env,
        )
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sockdir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
            "-c shared_buffers=64MB"
        )
        _run_as(
            runner,
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(tmp / "postgres.log"),
                "-o",
                opts,
                "-w",
                "-t",
                str(int(timeout)),
                "start",
            ],
            env=env,
        )
    except subprocess.CalledProcessError as exc:
        log = (tmp / "postgres.log").read_text() if (tmp / "postgres.log").exists() else ""
        shutil.rmtree(tmp, ignore_errors=True)
        raise PostgresUnavailable(f"starting PostgreSQL failed: {exc.stderr}\n{log}") from exc

    def _stop() -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _run_as(runner, [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], env=env)
        shutil.rmtree(tmp, ignore_errors=True)

    server = PostgresServer("127.0.0.1", port, PG_USER, PG_PASSWORD, "postgres", _stop)
    try:
        server.create_database(DEFAULT_DB)
    except Exception:
        _stop()
        raise
    server.database = DEFAULT_DB
    return server


def _docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        subprocess.run(["docker", "info"], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def start_testcontainers() -> PostgresServer:
    """A `postgres:16` container via testcontainers (needs a Docker engine)."""
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer(
        "postgres:16-alpine", username=PG_USER, password=PG_PASSWORD, dbname=DEFAULT_DB, driver=None
    )
    container.start()
    host = container.get_container_host_ip()
    port = int(container.get_exposed_port(5432))
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                container.stop()
                raise
            time.sleep(0.2)
    return PostgresServer(host, port, PG_USER, PG_PASSWORD, DEFAULT_DB, container.stop)


def start_postgres() -> PostgresServer:
    """Start a server the configured way (`MAASCTL_PG=testcontainers` or the Debian binaries)."""
    if os.environ.get("MAASCTL_PG") == "testcontainers" and _docker_available():
        return start_testcontainers()
    return start_debian()


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Context manager: a running server for the block, stopped and removed afterwards."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()
