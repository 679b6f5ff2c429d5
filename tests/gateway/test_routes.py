"""Route table: matching precedence, rewrites and backend resolution (pure, no cluster)."""

from __future__ import annotations

import random
from typing import Any

from maasctl.builders.httproute import ExternalRouteInput, build_external_route, build_external_service
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.gateway.routes import RouteRule, RouteTable, _host_rank, build_route_table, matches_prefix

GW = ("gw", "gw-ns")


def route(name: str, rules: list[dict[str, Any]], ns: str = "m", hostnames: list[str] | None = None,
          parent: tuple[str, str] = GW, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"parentRefs": [{"name": parent[0], "namespace": parent[1]}], "rules": rules}
    if hostnames:
        spec["hostnames"] = hostnames
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": created}, "spec": spec}


def rule(path: str, kind: str = "PathPrefix", svc: str = "svc", **extra: Any) -> dict[str, Any]:
    return {"matches": [{"path": {"type": kind, "value": path}}], "backendRefs": [{"name": svc, "port": 80}], **extra}


def local(ns: str, name: str) -> dict[str, Any] | None:
    return {"metadata": {"name": name, "namespace": ns, "annotations": {LOCAL_URL_ANNOTATION: f"http://127.0.0.1:9/{name}/"}},
            "spec": {"type": "ClusterIP"}}


def test_prefix_matching_is_element_wise() -> None:
    assert matches_prefix("/a/b", "/a/b")
    assert matches_prefix("/a/b/", "/a/b/c")
    assert not matches_prefix("/a/b", "/a/bc")
    assert matches_prefix("/", "/anything")


def test_longest_prefix_and_exact_win_and_other_gateways_are_ignored() -> None:
    table = build_route_table(
        [
            route("short", [rule("/m", svc="short")]),
            route("long", [rule("/m/model/v1", svc="long")]),
            route("exact", [rule("/m/model/v1/models", kind="Exact", svc="exact")]),
            route("elsewhere", [rule("/m/model/v1/chat", svc="x")], parent=("other", "gw-ns")),
        ],
        local,
        GW,
    )
    def pick(path: str) -> Any:
        return table.match("h", path, "POST", {})

    assert pick("/m/model/v1/chat/completions").rule.route == "long"
    assert pick("/m/model/v1/models").rule.route == "exact"
    assert pick("/m/other").rule.route == "short"
    assert pick("/nope") is None
    assert table.routes() == ["m/exact", "m/long", "m/short"]


def test_hostnames_restrict_and_exact_host_beats_wildcard() -> None:
    table = build_route_table(
        [route("wild", [rule("/", svc="w")], hostnames=["*.example.test"]),
         route("exact", [rule("/", svc="e")], hostnames=["api.example.test"])],
        local, GW)
    assert table.match("api.example.test:8080", "/x", "GET", {}).rule.route == "exact"  # type: ignore[union-attr]
    assert table.match("b.example.test", "/x", "GET", {}).rule.route == "wild"  # type: ignore[union-attr]
    assert table.match("example.org", "/x", "GET", {}) is None


