"""The billing console's pure rules (billing/rules/console.py): the objects a BillingConsole becomes and what
its status says; and the role rule the console shares with the operator (contract/billing_console.py)."""

from __future__ import annotations

from typing import Any

import pytest

from maasctl.billing.api.console import BillingConsoleSpec
from maasctl.billing.rules import console
from maasctl.contract.billing_console import at_least, role_of

BINDINGS = ("billing-console-viewer", "billing-console-operator", "billing-console-admin")
TARGET = console.ConsoleTarget(namespace="opendatahub", gateway_namespace="openshift-ingress",
                               gateway_name="maas-default-gateway", metrics_url="http://m:8080/metrics")


def spec(**fields: Any) -> BillingConsoleSpec:
    return BillingConsoleSpec.model_validate(fields)


def objects(s: BillingConsoleSpec, route_api: bool = False, url: str | None = None) -> dict[str, dict[str, Any]]:
    inp = console.ConsoleInput(name="default", uid="u-1", spec=s, route_api=route_api, url=url)
    return {o["kind"] if o["kind"] != "ClusterRoleBinding" else o["metadata"]["name"]: o
            for o in console.console_objects(inp, TARGET)}


def container(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return out


def test_defaults_render_a_deployment_a_service_and_an_httproute_owned_by_the_console() -> None:
    objs = objects(spec())
    assert set(objs) == {"Deployment", "Service", "HTTPRoute", *BINDINGS}
    for obj in objs.values():
        meta = obj["metadata"]
        if obj["kind"] == "ClusterRoleBinding":
            assert "namespace" not in meta and obj["subjects"] == []  # no auth.roles: nobody
        else:
            assert (meta["name"], meta["namespace"]) == ("billing-console", "opendatahub")
        assert meta["ownerReferences"] == [{"apiVersion": "billing.opendatahub.io/v1alpha1",
                                            "kind": "BillingConsole", "name": "default", "uid": "u-1",
                                            "controller": True}]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "billing-controller"
    deployment = objs["Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "maas-console"
    c = container(objs)
    assert c["image"] == "controller:latest" and c["command"] == ["maasctl"]
    assert c["args"] == ["console", "--host=0.0.0.0", "--port=8080", "--log-format=json",
                         "--billing-metrics-url=http://m:8080/metrics", "--tenant-portal"]
    assert "env" not in c  # no OIDC client
    route = objs["HTTPRoute"]["spec"]
    assert route["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                    "namespace": "openshift-ingress", "name": "maas-default-gateway"}]
    assert "hostnames" not in route
    assert route["rules"] == [{"backendRefs": [{"name": "billing-console", "port": 8080}]}]
    assert objs["Service"]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_image_replicas_host_portal_and_roles() -> None:
    s = spec(image="quay.io/x/maasctl:1.2", replicas=3, route={"host": "billing.example.com"},
             tenantPortal={"enabled": False},
             auth={"roles": {"admin": ["billing-admins"], "operator": ["billing-ops", "sre"],
                             "viewer": ["finance-ro"]}})
    objs = objects(s, url="https://billing.example.com")
    assert objs["Deployment"]["spec"]["replicas"] == 3
    c = container(objs)
    assert c["image"] == "quay.io/x/maasctl:1.2"
    assert "--tenant-portal" not in c["args"]  # tenantPortal.enabled false: no /portal
    assert "--public-url=https://billing.example.com" in c["args"]
    assert [a for a in c["args"] if a.startswith("--billing-") and "group" in a] == [
        "--billing-admin-group=billing-admins", "--billing-operator-group=billing-ops",
        "--billing-operator-group=sre", "--billing-viewer-group=finance-ro"]
    assert objs["HTTPRoute"]["spec"]["hostnames"] == ["billing.example.com"]
    # auth.roles as RBAC: each role's ClusterRole bound to its groups.
    assert {n: [(x["kind"], x["name"]) for x in objs[n]["subjects"]] for n in BINDINGS} == {
        "billing-console-admin": [("Group", "billing-admins")],
        "billing-console-operator": [("Group", "billing-ops"), ("Group", "sre")],
        "billing-console-viewer": [("Group", "finance-ro")]}
    assert objs["billing-console-admin"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                                        "kind": "ClusterRole", "name": "billing-console-admin"}


def test_a_route_when_the_route_api_is_served() -> None:
    objs = objects(spec(route={"host": "b.apps.example.com", "tlsSecretRef": {"name": "b-tls"}}), route_api=True)
    assert set(objs) == {"Deployment", "Service", "Route", *BINDINGS}
    route = objs["Route"]
    assert route["apiVersion"] == "route.openshift.io/v1"
    assert route["spec"] == {"host": "b.apps.example.com", "to": {"kind": "Service", "name": "billing-console",
                                                                  "weight": 100},
                             "port": {"targetPort": "http"},
                             "tls": {"termination": "edge", "insecureEdgeTerminationPolicy": "Redirect",
                                     "externalCertificate": {"name": "b-tls"}}}
    bare = objects(spec(), route_api=True)["Route"]["spec"]
    assert "host" not in bare and "externalCertificate" not in bare["tls"]  # OpenShift generates both


def test_oidc_and_brokered_clients_come_from_their_secret() -> None:
    oidc = spec(auth={"mode": "OIDC", "oidc": {"issuerURL": "https://idp.example.com",
                                               "clientSecretRef": {"name": "console-oidc"}}})
    c = container(objects(oidc))
    assert "--oidc-issuer-url=https://idp.example.com" in c["args"]
    assert "--oidc-client-secret-file=/etc/billing-console/oidc/client-secret" in c["args"]
    assert c["env"] == [{"name": "MAASCTL_CONSOLE_OIDC_CLIENT_ID",
                         "valueFrom": {"secretKeyRef": {"name": "console-oidc", "key": "client-id"}}}]
    volumes = objects(oidc)["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "oidc", "secret": {"secretName": "console-oidc", "items": [
        {"key": "client-secret", "path": "client-secret"}]}} in volumes
    broker = spec(auth={"mode": "Brokered", "broker": {"existingIssuerURL": "https://sso.example.com/realms/x"}})
    assert console.oidc_client_secret(broker) == "billing-console-broker"
    assert "--oidc-issuer-url=https://sso.example.com/realms/x" in container(objects(broker))["args"]
    for no_client in (spec(auth={"mode": "Brokered", "broker": {"deploy": True}}),
                      spec(auth={"mode": "OpenShiftOAuth"}), spec()):
        assert console.oidc_client_secret(no_client) is None
        assert not any(a.startswith("--oidc") for a in container(objects(no_client))["args"])


@pytest.mark.parametrize(("fields", "keys", "route_api", "expected"), [
    ({}, None, False, ("True", "TokenSignIn")),
    ({"auth": {"mode": "OIDC", "oidc": {"issuerURL": "https://i", "clientSecretRef": {"name": "s"}}}},
     None, False, ("False", "SecretNotFound")),
    ({"auth": {"mode": "OIDC", "oidc": {"issuerURL": "https://i", "clientSecretRef": {"name": "s"}}}},
     ["client-id"], False, ("False", "MissingKeys")),
    ({"auth": {"mode": "OIDC", "oidc": {"issuerURL": "https://i", "clientSecretRef": {"name": "s"}}}},
     ["client-id", "client-secret"], False, ("True", "OIDCConfigured")),
    ({"auth": {"mode": "Brokered", "broker": {"deploy": True}}}, None, True, ("False", "BrokerNotProvided")),
    ({"auth": {"mode": "Brokered", "broker": {"existingIssuerURL": "https://b"}}}, None, False,
     ("False", "SecretNotFound")),
    ({"auth": {"mode": "Brokered", "broker": {"existingIssuerURL": "https://b"}}}, ["client-id", "client-secret"],
     False, ("True", "OIDCConfigured")),
    ({"auth": {"mode": "Brokered", "broker": {}}}, None, False, ("False", "BrokerMissing")),
    ({"auth": {"mode": "OpenShiftOAuth"}}, None, True, ("True", "OpenShiftTokens")),
    ({"auth": {"mode": "OpenShiftOAuth"}}, None, False, ("False", "NotOpenShift")),
])
def test_auth_configured(fields: dict[str, Any], keys: list[str] | None, route_api: bool,
                         expected: tuple[str, str]) -> None:
    v = console.auth_verdict(spec(**fields), keys, route_api)
    assert (v.status, v.reason) == expected, v
    if v.reason == "MissingKeys":
        assert v.message == "Secret s lacks client-secret"


def test_auth_says_when_nobody_has_a_role() -> None:
    assert "nobody sees the billing pages" in console.auth_verdict(spec(), None, False).message
    roles = spec(auth={"roles": {"viewer": ["finance"]}})
    assert "nobody" not in console.auth_verdict(roles, None, False).message


def _route(*conditions: dict[str, Any], host: str = "b.apps.example.com") -> dict[str, Any]:
    return {"kind": "Route", "metadata": {"name": "billing-console", "namespace": "opendatahub"},
            "status": {"ingress": [{"host": host, "routerName": "default", "conditions": list(conditions)}]}}


def _http_route(namespace: str, name: str, status: str, reason: str = "Accepted") -> dict[str, Any]:
    return {"kind": "HTTPRoute", "metadata": {"name": "billing-console", "namespace": "opendatahub"},
            "status": {"parents": [{"parentRef": {"namespace": namespace, "name": name},
                                    "conditions": [{"type": "Accepted", "status": status, "reason": reason}]}]}}


def test_route_admitted_and_the_url() -> None:
    s = spec()
    admitted = _route({"type": "Admitted", "status": "True"})
    v = console.route_verdict(s, admitted, True, True, TARGET)
    assert (v.status, v.reason) == ("True", "Admitted")
    assert console.public_url(s, admitted) == "https://b.apps.example.com"  # the host OpenShift generated
    refused = _route({"type": "Admitted", "status": "False", "reason": "HostAlreadyClaimed", "message": "taken"})
    v = console.route_verdict(s, refused, True, True, TARGET)
    assert (v.status, v.reason) == ("False", "NotAdmitted") and "HostAlreadyClaimed taken" in v.message
    assert console.public_url(s, refused) is None
    assert console.route_verdict(s, _route(), True, True, TARGET).reason == "Pending"
    assert console.route_verdict(s, None, True, True, TARGET).reason == "Pending"
    # An HTTPRoute left from before the Route API appeared is not the Route.
    assert console.route_verdict(s, _http_route("openshift-ingress", "maas-default-gateway", "True"), True, True,
                                 TARGET).reason == "Pending"
    assert console.public_url(spec(route={"host": "x.example.com"}), None) == "https://x.example.com"


def test_httproute_accepted_by_the_configured_gateway_only() -> None:
    s = spec()
    ours = ("openshift-ingress", "maas-default-gateway")
    v = console.route_verdict(s, _http_route(*ours, "True"), False, True, TARGET)
    assert (v.status, v.reason) == ("True", "Accepted")
    v = console.route_verdict(s, _http_route(*ours, "False", "NotAllowedByListeners"), False, True, TARGET)
    assert (v.status, v.reason) == ("False", "NotAccepted") and "NotAllowedByListeners" in v.message
    other = console.route_verdict(s, _http_route("elsewhere", "gw", "True"), False, True, TARGET)
    assert (other.status, other.reason) == ("False", "Pending")
    assert console.route_verdict(s, None, False, False, TARGET).reason == "NoRouteAPI"
    assert console.route_verdict(spec(enabled=False), None, False, True, TARGET).reason == "Disabled"


def _deployment(generation: int, observed: int, available: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "availableReplicas": available}}


