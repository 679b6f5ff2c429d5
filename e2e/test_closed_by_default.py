"""Journey: an operator publishes a model and forgets the auth policy. Nobody gets through — not an anonymous
caller, not a user with a key for a subscription that includes the model — until a MaaSAuthPolicy names them."""

from __future__ import annotations

import httpx

from e2e.conftest import World, eventually
from maasctl.tls import default_tls


async def test_a_model_published_without_an_auth_policy_serves_nobody(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    sub = world.name("team")
    await world.apply(world.subscription(sub, {"gpt": [(100_000, "1m")]}, groups=("free-users",)))
    await world.wait_active(sub)
    key = (await world.mint("bob", subscription=sub))["key"]  # bob is in free-users: entitled by the subscription

    async def anonymous_unauthenticated() -> bool:
        async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
            anonymous = await http.post(f"/{world.namespace}/gpt/v1/chat/completions",
                                        json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        # Until the gateway has the model's route it is not found (404); until it has the generated AuthPolicy the
        # route is covered by none (403). Never served.
        assert anonymous.status_code in (401, 403, 404), anonymous.text
        return anonymous.status_code == 401

    # The MaaS answers, whether or not billing Plans are merged onto the Gateway's routes (maasctl dev runs some,
    # so the external mode meets them): no credential 401, a valid key or token 403. Never served.
    await eventually(anonymous_unauthenticated)
    keyed = await world.chat("gpt", key)
    assert keyed.status_code == 403, keyed.text
    assert (await world.chat("gpt", world.token("bob"))).status_code == 403

    # The operator adds the auth policy: now bob's key works, and only bob's.
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], groups=("free-users",)))

    async def served() -> bool:
        return (await world.chat("gpt", key)).status_code == 200

    await eventually(served)
    assert (await world.chat("gpt", world.token("carol"))).status_code == 403
