"""Manifests written for the reference MaaS (the shapes of its public CRD reference and docs) apply unchanged
and serve traffic through the local stack: an ExternalModel whose `endpoint` is a host name with the
`maas.opendatahub.io/port` / `maas.opendatahub.io/tls` annotations, a MaaSModelRef, a MaaSAuthPolicy and a
MaaSSubscription as the reference documents them."""

from __future__ import annotations

from urllib.parse import urlsplit

from e2e.conftest import MAAS, World, eventually

from maasctl.reconcilers.kinds import AUTH_POLICY, MAAS_MODEL_REF, MAAS_SUBSCRIPTION, TOKEN_RATE_LIMIT_POLICY
from maasctl.runtime.errors import ApiError
from maasctl.runtime.gvk import GroupVersionKind
from tests.compat.helpers import api, chat_body, gateway


async def test_reference_manifests_serve_traffic(world: World) -> None:
    ns, sub_ns = world.namespace, world.sub_ns()
    provider = urlsplit(world.stack.model_url)  # the local provider: plain HTTP on a loopback port
    sub, policy = world.name("premium-subscription"), world.name("premium-access")
    await world.apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai-credentials", "namespace": ns},
         "type": "Opaque", "stringData": {"api-key": world.stack.options.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel",
         "metadata": {"name": "gpt4", "namespace": ns, "annotations": {
             "maas.opendatahub.io/port": str(provider.port), "maas.opendatahub.io/tls": "false"}},
         "spec": {"provider": "openai", "endpoint": provider.hostname, "targetModel": "gpt-x",
                  "credentialRef": {"name": "openai-credentials"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": "gpt4-model", "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": "gpt4"}}},
        {"apiVersion": MAAS, "kind": "MaaSAuthPolicy", "metadata": {"name": policy, "namespace": sub_ns},
         "spec": {"modelRefs": [{"name": "gpt4-model", "namespace": ns}],
                  "subjects": {"groups": [{"name": "premium-users"}], "users": []},
                  "meteringMetadata": {"organizationId": "acme", "costCenter": "ai-team"}}},
        {"apiVersion": MAAS, "kind": "MaaSSubscription",
         "metadata": {"name": sub, "namespace": sub_ns, "annotations": {
             "openshift.io/display-name": "Premium Subscription",
             "openshift.io/description": "Premium-tier subscription with 1000 tokens/min rate limit"}},
         "spec": {"owner": {"groups": [{"name": "premium-users"}]},
                  "modelRefs": [{"name": "gpt4-model", "namespace": ns,
                                 "tokenRateLimits": [{"limit": 1000, "window": "1m"}],
                                 "billingRate": {"perToken": "0.001"}}],
                  "tokenMetadata": {"organizationId": "acme", "costCenter": "ai-team", "labels": {"tier": "gold"}},
                  "priority": 10}},
    )
    await world.wait_active(sub)

    async def ready() -> bool:
        obj = await world.client.get(MAAS_MODEL_REF, "gpt4-model", ns)
        return bool((obj.get("status") or {}).get("phase") == "Ready")

    await eventually(ready)
    r = await api(world, "POST", "/v1/api-keys", token=world.token("alice"),
                  json={"name": "my-premium-key", "description": "Key for premium subscription",
                        "subscription": sub, "expiresIn": "30d"})
    assert r.status_code == 201, r.text
    key = r.json()["key"]

    async def served() -> bool:
        r = await gateway(world, "POST", f"/{ns}/gpt4-model/v1/chat/completions", json=chat_body("gpt4"),
                          headers={"Authorization": f"Bearer {key}"})
        return r.status_code == 200

    await eventually(served)
    listed = (await api(world, "GET", "/v1/models", token=key)).json()["data"]
    model = next(m for m in listed if m["owned_by"] == f"{ns}/gpt4-model")
    assert model["id"] == "gpt4" and model["kind"] == "ExternalModel"  # the ExternalModel's name
    assert model["subscriptions"] == [{"name": sub, "displayName": "Premium Subscription",
                                       "description": "Premium-tier subscription with 1000 tokens/min rate limit"}]
    assert model["url"].endswith(f"/{ns}/gpt4-model/v1")
    item = next(s for s in (await api(world, "GET", "/v1/subscriptions", token=key)).json())
    assert item["subscription_id_header"] == sub and item["display_name"] == "Premium Subscription"
    assert item["model_refs"][0]["billing_rate"] == {"per_token": "0.001"}

    published = await world.client.get(MAAS_MODEL_REF, "gpt4-model", ns)
    assert published["status"]["resolvedModelAlias"] == "gpt4"
    assert published["status"]["httpRouteName"] == "maas-gpt4-model"


async def test_generated_policies_name_their_sources_as_the_reference_does(world: World) -> None:
    """`maas-trlp-<model>` carries `maas.opendatahub.io/subscriptions` and `maas-auth-<model>` carries
    `maas.opendatahub.io/auth-policies`: the sorted, comma-joined `ns/name` of what contributed, kept current."""
    ns, sub_ns = world.namespace, world.sub_ns()
    await world.apply(*world.external_model("gpt"))
    first, second, policy = world.name("s-a"), world.name("s-b"), world.name("ap")
    await world.apply(world.auth_policy(policy, ["gpt"], users=("alice",)),
                      world.subscription(first, {"gpt": [(100, "1m")]}, users=("alice",)),
                      world.subscription(second, {"gpt": [(200, "1m")]}, users=("alice",)))
    await world.wait_active(first, second)

    async def annotated(gvk: GroupVersionKind, name: str, key: str, want: str) -> bool:
        try:
            obj = await world.client.get(gvk, name, ns)
        except ApiError:
            return False
        return bool(((obj.get("metadata") or {}).get("annotations") or {}).get(key) == want)

    both = ",".join(sorted((f"{sub_ns}/{first}", f"{sub_ns}/{second}")))
    await eventually(lambda: annotated(TOKEN_RATE_LIMIT_POLICY, "maas-trlp-gpt",
                                       "maas.opendatahub.io/subscriptions", both))
    await eventually(lambda: annotated(AUTH_POLICY, "maas-auth-gpt", "maas.opendatahub.io/auth-policies",
                                       f"{sub_ns}/{policy}"))
    await world.client.delete(MAAS_SUBSCRIPTION, second, sub_ns)
    await eventually(lambda: annotated(TOKEN_RATE_LIMIT_POLICY, "maas-trlp-gpt",
                                       "maas.opendatahub.io/subscriptions", f"{sub_ns}/{first}"))
