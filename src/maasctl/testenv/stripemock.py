"""Stripe's own API mock server (`github.com/stripe/stripe-mock`) for tests, benchmarks and `maasctl dev`.

Built from the Go module proxy like the local control plane: `hack/stripe-mock` pins the version (go.mod,
go.sum); the binary is cached outside the repository in `~/.cache/maasctl/stripe-mock/<key>/`, keyed by those
files and the Go version, built once per machine. `start_stripe_mock()` runs it on a free loopback port (its
HTTPS listener on a Unix socket in a temporary directory, so parallel sessions never fight over its default
port). stripe-mock is stateless: it validates requests against Stripe's OpenAPI spec and answers fixtures; it
remembers nothing and sends no webhooks (tests deliver signed events themselves).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from maasctl.testenv.binary import BuildError, cache_home, repo_root
from maasctl.testenv.controlplane import free_port

__all__ = ["StripeMock", "StripeMockUnavailable", "ensure_stripe_mock", "running_stripe_mock", "start_stripe_mock"]

MODULE = "github.com/stripe/stripe-mock"
_FILES = ("go.mod", "go.sum", "tools.go")


class StripeMockUnavailable(RuntimeError):
    """stripe-mock could not be built or started (no Go, module proxy unreachable, ...)."""


def source_dir() -> Path:
    return repo_root() / "hack" / "stripe-mock"


def cache_key(src: Path, go_version: str) -> str:
    digest = hashlib.sha256()
    for name in _FILES:
        digest.update(src.joinpath(name).read_bytes())
    digest.update(go_version.encode())
    return digest.hexdigest()[:16]


def ensure_stripe_mock(*, quiet: bool = False) -> Path:
    """The cached stripe-mock binary, built first when missing (`MAASCTL_STRIPE_MOCK_BIN` overrides)."""
    override = os.environ.get("MAASCTL_STRIPE_MOCK_BIN")
    if override:
        if not Path(override).is_file():
            raise StripeMockUnavailable(f"MAASCTL_STRIPE_MOCK_BIN={override} does not exist")
        return Path(override)
    go = shutil.which("go")
    if go is None:
        raise StripeMockUnavailable("Go is required to build stripe-mock (https://go.dev/dl)")
    try:
        src = source_dir()
    except BuildError as exc:
        raise StripeMockUnavailable(str(exc)) from exc
    version = subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()
    target_dir = cache_home().joinpath("stripe-mock", cache_key(src, version))
    target = target_dir.joinpath("stripe-mock")
    if target.is_file():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(target_dir.joinpath(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        if not quiet:
            print(f"building stripe-mock into {target} ...", file=sys.stderr)
        tmp = target.with_suffix(".tmp")
        env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=readonly")
        proc = subprocess.run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), MODULE],
                              cwd=src, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StripeMockUnavailable(f"go build {MODULE} failed:\n{proc.stderr[-4000:]}")
        tmp.rename(target)
    return target



@dataclass
class StripeMock:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        """The API base to give the Stripe SDK (`base_addresses={"api": url}`)."""
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)


def start_stripe_mock(timeout: int = 30) -> StripeMock:
    """Run stripe-mock on a free loopback port; returns once it answers HTTP."""
    binary = ensure_stripe_mock()
    directory = Path(tempfile.mkdtemp(prefix="maasctl-stripe-mock-"))
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), "-http-addr", f"127.0.0.1:{port}", "-https-unix", str(directory.joinpath("https.sock"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            shutil.rmtree(directory, ignore_errors=True)
            raise StripeMockUnavailable(f"stripe-mock exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /v1/balance HTTP/1.0\r\nAuthorization: Bearer sk_test_ping\r\n\r\n")
                if s.recv(16).startswith(b"HTTP/1."):
                    return StripeMock(port, directory, proc)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    shutil.rmtree(directory, ignore_errors=True)
    raise StripeMockUnavailable(f"stripe-mock did not answer on port {port}")


@contextmanager
def running_stripe_mock() -> Iterator[StripeMock]:
    """`start_stripe_mock()`, stopped on exit (for test fixtures)."""
    mock = start_stripe_mock()
    try:
        yield mock
    finally:
        mock.stop()


def main() -> None:
    """`python -m maasctl.testenv.stripemock`: build if needed and print the binary path."""
    print(ensure_stripe_mock())


if __name__ == "__main__":
    main()
