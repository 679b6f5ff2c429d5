"""The MaaS answers with and without billing Plans (issue 37), over HTTP on the real local stack: a valid credential
on a model no MaaSAuthPolicy grants is 403, as a valid credential the model's policy does not admit; 401 only for
no credential or a token nobody accepts; an API key maas-api refuses is 403 everywhere (the reference's answer:
keys are checked in authorization). Applying the sample billing Plans (`billing.samples`, compiled by the billing
compiler `maasctl billing run` applies, targeting the stack's Gateway, created after its default-deny as in
`maasctl dev`) changes none of these answers, and nothing refused reaches the provider.

One namespace for the whole table: `gpt-open` (alice may call it), `gpt-closed` (published, in alice's
subscription, named by no MaaSAuthPolicy) and `probe`, which tells whether the Plans are in force: alice's
subscription belongs to the sample tenant `acme`, whose Plan `basic` admits only `gpt-*` and `granite*` models.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from e2e.cleanup import RUN_LABEL, Cleanup
from e2e.conftest import MAAS, World, eventually
from e2e.target import Target
from kubernetes_asyncio import client as k8s

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.dev.samples import billing_samples
from maasctl.billing.rules import identity
from maasctl.billing.rules.compile import PlanInput, Tenant, compile_plan
from maasctl.builders import authpolicy as maas_auth
from maasctl.runtime import GroupVersionKind, NotFound
from maasctl.tls import default_tls
from tests.security.helpers import backend_seq

MODELS = ("gpt-open", "gpt-closed", "probe")
CODES = {200: "", 401: "unauthenticated", 403: "forbidden"}
EXPECTED: dict[str, tuple[int, int]] = {
    # credential: (answer on gpt-open, answer on gpt-closed) - with and without Plans
    "valid key": (200, 403),
    "invalid key": (403, 403),
    "no credential": (401, 401),
    "valid token": (200, 403),
    "valid token, not entitled": (403, 403),
    "invalid token": (401, 401),
}
CASES = [(plans, credential, model) for plans in (False, True) for credential in EXPECTED
         for model in ("gpt-open", "gpt-closed")]


@dataclass
class Table:
    world: World
    credentials: dict[str, str | None]
    plans: list[dict[str, Any]] = field(default_factory=list)
    plans_on: bool = False

    async def call(self, model: str, credential: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        async with httpx.AsyncClient(base_url=self.world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
            return await http.post(f"/{self.world.namespace}/{model}/v1/chat/completions", headers=headers,
                                   json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})

    async def use_plans(self, on: bool) -> None:
        """Apply (or delete) the Plans' objects and wait until the gateway enforces that: the probe model, outside
        the tenant's Plan scopes, is refused exactly while they are in force."""
        if on == self.plans_on:
            return
        if on:
            await self.world.apply(*self.plans)
        else:
            for obj in self.plans:
                with contextlib.suppress(NotFound):
                    await self.world.client.delete(GroupVersionKind.of(obj), obj["metadata"]["name"],
                                                   obj["metadata"]["namespace"])
        key = self.credentials["valid key"]

        async def enforced() -> bool:
            return (await self.call("probe", key)).status_code == (403 if on else 200)

        await eventually(enforced, 60, describe=lambda: f"the Plans are {'not ' if on else ''}in force yet")
        self.plans_on = on


def sample_plans(world: World) -> list[dict[str, Any]]:
    """The Kuadrant objects the sample Plans compile to (their TenantAccounts as tenants), on the stack's Gateway;
    named after the journey so they never meet another run's."""
    settings = world.stack.settings
    samples = billing_samples(settings.gateway_namespace, settings.gateway_name, datetime.now(UTC))
    accounts = [o for o in samples if o["kind"] == "TenantAccount"]
    out: list[dict[str, Any]] = []
    for obj in (o for o in samples if o["kind"] == "Plan"):
        name = obj["metadata"]["name"]
        tenants = tuple(Tenant(t["metadata"]["name"], identity.tenant_id(t)) for t in accounts
                        if t["spec"]["planRef"]["name"] == name)
        compiled = compile_plan(PlanInput(settings.gateway_namespace, world.name(name), "", parse(Plan, obj).spec,
                                          tenants, fallback_denial=(maas_auth.DENIAL_MESSAGE,
                                                                    maas_auth.DENIAL_REASON)))
        out += [o for o in compiled.objects if o["apiVersion"].startswith("kuadrant.io/")]
    assert {o["kind"] for o in out} == {"AuthPolicy", "RateLimitPolicy", "TokenRateLimitPolicy"}
    return out


@pytest.fixture(scope="module")
async def table(stack: Target) -> AsyncIterator[Table]:
    suffix = uuid.uuid4().hex[:6]
    world = World(stack, f"e2e-{suffix}", suffix, Cleanup(stack.client, stack.api_url))
    world.cleanup.track({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": world.namespace}})
    await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(
        metadata=k8s.V1ObjectMeta(name=world.namespace, labels={RUN_LABEL: stack.run_id})))
    try:
        refs = [{"apiVersion": MAAS, "kind": "MaaSModelRef", "metadata": {"name": m, "namespace": world.namespace},
                 "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"}}} for m in MODELS[1:]]
        await world.apply(*world.external_model(MODELS[0]), *refs)
        sub = world.name("s")
        subscription = world.subscription(sub, {m: [(1_000_000, "1m")] for m in MODELS}, users=("alice",),
                                          organization="acme")
        await world.apply(world.auth_policy(world.name("ap"), ["gpt-open", "probe"], users=("alice",)), subscription)
        await world.wait_active(sub)
        key = str((await world.mint("alice", subscription=sub))["key"])
        for model in ("gpt-open", "probe"):
            await world.wait_enforced(model, key)
        table = Table(world, {"valid key": key, "invalid key": f"sk-oai-{uuid.uuid4().hex}", "no credential": None,
                              "valid token": world.token("alice"), "valid token, not entitled": world.token("carol"),
                              "invalid token": "not-a-token"}, sample_plans(world))

        async def routed() -> bool:  # the closed model's route is in the gateway (else 404)
            return (await table.call("gpt-closed", key)).status_code == 403

        await eventually(routed, 60, describe=lambda: "gpt-closed is not routed yet")
        yield table
        await table.use_plans(False)  # gone from the gateway before the next module's journeys
    finally:
        problems = await world.cleanup.run()
        assert not problems, problems


@pytest.mark.parametrize(("plans", "credential", "model"), CASES,
                         ids=[f"{'Plans' if p else 'no Plans'}-{c}-{m}" for p, c, m in CASES])
async def test_billing_plans_keep_the_maas_answers(table: Table, plans: bool, credential: str, model: str) -> None:
    await table.use_plans(plans)
    expected = EXPECTED[credential][model == "gpt-closed"]
    seen = await backend_seq(table.world)
    r = await table.call(model, table.credentials[credential])
    code = "" if r.status_code == 200 else r.json()["error"]["code"]
    assert (r.status_code, code) == (expected, CODES[expected]), r.text
    if expected == 401:
        assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
    if expected != 200:
        assert await backend_seq(table.world) == seen  # refused: the provider saw nothing
