"""The pipeline's stages in the order of the Envoy filter chain, each run by the component DESIGN_33 assigns it,
and the hand-over between the two roles: what the gateway playing Authorino hands the processor
(`x-maas-identity`) is what the processor adopts, the header never goes upstream, and a processor exchange
without it is refused (never served unbilled). Record-keeping belongs to one role only.

No control plane: the gateway is built on an unconnected API client (its pipeline's stages that need no
routes are called directly).
"""

from __future__ import annotations

import pytest

from maasctl.billing.rules.identity import KEY_LABELS, key_labels_match
from maasctl.contract import identity as ids
from maasctl.gateway import Gateway
from maasctl.gateway.auth import AuthOutcome
from maasctl.gateway.authpolicy import RequestInfo
from maasctl.gateway.expressions import predicates
from maasctl.gateway.pipeline import STAGES, Exchange, Role, _runs
from maasctl.gateway.routes import RouteMatch, RouteRule
from maasctl.gateway.usage import MemorySink

ORDER = [("edge", "processor"), ("route", "envoy"), ("auth", "envoy"), ("model listing", "processor"),
         ("metering", "processor"),
         ("body", "processor"), ("limits valid", "envoy"), ("backend", "envoy"), ("provider key", "processor"),
         ("request limits", "envoy"), ("token reservation", "processor"), ("input guardrails", "processor")]


@pytest.fixture
def gateway(offline_gateway: Gateway) -> Gateway:
    return offline_gateway


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


def authorino_header(ex: Exchange) -> str:
    """`x-maas-identity` as the AuthPolicy's success header renders it for an admitted exchange."""
    info = ex.outcome.auth.get("metadata", {}).get(ids.SUBSCRIPTION_INFO, {})
    return ids.encode_identity_header(ex.outcome.filters["identity"], info, ex.outcome.filters)


class TestIdentityHandOver:
    async def test_what_envoy_hands_over_the_processor_adopts_and_drops(self, gateway: Gateway) -> None:
        name, value = ids.HEADER, authorino_header(admitted(gateway))
        ex = gateway.pipeline.exchange("POST", b"/llm/gpt/v1/chat/completions", "",
                                       [("authorization", "Bearer sk-oai-x"), (name, value)])
        gateway.pipeline.adopt_identity(ex, value)
        assert ex.authorized and ex.outcome.filters["identity"]["userid"] == "alice"
        assert ex.outcome.auth["metadata"]["subscriptionInfo"] == {"organizationId": "acme"}
        assert ids.HEADER not in ex.headers and all(n != ids.HEADER for n, _ in ex.raw_headers)

    @pytest.mark.parametrize("selector, key_labels, holds", [
        ((("project", "rag"),), {"project": "rag", "env": "prod"}, True),  # a budget scoped by key labels
        ((("project", "rag"),), {"project": "other"}, False),
        ((("project", "rag"),), None, False),  # a token: no key labels
    ])
    async def test_the_exported_filters_come_whole_so_the_limits_read_the_same(
            self, gateway: Gateway, selector: tuple[tuple[str, str], ...], key_labels: dict[str, str] | None,
            holds: bool) -> None:
        envoy = admitted(gateway)
        envoy.outcome.filters["billing"] = {"tenant": "acme", **({"keyLabels": key_labels} if key_labels else {})}
        envoy.outcome.filters["guardrails"] = {"config": "maas/safety", "ready": True, "timeoutSeconds": 2.5}
        envoy.request = RequestInfo("POST", "/llm/gpt/v1/chat/completions", "gw", {}, "http")
        value = authorino_header(envoy)
        ex = gateway.pipeline.exchange("POST", b"/llm/gpt/v1/chat/completions", "", [])
        gateway.pipeline.adopt_identity(ex, value)
        ex.request = envoy.request
        assert ex.outcome.filters == envoy.outcome.filters  # identity, billing and guardrails, as exported
        when = predicates([{"predicate": key_labels_match(KEY_LABELS, selector)},
                           {"predicate": "auth.billing.tenant == 'acme'"}])
        assert when.holds(ex.activation()) is when.holds(envoy.activation()) is holds

    @pytest.mark.parametrize("value", ["", "garbage!", "e30" * 10_000])
    async def test_a_forged_or_broken_header_is_refused_whole(self, gateway: Gateway, value: str) -> None:
        ex = gateway.pipeline.exchange("POST", b"/x", "", [])
        with pytest.raises(ids.InvalidIdentityHeader):
            gateway.pipeline.adopt_identity(ex, value)
        assert not ex.authorized

    async def test_a_client_cannot_send_it(self, gateway: Gateway) -> None:
        ex = gateway.pipeline.exchange("POST", b"/x", "", [(ids.HEADER, "e30")])
        refusal = await gateway.pipeline.request_head(ex, "all")
        assert refusal is not None and (refusal.status, refusal.code) == (403, "forbidden_header")


class TestOneRecordKeeper:
    @pytest.mark.parametrize("role, records", [("all", 1), ("processor", 1), ("envoy", 0)])
    async def test_only_the_role_that_settles_records(self, gateway: Gateway, role: Role, records: int) -> None:
        ex = admitted(gateway)
        ex.role, ex.admitted = role, True
        ex.match = RouteMatch(RouteRule("llm", "route", 0, "PathPrefix", "/", model="llm/gpt"), "/v1/chat/completions")
        await gateway.pipeline.finish(ex, 200, "complete")
        sink = gateway.sink
        assert isinstance(sink, MemorySink) and len(sink.records) == records
