"""ExternalModel -> validated provider settings and the upstream-key Secret labelled for injection.

The routes are generated per MaaSModelRef (one provider endpoint and credential may back several published
model names); this reconciler only owns the credential's injection label and the ExternalModel's status. Its
finalizer (which releases the label) is added only to an ExternalModel naming a credential.
Secrets are never cached by the controller, so the credential check is a live GET; the key material is never
read into logs, events or status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maasctl.api import ExternalModel, ExternalModelPhase, parse
from maasctl.builders import names
from maasctl.reconcilers.context import FINALIZER, Context
from maasctl.reconcilers.kinds import EXTERNAL_MODEL, SECRET
from maasctl.reconcilers.routes import provider_endpoint
from maasctl.runtime import (
    NotFound,
    Request,
    Result,
    has_finalizer,
    is_deleting,
    remove_finalizer,
    set_condition,
    thaw,
)

RECHECK_MISSING_SECRET = 30.0


class ExternalModelReconciler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(EXTERNAL_MODEL, req.name, req.namespace)
        if obj is None:
            return Result.done()
        if is_deleting(obj):
            if has_finalizer(obj, FINALIZER):
                await self._release_secret(obj)
                await remove_finalizer(ctx.client, obj, FINALIZER)
            return Result.done()

        em = parse(ExternalModel, thaw(obj))
        phase, reason, message = ExternalModelPhase.READY, "Ready", f"provider {em.spec.provider}, no credentials"
        requeue: float | None = None
        ref = em.spec.credential_ref
        try:
            provider_endpoint(str(em.spec.endpoint), em.metadata.annotations, req.namespace,
                              ctx.settings.provider_service_namespaces)
        except ValueError as exc:
            phase, reason, message, ref = ExternalModelPhase.FAILED, "InvalidEndpoint", str(exc), None
        if ref is not None:
            # before the Secret is labelled (deletion releases it); predicates do not re-enqueue on it. Without
            # a credential there is nothing to release: no finalizer, one write less per ExternalModel
            await ctx.ensure_finalizer(obj)
            secret = await self._secret(ref.name, req.namespace or "")
            key = ref.key or "api-key"
            if secret is None:
                phase, reason = ExternalModelPhase.FAILED, "CredentialNotFound"
                message = f"Secret {ref.name} not found"
                requeue = RECHECK_MISSING_SECRET
            elif key not in (secret.get("data") or {}):
                phase, reason = ExternalModelPhase.FAILED, "CredentialKeyMissing"
                message = f"Secret {ref.name} has no key {key!r}"
                requeue = RECHECK_MISSING_SECRET
            else:
                labels = secret["metadata"].get("labels") or {}
                if labels.get(names.UPSTREAM_KEY_LABEL) != "true":
                    await ctx.client.apply(self._label_patch(ref.name, req.namespace or "", True),
                                           field_manager=ctx.applier.field_manager)
                message = f"provider {em.spec.provider}, credentials from Secret {ref.name}"
        if phase != ExternalModelPhase.READY:
            await ctx.event(obj, "Warning", reason, message)
        generation = int(obj["metadata"].get("generation", 0))
        status = {
            "phase": str(phase),
            "observedGeneration": generation,
            "conditions": set_condition(
                (obj.get("status") or {}).get("conditions"), type_="Ready",
                status="True" if phase == ExternalModelPhase.READY else "False",
                reason=reason, message=message, observed_generation=generation,
            ),
        }
        await ctx.write_status(obj, status)
        return Result.requeue_after(requeue) if requeue else Result.done()

    async def _secret(self, name: str, namespace: str) -> Mapping[str, Any] | None:
        try:
            return await self.ctx.client.get(SECRET, name, namespace)
        except NotFound:
            return None

    @staticmethod
    def _label_patch(name: str, namespace: str, labelled: bool) -> dict[str, Any]:
        labels = {names.UPSTREAM_KEY_LABEL: "true"} if labelled else {}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace,
                                                                    "labels": labels}}

    async def _release_secret(self, obj: Mapping[str, Any]) -> None:
        """Drop our injection label when no other ExternalModel in the namespace uses the Secret."""
        ref = ((obj.get("spec") or {}).get("credentialRef") or {}).get("name")
        if not ref:
            return
        ns = obj["metadata"]["namespace"]
        others = [
            o for o in self.ctx.cache.list(EXTERNAL_MODEL, ns)
            if o["metadata"]["name"] != obj["metadata"]["name"] and not is_deleting(o)
            and ((o.get("spec") or {}).get("credentialRef") or {}).get("name") == ref
        ]
        if others or await self._secret(ref, ns) is None:
            return
        await self.ctx.client.apply(self._label_patch(ref, ns, False), field_manager=self.ctx.applier.field_manager)
