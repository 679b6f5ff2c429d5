"""The psp-connector's pure rules: the reload decision (every guard, in order), minor units, the HMAC scheme of
the generic webhook and reading inbound events (hostile bodies refused, never a float)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from maasctl.billing.api.tenant import BillingMode, ReloadPolicy
from maasctl.billing.rules import signing
from maasctl.billing.rules.psp_amounts import from_minor, split_minor, to_minor
from maasctl.billing.rules.psp_events import BadEvent, parse_stripe, parse_webhook
from maasctl.billing.rules.reload import Facts, decide, next_month
from maasctl.billing.rules.webhook_route import WebhookRoute, service_name, webhook_objects

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = ReloadPolicy(enabled=True, threshold_amount=Decimal("5"), reload_amount=Decimal("25"),
                      monthly_cap_amount=Decimal("60"), max_reloads_per_day=2)


def facts(**kw: Any) -> Facts:
    base: dict[str, Any] = dict(mode=BillingMode.PREPAID, policy=POLICY, has_connector=True, has_customer=True,
                                balance=Decimal("4.99"), pending=False, month_reloaded=Decimal(0), attempts_24h=(),
                                consecutive_failures=0, last_failure_at=None, payment_method_changed_at=None,
                                payment_method_valid=True, now=NOW)
    base.update(kw)
    return Facts(**base)


def test_a_reload_starts_below_the_threshold_only() -> None:
    assert decide(facts()).start
    assert decide(facts(balance=Decimal("5"))).reason == "AboveThreshold"
    assert decide(facts(balance=Decimal("-3"))).start


@pytest.mark.parametrize(("change", "reason"), [
    ({"mode": BillingMode.INVOICED}, "ReloadDisabled"),
    ({"policy": None}, "ReloadDisabled"),
    ({"policy": POLICY.model_copy(update={"enabled": False})}, "ReloadDisabled"),
    ({"has_customer": False}, "NotConfigured"),
    ({"pending": True}, "ReloadInFlight"),
    ({"consecutive_failures": 3, "last_failure_at": NOW - timedelta(days=2)}, "PaymentsFailing"),
    ({"payment_method_changed_at": NOW - timedelta(minutes=59)}, "PaymentMethodCooldown"),
    ({"payment_method_valid": False}, "PaymentMethodInvalid"),
    ({"consecutive_failures": 1, "last_failure_at": NOW - timedelta(minutes=5)}, "RetryLater"),
    ({"attempts_24h": (NOW - timedelta(hours=23), NOW - timedelta(hours=1))}, "DailyLimitReached"),
    ({"month_reloaded": Decimal("35.000001")}, "MonthlyCapReached"),
])
def test_every_guard_blocks_a_reload(change: dict[str, Any], reason: str) -> None:
    decision = decide(facts(**change))
    assert not decision.start and decision.reason == reason, decision


def test_limits_say_when_they_lift() -> None:
    daily = decide(facts(attempts_24h=(NOW - timedelta(hours=23), NOW - timedelta(hours=1))))
    assert daily.retry_at == NOW + timedelta(hours=1)
    assert decide(facts(month_reloaded=Decimal(50))).retry_at == next_month(NOW) == datetime(2026, 12, 1, tzinfo=UTC)
    assert next_month(datetime(2026, 12, 31, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    cooldown = decide(facts(payment_method_changed_at=NOW - timedelta(minutes=30)))
    assert cooldown.retry_at == NOW + timedelta(minutes=30)


def test_the_cap_is_reached_exactly_never_exceeded() -> None:
    assert decide(facts(month_reloaded=Decimal(35))).start  # 35 + 25 = 60: at the cap
    no_daily_limit = POLICY.model_copy(update={"max_reloads_per_day": 0})
    assert decide(facts(month_reloaded=Decimal(35), policy=no_daily_limit, attempts_24h=(NOW,) * 50)).start


def test_minor_units() -> None:
    assert to_minor(Decimal("25000"), "USD") == 2_500_000
    assert to_minor(Decimal("12.34"), "eur") == 1234
    assert to_minor(Decimal("500"), "JPY") == 500
    for bad, cur in ((Decimal("10.005"), "USD"), (Decimal("1.5"), "JPY"), (Decimal("-1"), "USD")):
        with pytest.raises(ValueError):
            to_minor(bad, cur)
    with pytest.raises(ValueError):
        to_minor(Decimal(1), "XTS")
    assert from_minor(1234, "USD") == Decimal("12.340000")
    assert split_minor(Decimal("1.234567"), "USD") == (123, Decimal("0.004567"))
    assert split_minor(Decimal(0), "USD") == (0, Decimal(0))


def test_signatures_verify_and_refuse() -> None:
    body = b'{"id":"e1"}'
    header = signing.signature_header("s3cret", 1000, body)
    assert signing.verify("s3cret", header, body, 1100).ok
    assert signing.verify("s3cret", f"{header},v1=deadbeef", body, 1100).ok  # rotation: any v1 may match
    assert signing.verify("other", header, body, 1100).reason == "SignatureMismatch"
    assert signing.verify("s3cret", header, body + b" ", 1100).reason == "SignatureMismatch"
    assert signing.verify("s3cret", header, body, 1000 + 301).reason == "TimestampOutsideWindow"
    assert signing.verify("s3cret", header, body, 1000 - 301).reason == "TimestampOutsideWindow"
    for broken in ("", "v1=abc", "t=x,v1=abc", "t=1,t=2,v1=a", "garbage", "t=1", "x" * 2000):
        assert not signing.verify("s3cret", broken, body, 1).ok
    assert not signing.verify("", signing.signature_header("", 1, body), body, 1).ok


def pi_event(type_: str = "payment_intent.succeeded", **obj: Any) -> bytes:
    data = {"id": "pi_1", "object": "payment_intent", "amount": 2500, "amount_received": 2500, "currency": "usd",
            "metadata": {"maasctl_reload": "maasctl-reload-a", "maasctl_tenant": "ns/t"}}
    data.update(obj)
    return json.dumps({"id": "evt_1", "object": "event", "type": type_, "data": {"object": data}}).encode()


def test_stripe_events_are_read() -> None:
    ok = parse_stripe(pi_event())
    assert (ok.effect, ok.attempt, ok.tenant, ok.intent, ok.amount, ok.currency) == (
        "payment_succeeded", "maasctl-reload-a", "ns/t", "pi_1", Decimal("25.000000"), "USD")
    failed = parse_stripe(pi_event("payment_intent.payment_failed",
                                   last_payment_error={"code": "card_declined", "decline_code": "insufficient_funds"}))
    assert failed.effect == "payment_failed" and failed.code == "insufficient_funds"
    dispute = parse_stripe(json.dumps({"id": "evt_2", "type": "charge.dispute.created", "data": {"object": {
        "id": "dp_1", "payment_intent": "pi_1", "amount": 2500, "currency": "usd", "reason": "fraudulent"}}}).encode())
    assert (dispute.effect, dispute.intent, dispute.code) == ("dispute_opened", "pi_1", "fraudulent")
    assert parse_stripe(json.dumps({"id": "evt_3", "type": "customer.created", "data": {"object": {}}}).encode()
                        ).effect == "ignored"


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"type": "payment_intent.succeeded"}', b'{"id": "evt", "type": "x"}',
    pi_event(amount_received=25.0), pi_event(amount_received="2500"), pi_event(amount_received=-1),
    pi_event(amount_received=True), pi_event(currency="xts"), b"{" * 5000 + b"}" * 5000,
    json.dumps({"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": {}}, "pad": "x" * 300_000}
               ).encode(),
])
def test_hostile_stripe_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(BadEvent):
        parse_stripe(body)


def test_hostile_values_never_reach_the_event() -> None:
    evt = parse_stripe(pi_event(metadata={"maasctl_reload": "x\n<script>", "maasctl_tenant": "a" * 999},
                                last_payment_error={"code": "Robert'); DROP TABLE"}))
    assert evt.attempt is None and evt.tenant is None and evt.code is None


def test_generic_webhook_events_are_read() -> None:
    body = json.dumps({"id": "w1", "type": "reload.succeeded", "data": {
        "reloadId": "maasctl-reload-a", "tenant": "ns/t", "intentId": "ext-9", "amount": "25.00",
        "currency": "USD"}}).encode()
    evt = parse_webhook(body)
    assert (evt.effect, evt.attempt, evt.intent, evt.amount) == ("payment_succeeded", "maasctl-reload-a", "ext-9",
                                                                Decimal("25.00"))
    for amount in (25, "2.5e1", "-1", "1.0000001", 25.5):
        with pytest.raises(BadEvent):
            parse_webhook(json.dumps({"id": "w", "type": "reload.succeeded",
                                      "data": {"amount": amount, "currency": "USD"}}).encode())


# -- the webhook route (rules.webhook_route) ---------------------------------------------------------------------

CONNECTOR = {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "BillingConnector",
             "metadata": {"name": "stripe", "namespace": "team-a", "uid": "u-1"}}
PATH = "/webhooks/team-a/stripe"


def test_a_connector_in_the_connectors_namespace_routes_to_the_installed_service() -> None:
    own = {**CONNECTOR, "metadata": {**CONNECTOR["metadata"], "namespace": "opendatahub"}}
    for route in (WebhookRoute("opendatahub"), WebhookRoute("")):  # "": unknown, as before (maasctl dev)
        (ingress,) = webhook_objects(own, "psp.example.com", None, PATH, route)
        assert ingress["kind"] == "Ingress" and ingress["metadata"]["namespace"] == "opendatahub"
        backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": "psp-connector", "port": {"number": 8443}}
        assert "tls" not in ingress["spec"]


def test_a_connector_elsewhere_gets_an_external_name_service_owned_like_its_ingress() -> None:
    service, ingress = webhook_objects(CONNECTOR, "psp.example.com", "psp-tls", PATH, WebhookRoute("opendatahub"))
    assert service["kind"] == "Service" and service["metadata"]["namespace"] == "team-a"
    assert service["metadata"]["name"] == "psp-webhook-stripe"
    assert service["spec"] == {"type": "ExternalName", "externalName": "psp-connector.opendatahub.svc.cluster.local",
                               "ports": [{"name": "webhook", "port": 8443, "protocol": "TCP"}]}
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "psp.example.com" and rule["http"]["paths"] == [{
        "path": PATH, "pathType": "Exact",
        "backend": {"service": {"name": "psp-webhook-stripe", "port": {"number": 8443}}}}]
    assert ingress["spec"]["tls"] == [{"hosts": ["psp.example.com"], "secretName": "psp-tls"}]
    for obj in (service, ingress):
        assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "billing.opendatahub.io/v1alpha1",
                                                       "kind": "BillingConnector", "name": "stripe", "uid": "u-1",
                                                       "controller": True}]
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "psp-connector"}


@pytest.mark.parametrize("name", ["stripe.eu", "a" * 52, "x" * 253, "9lives", "s.1", "stripe-"], ids=len)
def test_a_connector_name_no_service_may_have_gets_a_hashed_valid_one(name: str) -> None:
    made = service_name(name)
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", made), made
    assert made.startswith("psp-webhook-") and made != service_name(name + "x")
    assert service_name("stripe") == "psp-webhook-stripe" and service_name("a" * 51) == "psp-webhook-" + "a" * 51


def test_the_external_name_comes_from_the_settings_never_the_spec() -> None:
    hostile = {**CONNECTOR, "spec": {"webhookIngress": {"host": "evil.example.com"}},
               "metadata": {**CONNECTOR["metadata"], "name": "evil.example.com"}}
    service, _ = webhook_objects(hostile, "evil.example.com", None, PATH, WebhookRoute("opendatahub", "svc", 9443))
    assert service["spec"]["externalName"] == "svc.opendatahub.svc.cluster.local"
    assert service["spec"]["ports"][0]["port"] == 9443
