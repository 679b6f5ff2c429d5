"""The psp-connector in the install manifests: its own Deployment whose environment is the real `maasctl billing
connector` configuration, the Service its generated webhook Ingresses route to, and its own ServiceAccount,
which (as the API server sees it) can connect a BillingConnector and nothing more."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.cli.connector import settings_from_args
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.cli import build_parser
from tests.install.manifests import DEFAULT_CONTROLLER_NS, MANIFESTS, OVERLAYS, find, kubectl, render

from ..conftest import Billing, wait_event
from .psp import API, Setup, b64, conds, status_of, stripe_connector

NAME = "psp-connector"
SA = f"system:serviceaccount:{DEFAULT_CONTROLLER_NS}:{NAME}"


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = find(docs, "Deployment", NAME)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    [only] = pod["containers"]
    return dict(only)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_the_connector_runs_as_its_own_hardened_deployment(overlay: Any) -> None:
    docs = render(overlay)
    c = container(docs)
    assert c["command"] == ["maasctl"] and c["args"] == ["billing", "connector"]
    assert "--leader-elect" not in c["args"], "only a leader would load the credentials that verify a webhook"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"webhook": 8443, "metrics": 8080, "health": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    ledger = next(e for e in c["env"] if e["name"] == "MAASCTL_BILLING_LEDGER_URL")
    assert ledger["valueFrom"] == {"secretKeyRef": {"name": "billing-ledger", "key": "ledger-url"}}


def test_the_manifest_environment_is_the_connectors_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variable the Deployment sets is one `maasctl billing connector` reads (a typo would be ignored)."""
    env = container(render(MANIFESTS / "overlays" / "default"))["env"]
    pod_namespace = next(e for e in env if e["name"] == "MAASCTL_PSP_SERVICE_NAMESPACE")
    assert pod_namespace["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    for e in env:
        from_secret = "secretKeyRef" in e.get("valueFrom", {})
        monkeypatch.setenv(e["name"], e.get("value", "postgresql+asyncpg://u@db:5432/billing" if from_secret
                                            else DEFAULT_CONTROLLER_NS))
    settings = settings_from_args(build_parser().parse_args(["billing", "connector"]))
    assert settings.ledger_url == "postgresql+asyncpg://u@db:5432/billing"
    assert settings.service_namespace == DEFAULT_CONTROLLER_NS
    assert (settings.webhook_bind_address, settings.metrics_bind_address, settings.health_probe_bind_address) == (
        ":8443", ":8080", ":8081")
    assert (settings.log_format, settings.log_level, settings.leader_elect) == ("json", "info", False)
    for e in env:
        monkeypatch.setenv(e["name"], "x-unused")
    differs = settings_from_args(build_parser().parse_args(["billing", "connector"]))
    assert differs.ledger_url == differs.webhook_bind_address == differs.metrics_bind_address == "x-unused"
    assert differs.health_probe_bind_address == differs.log_format == differs.log_level == "x-unused"
    assert differs.service_namespace == "x-unused"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_the_webhook_service_is_the_one_generated_ingresses_route_to(overlay: Any) -> None:
    docs = render(overlay)
    defaults = ConnectorSettings()
    svc = find(docs, "Service", defaults.service_name)["spec"]
    assert svc["selector"] == {"app.kubernetes.io/name": NAME}
    assert [(p["port"], p["targetPort"]) for p in svc["ports"]] == [(defaults.service_port, "webhook")]
    metrics = find(docs, "Service", f"{NAME}-metrics")["spec"]
    assert [(p["port"], p["targetPort"]) for p in metrics["ports"]] == [(8080, "metrics")]


# -- as its ServiceAccount, on the API server --------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.postgres
async def test_as_its_service_account_the_connector_connects_a_billing_connector_and_can_do_nothing_more(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    # The connector (started by the `psp` fixture with a token of its ServiceAccount) reconciles: it reads the
    # credentials Secret, patches the BillingConnector's status, applies the webhook Ingress and records an Event.
    await stripe_connector(kube, billing, namespace)
    st = await status_of(billing, "BillingConnector", "stripe", namespace)
    assert st["connected"] is True and conds(st)["WebhookReachable"]["status"] == "True"
    # The BillingConnector is outside the connector's namespace: its Ingress routes to the ExternalName Service
    # the connector generated beside it, naming Service psp-connector of the connector's namespace.
    ingress = await k8s.NetworkingV1Api(kube).read_namespaced_ingress("psp-webhook-stripe", namespace)
    assert ingress.spec.rules[0].http.paths[0].backend.service.name == "psp-webhook-stripe"
    service = await k8s.CoreV1Api(kube).read_namespaced_service("psp-webhook-stripe", namespace)
    assert (service.spec.type, service.spec.external_name) == (
        "ExternalName", f"{NAME}.{DEFAULT_CONTROLLER_NS}.svc.cluster.local")
    connector = await billing.get("BillingConnector", "stripe", namespace)
    assert connector is not None
    for obj in (ingress, service):
        [owner] = obj.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid, owner.controller) == (
            "BillingConnector", "stripe", connector["metadata"]["uid"], True)
    await wait_event(kube, namespace, "stripe", "Connected", "Normal")

    # The same identity, directly: reads what it watches, one Secret by name, and nothing else.
    api = psp.connector.api
    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    found = await custom.list_cluster_custom_object("billing.opendatahub.io", "v1alpha1", "billingconnectors")
    assert any(i["metadata"]["name"] == "stripe" for i in found["items"])
    assert (await core.read_namespaced_secret("stripe-credentials", namespace)).data

    async def denied(call: Any) -> None:
        with pytest.raises(k8s.ApiException) as refused:
            await call
        assert refused.value.status == 403

    await denied(core.list_namespaced_secret(namespace))
    await denied(core.list_secret_for_all_namespaces())
    await denied(core.patch_namespaced_secret("stripe-credentials", namespace, {"data": {"secretKey": b64("x")}}))
    await denied(core.delete_namespaced_secret("stripe-credentials", namespace))
    await denied(core.list_namespaced_config_map(namespace))
    await denied(custom.create_namespaced_custom_object(
        "billing.opendatahub.io", "v1alpha1", namespace, "billingconnectors",
        {"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": "mine"},
         "spec": {"type": "stripe", "credentialsSecretRef": {"name": "stripe-credentials"}}}))
    await denied(custom.patch_namespaced_custom_object(
        "billing.opendatahub.io", "v1alpha1", namespace, "billingconnectors", "stripe",
        [{"op": "replace", "path": "/spec/taxMode", "value": "none"}]))
    await denied(k8s.NetworkingV1Api(api).list_namespaced_ingress(namespace))
    await denied(core.list_namespaced_service(namespace))
    await denied(core.read_namespaced_service("psp-webhook-stripe", namespace))
    await denied(k8s.CoordinationV1Api(api).create_namespaced_lease(DEFAULT_CONTROLLER_NS, k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name="psp-connector-test"))))

    def can(*question: str) -> bool:
        out = kubectl("auth", "can-i", *question, f"--as={SA}", kubeconfig=psp.cluster.kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    assert can("patch", "tenantaccounts.billing.opendatahub.io", "--subresource=status", "-n", namespace)
    assert can("get", "plans.billing.opendatahub.io", "-n", namespace)
    assert can("create", "events.events.k8s.io", "-n", namespace)
    for verb in ("create", "update", "patch", "delete"):
        for kind in ("tenantaccounts", "plans", "pricebooks", "budgetpolicies"):
            assert not can(verb, f"{kind}.billing.opendatahub.io", "-n", namespace), (verb, kind)
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not can(verb, "secrets", "-n", namespace), verb
    assert not can("get", "budgetpolicies.billing.opendatahub.io", "-n", namespace)
    assert not can("patch", "plans.billing.opendatahub.io", "--subresource=status", "-n", namespace)
    assert not can("update", "ingresses.networking.k8s.io", "-n", namespace)
    assert can("patch", "services", "-n", namespace) and can("create", "services", "-n", namespace)
    for verb in ("get", "list", "watch", "update"):
        assert not can(verb, "services", "-n", namespace), verb
    assert not can("get", "services", "--subresource=proxy", "-n", namespace)
    assert not can("patch", "endpoints", "-n", namespace)
    assert not can("get", "maassubscriptions.maas.opendatahub.io", "-A")
    assert not can("create", "pods", "-n", DEFAULT_CONTROLLER_NS)