def test_deployed() -> None:
    s = spec(replicas=2)
    assert console.deployed_verdict(spec(enabled=False), None, False).reason == "Disabled"
    assert console.deployed_verdict(s, None, True).reason == "Pending"
    assert console.deployed_verdict(s, _deployment(2, 2, 2), False).reason == "Pending"  # no Service yet
    assert console.deployed_verdict(s, _deployment(3, 2, 2), True).reason == "Progressing"
    v = console.deployed_verdict(s, _deployment(2, 2, 1), True)
    assert (v.status, v.reason, v.message) == ("False", "ReplicasUnavailable", "1/2 replicas available")
    v = console.deployed_verdict(s, _deployment(2, 2, 2), True)
    assert (v.status, v.reason, v.message) == ("True", "Available", "2/2 replicas available")


def test_not_singleton() -> None:
    v = console.not_singleton("billing")
    assert (v.status, v.reason) == ("False", "NotSingleton") and "billing is ignored" in v.message


def test_roles_strongest_wins_and_no_group_no_role() -> None:
    roles = {"admin": ["billing-admins"], "operator": ["billing-ops"], "viewer": ["finance", "billing-ops"]}
    assert role_of(["finance"], roles) == "viewer"
    assert role_of(["billing-ops"], roles) == "operator"
    assert role_of(["finance", "billing-admins"], roles) == "admin"
    assert role_of(["developers"], roles) is None
    assert role_of([], {}) is None
    assert at_least("admin", "operator") and at_least("operator", "operator") and not at_least("viewer", "operator")
    assert not at_least(None, "viewer")
