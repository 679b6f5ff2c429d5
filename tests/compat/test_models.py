"""Models as a reference client sees them, against the real local stack: a model published under another name
than the provider's (seed 004 "Publish Models"; ExternalModel `targetModel`) is callable under the published
name, the provider sees its own name, usage is metered under the published model, and the body cannot name
another of the provider's models. `/v1/models`, `x-api-key`, and the one subscription rule in maas-api and
the gateway."""

from __future__ import annotations

import json
from typing import Any

from e2e.conftest import MAAS, World, eventually

from tests.compat.helpers import api, chat_body, gateway, served_model
from tests.security.helpers import backend_log, backend_seq, backend_since


async def renamed_model(world: World, published: str = "company-chat", ref: str = "chat") -> tuple[str, str, str]:
    """ExternalModel `published` (the provider's `gpt-x`) published by MaaSModelRef `ref`; alice may call it.
    Returns (subscription, key, key id)."""
    ns = world.namespace
    await world.apply(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-key", "namespace": ns},
         "stringData": {"api-key": world.stack.options.upstream_key}},
        {"apiVersion": MAAS, "kind": "ExternalModel", "metadata": {"name": published, "namespace": ns},
         "spec": {"provider": "openai", "endpoint": f"{world.stack.model_url}/v1", "targetModel": "gpt-x",
                  "credentialRef": {"name": "provider-key"}}},
        {"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": ref, "namespace": ns},
         "spec": {"modelRef": {"kind": "ExternalModel", "name": published}}},
    )
    sub = world.name("s")
    await world.apply(world.auth_policy(world.name("ap"), [ref], users=("alice",)),
                      world.subscription(sub, {ref: [(100_000, "1m")]}, users=("alice",)))
    await world.wait_active(sub)
    minted = await world.mint("alice", subscription=sub)

    async def served() -> bool:
        r = await gateway(world, "POST", f"/{ns}/{ref}/v1/chat/completions", json=chat_body(published),
                          headers={"Authorization": f"Bearer {minted['key']}"})
        return r.status_code == 200

    await eventually(served)
    return sub, str(minted["key"]), str(minted["id"])


async def _usage_records(world: World, key_id: str, at_least: int) -> list[dict[str, Any]]:
    assert world.stack.admin_token_file is not None
    admin = world.stack.admin_token_file.read_text().strip()
    found: list[dict[str, Any]] = []

    async def arrived() -> bool:
        nonlocal found
        r = await api(world, "GET", "/v1/usage/records", token=admin, params={"keyId": key_id, "limit": 100})
        assert r.status_code == 200, r.text
        found = r.json()
        return len(found) >= at_least

    await eventually(arrived, timeout=30)
    return found


