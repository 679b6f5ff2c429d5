"""Organizations and subscription identity (issue 25) end to end: an organization's administrator manages that
organization's keys and usage only; a TokenRateLimitPolicy limits by a subscription label through the identity
the generated AuthPolicy exports (`subscription_info`); the gateway measures latency and tokens per
subscription; a deleted subscription is Terminating until its keys are revoked. Works on any cluster (the
metrics journey needs maasctl's data plane)."""

from __future__ import annotations

import csv
import io
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import Need, World, eventually
from maasctl.reconcilers.kinds import MAAS_SUBSCRIPTION
from maasctl.runtime import GroupVersionKind
from maasctl.tls import default_tls

KUADRANT_TRLP = "kuadrant.io/v1alpha1"
CRD = GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_organization_admin_manages_only_their_organizations_keys_and_usage(world: World) -> None:
    """acme's admins (premium-users: alice) revoke a key of acme and read acme's usage; globex's key and usage
    stay invisible to them; the platform admin sees both."""
    world.require(Need.ADMIN_TOKEN)
    await world.apply(*world.external_model("gpt"))
    acme, globex = world.name("acme"), world.name("globex")
    sub_acme, sub_globex = world.name("team-acme"), world.name("team-globex")
    await world.apply(
        world.organization_admins(world.name("org-admins"), {acme: ("premium-users",), globex: ("free-users",)}),
        world.auth_policy(world.name("ap"), ["gpt"], users=("carol",)),
        world.subscription(sub_acme, {"gpt": [(100_000, "1m")]}, users=("carol",), organization=acme),
        world.subscription(sub_globex, {"gpt": [(100_000, "1m")]}, users=("carol",), organization=globex))
    await world.wait_active(sub_acme, sub_globex)
    key_acme = await world.mint("carol", subscription=sub_acme)
    key_globex = await world.mint("carol", subscription=sub_globex)
    await world.wait_enforced("gpt", key_acme["key"])
    await world.wait_enforced("gpt", key_globex["key"])
    alice = bearer(world.token("alice"))
    ns = world.sub_ns()
    ours = {str(key_acme["id"]), str(key_globex["id"])}

    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        async def acme_keys_visible() -> bool:
            r = await http.post("/v1/api-keys/search", headers=alice,
                                json={"filters": {"username": world.username("carol")}})
            return r.status_code == 200 and {k["id"] for k in r.json()["data"]} & ours == {key_acme["id"]}

        await eventually(acme_keys_visible, timeout=30, describe=lambda: "alice sees exactly acme's key")
        assert (await http.get(f"/v1/api-keys/{key_globex['id']}", headers=alice)).status_code == 404
        assert (await http.post("/v1/api-keys/bulk-revoke", headers=alice,
                                json={"subscription": sub_globex})).status_code == 403

        async def usage_recorded() -> bool:
            r = await http.get("/v1/usage/report", params={"range": "1d"}, headers=world.admin_headers())
            subs = {row["subscription"] for row in r.json()["data"]}
            return {f"{ns}/{sub_acme}", f"{ns}/{sub_globex}"} <= subs

        await eventually(usage_recorded, timeout=30)
        report = await http.get("/v1/usage/report", params={"range": "1d"}, headers=alice)
        assert report.status_code == 200
        assert {row["subscription"] for row in report.json()["data"]} == {f"{ns}/{sub_acme}"}
        export = await http.get("/v1/usage/export", params={"groupBy": "subscription"}, headers=alice)
        assert {r["subscription"] for r in csv.DictReader(io.StringIO(export.text))} == {f"{ns}/{sub_acme}"}
        assert (await http.get("/v1/usage/export", params={"organization": globex},
                               headers=alice)).status_code == 403
        revoked = await http.delete(f"/v1/api-keys/{key_acme['id']}", headers=alice)
        assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"

    async def acme_key_refused() -> bool:
        return (await world.chat("gpt", key_acme["key"])).status_code in (401, 403)

    await eventually(acme_key_refused, timeout=15)
    assert (await world.chat("gpt", key_globex["key"])).status_code == 200


