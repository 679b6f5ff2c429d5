"""ExternalModel -> validated provider settings and the upstream-key Secret labelled for injection.

The routes are generated per MaaSModelRef (one provider endpoint and credential may back several published
model names); this reconciler only owns the credentials' injection label and the ExternalModel's status. Its
finalizer (which releases the label) is added only to an ExternalModel naming a credential. With fallbacks
every provider is checked (endpoint, credential), each one's Secret labelled, and `status.providers` lists
each; the model is Ready only when all are (the first failing one is the Ready condition's reason).
The Secrets it labelled are cached (label `maas.opendatahub.io/upstream-key=true`; `secret_keys_only` keeps the
key names of their data and drops the values), so a restart checks every credential without a read; a Secret
not (or no longer) labelled is read live once, then labelled. The key material is never kept, nor written to
logs, events or status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from maasctl.api import ExternalModel, ExternalModelPhase, SecretKeyRef, parse
from maasctl.builders import names
from maasctl.reconcilers.context import FINALIZER, Context
from maasctl.reconcilers.kinds import EXTERNAL_MODEL, SECRET
from maasctl.reconcilers.routes import fallback_input, provider_endpoint
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
SECRET_INDEX = "maas.secret"
"""Index on ExternalModel: `namespace/secret` of each credential Secret it names (`secret_index`)."""


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
        namespace = req.namespace or ""
        shared = ctx.settings.provider_service_namespaces
        several = bool(em.spec.fallbacks)
        checked: list[_Checked] = []
        for name, endpoint_check, ref in self._providers(em, namespace, shared):
            try:
                endpoint_check()
            except ValueError as exc:
                checked.append(_Checked(name, "InvalidEndpoint", str(exc)))
                continue
            if ref is None:
                checked.append(_Checked(name, "Ready", f"provider {name}, no credentials"))
                continue
            # before the Secret is labelled (deletion releases it); predicates do not re-enqueue on it. Without
            # a credential there is nothing to release: no finalizer, one write less per ExternalModel
            await ctx.ensure_finalizer(obj)
            checked.append(await self._credential(name, ref.name, ref.key or "api-key", namespace))
        failed = next((c for c in checked if c.reason != "Ready"), None)
        phase = ExternalModelPhase.READY if failed is None else ExternalModelPhase.FAILED
        if failed is None:
            reason, message = "Ready", checked[0].message if not several else \
                f"{len(checked)} providers: " + ", ".join(c.name for c in checked)
        else:
            reason = failed.reason
            message = f"provider {failed.name}: {failed.message}" if several else failed.message
        # Secrets are not watched: a missing one is looked for again
        requeue = RECHECK_MISSING_SECRET if any(c.reason.startswith("Credential") for c in checked) else None
        if phase != ExternalModelPhase.READY:
            await ctx.event(obj, "Warning", reason, message)
        generation = int(obj["metadata"].get("generation", 0))
        status: dict[str, Any] = {
            "phase": str(phase),
            "observedGeneration": generation,
            "conditions": set_condition(
                (obj.get("status") or {}).get("conditions"), type_="Ready",
                status="True" if phase == ExternalModelPhase.READY else "False",
                reason=reason, message=message, observed_generation=generation,
            ),
        }
        if several:
            status["providers"] = [{"name": c.name, "ready": c.reason == "Ready", "reason": c.reason,
                                    "message": c.message[:1024]} for c in checked]
        await ctx.write_status(obj, status)
        return Result.requeue_after(requeue) if requeue else Result.done()

    @staticmethod
    def _providers(em: ExternalModel, namespace: str, shared: tuple[str, ...]
                   ) -> list[tuple[str, Callable[[], object], SecretKeyRef | None]]:
        """(name, endpoint check raising ValueError, credential) of each provider, the first one first."""
        spec = em.spec
        out: list[tuple[str, Callable[[], object], SecretKeyRef | None]] = [(
            spec.provider,
            lambda: provider_endpoint(str(spec.endpoint), em.metadata.annotations, namespace, shared),
            spec.credential_ref)]
        for binding in spec.fallbacks or ():
            out.append((binding.name, lambda b=binding: fallback_input(b, namespace, shared),  # type: ignore[misc]
                        binding.credential_ref))
        return out

    async def _credential(self, provider: str, secret_name: str, key: str, namespace: str) -> _Checked:
        """Whether a provider's key is there; labels its Secret for the data plane (never reads the value out)."""
        secret = await self._secret(secret_name, namespace)
        if secret is None:
            return _Checked(provider, "CredentialNotFound", f"Secret {secret_name} not found")
        if key not in (secret.get("data") or {}):
            return _Checked(provider, "CredentialKeyMissing", f"Secret {secret_name} has no key {key!r}")
        labels = secret["metadata"].get("labels") or {}
        if labels.get(names.UPSTREAM_KEY_LABEL) != "true":
            await self.ctx.client.apply(self._label_patch(secret_name, namespace, True),
                                        field_manager=self.ctx.applier.field_manager)
        return _Checked(provider, "Ready", f"provider {provider}, credentials from Secret {secret_name}")

    async def _secret(self, name: str, namespace: str) -> Mapping[str, Any] | None:
        """The Secret from the cache of labelled Secrets, else a live GET (a Secret not labelled yet)."""
        cached = self.ctx.cache.get(SECRET, name, namespace)
        if cached is not None:
            return cached
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
        """Drop our injection label from each Secret the ExternalModel names (its first provider's and its
        fallbacks') that no other ExternalModel in the namespace uses."""
        ns = obj["metadata"]["namespace"]
        others = [o for o in self.ctx.cache.list(EXTERNAL_MODEL, ns)
                  if o["metadata"]["name"] != obj["metadata"]["name"] and not is_deleting(o)]
        used = {name for o in others for name in _secret_names(o)}
        for ref in sorted(_secret_names(obj) - used):
            if await self._secret(ref, ns) is not None:
                await self.ctx.client.apply(self._label_patch(ref, ns, False),
                                            field_manager=self.ctx.applier.field_manager)


@dataclass(frozen=True)
class _Checked:
    """One provider's configuration and credential, as status reports it."""

    name: str
    reason: str  # Ready | InvalidEndpoint | CredentialNotFound | CredentialKeyMissing
    message: str


def secret_keys_only(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """Cache transform for Secrets: the names of the data's keys stay (a credential check asks for one), their
    values never enter the cache."""
    kept = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
    if isinstance(obj.get("data"), Mapping):
        kept["data"] = dict.fromkeys(obj["data"], "")
    return kept


def secret_index(obj: Mapping[str, Any]) -> list[str]:
    """`namespace/secret` of each credential Secret an ExternalModel names (a Secret's change finds its models)."""
    return [f"{obj['metadata']['namespace']}/{name}" for name in sorted(_secret_names(obj))]


def _secret_names(obj: Mapping[str, Any]) -> set[str]:
    """The credential Secrets an ExternalModel object names (first provider and fallbacks)."""
    spec = obj.get("spec") or {}
    fallbacks = spec.get("fallbacks") or ()
    refs = [spec.get("credentialRef") or {}, *((f or {}).get("credentialRef") or {} for f in fallbacks)]
    return {str(r["name"]) for r in refs if isinstance(r, Mapping) and r.get("name")}
