"""Safe deletion of a MaaSSubscription: revoke the API keys bound to it before its finalizer goes (seed 000).

Controller side (`KeyCleanup.run`, called while the subscription is Terminating):
- It creates a cleanup Job in the controller namespace (`settings.leader_election_namespace`). The Job has
  no ownerReference (the subscription is being deleted and lives in another namespace, so garbage collection
  would remove the Job early); it is found again by the subscription's uid label.
- Job names are `maas-key-cleanup-<subscription>-<hash of namespace, name and uid>-<attempt>`: deterministic,
  so a lagging cache can never start two Jobs for one attempt, and a re-created subscription of the same name
  never reuses an older incarnation's Job.
- Until then the subscription's phase is `Terminating` (status and the Phase printer column).
- Succeeded: the finalizer may go. Failed: the subscription stays Terminating, a Warning Event names the
  attempt, the status says so (condition `APIKeysRevoked`), and attempt n+1 starts after an exponential
  backoff (`cleanup_retry_base_seconds` doubling up to `cleanup_retry_max_seconds`), so failing cleanups cost
  at most one Job per max interval. Older failed attempts are pruned, keeping the last two for diagnosis.

Job side: `maasctl keys revoke-subscription` (`keys_cli`) revokes the subscription's keys through maas-api.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from maasctl.api import SubscriptionPhase
from maasctl.builders import names
from maasctl.builders.refs import ObjectRef
from maasctl.reconcilers.context import Context
from maasctl.runtime import Conflict, GroupVersionKind, NotFound, Result, set_condition, thaw
from maasctl.runtime.errors import ApiError
from maasctl.runtime.objects import FrozenObject
from maasctl.settings import ControllerSettings

JOB: Final = GroupVersionKind("batch", "v1", "Job")
COMPONENT: Final = "key-cleanup"
UID_LABEL: Final = "maas.opendatahub.io/subscription-uid"
ATTEMPT_ANNOTATION: Final = "maas.opendatahub.io/cleanup-attempt"
CONDITION: Final = "APIKeysRevoked"
BACKOFF_LIMIT: Final = 2
TTL_SECONDS: Final = 3600
ACTIVE_DEADLINE_SECONDS: Final = 600
_KEEP_FAILED: Final = 2


# -- pure parts --------------------------------------------------------------------------------------------


def job_name(subscription: ObjectRef, uid: str, attempt: int) -> str:
    """A DNS label (<= 63, it becomes the pods' job-name label) unique per subscription incarnation and attempt."""
    readable = re.sub(r"[^a-z0-9-]+", "-", subscription.name.lower()).strip("-")[:24].rstrip("-")
    digest = names.stable_hash(subscription.namespace, subscription.name, uid)
    prefix = f"maas-key-cleanup-{readable}" if readable else "maas-key-cleanup"
    return f"{prefix}-{digest}-{attempt}"


def cleanup_command(subscription: ObjectRef, maas_api_url: str) -> list[str]:
    return ["maasctl", "keys", "revoke-subscription", "--subscription", subscription.key,
            "--maas-api-url", maas_api_url]


def build_cleanup_job(subscription: ObjectRef, uid: str, attempt: int, settings: ControllerSettings) -> dict[str, Any]:
    """The cleanup Job of one attempt (no ownerReference: see the module docstring)."""
    labels = {
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.PART_OF_LABEL: "maas-subscription",
        names.COMPONENT_LABEL: COMPONENT,
        names.SUBSCRIPTION_LABEL: names.label_value(subscription.name),
        names.SUBSCRIPTION_NAMESPACE_LABEL: names.label_value(subscription.namespace),
        UID_LABEL: names.label_value(uid),
    }
    spec: dict[str, Any] = {
        "backoffLimit": BACKOFF_LIMIT,
        "ttlSecondsAfterFinished": TTL_SECONDS,
        "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
        "template": {
            "metadata": {"labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.COMPONENT_LABEL: COMPONENT}},
            "spec": {
                "restartPolicy": "Never",
                "serviceAccountName": settings.cleanup_job_service_account,
                "containers": [{
                    "name": "revoke-keys",
                    "image": settings.cleanup_job_image,
                    "command": cleanup_command(subscription, settings.maas_api_url),
                    "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "runAsNonRoot": True,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }],
            },
        },
    }
    if settings.cleanup_job_managed_by:
        spec["managedBy"] = settings.cleanup_job_managed_by
    return {
        "apiVersion": JOB.api_version,
        "kind": JOB.kind,
        "metadata": {
            "name": job_name(subscription, uid, attempt),
            "namespace": settings.leader_election_namespace,
            "labels": labels,
            "annotations": {names.SUBSCRIPTIONS_ANNOTATION: subscription.key, ATTEMPT_ANNOTATION: str(attempt)},
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class JobState:
    attempt: int
    phase: str  # Running | Succeeded | Failed
    finished_at: datetime | None = None
    message: str = ""


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def job_state(job: Mapping[str, Any]) -> JobState:
    """Attempt number and outcome of a cleanup Job from its terminal conditions."""
    attempt = int(((job.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION, "0") or 0)
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return JobState(attempt, "Succeeded", _parse_time(cond.get("lastTransitionTime")))
        if cond.get("type") == "Failed":
            detail = ": ".join(str(v) for v in (cond.get("reason"), cond.get("message")) if v)
            return JobState(attempt, "Failed", _parse_time(cond.get("lastTransitionTime")), detail)
    return JobState(attempt, "Running")


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based) before the next one."""
    return float(min(cap, base * 2 ** max(0, attempt - 1)))


# -- controller side ---------------------------------------------------------------------------------------


class CleanupRetry(Exception):
    """The cleanup Job could not be created; raised after status and event so the work queue backs off."""


class KeyCleanup:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def _jobs(self, uid: str) -> list[FrozenObject]:
        ns = self.ctx.settings.leader_election_namespace
        return self.ctx.cache.list(JOB, ns, labels={UID_LABEL: names.label_value(uid)})

    async def run(self, sub: FrozenObject, now: datetime | None = None) -> Result | None:
        """None once the subscription's keys are revoked (release the finalizer), else a Result holding it."""
        now = now or datetime.now(UTC)
        settings = self.ctx.settings
        ref = ObjectRef(str(sub["metadata"]["namespace"]), str(sub["metadata"]["name"]))
        uid = str(sub["metadata"]["uid"])
        states = sorted((job_state(j) for j in self._jobs(uid)), key=lambda s: s.attempt)
        latest = states[-1] if states else None
        if latest is not None and latest.phase == "Succeeded":
            await self.ctx.event(sub, "Normal", "APIKeysRevoked",
                                 f"cleanup Job attempt {latest.attempt} revoked the subscription's API keys")
            return None
        if latest is not None and latest.phase == "Running":
            await self._status(sub, "CleanupRunning", f"cleanup Job attempt {latest.attempt} is running")
            return Result.done()  # the Job watch re-enqueues on completion
        attempt = 1
        if latest is not None:  # Failed
            base, cap = settings.cleanup_retry_base_seconds, settings.cleanup_retry_max_seconds
            finished = latest.finished_at or now
            due = finished + timedelta(seconds=retry_delay(latest.attempt, base, cap))
            await self.ctx.event(sub, "Warning", "APIKeyCleanupFailed",
                                 f"cleanup Job attempt {latest.attempt} failed ({latest.message or 'no detail'}); "
                                 "the subscription stays Terminating and the cleanup is retried")
            if now < due:
                await self._status(sub, "CleanupFailed",
                                   f"cleanup Job attempt {latest.attempt} failed ({latest.message or 'no detail'}); "
                                   f"attempt {latest.attempt + 1} starts at {due.strftime('%Y-%m-%dT%H:%M:%SZ')}")
                return Result.requeue_after(max(0.5, (due - now).total_seconds()))
            attempt = latest.attempt + 1
        job = build_cleanup_job(ref, uid, attempt, settings)
        try:
            await self.ctx.client.create(job, field_manager=self.ctx.applier.field_manager)
        except Conflict:
            pass  # created by an earlier reconcile; the cache had not seen it yet
        except ApiError as exc:
            message = f"could not create cleanup Job attempt {attempt}: {str(exc)[:300]}"
            await self.ctx.event(sub, "Warning", "APIKeyCleanupFailed", message)
            await self._status(sub, "CleanupFailed", message)
            raise CleanupRetry(message) from exc  # the work queue retries with per-key exponential backoff
        else:
            await self.ctx.event(sub, "Normal", "APIKeyCleanupStarted",
                                 f"created cleanup Job {job['metadata']['namespace']}/{job['metadata']['name']}")
        await self._prune(uid, keep_from=attempt - _KEEP_FAILED)
        await self._status(sub, "CleanupRunning", f"cleanup Job attempt {attempt} is running")
        return Result.done()

    async def _prune(self, uid: str, keep_from: int) -> None:
        """Delete failed attempts older than `keep_from` (their pods go with them)."""
        for job in self._jobs(uid):
            state = job_state(job)
            if state.phase == "Failed" and state.attempt < keep_from:
                try:
                    await self.ctx.client.delete(JOB, str(job["metadata"]["name"]), str(job["metadata"]["namespace"]),
                                                 propagation_policy="Background")
                except NotFound:
                    continue

    async def _status(self, sub: FrozenObject, reason: str, message: str) -> None:
        """Keep the last status, phase Terminating (also in `kubectl get`'s Phase column) and the cleanup
        condition (one SSA apply of the whole status)."""
        status = thaw(sub.get("status") or {})
        status["phase"] = SubscriptionPhase.TERMINATING.value
        status["conditions"] = set_condition(status.get("conditions"), type_=CONDITION, status="False",
                                             reason=reason, message=message)
        await self.ctx.write_status(sub, status)
