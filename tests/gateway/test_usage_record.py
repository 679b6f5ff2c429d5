"""A served request always leaves a usage record (`Pipeline.finish`, `record.usage_record`): values out of
UsageRecord's bounds (a 339-character ServiceAccount user is valid Kubernetes) are fitted, never a reason to
drop the record, since a request without a record is never billed.

No control plane: the gateway is built on an unconnected API client and the pipeline's response pass and
`finish` are called as the HTTP front calls them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.contract.usage import UsageRecord
from maasctl.dataplane.body import PreparedBody
from maasctl.gateway import Gateway
from maasctl.gateway import record as fitting
from maasctl.gateway.auth import AuthOutcome
from maasctl.gateway.ratelimit import Reservation, compile_token_rate_limit_policy
from maasctl.gateway.routes import RouteMatch, RouteRule
from maasctl.gateway.usage import MemorySink

KEY = "models-as-a-service/free@team/m"
PATH = "/team/m/v1/chat/completions"
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
SA_USER = "system:serviceaccount:" + "n" * 63 + ":" + "s" * 253
LIMITS = UsageRecord.model_fields


@pytest.fixture
def gateway(offline_gateway: Gateway) -> Gateway:
    return offline_gateway


def trlp() -> Any:
    obj = build_token_rate_limit_policy(TokenRateLimitInput(
        ObjectRef("team", "m"), ObjectRef("team", "route"),
        (SubscriptionLimits(ObjectRef("models-as-a-service", "free"), (RateTier(10_000, "1m"),)),)))
    assert obj is not None
    obj["metadata"] |= {"uid": "u1", "generation": 1}
    return compile_token_rate_limit_policy(obj)


async def finish(gw: Gateway, user: str = "alice", labels: Any = None, **sub_info: Any) -> UsageRecord:
    """One served request (10 + 5 tokens, under a token limit) finished; the one record it left."""
    identity = {"userid": user, "keyId": "k1", "selected_subscription_key": KEY,
                "selected_subscription": "free", "selected_subscription_namespace": "models-as-a-service"}
    request = {"path": PATH, "url_path": PATH}
    applied = gw.limiter.applicable(trlp(), "team/route", {"request": request, "auth": {"identity": identity}})
    assert applied, "the token limit applies: the record carries the charge"
    reservation = await gw.limiter.reserve(applied, 1)
    assert isinstance(reservation, Reservation)
    info = {**sub_info, **({"labels": labels} if labels is not None else {})}
    outcome = AuthOutcome(True, filters={"identity": identity}, auth={"metadata": {"subscriptionInfo": info}})
    rule = RouteRule("team", "route", 0, "PathPrefix", "/", model="team/m")
    exchange = gw.pipeline.exchange("POST", PATH.encode(), "", [])
    exchange.match, exchange.outcome, exchange.applied = RouteMatch(rule, PATH), outcome, applied
    exchange.body, exchange.reservation, exchange.admitted = PreparedBody(b"{}", prompt_estimate=1), reservation, True
    response = gw.pipeline.response(exchange, 200, [("content-type", "application/json")])
    await response.feed(json.dumps({"usage": USAGE}).encode())
    await response.close()
    sink = gw.sink
    assert isinstance(sink, MemorySink)
    before = len(sink.records)
    await gw.pipeline.finish(exchange, 200, "complete")
    assert len(sink.records) == before + 1, "a served request left no usage record: it is never billed"
    return sink.records[-1]


def billable(record: UsageRecord) -> UsageRecord:
    """The record as maas-api ingests it (validated again from its JSON), with the request's charge."""
    again = UsageRecord.model_validate_json(record.model_dump_json().encode())
    assert (again.input_tokens, again.output_tokens, again.total_tokens, again.charged_tokens) == (10, 5, 15, 15)
    assert (again.model, again.subscription, again.status) == ("team/m", "models-as-a-service/free", 200)
    return again


