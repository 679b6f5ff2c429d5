"""The one base URL for in-cluster (KServe) models (`contract.routing`, `gateway.state.in_cluster_models`,
`gateway.pipeline.route_by_model`): a base-URL request naming one goes to the model's own path, so its route's
policies admit and count it. Each hole as a class: odd prefixes, claims on routes that are not the policy's,
names that another model publishes, the Messages door."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from maasctl.contract.routing import (
    BASE_URL_MODEL_ANNOTATION,
    BASE_URL_PREFIX_ANNOTATION,
    MAX_PREFIX,
    MODEL_HEADER,
    endpoint_prefix,
    in_cluster_path,
    valid_prefix,
)
from maasctl.gateway.pipeline import Exchange, route_by_model
from maasctl.gateway.routes import build_route_table
from maasctl.gateway.state import InClusterModel, Snapshot, in_cluster_models
from tests.gateway.test_routes import GW, local, route, rule


class TestPrefix:
    @pytest.mark.parametrize("prefix", ["/llm/granite", "/a", "/ns-1/model.v2/x_y~z"])
    def test_plain_paths(self, prefix: str) -> None:
        assert valid_prefix(prefix)

    @pytest.mark.parametrize("prefix", [
        "", "/", "llm/granite", "/llm/granite/", "//llm", "/llm//granite", "/llm/../admin", "/llm/./granite", "/..",
        "/llm/%2e%2e", "/llm/gr%61nite", "/llm/granite?x=1", "/llm/granite#f", "/llm/gr anite", "/llm/granité",
        "/llm\\granite", "/llm/granite\n", "/" + "a" * MAX_PREFIX,
    ])
    def test_anything_else_is_refused(self, prefix: str) -> None:
        assert not valid_prefix(prefix)

    @pytest.mark.parametrize(("endpoint", "prefix"), [
        ("http://gw.example/llm/granite", "/llm/granite"),
        ("https://gw.example:8443/llm/granite/", "/llm/granite"),
        ("http://gw.example", None),
        ("http://gw.example/", None),
        ("http://gw.example/llm/../x", None),
        ("http://[::1", None),
        ("", None),
        (None, None),
    ])
    def test_from_the_models_url(self, endpoint: str | None, prefix: str | None) -> None:
        assert endpoint_prefix(endpoint) == prefix

    def test_the_door_is_not_rerouted(self) -> None:
        assert in_cluster_path("/llm/granite", "/v1/chat/completions") == "/llm/granite/v1/chat/completions"
        assert in_cluster_path("/llm/granite", "/v1/messages") is None


def policy(name: str, route_name: str, model: str | None, prefix: str | None, *, ns: str = "llm",
           created: str = "2026-01-01T00:00:00Z", kind: str = "HTTPRoute", deleting: bool = False) -> dict[str, Any]:
    notes = {k: v for k, v in ((BASE_URL_MODEL_ANNOTATION, model), (BASE_URL_PREFIX_ANNOTATION, prefix)) if v}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "creationTimestamp": created, "annotations": notes}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": kind,
                                                     "name": route_name}}}


class TestInClusterModels:
    ROUTES = {"llm/granite-route", "llm/other-route"}

    def test_a_generated_policy_publishes_its_model(self) -> None:
        found = in_cluster_models([policy("maas-auth-granite", "granite-route", "granite", "/llm/granite")],
                                  self.ROUTES)
        assert found == {"granite": InClusterModel("/llm/granite", "llm/granite-route")}

    @pytest.mark.parametrize("obj", [
        policy("p", "granite-route", "granite", None),  # half the annotations
        policy("p", "granite-route", None, "/llm/granite"),
        policy("p", "granite-route", "granite", "/llm/../admin"),  # not a plain path
        policy("p", "granite-route", "granite", "/llm/granite", kind="Gateway"),  # not a route's policy
        policy("p", "elsewhere", "granite", "/llm/granite"),  # a route the served Gateway does not have
        policy("p", "granite-route", "granite", "/llm/granite", ns="other"),  # the route is in its own namespace
        policy("p", "granite-route", "granite", "/llm/granite", deleting=True),
    ])
    def test_what_does_not_publish(self, obj: dict[str, Any]) -> None:
        assert in_cluster_models([obj], self.ROUTES) == {}

    def test_a_name_claimed_twice_goes_to_the_older_policy(self) -> None:
        newer = policy("b", "other-route", "granite", "/llm/other", created="2026-02-01T00:00:00Z")
        older = policy("a", "granite-route", "granite", "/llm/granite", created="2026-01-01T00:00:00Z")
        for order in ([newer, older], [older, newer]):
            assert in_cluster_models(order, self.ROUTES)["granite"].route == "llm/granite-route"


def snapshot(policies: list[dict[str, Any]], extra_routes: Sequence[dict[str, Any]] = ()) -> Snapshot:
    routes = [
        route("granite-route", [rule("/llm/granite", svc="granite")], ns="llm"),
        route("other-route", [rule("/llm/other", svc="other")], ns="llm"),
        *extra_routes,
    ]
    table = build_route_table(routes, local, GW)
    snap = Snapshot(1, table)
    snap.in_cluster = in_cluster_models(policies, set(table.routes()))
    return snap


def exchange(path: str, model: str, query: str = "") -> Exchange:
    headers = {"host": "gw.example", "content-type": "application/json"}
    ex = Exchange("POST", path.encode(), query, list(headers.items()), dict(headers), "http", path=path)
    ex.raw_body = json.dumps({"model": model, "messages": []}).encode()
    return ex


GRANITE = policy("maas-auth-granite", "granite-route", "granite", "/llm/granite")


class TestRouteByModel:
    @pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"])
    def test_a_base_url_request_goes_to_the_models_own_path(self, path: str) -> None:
        snap, ex = snapshot([GRANITE]), exchange(path, "granite")
        assert route_by_model(ex, snap) is None
        assert ex.rerouted and ex.path == f"/llm/granite{path}"
        assert MODEL_HEADER not in ex.headers  # the model's route matches by path, as a direct call does
        match = snap.table.match("gw.example", ex.path, "POST", ex.headers)
        assert match is not None and match.rule.route_key == "llm/granite-route"

    def test_other_names_and_paths_are_left_alone(self) -> None:
        snap = snapshot([GRANITE])
        for ex in (exchange("/v1/chat/completions", "unknown"), exchange("/llm/granite/v1/chat/completions", "x"),
                   exchange("/v1/messages", "granite")):  # the door: translation needs a rule of ours
            assert route_by_model(ex, snap) is None
            assert not ex.rerouted

    def test_a_prefix_that_lands_on_another_route_is_not_followed(self) -> None:
        """A policy may only send requests to the route it targets: its prefix reaching another route's rules
        (a stale annotation, or a namespace claiming someone else's path) routes nothing."""
        snap = snapshot([policy("maas-auth-granite", "granite-route", "granite", "/llm/other")])
        ex = exchange("/v1/chat/completions", "granite")
        assert route_by_model(ex, snap) is None
        assert not ex.rerouted and ex.path == "/v1/chat/completions"
        assert snap.table.match("gw.example", ex.path, "POST", ex.headers) is None  # 404, never the other model

    def test_a_prefix_nothing_serves_routes_nothing(self) -> None:
        snap = snapshot([policy("maas-auth-granite", "granite-route", "granite", "/llm/gone")])
        ex = exchange("/v1/chat/completions", "granite")
        route_by_model(ex, snap)
        assert not ex.rerouted

    def test_a_generated_rule_publishing_the_same_name_wins(self) -> None:
        external = route("maas-granite", [{
            "matches": [{"path": {"type": "Exact", "value": "/v1/chat/completions"},
                         "headers": [{"name": MODEL_HEADER, "value": "granite"}]}],
            "backendRefs": [{"name": "provider", "port": 80}]}], ns="ext")
        snap = snapshot([GRANITE], [external])
        ex = exchange("/v1/chat/completions", "granite")
        assert route_by_model(ex, snap) is None
        assert not ex.rerouted and ex.headers[MODEL_HEADER] == "granite"
        match = snap.table.match("gw.example", ex.path or "", "POST", ex.headers)
        assert match is not None and match.rule.route_key == "ext/maas-granite"

    def test_the_query_stays_with_the_request(self) -> None:
        snap, ex = snapshot([GRANITE]), exchange("/v1/chat/completions", "granite", query="api-version=1")
        route_by_model(ex, snap)
        assert ex.rerouted and ex.query == "api-version=1"

    @pytest.mark.parametrize("body", [b'{"messages": []}', b'{"model": 7}', b"[]", b'{"model": "gran\\u0000ite"}'])
    def test_a_body_without_a_usable_model_is_still_refused(self, body: bytes) -> None:
        snap, ex = snapshot([GRANITE]), exchange("/v1/chat/completions", "granite")
        ex.raw_body = body
        refusal = route_by_model(ex, snap)
        assert refusal is not None and refusal.status == 400
        assert not ex.rerouted
