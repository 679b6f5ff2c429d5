"""The guardrails engine on one machine: the real NeMo Guardrails server, as the controller rendered it.

The local control plane has no kubelet, so the engine Deployment (`builders.guardrails.build_engine`) never
runs by itself. `EngineRunner` plays the kubelet for exactly that Deployment: it reads the rendered ConfigMap
and Deployment from the API server, writes the ConfigMap's items where the volume would mount them, resolves
the container's `secretKeyRef` environment variables from the Secrets, and runs the container's command
(`nemoguardrails server --config ...`) from the engine virtualenv that `hack/setup-guardrails.sh` installs,
on a local port. It restarts the engine when what it would run changes, and stops it when the Deployment goes.
The engine's output reaches its log (`engine.log`) through `RedactedProcess`, which masks every value it got
from a Secret (defence in depth: the engine's own `config.py`, `maasctl/guardrails_redact.py`, redacts too).

`engine_venv()` finds that virtualenv (`MAASCTL_GUARDRAILS_VENV`, else the cache path keyed by
`hack/guardrails/engine-constraints.txt`); `check_command()` is the controller's `--guardrails-check-command`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from maasctl.guardrails_redact import redact, secret_values
from maasctl.runtime import Client, GroupVersionKind, NotFound
from maasctl.runtime.informer import Event, Informer
from maasctl.testenv.controlplane import ManagedProcess, die_with_parent, free_port
from maasctl.tls import default_tls

__all__ = ["EngineRunner", "RedactedProcess", "check_command", "engine_venv"]

log = logging.getLogger("maasctl.testenv.guardrails")

ENGINE = "maas-guardrails"
CONFIG_MAP = GroupVersionKind("", "v1", "ConfigMap")
DEPLOYMENT = GroupVersionKind("apps", "v1", "Deployment")
SECRET = GroupVersionKind("", "v1", "Secret")
_REPO = Path(__file__).resolve().parents[3]
LOCK = _REPO / "hack" / "guardrails" / "engine-constraints.txt"
CHECK_SCRIPT = Path(__file__).resolve().parents[1] / "guardrails_check.py"


def engine_venv() -> Path | None:
    """The engine virtualenv, or None when it is not installed."""
    explicit = os.environ.get("MAASCTL_GUARDRAILS_VENV")
    if explicit:
        return Path(explicit) if (Path(explicit) / "bin" / "nemoguardrails").exists() else None
    if not LOCK.exists():
        return None
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("MAASCTL_CACHE", Path.home() / ".cache" / "maasctl"))
    venv = cache / "guardrails" / digest
    return venv if (venv / ".installed").exists() else None


def check_command(venv: Path) -> tuple[str, ...]:
    """The controller's engine check: the engine's Python runs `maasctl/guardrails_check.py` (-P: the script's
    folder is not put on sys.path, so maasctl's modules never shadow the standard library)."""
    return (str(venv / "bin" / "python"), "-P", str(CHECK_SCRIPT))


@dataclass
class RedactedProcess(ManagedProcess):
    """A ManagedProcess whose output is copied to its log line by line with `secrets` masked."""

    secrets: tuple[str, ...] = ()
    _pump: threading.Thread | None = None

    def start(self) -> None:
        env = {**os.environ, **self.env} if self.env else None
        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
        self._pump = threading.Thread(target=self._copy, args=(self.popen.stdout,), name=f"{self.name}-log",
                                      daemon=True)
        self._pump.start()

    def _copy(self, pipe: Any) -> None:
        with pipe, open(self.log_path, "ab") as out:
            for line in iter(pipe.readline, b""):
                out.write(redact(line.decode(errors="replace"), self.secrets).encode())
                out.flush()

    def _join(self) -> None:
        if self._pump is not None:
            self._pump.join(5)
            self._pump = None

    def stop(self, timeout: float = 15.0) -> None:
        super().stop(timeout)
        self._join()

    def kill(self) -> None:
        super().kill()
        self._join()


@dataclass
class EngineRunner:
    """Runs the rendered engine Deployment locally until cancelled (see the module docstring)."""

    client: Client
    namespace: str
    venv: Path
    directory: Path
    port: int = 0
    interval: float = 1.0  # how soon a died engine (or a failed sync) is looked at again
    process: RedactedProcess | None = None
    paused: bool = False  # tests: a killed engine stays down until resumed
    starts: int = 0
    last_error: str = ""
    _digest: str = ""
    _stopped: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def run(self) -> None:
        """Sync when the engine's Deployment, ConfigMap or a Secret of the namespace changes (watches, as a
        kubelet does: polling them cost the test process and the API server a request pair every half second),
        and every `interval` when the engine process has died or the last sync failed."""
        changed = asyncio.Event()
        changed.set()

        def on_engine_object(event: Event) -> None:
            if event.obj["metadata"].get("name") == ENGINE:
                changed.set()

        def on_secret(_: Event) -> None:  # any: the Deployment may name any Secret
            changed.set()

        watches = ((DEPLOYMENT, on_engine_object), (CONFIG_MAP, on_engine_object), (SECRET, on_secret))
        try:
            async with asyncio.TaskGroup() as tg:
                for gvk, handler in watches:
                    informer = Informer(self.client, gvk, namespaces=(self.namespace,))
                    informer.add_handler(handler)
                    tg.create_task(informer.run())
                while True:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), self.interval)
                    due = changed.is_set() or bool(self.last_error) or (
                        self.process is not None and not self.process.alive())
                    changed.clear()
                    if due and not self.paused:
                        await self._sync_logged()
        finally:
            await asyncio.to_thread(self._stop)

    async def _sync_logged(self) -> None:
        try:
            await self._sync()
            self.last_error = ""
        except Exception as exc:  # keep running, like a kubelet; tests read last_error
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("guardrails engine: %s", self.last_error)

    async def kill(self) -> None:
        """Stop the engine and keep it down (the engine failing) until `resume()`."""
        self.paused = True
        await asyncio.to_thread(self._stop)

    async def resume(self) -> None:
        self.paused = False
        self._digest = ""
        await self._sync()

    def _stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    async def _get(self, gvk: GroupVersionKind, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self.client.get(gvk, name, self.namespace))
        except NotFound:
            return None

    async def _sync(self) -> None:
        deployment = await self._get(DEPLOYMENT, ENGINE)
        configmap = await self._get(CONFIG_MAP, ENGINE)
        if deployment is None or configmap is None:
            if self.process is not None:
                await asyncio.to_thread(self._stop)
            self._digest = ""
            return
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env: dict[str, str] = {}
        for var in container.get("env") or ():
            if "value" in var:
                env[var["name"]] = str(var["value"])
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                secret = await self._get(SECRET, ref["name"])
                raw = ((secret or {}).get("data") or {}).get(ref["key"])
                if raw is not None:
                    env[var["name"]] = base64.b64decode(raw).decode()
        volume = next(v for v in pod["volumes"] if v["name"] == "configs")
        files = {i["path"]: (configmap.get("data") or {}).get(i["key"], "") for i in volume["configMap"]["items"]}
        digest = hashlib.sha256(json.dumps([container.get("command"), env, files], sort_keys=True)
                                .encode()).hexdigest()
        if digest == self._digest and self.process is not None and self.process.alive():
            return
        await asyncio.to_thread(self._stop)
        root = self.directory / "configs"
        shutil.rmtree(root, ignore_errors=True)
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        root.mkdir(parents=True, exist_ok=True)
        argv = [str(a) for a in container["command"]]
        argv[0] = str(self.venv / "bin" / argv[0])
        argv[argv.index("--config") + 1] = str(root)
        argv[argv.index("--port") + 1] = str(self.port)
        from_secrets = tuple(env[var["name"]] for var in container.get("env") or ()
                             if (var.get("valueFrom") or {}).get("secretKeyRef") and var["name"] in env)
        masked = tuple(sorted({*from_secrets, *secret_values(env)}, key=len, reverse=True))
        self.process = RedactedProcess("guardrails-engine", argv, self.directory / "engine.log", env=env,
                                       secrets=masked)
        self.process.start()
        self.starts += 1
        self._digest = digest
        await self._wait_ready()

    async def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        async with httpx.AsyncClient(timeout=2.0, verify=default_tls()) as http:
            while asyncio.get_running_loop().time() < deadline:
                if self.process is None or not self.process.alive():
                    tail = self.process.log_tail() if self.process else ""
                    raise RuntimeError(f"guardrails engine exited:\n{tail}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.url}/v1/health")).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise RuntimeError("guardrails engine not ready")
