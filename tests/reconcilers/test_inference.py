"""The reference's inference.opendatahub.io ExternalProvider / ExternalModel on the real control plane, with the
controller running as its ServiceAccount: the provider's status (its Secret), the generated
maas.opendatahub.io ExternalModel (owned, labelled, garbage-collected), the model's status as the reference
reports it (Ready, httpRouteName once a MaaSModelRef publishes it), a refusal withdrawing what was generated, and
a name taken by a hand-written ExternalModel left alone."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s

from maasctl.builders.inference import GENERATED_FROM_LABEL
from tests.reconcilers.conftest import Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import create_secret, external_model, model_ref

GROUP, VERSION = "inference.opendatahub.io", "v1alpha1"


def provider(ns: str, name: str, kind: str = "openai", secret: str = "provider-key") -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ExternalProvider", "metadata": {"name": name, "namespace": ns},
            "spec": {"provider": kind, "endpoint": f"{name}.provider.test",
                     "auth": {"type": "simple", "secretRef": {"name": secret}}}}


def inference_model(ns: str, name: str, *refs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ExternalModel", "metadata": {"name": name, "namespace": ns},
            "spec": {"externalProviderRefs": list(refs)}}


def ref(name: str, fmt: str = "openai-chat", **extra: Any) -> dict[str, Any]:
    path = "/v1/chat/completions" if fmt == "openai-chat" else "/v1/messages"
    return {"ref": {"name": name}, "targetModel": f"{name}-model", "apiFormat": fmt, "path": path, **extra}


class Inference:
    def __init__(self, kube: k8s.ApiClient, ns: str) -> None:
        self.api, self.ns = k8s.CustomObjectsApi(kube), ns

    @staticmethod
    def plural(kind: str) -> str:
        return "externalproviders" if kind == "ExternalProvider" else "externalmodels"

    async def create(self, obj: dict[str, Any]) -> None:
        await self.api.create_namespaced_custom_object(GROUP, VERSION, self.ns, self.plural(obj["kind"]), obj)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = await self.api.get_namespaced_custom_object(GROUP, VERSION, self.ns,
                                                                              self.plural(kind), name)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got

    async def patch(self, kind: str, name: str, body: Any) -> None:
        await self.api.patch_namespaced_custom_object(GROUP, VERSION, self.ns, self.plural(kind), name, body,
                                                      _content_type="application/merge-patch+json")

    async def delete(self, kind: str, name: str) -> None:
        await self.api.delete_namespaced_custom_object(GROUP, VERSION, self.ns, self.plural(kind), name)

    async def ready(self, kind: str, name: str, phase: str, reason: str | None = None) -> dict[str, Any] | None:
        obj = await self.get(kind, name)
        status = (obj or {}).get("status") or {}
        cond = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
        if status.get("phase") == phase and (reason is None or cond.get("reason") == reason):
            return obj
        return None


async def test_a_provider_and_a_model_are_served_as_a_generated_external_model(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    inf = Inference(kube, namespace)
    await inf.create(provider(namespace, "primary"))
    await inf.create(provider(namespace, "backup", "anthropic", secret="backup-key"))
    await inf.create(inference_model(namespace, "chat", ref("primary", weight=3), ref("backup", "messages")))

    # the provider without its Secret is Failed (the reference's reason) and left out of the model
    await eventually(lambda: inf.ready("ExternalProvider", "backup", "Failed", "SecretNotFound"))
    await create_secret(kube, namespace, "provider-key")
    await inf.patch("ExternalProvider", "primary", {"metadata": {"annotations": {"touched": "1"}}})
    await eventually(lambda: inf.ready("ExternalProvider", "primary", "Ready", "Reconciled"))
    model = await eventually(lambda: inf.ready("ExternalModel", "chat", "Ready", "Reconciled"))
    message = next(c for c in model["status"]["conditions"] if c["type"] == "Ready")["message"]
    assert "by ExternalProvider(s) primary; left out: ExternalProvider 'backup' is not ready" in message

    generated = await objs.get("ExternalModel", namespace, "chat")
    assert generated is not None
    assert generated["metadata"]["labels"][GENERATED_FROM_LABEL] == GROUP
    (owner,) = generated["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        f"{GROUP}/{VERSION}", "ExternalModel", "chat", model["metadata"]["uid"], True)
    assert generated["spec"] == {"provider": "openai", "endpoint": "https://primary.provider.test/v1",
                                 "targetModel": "primary-model", "apiFormat": "openai-chat",
                                 "credentialRef": {"name": "provider-key", "key": "api-key"}}

    # its Secret appears: both providers serve, weighted, the second a fallback named after its ExternalProvider
    await create_secret(kube, namespace, "backup-key")
    await inf.patch("ExternalProvider", "backup", {"metadata": {"annotations": {"touched": "1"}}})

    async def both() -> dict[str, Any] | None:
        em = await objs.get("ExternalModel", namespace, "chat")
        return em if em and em["spec"].get("fallbacks") else None

    generated = await eventually(both)
    assert (generated["spec"]["weight"], generated["spec"]["providerSelection"]) == (3, "Weighted")
    assert [(f["name"], f["provider"], f["apiFormat"], f["credentialRef"]["name"]) for f in
            generated["spec"]["fallbacks"]] == [("backup", "anthropic", "messages", "backup-key")]

    # published as the reference's manifests do: a MaaSModelRef of kind ExternalModel naming it
    await objs.create(model_ref(namespace, "chat-model", "ExternalModel", "chat"))

    async def routed() -> dict[str, Any] | None:
        obj = await inf.ready("ExternalModel", "chat", "Ready", "Reconciled")
        return obj if obj and obj["status"].get("httpRouteName") == "maas-chat-model" else None

    await eventually(routed)
    assert await objs.get("HTTPRoute", namespace, "maas-chat-model") is not None

    # the generated object edited by hand is put back
    await objs.patch("ExternalModel", namespace, "chat", {"spec": {"targetModel": "hijacked"}})

    async def restored() -> bool:
        em = await objs.get("ExternalModel", namespace, "chat")
        return bool(em and em["spec"]["targetModel"] == "primary-model")

    await eventually(restored)

    # something maasctl would serve differently: refused, and what was generated is withdrawn (never served
    # differently); the reference sends an anthropic provider's key in x-api-key, maasctl with openai-chat not
    await inf.patch("ExternalModel", "chat", {"spec": {"externalProviderRefs": [ref("backup")]}})
    refused = await eventually(lambda: inf.ready("ExternalModel", "chat", "Failed", "Unsupported"))
    assert "the reference sends the key as x-api-key" in next(
        c for c in refused["status"]["conditions"] if c["type"] == "Ready")["message"]

    async def withdrawn() -> bool:
        return await objs.get("ExternalModel", namespace, "chat") is None

    await eventually(withdrawn)
    events = await k8s.EventsV1Api(kube).list_namespaced_event(namespace)
    assert any(e.reason == "Unsupported" and e.regarding.kind == "ExternalModel" and e.type == "Warning"
               for e in events.items)

    # fixed again, then deleted: the generated ExternalModel goes with it (garbage collection)
    await inf.patch("ExternalModel", "chat", {"spec": {"externalProviderRefs": [ref("primary")]}})
    await eventually(lambda: objs.get("ExternalModel", namespace, "chat"))
    await inf.delete("ExternalModel", "chat")
    await eventually(withdrawn)


async def test_a_name_taken_by_a_hand_written_external_model_is_a_conflict_and_left_alone(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    inf = Inference(kube, namespace)
    await create_secret(kube, namespace, "provider-key")
    await objs.create(external_model(namespace, "taken"))
    await inf.create(provider(namespace, "primary"))
    await inf.create(inference_model(namespace, "taken", ref("primary")))
    conflict = await eventually(lambda: inf.ready("ExternalModel", "taken", "Failed", "NameConflict"))
    assert "MaaSModelRefs naming 'taken' publish that one" in conflict["status"]["conditions"][0]["message"]
    mine = await objs.get("ExternalModel", namespace, "taken")
    assert mine is not None and mine["spec"]["endpoint"] == "https://api.provider.test/v1"
    assert GENERATED_FROM_LABEL not in (mine["metadata"].get("labels") or {})
    assert not mine["metadata"].get("ownerReferences")
