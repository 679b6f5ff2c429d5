"""The reference's newer model API (issue 37): an `inference.opendatahub.io` ExternalProvider pair and an
ExternalModel binding both, as the reference's manifests write them, published by a MaaSModelRef of kind
ExternalModel as the reference publishes it. maasctl serves it through the same code as its own ExternalModel:
the route, the AuthPolicy and the TokenRateLimitPolicy generated for it equal those of the equivalent
`maas.opendatahub.io` ExternalModel written by hand, calls through the gateway fail over from the failing
provider to the healthy one, metered once and recorded under the provider that served, and `GET /v1/models`
lists the model."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import httpx
from e2e.conftest import MAAS, World, eventually
from e2e.target import Need

from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    EXTERNAL_MODEL,
    HTTP_ROUTE,
    INFERENCE_EXTERNAL_MODEL,
    INFERENCE_EXTERNAL_PROVIDER,
    MAAS_MODEL_REF,
    SERVICE,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.runtime.errors import ApiError
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.tls import default_tls
from tests.compat.helpers import chat_body, gateway

INFERENCE = "inference.opendatahub.io/v1alpha1"
VOLATILE = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "ownerReferences")


def reference_manifests(world: World) -> list[dict[str, Any]]:
    """Two ExternalProviders on the test model (plain HTTP on its port: the reference's annotations) and an
    ExternalModel `chat` binding both: `primary` answers every request with 503, `backup` serves."""
    ns, model = world.namespace, urlsplit(world.stack.model_url)
    assert model.hostname and "." in model.hostname, "the reference's endpoint is a host name with a dot"
    notes = {"inference.opendatahub.io/port": str(model.port or 80), "inference.opendatahub.io/tls": "false"}

    def provider(name: str) -> dict[str, Any]:
        return {"apiVersion": INFERENCE, "kind": "ExternalProvider",
                "metadata": {"name": name, "namespace": ns, "annotations": notes},
                "spec": {"provider": "openai", "endpoint": model.hostname,
                         "auth": {"type": "simple", "secretRef": {"name": "provider-credentials"}}}}

    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-credentials", "namespace": ns},
         "type": "Opaque", "stringData": {"api-key": world.stack.upstream_key}},
        provider("primary"), provider("backup"),
        {"apiVersion": INFERENCE, "kind": "ExternalModel", "metadata": {"name": "chat", "namespace": ns},
         "spec": {"externalProviderRefs": [
             {"ref": {"name": "primary"}, "targetModel": "gpt-x", "apiFormat": "openai-chat",
              "path": "/fail/503/v1/chat/completions", "weight": 100},
             {"ref": {"name": "backup"}, "targetModel": "gpt-x", "apiFormat": "openai-chat",
              "path": "/v1/chat/completions", "weight": 1}]}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "chat-model", "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": "chat"}}},
    ]


def equivalent(world: World) -> list[dict[str, Any]]:
    """The same model written as maasctl's own ExternalModel (`chat-equiv`), published as `equiv-model`."""
    ns, model = world.namespace, urlsplit(world.stack.model_url)
    base = f"http://{model.hostname}:{model.port or 80}"
    return [
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": "chat-equiv", "namespace": ns},
         "spec": {"provider": "openai", "endpoint": f"{base}/fail/503/v1", "targetModel": "gpt-x",
                  "apiFormat": "openai-chat", "credentialRef": {"name": "provider-credentials", "key": "api-key"},
                  "weight": 100, "providerSelection": "Weighted",
                  "fallbacks": [{"name": "backup", "provider": "openai", "endpoint": f"{base}/v1",
                                 "targetModel": "gpt-x", "apiFormat": "openai-chat", "weight": 1,
                                 "credentialRef": {"name": "provider-credentials", "key": "api-key"}}]}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "equiv-model", "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": "chat-equiv"}}},
    ]


