"""A test-only Job runner: the local control plane has no scheduler and no kubelet, so Jobs never run.

How it works: Jobs whose `spec.managedBy` equals the runner's `managed_by` are ignored by the built-in Job
controller (Kubernetes' JobManagedBy contract, the one MultiKueue uses), so the runner can own them without
a fight over their status. For each such Job it watches, the runner
1. marks it started (`status.startTime`, `active: 1`),
2. runs the first container's `command + args` locally as a subprocess, mapping the command `maasctl` to the
   virtualenv's `maasctl` (other commands can be mapped with `commands`) and passing the container's literal
   `env` values plus the runner's `env` (e.g. a token file standing in for the service-account mount),
3. retries a failing run up to `spec.backoffLimit` more times, like pods of a Job,
4. writes the terminal status the Job API requires: `SuccessCriteriaMet` + `Complete` with `succeeded` and
   `completionTime`, or `FailureTarget` + `Failed` (reason BackoffLimitExceeded) with `failed`.

Production never uses this: the controller's cleanup Jobs have no `managedBy` there (setting
`cleanup_job_managed_by` empty) and run as real pods. Every run is kept in `runs` for assertions. `accepts`
narrows the Jobs run to a test's own (a shared control plane holds other tests' leftovers: subscriptions left
Terminating by a controller without a runner get cleanup Jobs from the next controller that sees them, and
running them all would only load the machine).

Usage::

    runner = JobRunner(client, managed_by="maasctl.opendatahub.io/job-runner", namespace="opendatahub",
                       env={"MAASCTL_MAAS_API_TOKEN_FILE": str(token_file)})
    task = asyncio.create_task(runner.run())
    ...
    task.cancel()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from maasctl.runtime import Client, GroupVersionKind, NotFound
from maasctl.runtime.informer import Event, EventType, Informer
from maasctl.runtime.objects import FrozenObject

__all__ = ["DEFAULT_MANAGED_BY", "JOB", "JOB_ENV_MARKER", "JobRun", "JobRunner"]

log = structlog.get_logger("maasctl.testenv.jobrunner")

JOB = GroupVersionKind("batch", "v1", "Job")
DEFAULT_MANAGED_BY = "maasctl.opendatahub.io/job-runner"
# Set in every process the runner starts (`<namespace>/<job name>`): the process belongs to the runner, whose
# lifetime is its fixture's, not to the test that happened to be running when the Job was created.
JOB_ENV_MARKER = "MAASCTL_TESTENV_JOB"


@dataclass(frozen=True)
class JobRun:
    """One local run of a Job's container."""

    namespace: str
    name: str
    argv: tuple[str, ...]
    returncode: int
    output: str


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": reason, "message": message[:1000],
            "lastProbeTime": now, "lastTransitionTime": now}


def _finished(job: Mapping[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or ())


def _every_job(job: FrozenObject) -> bool:
    return True


@dataclass
class JobRunner:
    client: Client
    managed_by: str = DEFAULT_MANAGED_BY
    namespace: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    commands: Mapping[str, Sequence[str]] = field(
        default_factory=lambda: {"maasctl": (str(Path(sys.executable).with_name("maasctl")),)})
    timeout: float = 120.0
    accepts: Callable[[FrozenObject], bool] = _every_job
    runs: list[JobRun] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # Jobs whose handling failed (each also logged)
    status_attempts: int = 8
    _seen: set[str] = field(default_factory=set)
    _queue: asyncio.Queue[FrozenObject] = field(default_factory=asyncio.Queue)

    async def run(self) -> None:
        """Watch and run matching Jobs until cancelled."""
        informer = Informer(self.client, JOB, namespaces=(self.namespace,) if self.namespace else None)
        informer.add_handler(self._on_event)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(informer.run())
            while True:
                job = await self._queue.get()
                tg.create_task(self._guarded(job))

    async def _guarded(self, job: FrozenObject) -> None:
        """Run one Job; its failure is recorded and logged, never the end of the runner (a TaskGroup would
        cancel the informer and every other Job with it, and no later Job would ever run: subscriptions would
        wait for their key cleanup for good, and nothing would say why)."""
        meta = job["metadata"]
        try:
            await self._execute(job)
        except Exception as exc:  # any one Job's failure: the runner goes on
            what = f"{meta.get('namespace')}/{meta.get('name')}: {exc!r}"[:500]
            self.errors.append(what)
            log.error("job runner: a Job could not be run", job=what)

    def _on_event(self, event: Event) -> None:
        job = event.obj
        uid = str(job["metadata"].get("uid"))
        if event.type is EventType.DELETED or uid in self._seen or _finished(job):
            return
        if (job.get("spec") or {}).get("managedBy") != self.managed_by or not self.accepts(job):
            return
        self._seen.add(uid)
        self._queue.put_nowait(job)

    def _argv(self, container: Mapping[str, Any]) -> list[str]:
        argv = [str(a) for a in (*(container.get("command") or ()), *(container.get("args") or ()))]
        if argv and argv[0] in self.commands:
            argv = [*self.commands[argv[0]], *argv[1:]]
        return argv

    async def _execute(self, job: FrozenObject) -> None:
        meta = job["metadata"]
        ns, name = str(meta["namespace"]), str(meta["name"])
        spec = job.get("spec") or {}
        container = spec["template"]["spec"]["containers"][0]
        argv = self._argv(container)
        env = {**os.environ, **{e["name"]: str(e.get("value", "")) for e in container.get("env") or ()
                                if "value" in e}, **self.env, JOB_ENV_MARKER: f"{ns}/{name}"}
        started = _now()
        await self._patch_status(ns, name, {"startTime": started, "active": 1})
        failures = 0
        attempts = int(spec.get("backoffLimit", 6)) + 1
        for _ in range(attempts):
            code, output = await self._run_once(argv, env)
            self.runs.append(JobRun(ns, name, tuple(argv), code, output))
            if code == 0:
                now = _now()
                await self._patch_status(ns, name, {
                    "active": 0, "ready": 0, "succeeded": 1, "failed": failures, "completionTime": now,
                    "conditions": [_condition("SuccessCriteriaMet", "CompletionsReached", "", now),
                                   _condition("Complete", "CompletionsReached", "", now)],
                })
                return
            failures += 1
        now = _now()
        message = f"Job has reached the specified backoff limit; last output: {output.strip()[-400:]}"
        await self._patch_status(ns, name, {
            "active": 0, "ready": 0, "failed": failures,
            "conditions": [_condition("FailureTarget", "BackoffLimitExceeded", message, now),
                           _condition("Failed", "BackoffLimitExceeded", message, now)],
        })

    async def _run_once(self, argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            return 127, str(exc)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return 124, "timed out"
        return int(proc.returncode or 0), out.decode(errors="replace")

    async def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Write the Job's status as the Job controller would, again after a transient error (a loaded API
        server); a Job deleted meanwhile needs no status (NotFound is the end of it)."""
        delay = 0.2
        for attempt in range(self.status_attempts):
            try:
                await self.client.patch(JOB, name, namespace, {"status": status}, subresource="status")
                return
            except NotFound:
                return
            except Exception:
                if attempt == self.status_attempts - 1:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