def with_labels(sub: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    sub["spec"]["tokenMetadata"] = {"labels": labels}
    return sub


async def test_a_rate_limit_by_subscription_tier_label_through_the_identity(world: World) -> None:
    """An operator's TokenRateLimitPolicy on the Gateway limits every subscription labelled with a tier, reading
    `auth.identity.subscription_info.labels` that the generated AuthPolicy exports; other subscriptions on the
    same model are untouched."""
    await world.apply(*world.external_model("gpt"))
    gold, plain, tier = world.name("gold"), world.name("plain"), world.name("tier")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice", "bob")),
                      with_labels(world.subscription(gold, {"gpt": [(1_000_000, "1m")]}, users=("alice",)),
                                  {"tier": tier}),
                      world.subscription(plain, {"gpt": [(1_000_000, "1m")]}, users=("bob",)))
    await world.wait_active(gold, plain)
    gold_key = (await world.mint("alice", subscription=gold))["key"]
    plain_key = (await world.mint("bob", subscription=plain))["key"]
    await world.wait_enforced("gpt", gold_key)
    await world.wait_enforced("gpt", plain_key)
    labels = "auth.identity.subscription_info.labels"
    settings = world.stack.settings
    await world.apply({
        "apiVersion": KUADRANT_TRLP, "kind": "TokenRateLimitPolicy",
        "metadata": {"name": world.name("tier-limit"), "namespace": settings.gateway_namespace},
        "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                               "name": settings.gateway_name},
                 "overrides": {"strategy": "merge", "limits": {f"tier-{tier}": {
                     "rates": [{"limit": 40, "window": "1m"}],
                     "counters": [{"expression": "auth.identity.userid"}],
                     "when": [{"predicate": f'"tier" in {labels} && {labels}.tier == "{tier}"'}]}}}}})
    seen: list[int] = []

    async def gold_limited() -> bool:  # 15 tokens an answer: the tier's 40 a minute run out after a few calls
        seen.append((await world.chat("gpt", gold_key)).status_code)
        return seen[-1] == 429

    await eventually(gold_limited, timeout=60, interval=0.5, describe=lambda: f"gold answers {seen[-10:]}")
    assert set(seen) <= {200, 429}
    for _ in range(len(seen) + 2):  # the unlabelled subscription keeps being served beyond that
        assert (await world.chat("gpt", plain_key)).status_code == 200


async def alices_subscription(world: World) -> tuple[str, dict[str, Any]]:
    """The external model `gpt`, one subscription of alice's (its name) and her key on it."""
    await world.apply(*world.external_model("gpt"))
    sub = world.name("s")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(sub, {"gpt": [(100_000, "1m")]}, users=("alice",)))
    await world.wait_active(sub)
    return sub, await world.mint("alice", subscription=sub)


async def test_the_gateway_measures_latency_and_tokens_per_subscription(world: World) -> None:
    world.require(Need.MAASCTL_DATA_PLANE)
    sub, minted = await alices_subscription(world)
    key = minted["key"]
    await world.wait_enforced("gpt", key)
    for _ in range(2):
        assert (await world.chat("gpt", key)).status_code == 200
    ref = f"{world.sub_ns()}/{sub}"
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        text = (await http.get(f"{world.stack.gateway_url}/_gateway/metrics")).text
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.labels.get("subscription") == ref]
    count = [s for s in samples if s.name == "maas_gateway_subscription_request_duration_seconds_count"]
    assert len(count) == 1 and count[0].value >= 3 and count[0].labels["model"].endswith("/gpt"), samples
    calls = count[0].value  # wait_enforced's call and ours (each answer: 10 prompt + 5 completion tokens)
    tokens = {s.labels["kind"]: s.value for s in samples if s.name == "maas_gateway_subscription_tokens_total"}
    assert tokens == {"input": 10 * calls, "output": 5 * calls, "total": 15 * calls}
    assert not any(s.labels.get("user") or s.labels.get("key") for s in samples)  # no per-user series


async def test_a_deleted_subscription_is_terminating_until_its_keys_are_revoked(world: World) -> None:
    sub, minted = await alices_subscription(world)
    key_id = minted["id"]
    live = await world.client.get(MAAS_SUBSCRIPTION, sub, world.sub_ns())
    await world.client.delete(MAAS_SUBSCRIPTION, sub, world.sub_ns())
    phases: list[str] = []
    async for event in world.client.watch(MAAS_SUBSCRIPTION, world.sub_ns(),
                                          resource_version=str(live["metadata"]["resourceVersion"]),
                                          field_selector=f"metadata.name={sub}", timeout_seconds=120):
        obj = event.get("object") or {}
        if event.get("type") == "DELETED":
            break
        if event.get("type") == "MODIFIED" and (obj.get("metadata") or {}).get("deletionTimestamp"):
            phases.append(str((obj.get("status") or {}).get("phase")))
    assert "Terminating" in phases, phases
    # revoked by the cleanup
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        shown = await http.get(f"/v1/api-keys/{key_id}", headers=bearer(world.token("alice")))
    assert shown.status_code == 200 and shown.json()["status"] == "revoked", shown.text
    crd = await world.client.get(CRD, "maassubscriptions.maas.opendatahub.io")
    columns = {c["name"]: c["jsonPath"] for v in crd["spec"]["versions"] for c in v["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"

