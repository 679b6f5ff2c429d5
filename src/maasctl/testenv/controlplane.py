"""Start, restart and tear down a real etcd + kube-apiserver + kube-controller-manager.

Guarantees:
- every process gets free loopback ports chosen at start, so several control planes run side by side;
- the child processes die with the parent (PR_SET_PDEATHSIG) and are stopped on `stop()`: no leaks;
- the admin user authenticates with a client certificate in `system:masters`; test users with bearer
  tokens from a token file, each with their groups, so RBAC is exercised for real.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import fcntl
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import yaml

from maasctl.testenv.binary import ensure_binary
from maasctl.testenv.pki import Pki, create_pki
from maasctl.tls import default_tls

KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "deployment-controller",
    "serviceaccount-controller",
    "resourcequota-controller",
)


class ControlPlaneError(RuntimeError):
    """A component did not start or became unhealthy; the message carries the tail of its log."""


@dataclass(frozen=True)
class TestUser:
    """A user known to the apiserver's token file."""

    __test__ = False  # not a pytest test class

    name: str
    token: str
    groups: tuple[str, ...] = ()


def default_users() -> tuple[TestUser, ...]:
    def tok() -> str:
        return secrets.token_urlsafe(24)

    return (
        TestUser("alice", tok(), ("premium-users", "system:authenticated")),
        TestUser("bob", tok(), ("free-users", "system:authenticated")),
        TestUser("carol", tok(), ("system:authenticated",)),
    )


_LISTEN_PORTS = (20000, 32767)  # below Linux's default ephemeral range (32768-60999)


def _ephemeral_range() -> tuple[int, int]:
    with contextlib.suppress(OSError, ValueError):
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    return 32768, 60999


_PORT_HOLD_SECONDS = 600.0


