"""A throwaway Redis server for tests and benchmarks: the Debian `redis-server` binary on a free loopback
port, no persistence, in a temporary directory. Installed by `hack/setup.sh`; never a fake."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from maasctl.testenv.controlplane import free_port

__all__ = ["RedisServer", "RedisUnavailable", "start_redis"]


class RedisUnavailable(RuntimeError):
    """No redis-server binary here (run hack/setup.sh, which installs the Debian package)."""



@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_redis(timeout: float = 20.0) -> RedisServer:
    binary = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists()
                                              else None)
    if binary is None:
        raise RedisUnavailable("redis-server not found: run hack/setup.sh (installs the Debian package)")
    directory = Path(tempfile.mkdtemp(prefix="maasctl-redis-"))
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RedisUnavailable(f"redis-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return RedisServer(port, directory, proc)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RedisUnavailable(f"redis-server did not answer on port {port}")