async def test_a_renamed_model_is_called_metered_and_listed_under_its_published_name(world: World) -> None:
    ns = world.namespace
    sub, key, key_id = await renamed_model(world)
    bearer = {"Authorization": f"Bearer {key}"}
    path = f"/{ns}/chat/v1/chat/completions"

    seen = await backend_seq(world)
    r = await gateway(world, "POST", path, json=chat_body("company-chat"), headers=bearer)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "company-chat"  # what the client sees: the published name
    upstream = await backend_since(world, seen)
    assert [e.get("model") for e in upstream] == ["gpt-x"]  # what the provider sees: its own name

    stream = await gateway(world, "POST", path, json={**chat_body("company-chat"), "stream": True}, headers=bearer)
    assert stream.status_code == 200 and "gpt-x" not in stream.text
    events = [json.loads(line[5:]) for line in stream.text.splitlines()
              if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    assert events and {e["model"] for e in events} == {"company-chat"}

    records = await _usage_records(world, key_id, 3)  # the readiness probe's call and the two above
    assert {rec["model"] for rec in records} == {f"{ns}/chat"}  # metered under the published model

    listed = (await api(world, "GET", "/v1/models", token=key)).json()["data"]
    mine = [m for m in listed if m["owned_by"] == f"{ns}/chat"]
    assert [(m["id"], m["kind"], m["ready"]) for m in mine] == [("company-chat", "ExternalModel", True)]
    assert mine[0]["subscriptions"] == [{"name": sub}] and mine[0]["object"] == "model"


async def test_a_renamed_route_reaches_no_other_model_of_the_provider(world: World) -> None:
    """The provider also serves `granite`; through the route of `company-chat` (and its upstream key) no body
    may ask for it, in any spelling, and nothing reaches the provider."""
    ns = world.namespace
    _, key, _ = await renamed_model(world)
    bearer = {"Authorization": f"Bearer {key}"}
    path = f"/{ns}/chat/v1/chat/completions"
    before = await backend_seq(world)
    for model in ("granite", "GPT-X", "company-chat ", None, ["company-chat"], {"name": "company-chat"}):
        r = await gateway(world, "POST", path, json={"model": model, "messages": []}, headers=bearer)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", (model, r.text)
    dup = b'{"model": "company-chat", "model": "granite", "messages": []}'  # last key wins in JSON parsers
    r = await gateway(world, "POST", path, content=dup, headers={**bearer, "Content-Type": "application/json"})
    assert r.status_code == 404
    r = await gateway(world, "POST", f"/{ns}/chat/v1/audio/transcriptions", content=b"model=granite",
                      headers={**bearer, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400  # a body that cannot be rewritten is refused, not passed on
    assert await backend_seq(world) == before
    # the other accepted spellings (the provider's own name, the MaaSModelRef's name) reach the same model
    for model in ("gpt-x", "chat"):
        r = await gateway(world, "POST", path, json=chat_body(model), headers=bearer)
        assert r.status_code == 200 and r.json()["model"] == "company-chat", model


async def test_api_key_in_x_api_key(world: World) -> None:
    """The reference accepts an API key in `x-api-key` (Anthropic-style clients) besides `Authorization`."""
    ns = world.namespace
    sub, key, _ = await renamed_model(world)
    path = f"/{ns}/chat/v1/chat/completions"
    seen = await backend_seq(world)
    r = await gateway(world, "POST", path, json=chat_body("company-chat"), headers={"x-api-key": key})
    assert r.status_code == 200, r.text
    upstream = await backend_since(world, seen)
    assert len(upstream) == 1 and "x-api-key" not in upstream[0]["headers"]
    assert key not in json.dumps(upstream)  # the provider gets its own key only
    r = await api(world, "GET", "/v1/models", headers={"x-api-key": key})
    assert r.status_code == 200 and "company-chat" in {m["id"] for m in r.json()["data"]}
    r = await api(world, "GET", "/v1/subscriptions", headers={"X-Api-Key": key})
    assert r.status_code == 200 and len(r.json()) == 1

    # one credential per request: both headers must agree, and x-api-key carries API keys only
    other = (await world.mint("alice", subscription=sub))["key"]
    for headers in ({"x-api-key": key, "Authorization": f"Bearer {other}"},
                    {"x-api-key": key, "Authorization": f"Bearer {world.token('alice')}"}):
        assert (await gateway(world, "POST", path, json=chat_body("company-chat"), headers=headers)).status_code \
            in (401, 403)
        assert (await api(world, "GET", "/v1/models", headers=headers)).status_code == 401
    same = {"x-api-key": key, "Authorization": f"Bearer {key}"}
    assert (await gateway(world, "POST", path, json=chat_body("company-chat"), headers=same)).status_code == 200
    for headers in ({"x-api-key": world.token("alice")}, {"x-api-key": "sk-oai-forged_x"}):
        assert (await gateway(world, "POST", path, json=chat_body("company-chat"), headers=headers)).status_code \
            in (401, 403)  # no credential / a key maas-api does not validate, as with Authorization
        assert (await api(world, "GET", "/v1/models", headers=headers)).status_code == 401
    assert len([e for e in await backend_since(world, seen) if e["path"].endswith("/chat/completions")]) == 2


async def test_one_subscription_rule_in_maas_api_and_the_gateway(world: World) -> None:
    """A key's binding wins over an X-MaaS-Subscription header in both places, as in the reference (the header is
    ignored: served and listed under the bound subscription, never switched); a token caller naming a
    subscription it cannot use gets 403 from /v1/models, as in the reference."""
    ns = world.namespace
    sub, key, _ = await renamed_model(world)
    other = world.name("other")
    await world.apply(world.subscription(other, {"chat": [(100, "1m")]}, users=("alice",), priority=5))
    await world.wait_active(other)
    for named in (other, "no-such-subscription", f"{world.sub_ns()}/{other}"):
        header = {"X-MaaS-Subscription": named}
        r = await gateway(world, "POST", f"/{ns}/chat/v1/chat/completions", json=chat_body("company-chat"),
                          headers={"Authorization": f"Bearer {key}", **header})
        assert r.status_code == 200, (named, r.text)
        served = [e for e in await backend_log(world) if e["path"].endswith("/chat/completions")][-1]
        assert served["headers"]["x-maas-subscription"] == sub, named  # charged to the binding
        r = await api(world, "GET", "/v1/models", token=key, headers=header)
        assert r.status_code == 200, (named, r.text)
        listed = [m for m in r.json()["data"] if m["owned_by"] == f"{ns}/chat"]
        assert [s["name"] for s in listed[0]["subscriptions"]] == [sub], named
    for name in ("no-such-subscription", other + "x"):
        r = await api(world, "GET", "/v1/models", token=world.token("bob"), headers={"X-MaaS-Subscription": name})
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", name
    r = await api(world, "GET", "/v1/models", token=world.token("bob"), headers={"X-MaaS-Subscription": sub})
    assert r.status_code == 403  # alice's, not bob's: indistinguishable from unknown
    r = await api(world, "GET", "/v1/models", token=world.token("alice"), headers={"X-MaaS-Subscription": sub})
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"] if m["owned_by"] == f"{ns}/chat"] == [
        "company-chat"]


async def test_subscriptions_listing_and_per_model_subscriptions(world: World) -> None:
    sub, key, _ = await renamed_model(world)
    other = world.name("other")
    spec = world.subscription(other, {"chat": None}, users=("alice",), priority=3)
    spec["metadata"]["annotations"] = {"openshift.io/display-name": "Other plan",
                                       "openshift.io/description": "All you can eat"}
    spec["spec"]["tokenMetadata"] = {"organizationId": "acme", "costCenter": "cc-1", "labels": {"tier": "gold"}}
    await world.apply(spec)
    await world.wait_active(other)

    r = await api(world, "GET", "/v1/subscriptions", token=world.token("alice"))
    assert r.status_code == 200 and isinstance(r.json(), list)  # a bare array, as in the reference
    by_header = {s["subscription_id_header"]: s for s in r.json()}
    item = by_header[other]
    assert item["subscription_description"] == "All you can eat" and item["display_name"] == "Other plan"
    assert item["priority"] == 3 and item["organization_id"] == "acme" and item["cost_center"] == "cc-1"
    assert item["labels"] == {"tier": "gold"}
    assert item["model_refs"] == [{"name": "chat", "namespace": world.namespace, "token_rate_limits": [],
                                   "unlimited": True, "model_name": "company-chat", "source": "external"}]
    assert by_header[sub]["subscription_description"] == sub  # falls back to the name
    assert by_header[sub]["model_refs"][0]["token_rate_limits"] == [{"limit": 100_000, "window": "1m"}]

    # as in the reference, a key lists its user's subscriptions; it is still only ever served by its own
    r = await api(world, "GET", "/v1/subscriptions", token=key)
    assert {s["subscription_id_header"] for s in r.json()} >= {sub, other}
    r = await api(world, "GET", "/v1/model/chat/subscriptions", token=key)
    assert {s["subscription_id_header"] for s in r.json()} >= {sub, other}

    # the entries carry the MaaSModelRef's display annotations, as the reference's do
    await world.apply({"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {
        "name": "chat", "namespace": world.namespace, "annotations": {
            "openshift.io/display-name": "Company chat", "openshift.io/description": "Our chat model"}},
        "spec": {"modelRef": {"kind": "ExternalModel", "name": "company-chat"}}})

    async def described() -> bool:
        items = (await api(world, "GET", "/v1/subscriptions", token=world.token("alice"))).json()
        entry = next(s for s in items if s["subscription_id_header"] == other)["model_refs"][0]
        return bool(entry.get("display_name") == "Company chat" and entry.get("description") == "Our chat model")

    await eventually(described)

    r = await api(world, "GET", "/v1/model/chat/subscriptions", token=world.token("alice"))
    assert r.status_code == 200 and {s["subscription_id_header"] for s in r.json()} >= {sub, other}
    r = await api(world, "GET", "/v1/model/chat/subscriptions", token=world.token("bob"))
    assert r.status_code == 200 and sub not in {s["subscription_id_header"] for s in r.json()}
    r = await api(world, "GET", f"/v1/model/{world.name('nothing')}/subscriptions", token=world.token("alice"))
    assert r.status_code == 200 and r.json() == []
    r = await api(world, "GET", "/v1/model/chat/subscriptions")
    assert r.status_code == 401



async def test_listings_show_only_what_a_maas_auth_policy_grants(world: World) -> None:
    """As in the reference: a subscription lists only the models a MaaSAuthPolicy grants the caller (the gateway
    refuses the others), and one with no granted model is not listed; the per-model listing the same."""
    sub, key = await served_model(world, model="granted", user="alice")  # alice is granted `granted`
    await world.apply(*world.external_model("ungranted"))
    both, none = world.name("both"), world.name("none")
    await world.apply(world.subscription(both, {"granted": [(1000, "1m")], "ungranted": [(1000, "1m")]},
                                         users=("alice",)),
                      world.subscription(none, {"ungranted": [(1000, "1m")]}, users=("alice",)))
    await world.wait_active(both)

    for credential in (world.token("alice"), key):  # a token, and a key (its user's subscriptions)
        listed = {s["subscription_id_header"]: s for s in
                  (await api(world, "GET", "/v1/subscriptions", token=credential)).json()}
        assert [m["name"] for m in listed[both]["model_refs"]] == ["granted"], listed[both]
        assert none not in listed and sub in listed
        per_model = await api(world, "GET", "/v1/model/ungranted/subscriptions", token=credential)
        assert per_model.status_code == 200 and per_model.json() == []
        per_model = await api(world, "GET", "/v1/model/granted/subscriptions", token=credential)
        assert {s["subscription_id_header"] for s in per_model.json()} >= {sub, both}
    # What the listing leaves out the gateway refuses: the listing never advertises a 403.
    assert (await world.chat("ungranted", world.token("alice"), headers={"X-MaaS-Subscription": both})
            ).status_code == 403

    # Granting it (to a group alice is in) brings it back.
    await world.apply(world.auth_policy(world.name("ap-more"), ["ungranted"], groups=("premium-users",)))

    async def listed_again() -> bool:
        items = (await api(world, "GET", "/v1/subscriptions", token=world.token("alice"))).json()
        names = {s["subscription_id_header"]: [m["name"] for m in s["model_refs"]] for s in items}
        return names.get(both) == ["granted", "ungranted"] and names.get(none) == ["ungranted"]

    await eventually(listed_again)
