"""The console's pure parts: tiers as administrators type them, the service model-list plan, charts,
usage buckets, error mapping and redirect targets (no cluster, no browser)."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import shlex
import subprocess
from datetime import UTC, datetime

import pytest
from markupsafe import Markup

from maasctl.console import catalog, tiers, usage
from maasctl.console.charts import bar_chart
from maasctl.console.edits import fingerprint
from maasctl.console.forms import kube_errors
from maasctl.console.kube import KubeError
from maasctl.console.pages.user import curl_for
from maasctl.console.subscriptions import (
    FormError,
    ModelRow,
    SubscriptionForm,
    auth_policy,
    desired,
    labels_from_text,
    validate,
)
from maasctl.console.web import safe_next


@pytest.mark.parametrize(("text", "expected"), [
    ("100M per Hour, 1000M per Day", [{"limit": 100_000_000, "window": "1h"},
                                      {"limit": 1_000_000_000, "window": "24h"}]),
    ("100M tokens per hour; 1.5B tokens / day", [{"limit": 100_000_000, "window": "1h"},
                                                 {"limit": 1_500_000_000, "window": "24h"}]),
    ("1,000,000 per Minute", [{"limit": 1_000_000, "window": "1m"}]),
    ("250k per 30m", [{"limit": 250_000, "window": "30m"}]),
])
def test_tiers_read_the_way_administrators_write_them(text: str, expected: list[dict[str, object]]) -> None:
    assert tiers.from_text(text) == expected


def test_tiers_round_trip_and_unlimited() -> None:
    limits = tiers.from_text("100M per Hour, 1000M per Day")
    assert tiers.to_text(limits) == "100M per Hour, 1B per Day"
    assert tiers.from_text(tiers.to_text(limits)) == limits
    assert tiers.from_text(" Unlimited ") is None and tiers.to_text(None) == "unlimited"


@pytest.mark.parametrize(("text", "message"), [
    ("", "at least one limit"),
    ("100X per Hour", "unknown suffix"),
    ("100M per Fortnight", "not a window"),
    ("100M per Hour and more", "cannot read"),
    ("100M per Hour, 2M per hour", "only once"),
    ("0 per Hour", "between 1"),
])
def test_tiers_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(tiers.TierError, match=message):
        tiers.from_text(text)


def test_publish_plan_creates_before_it_deletes_and_retargets_in_place() -> None:
    current = [catalog.Published("a", "a"), catalog.Published("b", "provider-b"), catalog.Published("c", "c")]
    rows = [("a", "a", "", True), ("b", "bee", "provider-b", False), ("c", "c", "c2", False), ("", "d", "", False),
            ("", "", "", False)]
    plan = catalog.plan(current, rows)
    assert [(c.action, c.model.name, c.model.target, c.row) for c in plan] == [
        ("create", "bee", "provider-b", 1), ("create", "d", "d", 3), ("retarget", "c", "c2", 2),
        ("delete", "a", "a", 0), ("delete", "b", "provider-b", 1)]


def test_service_objects_share_endpoint_and_key() -> None:
    svc = catalog.Service(name="acme", namespace="llm", endpoint="https://api.acme.example/v1", provider="openai",
                          has_key=True)
    em, ref = catalog.service_objects(svc, catalog.Published("fast", "acme-fast-v2"))
    assert em["spec"] == {"provider": "openai", "endpoint": "https://api.acme.example/v1",
                          "targetModel": "acme-fast-v2",
                          "credentialRef": {"name": "maas-service-acme", "key": "api-key"}}
    assert ref["spec"]["modelRef"] == {"kind": "ExternalModel", "name": "fast"}
    secret = catalog.service_secret(svc, "k")
    assert secret["stringData"] == {"api-key": "k"}
    parsed = catalog.service_from_metadata({"metadata": secret["metadata"]})
    assert parsed == svc
    assert "stringData" not in catalog.service_secret(catalog.Service("x", "llm", "https://h/v1", "openai", False), "")


def test_a_messages_service_publishes_messages_external_models() -> None:
    svc = catalog.Service(name="claude", namespace="llm", endpoint="https://api.anthropic.com/v1",
                          provider="anthropic", has_key=True, api_format="messages")
    em, _ = catalog.service_objects(svc, catalog.Published("sonnet", "claude-sonnet-4-5"))
    assert em["spec"]["apiFormat"] == "messages"
    secret = catalog.service_secret(svc, "k")
    assert secret["metadata"]["annotations"]["maas.opendatahub.io/api-format"] == "messages"
    assert catalog.service_from_metadata({"metadata": secret["metadata"]}) == svc
    plain = catalog.Service("x", "llm", "https://h/v1", "openai", False)
    assert "apiFormat" not in catalog.service_objects(plain, catalog.Published("m", "m"))[0]["spec"]


def test_subscription_and_its_auth_policy_for_everyone() -> None:
    form = SubscriptionForm(name="everyone", users="*", priority="3",
                            models=[ModelRow("llm", "gpt-x", include=True), ModelRow("llm", "skip")])
    sub, included = desired(form, "models-as-a-service", None, {"llm/gpt-x": tiers.from_text("100M per Hour")})
    validate(sub)
    assert sub["spec"] == {"owner": {"users": ["*"]}, "priority": 3, "modelRefs": [
        {"name": "gpt-x", "namespace": "llm", "tokenRateLimits": [{"limit": 100_000_000, "window": "1h"}]}]}
    assert included == [0]
    policy = auth_policy(sub, None)
    assert policy["spec"] == {"modelRefs": [{"name": "gpt-x", "namespace": "llm"}], "subjects": {"users": ["*"]}}


def test_a_save_replaces_only_what_the_form_owns() -> None:
    base = {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7", "labels": {"team": "a"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"owner": {"users": ["a", "b"]}, "priority": 1, "organization": {"id": "org-1"},
                     "tokenMetadata": {"organizationId": "legacy", "costCenter": "cc"},
                     "modelRefs": [{"name": "m2", "namespace": "llm", "unlimited": True,
                                    "guardrails": {"enabled": True, "config": "strict"}},
                                   {"name": "m1", "namespace": "llm", "tokenRateLimits": [{"limit": 5, "window": "1m"}],
                                    "billingRate": {"perToken": "0.1"}}]},
            "status": {"phase": "Active"}}
    form = SubscriptionForm(name="s", users="a", organization_id="org-1", models=[
        ModelRow("llm", "m1", include=True, price=""), ModelRow("llm", "m2", include=True, guardrails="strict"),
        ModelRow("llm", "m3", include=True, price="0.000002")])
    sub, included = desired(form, "ns", base, {"llm/m1": None, "llm/m2": [{"limit": 9, "window": "1h"}],
                                              "llm/m3": None})
    validate(sub)
    assert "status" not in sub and "managedFields" not in sub["metadata"]
    assert sub["metadata"]["labels"] == {"team": "a"} and sub["metadata"]["resourceVersion"] == "7"
    assert sub["spec"]["owner"] == {"users": ["a"]}  # a removed user is gone, not kept
    assert sub["spec"]["tokenMetadata"] == {"organizationId": "legacy"}  # the form's cost center was cleared
    assert sub["spec"]["priority"] == 0
    assert sub["spec"]["modelRefs"] == [  # kept entries keep their place (guardrails as the form chose)
        {"name": "m2", "namespace": "llm", "guardrails": {"enabled": True, "config": "strict"},
         "tokenRateLimits": [{"limit": 9, "window": "1h"}]},
        {"name": "m1", "namespace": "llm", "unlimited": True},
        {"name": "m3", "namespace": "llm", "unlimited": True, "billingRate": {"perToken": "0.000002"}}]
    assert included == [1, 0, 2]
    with pytest.raises(FormError) as err:
        desired(SubscriptionForm(name="s", users="a", models=form.models), "ns", base, {})
    assert err.value.field == "organization_id"
    with pytest.raises(FormError) as err:
        desired(SubscriptionForm(name="s", users="a", gateway_name="gw", models=form.models), "ns", None, {})
    assert err.value.field == "gateway"


def test_a_status_write_is_no_conflict_but_a_spec_change_is() -> None:
    obj = {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}, "spec": {"priority": 1}}
    seen = fingerprint(obj)
    assert fingerprint({**obj, "status": {"phase": "Active"}, "metadata": {**obj["metadata"], "resourceVersion": "2"}}
                       ) == seen
    assert fingerprint({**obj, "spec": {"priority": 2}}) != seen
    assert fingerprint({**obj, "metadata": {"labels": {"a": "c"}}}) != seen


def test_metering_labels_are_key_value_lines() -> None:
    assert labels_from_text("team = ml\n\nenv=prod=1\n") == {"team": "ml", "env": "prod=1"}
    for bad in ("novalue", "=x", "a=1\na=2"):
        with pytest.raises(FormError):
            labels_from_text(bad)


def test_api_server_causes_land_on_their_fields() -> None:
    exc = KubeError(422, "Invalid", "invalid", [("metadata.name", "bad name"), ("spec.modelRefs[1].tokenRateLimits",
                                                                                 "too many"), ("spec.other", "x")])
    errors = kube_errors(exc, {"metadata.name": "name", "spec.modelRefs[1]": "model-4-tiers"})
    assert errors == {"name": "bad name", "model-4-tiers": "too many", "_form": "spec.other: x"}
    assert kube_errors(KubeError(409, "AlreadyExists", "exists"), {"metadata.name": "name"}) == {"name": "exists"}


def test_chart_escapes_labels_and_scales() -> None:
    svg = bar_chart([("<b>", 30), ("x", 0)], "t<i>", ident="c1")
    assert isinstance(svg, Markup)
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "t&lt;i&gt;" in svg
    assert ">40<" in svg  # a round axis maximum at or above 30


def test_usage_buckets_cover_the_range_oldest_first() -> None:
    now = datetime(2026, 3, 15, 10, 30, tzinfo=UTC)
    day = usage.buckets("1d", now)
    assert len(day) == 24 and day[-1].start == datetime(2026, 3, 15, 10, tzinfo=UTC)
    week = usage.buckets("7d", now)
    assert len(week) == 7 and week[0].start == datetime(2026, 3, 9, tzinfo=UTC)
    year = usage.buckets("1y", now)
    assert len(year) == 12 and year[0].start == datetime(2025, 4, 1, tzinfo=UTC) and year[-1].end == datetime(
        2026, 4, 1, tzinfo=UTC)
    assert all(a.end == b.start for a, b in itertools.pairwise(year))
    assert usage.usage_query("24h", now) == ({"from": "2026-03-14T11:00:00Z"}, "last 24 hours")
    assert usage.usage_query("1m", now) == ({"window": "1m"}, "last minute")  # the window itself, not "this hour"
    assert usage.usage_query("30s", now) == ({"window": "30s"}, "last 30 seconds")
    assert usage.usage_query("1h", now) == ({"window": "1h"}, "last hour")
    assert usage.usage_query("90m", now) == ({"from": "2026-03-15T09:00:00Z"}, "last 2 hours")


@pytest.mark.parametrize(("target", "expected"), [
    ("/keys", "/keys"), ("/admin/report?range=7d", "/admin/report?range=7d"), ("//evil", "/"),
    ("https://evil", "/"), ("/\\evil", "/"), ("", "/"), (None, "/"), ("/x\r\nSet-Cookie: a=b", "/"),
])
def test_only_local_redirects(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


GATEWAY = ("https://gw.example.com",)
BASE = "https://gw.example.com/llm/m"


def curl_args(command: str | None) -> list[str]:
    """The arguments of the command as the shell splits them (the command is one curl, lines joined by `\\`)."""
    assert command is not None
    return shlex.split(command.replace("\\\n", " "))


@pytest.mark.parametrize(("url", "called"), [
    (f"{BASE}/v1", f"{BASE}/v1/chat/completions"),
    ("HTTPS://GW.example.com:443/llm/m/", "https://gw.example.com:443/llm/m/v1/chat/completions"),
    (f"{BASE}/v1;{{touch,/tmp/x}};true", f"{BASE}/v1;%7Btouch,/tmp/x%7D;true/v1/chat/completions"),
    (f"{BASE}|id", f"{BASE}%7Cid/v1/chat/completions"),
    (f"{BASE}$(id)", f"{BASE}$(id)/v1/chat/completions"),
    (f"{BASE}`id`", f"{BASE}%60id%60/v1/chat/completions"),
    (f"{BASE}/{{a,b}}", f"{BASE}/%7Ba,b%7D/v1/chat/completions"),
    (f"{BASE}&id&", f"{BASE}&id&/v1/chat/completions"),
    (f"{BASE}'\"q", f"{BASE}'%22q/v1/chat/completions"),
    (f"{BASE}<x>(y)", f"{BASE}%3Cx%3E(y)/v1/chat/completions"),
])
def test_curl_url_is_one_argument_whatever_the_model_says(url: str, called: str) -> None:
    args = curl_args(curl_for({"id": "m", "url": url}, GATEWAY))
    assert args[:2] == ["curl", "-s"] and args[2] == called
    assert args[3:7] == ["-H", "Authorization: Bearer $MAAS_API_KEY", "-H", "Content-Type: application/json"]
    assert args[7] == "-d" and json.loads(args[8])["model"] == "m" and len(args) == 9


@pytest.mark.parametrize("url", [
    f"{BASE}\nid", f"{BASE} id", f"{BASE}\tid", f"{BASE}\x00", f"{BASE}#x", f"{BASE}?a=b;id",
    "https://evil.example/v1", "http://gw.example.com/llm/m/v1", "https://gw.example.com:8443/v1",
    "https://gw.example.com@evil.example/v1", "https://user:pw@gw.example.com/v1",
    "https://gw.example.com;id/v1", "https://{gw.example.com,evil.example}/v1", "ftp://gw.example.com/v1",
    "https://gw.example.com:bad/v1", "https://[::1/v1", "gw.example.com/v1", "",
])
def test_no_curl_off_the_gateway_or_for_a_url_that_is_not_plain(url: str) -> None:
    assert curl_for({"id": "m", "url": url}, GATEWAY) is None
    assert curl_for({"id": "m", "url": f"{BASE}/v1"}, ()) is None  # no gateway configured: no command at all


def test_curl_quotes_the_model_id() -> None:
    model_id = "m'; touch x; echo '"
    args = curl_args(curl_for({"id": model_id, "url": BASE}, GATEWAY))
    assert len(args) == 9 and json.loads(args[8])["model"] == model_id


@pytest.mark.parametrize("tail", [";{touch,pwned};true", "$(touch${IFS}pwned)", "`touch${IFS}pwned`",
                                  "|{touch,pwned}", "&{touch,pwned}&", "';{touch,pwned};'", "\";{touch,pwned};\"",
                                  "/{touch,pwned}", ">pwned"])
def test_pasted_curl_runs_nothing_else(tmp_path: pathlib.Path, tail: str) -> None:
    """The page's command through bash, curl replaced by a function that records its arguments."""
    command = curl_for({"id": "m", "url": BASE + tail}, GATEWAY)
    assert command is not None
    script = "curl() { printf '%s\\0' \"$@\" >> args; }\ntouch() { echo ran >> pwned; }\n" + command
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={"MAAS_API_KEY": "k", "PATH": os.environ["PATH"]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args"], done.stderr  # nothing else ran
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split("\0")[:-1]
    expected = curl_args(command)[1:]
    expected[3] = "Authorization: Bearer k"
    assert args == expected and len(args) == 8 and args[1].startswith(BASE)


@pytest.mark.parametrize("services", [[], [{"namespace": "llm", "name": "granite"}]], ids=["none-left", "one-left"])
def test_the_publish_page_offers_a_form_only_with_something_to_publish(services: list[dict[str, str]]) -> None:
    """With nothing left to publish the page said so above an empty select and an enabled Publish button."""
    from maasctl.console.app import templates

    page = templates().env.get_template("admin/publish.html").render(
        services=services, form={}, errors={}, csrf_token="t", identity=None, nav=[], flashes=[],
        path="/admin/models/publish", oidc_enabled=False, is_admin=True, title="Publish")
    if services:
        assert '<option value="llm/granite"' in page and "<button type=\"submit\">Publish</button>" in page
        assert 'id="nothing-to-publish"' not in page
    else:
        assert 'id="nothing-to-publish"' in page and "<select" not in page and "Publish</button>" not in page


def test_the_overview_renders_when_usage_and_lists_cannot_be_read() -> None:
    """A console administrator without RBAC or maas-api rights lands here: the page shows the errors, never a 500
    (the template runs with StrictUndefined, so a missing total must not be read as an attribute)."""
    from maasctl.console.app import templates

    page = templates().env.get_template("admin/overview.html").render(
        model_phases=[], model_count=0, sub_phases=[], sub_count=0, today={}, healthy=set(), problems=[],
        errors=["MaaSModelRef: forbidden", "usage: not allowed"], identity=None, nav=[], flashes=[],
        path="/admin/overview", oidc_enabled=False, is_admin=True, title="Overview", csrf_token="t")
    assert "MaaSModelRef: forbidden" in page and 'id="overview-tokens-today">0<' in page


@pytest.mark.parametrize("terms", [
    {"organization_id": "acme", "tenant": "ten-acme", "tenant_namespace": "gw", "enforced": False, "plan": "basic",
     "plan_found": True, "limits": [{"kind": "requests", "limit": 30, "window": "1m", "name": "billing/gw/b/requests"},
                                    {"kind": "tokens", "limit": 20000, "window": "1m", "name": "billing/gw/b/tokens"}],
     "model_scopes": []},  # maas-api's shape: null fields left out
    {"organization_id": "acme", "tenant": "ten-acme", "tenant_namespace": "gw", "state": "Frozen", "enforced": True,
     "billing_mode": "Prepaid", "plan": "basic", "plan_found": False, "limits": [], "model_scopes": [],
     "route": None},  # the administrators' view: every field
], ids=["maas-api", "admin"])
def test_billing_terms_render_from_either_source(terms: dict[str, object]) -> None:
    from maasctl.console.app import templates

    macro = templates().env.get_template("macros.html").module.billing_terms  # type: ignore[attr-defined]
    html = " ".join(re.sub(r"<[^>]+>", "", str(macro([terms], "billing"))).split())  # the text as read
    assert "ten-acme" in html and "acme" in html
    if terms["plan_found"]:
        assert "Pending" in html and "30 requests per Minute, 20k tokens per Minute" in html
    else:
        assert "Frozen" in html and "requests are refused" in html and "does not exist" in html
    assert "No billing Plan" in str(macro([], "b")) and str(macro(None, "b")).strip() == ""