def bound(field: str) -> int:
    """The field's max_length, as UsageRecord declares it."""
    return int(next(c.max_length for c in LIMITS[field].metadata if getattr(c, "max_length", None)))


def within(text: str, field: str) -> bool:
    return len(text) <= bound(field)


class TestEveryServedRequestIsRecorded:
    async def test_an_ordinary_record_is_unchanged(self, gateway: Gateway) -> None:
        record = billable(await finish(gateway, labels={"team": "a", "tier": "gold"}))
        assert record.user == "alice" and record.key_id == "k1" and record.labels == {"team": "a", "tier": "gold"}

    async def test_a_long_service_account_user_is_kept_recognisable_and_distinct(self, gateway: Gateway) -> None:
        assert len(SA_USER) == 339
        first = billable(await finish(gateway, SA_USER))
        other = billable(await finish(gateway, SA_USER[:-1] + "t"))  # differs only past the bound
        assert within(first.user, "user") and first.user.startswith("system:serviceaccount:" + "n" * 63 + ":s")
        assert first.user != other.user
        assert billable(await finish(gateway, SA_USER)).user == first.user  # the same user, the same name

    async def test_a_long_oidc_user_is_fitted(self, gateway: Gateway) -> None:
        users = ["oidc:" + "x" * 300 + "@example.com", "oidc:" + "x" * 300 + "@example.org", "oidc:" + "ü" * 400]
        records = [billable(await finish(gateway, user)) for user in users]
        assert all(within(r.user, "user") and r.user.startswith("oidc:") for r in records)
        assert len({r.user for r in records}) == 3

    async def test_more_labels_than_the_bound_keep_the_same_ones_every_time(self, gateway: Gateway) -> None:
        labels = {f"label-{i:03}": str(i) for i in range(100)}
        record = billable(await finish(gateway, labels=labels))
        assert len(record.labels) == bound("labels") == 64
        assert record.labels == {f"label-{i:03}": str(i) for i in range(64)}
        shuffled = dict(reversed(list(labels.items())))  # the callback answered in another order
        assert billable(await finish(gateway, labels=shuffled)).labels == record.labels

    async def test_long_label_keys_and_values_are_fitted(self, gateway: Gateway) -> None:
        labels = {"k" * 400: "v" * 300, "k" * 399 + "j": "short", "cost": "c" * 254}
        record = billable(await finish(gateway, labels=labels, organizationId="o" * 300, costCenter="c" * 260))
        assert len(record.labels) == 3  # two long keys that share their prefix stay two labels
        assert all(len(k) <= 317 and len(v) <= 253 for k, v in record.labels.items())
        assert record.labels[next(k for k in record.labels if k.startswith("cost"))].startswith("c" * 200)
        assert within(record.organization, "organization") and within(record.cost_center, "cost_center")

    @pytest.mark.parametrize("user", ["al\ud800ice", "al\x00ice", "al\x1bice\x7f", "ali\udfffce" + "x" * 300])
    async def test_odd_characters_are_replaced_and_marked(self, gateway: Gateway, user: str) -> None:
        record = billable(await finish(gateway, user, labels={"t\x00eam": "a\ud83d"}))
        assert record.user.startswith("al") and "\x00" not in record.user and within(record.user, "user")
        assert record.user != billable(await finish(gateway, user + "2")).user
        assert all("\x00" not in k + v for k, v in record.labels.items())

    async def test_a_value_still_refused_empties_that_field_never_the_record(
            self, gateway: Gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
        def unfitted(values: Mapping[str, Any]) -> dict[str, Any]:
            return dict(values)

        monkeypatch.setattr(fitting, "fit_record_values", unfitted)  # as if a bound were missed
        with caplog.at_level(logging.ERROR, "maasctl.gateway"):
            record = billable(await finish(gateway, SA_USER, labels={"team": "x" * 300}))
        assert (record.user, record.labels, record.key_id) == ("", {}, "k1")
        assert "emitted without labels, user" in caplog.text