@contextlib.contextmanager
def _port_ledger() -> Iterator[dict[int, float]]:
    """The ports handed out on this machine in the last ten minutes (port -> when), shared by every process
    under an exclusive lock and written back on exit."""
    path = Path(tempfile.gettempdir()) / f"maasctl-listen-ports-{os.getuid()}"
    with open(path, "a+", encoding="ascii") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        ledger.seek(0)
        now = time.time()
        held: dict[int, float] = {}
        for line in ledger.read().splitlines():
            with contextlib.suppress(ValueError):
                port, when = line.split()
                if now - float(when) < _PORT_HOLD_SECONDS:
                    held[int(port)] = float(when)
        yield held
        ledger.seek(0)
        ledger.truncate()
        ledger.write("".join(f"{port} {when}\n" for port, when in held.items()))


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port a child process can listen on a moment later.

    Asking the kernel for port 0 hands out a port from the ephemeral range, the same range every outgoing
    connection's source port comes from: with dozens of clients talking to the apiserver, one of them can take
    that port before the child binds it ("address already in use"). So pick at random outside that range and
    keep the one that binds now. Choosing is not binding: until the child binds, the same port could be chosen
    again, by this process (a payload processor's three ports) or by another (the test workers run side by side;
    a CI run failed on that). So a port handed out is kept in a ledger all processes share and not handed out
    again for ten minutes."""
    eph_low, eph_high = _ephemeral_range()
    candidates = [p for p in range(*_LISTEN_PORTS) if not eph_low <= p <= eph_high]
    with _port_ledger() as held:
        for _ in range(200 if candidates else 0):
            port = secrets.choice(candidates)
            if port not in held and _bindable(port):
                held[port] = time.time()
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no room outside it: the kernel's choice
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the launching process dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class ManagedProcess:
    """A child process with its output in a log file; it dies with its parent."""

    name: str
    argv: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None  # added to this process's environment (e.g. secrets: not in argv)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env} if self.env else None,
                preexec_fn=die_with_parent,
            )
        finally:
            log.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self.popen = None

    def kill(self) -> None:
        """SIGKILL, as the OOM killer would: no shutdown code runs (tests of what a crash loses)."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(5)
        self.popen = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """A real local control plane. Use as a context manager or call `start()` / `stop()`.

    Caveats: there is no scheduler and no kubelet, so Pods stay Pending and Jobs never run by themselves.
    """

    directory: Path | None = None
    binary: Path | None = None
    users: dict[str, TestUser] = field(default_factory=lambda: {u.name: u for u in default_users()})
    extra_apiserver_flags: Sequence[str] = ()
    with_controller_manager: bool = True
    startup_timeout: float = 120.0
    etcd_seed: Path | None = None
    """An etcd data directory to start from (copied, never changed): `seed.third_party_seed()`'s CRDs."""

    _owns_directory: bool = field(default=False, init=False)
    _procs: dict[str, ManagedProcess] = field(default_factory=dict, init=False)
    _pki: Pki | None = field(default=None, init=False)
    apiserver_port: int = field(default=0, init=False)

    # ----- public surface -------------------------------------------------------------------
    @property
    def root(self) -> Path:
        if self.directory is None:
            raise ControlPlaneError("control plane not started")
        return self.directory

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    @property
    def pki(self) -> Pki:
        if self._pki is None:
            raise ControlPlaneError("control plane not started")
        return self._pki

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig authenticating as one of the token-file users (written on first use)."""
        path = self.root / f"{user}.kubeconfig"
        if not path.exists():
            path.write_text(yaml.safe_dump(self._kubeconfig_doc(user, {"token": self.users[user].token})))
            path.chmod(0o600)
        return path

    def start(self) -> ControlPlane:
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="maasctl-cp-"))
            self._owns_directory = True
        self.root.mkdir(parents=True, exist_ok=True)
        self.binary = self.binary or ensure_binary()
        self._pki = create_pki(self.root / "pki")
        self._write_token_file()
        try:
            self._start_etcd()
            self.apiserver_port = free_port()
            self._write_admin_kubeconfig()
            self._start_apiserver()
            if self.etcd_seed is not None:
                self._wait(self._procs["kube-apiserver"], self._seeded_groups_discoverable)
            if self.with_controller_manager:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.stop()
        if self._owns_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def restart_apiserver_blocking(self) -> None:
        """Stop and start kube-apiserver on the same port (etcd keeps the data)."""
        self._procs["kube-apiserver"].stop()
        self._start_apiserver()

    async def restart_apiserver(self) -> None:
        await asyncio.to_thread(self.restart_apiserver_blocking)

    async def stop_apiserver(self) -> None:
        """Stop kube-apiserver (an outage); ``start_apiserver`` brings it back on the same port."""
        await asyncio.to_thread(self._procs["kube-apiserver"].stop)

    async def start_apiserver(self) -> None:
        await asyncio.to_thread(self._start_apiserver)

    def check_healthy(self) -> None:
        """Raise with the component's log tail when a process has died."""
        for proc in self._procs.values():
            if not proc.alive():
                raise ControlPlaneError(f"{proc.name} exited:\n{proc.log_tail()}")

    def http_client(self, timeout: float = 10.0) -> httpx.Client:
        """A synchronous admin HTTP client (client certificate) for the apiserver."""
        return httpx.Client(base_url=self.server, verify=self.admin_ssl_context(), timeout=timeout)

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS context trusting the local CA and presenting the admin client certificate."""
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ----- processes ----------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> ManagedProcess:
        assert self.binary is not None
        proc = ManagedProcess(name, [str(self.binary), name, *args], self.root / f"{name}.log")
        proc.start()
        self._procs[name] = proc
        return proc

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        data = self.root / "etcd"
        if self.etcd_seed is not None and not data.exists():
            shutil.copytree(self.etcd_seed, data)
        self._etcd_url = f"http://127.0.0.1:{client_port}"
        proc = self._spawn(
            "etcd",
            [
                f"--data-dir={data}",
                f"--listen-client-urls={self._etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            ],
        )
        self._wait(proc, lambda: _http_ok(f"{self._etcd_url}/health"))

    def _start_apiserver(self) -> None:
        pki = self.pki
        args = [
            f"--etcd-servers={self._etcd_url}",
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            f"--cert-dir={self.root / 'apiserver-certs'}",
            "--profiling=false",
            *self.extra_apiserver_flags,
        ]
        proc = self._spawn("kube-apiserver", args)
        self._wait(proc, self._apiserver_ready)

    def _start_controller_manager(self) -> None:
        args = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--controllers={','.join(KCM_CONTROLLERS)}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            "--concurrent-gc-syncs=5",
        ]
        proc = self._spawn("kube-controller-manager", args)
        # KCM has no probe endpoint with --secure-port=0: it is up once it stays alive for a moment.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ControlPlaneError(f"kube-controller-manager exited:\n{proc.log_tail()}")
            time.sleep(0.2)

    def _apiserver_ready(self) -> bool:
        try:
            with self.http_client(timeout=2.0) as http:
                return http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def _seeded_groups_discoverable(self) -> bool:
        """Every CRD the seed brought is in discovery (clients and controllers find APIs there; /readyz only
        says the CRDs are loaded)."""
        try:
            with self.http_client(timeout=5.0) as http:
                crds = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json()["items"]
                served = {v["groupVersion"] for g in http.get("/apis").json()["groups"] for v in g["versions"]}
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        wanted = {f"{c['spec']['group']}/{v['name']}" for c in crds for v in c["spec"]["versions"] if v["served"]}
        return wanted <= served

    def _wait(self, proc: ManagedProcess, ready: object) -> None:
        assert callable(ready)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ControlPlaneError(f"{proc.name} exited during start-up:\n{proc.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{proc.name} not ready after {self.startup_timeout}s:\n{proc.log_tail()}")

    # ----- files --------------------------------------------------------------------------
    def _write_token_file(self) -> None:
        lines = []
        for user in self.users.values():
            groups = ",".join(user.groups)
            lines.append(f'{user.token},{user.name},uid-{user.name},"{groups}"')
        path = self.root / "tokens.csv"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)

    def _kubeconfig_doc(self, user: str, credentials: dict[str, str]) -> dict[str, object]:
        ca = base64.b64encode(self.pki.ca_cert.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "maasctl-local", "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "maasctl-local", "user": user}}],
            "current-context": user,
        }

    def _write_admin_kubeconfig(self) -> None:
        creds = {
            "client-certificate-data": base64.b64encode(self.pki.admin_cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(self.pki.admin_key.read_bytes()).decode(),
        }
        self.kubeconfig.write_text(yaml.safe_dump(self._kubeconfig_doc("admin", creds)))
        self.kubeconfig.chmod(0o600)


def _http_ok(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2.0, verify=default_tls()).status_code == 200
    return False


@contextlib.contextmanager
def running(**kwargs: object) -> Iterator[ControlPlane]:
    """Context manager shorthand: `with running() as cp: ...`."""
    cp = ControlPlane(**kwargs)  # type: ignore[arg-type]
    with cp:
        yield cp