def test_generated_external_route_rewrites_prefix_and_host_to_the_external_name() -> None:
    inp = ExternalRouteInput(model=ObjectRef("team", "gpt"), external_model="prov", host="api.provider.test",
                             gateway=GatewayRef("gw-ns", "gw"), base_path="/openai/v1", credential_secret="k")
    svc = build_external_service(inp)
    r = build_external_route(inp)
    r["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    table = build_route_table([r], lambda ns, name: svc if name == svc["metadata"]["name"] else None, GW)
    m = table.match("anything", "/team/gpt/v1/chat/completions", "POST", {})
    assert m is not None
    assert m.upstream_path == "/openai/v1/chat/completions"
    assert m.rule.rewrite_hostname == "api.provider.test"
    assert m.rule.pick_backend().base_url == "https://api.provider.test"  # type: ignore[union-attr]
    assert m.rule.upstream_key_secret == "k"
    assert m.rule.model == "team/gpt"
    assert m.rule.timeout == 300
    assert table.match("x", "/team/gpt/v1", "POST", {}).upstream_path == "/openai/v1"  # type: ignore[union-attr]


def test_replace_prefix_with_root_and_full_path() -> None:
    def rw(t: str, v: str) -> dict[str, Any]:
        return {"type": "URLRewrite", "urlRewrite": {"path": {"type": t, t[0].lower() + t[1:]: v}}}

    table = build_route_table(
        [route("root", [rule("/a/b", filters=[rw("ReplacePrefixMatch", "/")])]),
         route("full", [rule("/c", filters=[rw("ReplaceFullPath", "/fixed")])])],
        local, GW)
    assert table.match("h", "/a/b/chat", "GET", {}).upstream_path == "/chat"  # type: ignore[union-attr]
    assert table.match("h", "/a/b", "GET", {}).upstream_path == "/"  # type: ignore[union-attr]
    assert table.match("h", "/c/d", "GET", {}).upstream_path == "/fixed"  # type: ignore[union-attr]


def test_unresolvable_backends_are_reported_not_guessed() -> None:
    cluster_ip = {"metadata": {"name": "svc", "namespace": "m"}, "spec": {"type": "ClusterIP"}}
    table = build_route_table([route("r", [rule("/x")])], lambda ns, name: cluster_ip, GW)
    m = table.match("h", "/x", "GET", {})
    assert m is not None and m.rule.pick_backend() is None
    assert LOCAL_URL_ANNOTATION in (m.rule.backend_error or "")
    assert table.problems
    missing = build_route_table([route("r", [rule("/x")])], lambda ns, name: None, GW)
    assert "not found" in (missing.rules[0].backend_error or "")


def test_local_url_annotation_and_weights() -> None:
    r = route("r", [{"matches": [{"path": {"type": "PathPrefix", "value": "/x"}}],
                     "backendRefs": [{"name": "a", "port": 80, "weight": 1}, {"name": "b", "port": 80, "weight": 3}]}])
    table = build_route_table([r], local, GW)
    m = table.match("h", "/x", "GET", {})
    assert m is not None
    assert m.rule.pick_backend(lambda: 0.1).base_url == "http://127.0.0.1:9/a"  # type: ignore[union-attr]
    assert m.rule.pick_backend(lambda: 0.5).base_url == "http://127.0.0.1:9/b"  # type: ignore[union-attr]


def test_external_name_plain_http_port() -> None:
    svc = {"metadata": {"name": "svc", "namespace": "m"},
           "spec": {"type": "ExternalName", "externalName": "model.local", "ports": [{"name": "http", "port": 8000}]}}
    r = route("r", [{"matches": [{"path": {"type": "PathPrefix", "value": "/x"}}],
                     "backendRefs": [{"name": "svc", "port": 8000}]}])
    m = build_route_table([r], lambda ns, name: svc, GW).match("h", "/x", "GET", {})
    assert m is not None and m.rule.pick_backend().base_url == "http://model.local:8000"  # type: ignore[union-attr]


def _scan(table: Any, host: str, path: str, headers: dict[str, str]) -> Any:
    """Gateway API precedence by a scan over every rule (what the table's path index must agree with)."""
    best = None
    for rule in table.rules:
        rank = _host_rank(rule.hostnames, host)
        if rank is not None and (best is None or rank < best[0]) and RouteTable._matches(rule, path, "POST", headers):
            best = (rank, rule)
    return None if best is None else best[1]


def test_the_exact_path_index_picks_what_a_scan_over_every_rule_picks() -> None:
    rnd = random.Random(33)
    paths = ["/v1/chat/completions", "/v1/completions", "/v1", "/llm/a/v1", "/llm/a/v1/chat/completions", "/"]
    rules = [RouteRule("ns", f"r{i}", i, rnd.choice(["Exact", "PathPrefix"]), rnd.choice(paths),
                       headers=(("x-gateway-model-name", "Exact", rnd.choice(["a", "b"])),) if rnd.random() < 0.5
                       else (), hostnames=rnd.choice([(), ("gw.example",), ("*.example",)]), created=str(i % 3))
             for i in range(300)]
    table = RouteTable(rules)
    for _ in range(2000):
        host = rnd.choice(["gw.example", "x.example", "other"])
        path = rnd.choice([*paths, "/v1/embeddings", "/llm/a/v1/x"])
        headers = {"x-gateway-model-name": rnd.choice(["a", "b"])} if rnd.random() < 0.7 else {}
        got = table.match(host, path, "POST", headers)
        assert (got.rule if got else None) == _scan(table, host, path, headers), (host, path, headers)
