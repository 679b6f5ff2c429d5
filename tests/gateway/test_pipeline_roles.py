"""The pipeline's stages in the order of the Envoy filter chain, each run by the component DESIGN_33 assigns it,
and the hand-over between the two roles: what the gateway playing Authorino hands the processor
(`x-maas-identity`) is what the processor adopts, the header never goes upstream, and a processor exchange
without it is refused (never served unbilled). Record-keeping belongs to one role only.

No control plane: the gateway is built on an unconnected API client (its pipeline's stages that need no
routes are called directly).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from maasctl.contract import identity as ids
from maasctl.gateway import Gateway, GatewaySettings
from maasctl.gateway.auth import AuthOutcome
from maasctl.gateway.pipeline import STAGES, Exchange, Role, _runs
from maasctl.gateway.routes import RouteMatch, RouteRule
from maasctl.gateway.usage import MemorySink
from maasctl.runtime import Client

ORDER = [("edge", "processor"), ("route", "envoy"), ("auth", "envoy"), ("metering", "processor"),
         ("body", "processor"), ("limits valid", "envoy"), ("backend", "envoy"), ("provider key", "processor"),
         ("request limits", "envoy"), ("token reservation", "processor"), ("input guardrails", "processor")]


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    api = ApiClient()
    gw = Gateway(GatewaySettings(gateway_name="gw", gateway_namespace="gw-ns"), Client(api), sink=MemorySink())
    try:
        yield gw
    finally:
        await gw.stop()
        await api.close()


def admitted(gw: Gateway) -> Exchange:
    ex = gw.pipeline.exchange("POST", b"/llm/gpt/v1/chat/completions", "", [("authorization", "Bearer sk-oai-x")])
    ex.outcome = AuthOutcome(True, filters={"identity": {"userid": "alice", "keyId": "k1", "groups": ["a"],
                                                         "selected_subscription": "premium",
                                                         "selected_subscription_namespace": "maas"}},
                             auth={"metadata": {"subscriptionInfo": {"organizationId": "acme"}}})
    return ex


class TestStages:
    def test_in_the_filter_chains_order_each_with_its_component(self) -> None:
        assert [(s.name, s.runner) for s in STAGES] == ORDER

    @pytest.mark.parametrize("role", ["envoy", "processor"])
    def test_a_role_runs_its_own_stages_and_the_shared_lookups(self, role: Role) -> None:
        runs = {s.name for s in STAGES if _runs(s, role)}
        assert runs == {n for n, r in ORDER if r == role} | {"route", "limits valid", "token reservation"}

    def test_all_runs_everything(self) -> None:
        assert all(_runs(s, "all") for s in STAGES)


class TestIdentityHandOver:
    async def test_what_envoy_hands_over_the_processor_adopts_and_drops(self, gateway: Gateway) -> None:
        name, value = gateway.pipeline.identity_header(admitted(gateway))
        assert name == ids.HEADER
        ex = gateway.pipeline.exchange("POST", b"/llm/gpt/v1/chat/completions", "",
                                       [("authorization", "Bearer sk-oai-x"), (name, value)])
        gateway.pipeline.adopt_identity(ex, value)
        assert ex.authorized and ex.outcome.filters["identity"]["userid"] == "alice"
        assert ex.outcome.auth["metadata"]["subscriptionInfo"] == {"organizationId": "acme"}
        assert ids.HEADER not in ex.headers and all(n != ids.HEADER for n, _ in ex.raw_headers)

    @pytest.mark.parametrize("value", ["", "garbage!", "e30" * 10_000])
    async def test_a_forged_or_broken_header_is_refused_whole(self, gateway: Gateway, value: str) -> None:
        ex = gateway.pipeline.exchange("POST", b"/x", "", [])
        with pytest.raises(ids.InvalidIdentityHeader):
            gateway.pipeline.adopt_identity(ex, value)
        assert not ex.authorized

    async def test_a_client_cannot_send_it(self, gateway: Gateway) -> None:
        ex = gateway.pipeline.exchange("POST", b"/x", "", [(ids.HEADER, "e30")])
        refusal = await gateway.pipeline.request_head(ex, "all")
        assert refusal is not None and (refusal.status, refusal.code) == (400, "forbidden_header")


class TestOneRecordKeeper:
    @pytest.mark.parametrize("role, records", [("all", 1), ("processor", 1), ("envoy", 0)])
    async def test_only_the_role_that_settles_records(self, gateway: Gateway, role: Role, records: int) -> None:
        ex = admitted(gateway)
        ex.role, ex.admitted = role, True
        ex.match = RouteMatch(RouteRule("llm", "route", 0, "PathPrefix", "/", model="llm/gpt"), "/v1/chat/completions")
        await gateway.pipeline.finish(ex, 200, "complete")
        sink = gateway.sink
        assert isinstance(sink, MemorySink) and len(sink.records) == records