def comparable(obj: dict[str, Any], *, renamed: bool) -> Any:
    """What of a generated object must be equal: everything but server-assigned fields, with the equivalent
    model's names read as the converted one's."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in VOLATILE}
    text = json.dumps({"metadata": meta, "spec": obj.get("spec")}, sort_keys=True)
    if renamed:
        text = text.replace("equiv-model", "chat-model").replace("chat-equiv", "chat")
    return json.loads(text)


async def status_of(world: World, gvk: GroupVersionKind, name: str) -> dict[str, Any]:
    try:
        obj = await world.client.get(gvk, name, world.namespace)
    except ApiError:
        return {}
    return dict(obj.get("status") or {})


async def test_the_newer_model_api_is_served_as_maasctls_own_external_model(world: World) -> None:
    ns = world.namespace
    sub, policy = world.name("inference"), world.name("inference-access")
    await world.apply(*reference_manifests(world), *equivalent(world))
    await world.apply(world.auth_policy(policy, ["chat-model", "equiv-model"], users=("alice",)),
                      world.subscription(sub, {"chat-model": [(1_000_000, "1h")], "equiv-model": [(1_000_000, "1h")]},
                                         users=("alice",)))
    await world.wait_active(sub)

    # status as the reference reports it
    async def ready() -> bool:
        model = await status_of(world, INFERENCE_EXTERNAL_MODEL, "chat")
        providers = [await status_of(world, INFERENCE_EXTERNAL_PROVIDER, p) for p in ("primary", "backup")]
        return (model.get("phase") == "Ready" and model.get("httpRouteName") == "maas-chat-model"
                and all(p.get("phase") == "Ready" for p in providers))

    await eventually(ready, timeout=60)
    model = await status_of(world, INFERENCE_EXTERNAL_MODEL, "chat")
    (condition,) = model["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Ready", "True", "Reconciled")
    published = await status_of(world, MAAS_MODEL_REF, "chat-model")
    assert published["phase"] == "Ready" and published["resolvedModelAlias"] == "chat"

    # the generated objects equal those of the equivalent maas.opendatahub.io ExternalModel
    generated = await world.client.get(EXTERNAL_MODEL, "chat", ns)
    written = await world.client.get(EXTERNAL_MODEL, "chat-equiv", ns)
    assert generated["spec"] == written["spec"]
    for gvk, name in ((HTTP_ROUTE, "maas-{}"), (SERVICE, "maas-{}"), (AUTH_POLICY, "maas-auth-{}"),
                      (TOKEN_RATE_LIMIT_POLICY, "maas-trlp-{}")):
        ours = await world.client.get(gvk, name.format("chat-model"), ns)
        theirs = await world.client.get(gvk, name.format("equiv-model"), ns)
        assert comparable(ours, renamed=False) == comparable(theirs, renamed=True), gvk.kind

    # calls through the gateway: the first draw is nearly always the failing provider, then the healthy one
    key = (await world.mint("alice", subscription=sub))["key"]
    await world.wait_enforced("chat-model", key)
    for _ in range(3):
        r = await gateway(world, "POST", f"/{ns}/chat-model/v1/chat/completions", json=chat_body("chat"),
                          headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "chat"
    # the one base URL, the model named in the body, as the reference's clients call it (refused, never served,
    # until the base-URL table has the model: one CI run saw a first 403 there after the model path served)
    base: dict[str, Any] = {}

    async def served_on_the_base_url() -> bool:
        r = await gateway(world, "POST", "/v1/chat/completions", json=chat_body("chat"),
                          headers={"Authorization": f"Bearer {key}"})
        base.update(status=r.status_code, text=r.text[:300])
        assert r.status_code in (200, 403), r.text
        return r.status_code == 200 and r.json()["model"] == "chat"

    await eventually(served_on_the_base_url, timeout=30, describe=lambda: f"base URL: {base}")
    # and the listing shows both (several providers: the data plane answers the probe of the model's path),
    # the converted one at once (its policies are in force), the hand-written one once its are too
    listing = {"models": await world.models(key)}
    assert f"{ns}/chat-model" in listing["models"]

    async def both_listed() -> bool:
        listing["models"] = await world.models(key)
        return listing["models"] == [f"{ns}/chat-model", f"{ns}/equiv-model"]

    await eventually(both_listed, timeout=60, describe=lambda: f"listed: {listing['models']}")

    if not world.stack.missing(Need.MODEL_REQUESTS):
        seen = await world.model_requests()
        assert [r for r in seen if r["path"] == "/fail/503/v1/chat/completions"], "the failing provider was tried"
    if not world.stack.missing(Need.ADMIN_TOKEN):
        admin = world.admin_headers()

        records: list[dict[str, Any]] = []

        async def recorded() -> bool:
            async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
                resp = await http.get("/v1/usage/records", params={"subscription": sub, "limit": 100},
                                      headers=admin)
            assert resp.status_code == 200, resp.text
            records[:] = [r for r in resp.json() if r["model"].endswith("chat-model")]
            return len(records) == 5  # wait_enforced's call and four more

        await eventually(recorded, timeout=30, describe=lambda: f"{len(records)} of 5 requests recorded")
        assert {(r["status"], r["provider"]) for r in records} == {(200, "backup")}
