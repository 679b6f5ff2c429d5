"""The billing operator in the install manifests and on the command line: its own Deployment, its own
ServiceAccount whose permissions are bounded as the API server sees them, and `maasctl billing run` flags."""

from __future__ import annotations

import asyncio

import pytest

from maasctl.billing.cli.billing import settings_from_args
from maasctl.cli import build_parser
from maasctl.console.billing import rbac
from maasctl.testenv import ControlPlane
from tests.billing.conftest import install_route_crd
from tests.install.manifests import (
    DEFAULT_CONTROLLER_NS,
    DEFAULT_SUBSCRIPTION_NS,
    MANIFESTS,
    apply_docs,
    find,
    identity_docs,
    kubectl,
    render,
)


def test_the_default_overlay_runs_billing_as_its_own_deployment_and_service_account() -> None:
    docs = render(MANIFESTS / "overlays" / "default")
    deployment = find(docs, "Deployment", "billing-controller")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "billing-controller"
    container = pod["containers"][0]
    assert container["args"] == ["billing", "run", "--leader-elect"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["metadata"]["namespace"] == DEFAULT_CONTROLLER_NS


@pytest.mark.integration
async def test_the_billing_service_account_is_bounded(billing_cluster: ControlPlane) -> None:
    cp = billing_cluster
    await apply_docs(cp, identity_docs({"billing-controller"}, DEFAULT_CONTROLLER_NS, DEFAULT_SUBSCRIPTION_NS))

    def can(*question: str) -> bool:
        out = kubectl("auth", "can-i", *question,
                      f"--as=system:serviceaccount:{DEFAULT_CONTROLLER_NS}:billing-controller",
                      kubeconfig=cp.kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    assert can("patch", "plans.billing.opendatahub.io", "--subresource=status", "-n", "tenants")
    assert can("create", "ratelimitpolicies.kuadrant.io", "-n", "tenants")
    assert can("delete", "clusterqueues.kueue.x-k8s.io")
    assert can("create", "leases.coordination.k8s.io", "-n", DEFAULT_CONTROLLER_NS)
    for verb in ("create", "update", "patch", "delete"):
        assert not can(verb, "plans.billing.opendatahub.io", "-n", "tenants"), verb
        assert not can(verb, "tenantaccounts.billing.opendatahub.io", "-n", "tenants"), verb
    assert not can("delete", "resourceflavors.kueue.x-k8s.io")
    assert can("get", "secrets", "-n", "tenants")  # a PriceBook's cost Secret, by name
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not can(verb, "secrets", "-n", "tenants"), verb
    assert not can("create", "leases.coordination.k8s.io", "-n", "tenants")
    assert not can("patch", "httproutes.gateway.networking.k8s.io", "-n", "tenants")
    assert not can("patch", "maassubscriptions.maas.opendatahub.io", "-n", DEFAULT_SUBSCRIPTION_NS)
    # The billing console (BillingConsole): its objects in the operator's namespace only, the resource's status.
    # (kubectl asks about routes.route.openshift.io only where the Route API is served.)
    await asyncio.to_thread(install_route_crd, cp)
    ns = ("-n", DEFAULT_CONTROLLER_NS)
    for resource in ("deployments.apps", "services", "routes.route.openshift.io"):
        for verb in ("get", "list", "watch", "create", "patch", "delete"):
            assert can(verb, resource, *ns), (verb, resource)
        for verb in ("list", "watch", "create", "patch", "delete"):
            assert not can(verb, resource, "-n", "tenants"), (verb, resource)
        assert not can("list", resource, "-A"), resource
    assert can("create", "routes.route.openshift.io", "--subresource=custom-host", *ns)
    assert can("patch", "httproutes.gateway.networking.k8s.io", *ns)
    assert can("patch", "billingconsoles.billing.opendatahub.io", "--subresource=status")
    for verb in ("create", "update", "patch", "delete"):
        assert not can(verb, "billingconsoles.billing.opendatahub.io"), verb
    for question in (("create", "pods", *ns), ("create", "serviceaccounts", *ns), ("create", "rolebindings", *ns),
                     ("update", "deployments.apps", "--subresource=scale", *ns), ("list", "secrets", *ns)):
        assert not can(*question), question
    # spec.auth.roles: it binds the billing console's three ClusterRoles, and no other role.
    for role in ("billing-console-viewer", "billing-console-operator", "billing-console-admin"):
        assert can("bind", f"clusterroles.rbac.authorization.k8s.io/{role}"), role
        assert can("patch", f"clusterrolebindings.rbac.authorization.k8s.io/{role}"), role
        assert can("delete", f"clusterrolebindings.rbac.authorization.k8s.io/{role}"), role
    for other in ("cluster-admin", "billing-controller", "admin", "edit"):
        assert not can("bind", f"clusterroles.rbac.authorization.k8s.io/{other}"), other
        assert not can("escalate", f"clusterroles.rbac.authorization.k8s.io/{other}"), other
        for verb in ("patch", "update", "delete"):
            assert not can(verb, f"clusterrolebindings.rbac.authorization.k8s.io/{other}"), (verb, other)
    assert not can("update", "clusterrolebindings.rbac.authorization.k8s.io/billing-console-admin")


def test_the_console_roles_are_shipped_as_the_console_defines_them() -> None:
    shipped = {d["metadata"]["name"]: d["rules"] for d in render(MANIFESTS / "overlays" / "default")
               if d["kind"] == "ClusterRole" and d["metadata"]["name"].startswith("billing-console-")}
    assert shipped == {r["metadata"]["name"]: r["rules"] for r in rbac.cluster_roles()}


def test_billing_run_flags_build_the_settings() -> None:
    args = build_parser().parse_args([
        "billing", "run", "--kubeconfig", "/k", "--namespace", "a", "--namespace", "b", "--leader-elect",
        "--metrics-bind-address", "0", "--max-concurrent-reconciles", "3", "--gpu-flavor", "h200",
        "--dependency-recheck-seconds", "5"])
    settings = settings_from_args(args)
    assert settings.kubeconfig == "/k" and settings.namespaces == ("a", "b") and settings.leader_elect
    assert settings.metrics_bind_address == "0" and settings.max_concurrent_reconciles == 3
    assert settings.gpu_flavor == "h200" and settings.dependency_recheck_seconds == 5


def test_billing_run_console_flags() -> None:
    args = build_parser().parse_args([
        "billing", "run", "--console-gateway-name", "gw", "--console-gateway-namespace", "edge",
        "--console-metrics-url", "http://m:8080/metrics", "--console-maas-api-url", "http://api:8080",
        "--leader-election-namespace", "billing-system"])
    settings = settings_from_args(args)
    assert (settings.console_gateway_name, settings.console_gateway_namespace) == ("gw", "edge")
    assert settings.console_metrics_url == "http://m:8080/metrics"
    assert settings.console_maas_api_url == "http://api:8080"
    assert settings.console_namespace == "billing-system"  # the operator's own namespace
