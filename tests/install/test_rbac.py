"""Least privilege: the rendered roles grant exactly the documented table (no wildcard, no extra verb), and the
ServiceAccounts, as the API server sees them, can do what they need and nothing they must not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api.install import install_crds
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.tls import default_tls
from tests.install.manifests import (
    DEFAULT_CONTROLLER_NS,
    DEFAULT_SUBSCRIPTION_NS,
    MANIFESTS,
    OVERLAYS,
    apply_docs,
    kubectl,
    render,
    service_account_api,
)

MAAS = "maas.opendatahub.io"
BILLING = "billing.opendatahub.io"
MAAS_KINDS = ("maasmodelrefs", "externalmodels", "maasauthpolicies", "maassubscriptions")
GUARDRAILS_KINDS = ("guardrailssettings", "guardrailconfigs")
INFERENCE = "inference.opendatahub.io"
INFERENCE_KINDS = ("externalmodels", "externalproviders")
READ = frozenset({"get", "list", "watch"})
RBAC = "rbac.authorization.k8s.io"
CONSOLE_ROLES = "billing-console-admin,billing-console-operator,billing-console-viewer"
BILLING_KINDS = ("pricebooks", "plans", "tenantaccounts", "budgetpolicies", "reservations", "billingconnectors",
                 "billingconsoles")
GENERATED = READ | {"create", "patch", "delete"}

# The documented allow-list (docs/install.md, "Permissions"): (role kind, role name) -> {(group, resource): verbs}.
EXPECTED: dict[tuple[str, str], dict[tuple[str, str], frozenset[str]]] = {
    ("ClusterRole", "maas-controller"): {
        **{(MAAS, r): READ | {"patch"} for r in (*MAAS_KINDS, *GUARDRAILS_KINDS)},
        (MAAS, "externalmodels"): GENERATED,  # those generated from the reference's inference.opendatahub.io ones
        **{(MAAS, f"{r}/status"): frozenset({"patch"}) for r in (*MAAS_KINDS, *GUARDRAILS_KINDS)},
        (MAAS, "maasmodelrefs/finalizers"): frozenset({"update"}),
        **{(INFERENCE, r): READ for r in INFERENCE_KINDS},
        **{(INFERENCE, f"{r}/status"): frozenset({"patch"}) for r in INFERENCE_KINDS},
        (INFERENCE, "externalmodels/finalizers"): frozenset({"update"}),
        ("gateway.networking.k8s.io", "httproutes"): GENERATED,
        ("", "services"): GENERATED,
        ("kuadrant.io", "authpolicies"): GENERATED,
        ("kuadrant.io", "tokenratelimitpolicies"): GENERATED,
        ("llm-d.ai", "inferenceobjectives"): GENERATED,
        ("networking.istio.io", "envoyfilters"): GENERATED,
        ("gateway.envoyproxy.io", "envoyextensionpolicies"): GENERATED,
        ("gateway.networking.k8s.io", "gateways"): READ,
        ("gateway.networking.k8s.io", "gateways/status"): frozenset({"patch"}),
        ("serving.kserve.io", "llminferenceservices"): READ,
        ("inference.networking.k8s.io", "inferencepools"): READ,
        ("batch", "jobs"): READ,
        ("", "secrets"): frozenset({"get", "list", "watch", "patch"}),  # list/watch: labelled keys, values dropped
        ("events.k8s.io", "events"): frozenset({"create", "patch"}),
    },
    ("Role", "maas-controller"): {
        ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update", "watch"}),
        ("batch", "jobs"): frozenset({"create", "delete"}),
    },
    # The guardrails engine, in the subscription namespace only.
    ("Role", "maas-controller-guardrails"): {("", "configmaps"): GENERATED, ("apps", "deployments"): GENERATED},
    ("ClusterRole", "maas-api"): {
        ("authentication.k8s.io", "tokenreviews"): frozenset({"create"}),
        ("authorization.k8s.io", "subjectaccessreviews"): frozenset({"create"}),
        **{(MAAS, r): READ for r in MAAS_KINDS},
        # the Plan limits and tenant state of a subscription's organization (contract/billing_terms.py)
        **{(BILLING, r): READ for r in ("plans", "tenantaccounts")},
    },
    # The organization-admin mapping (docs/organizations.md), in the subscription namespace only.
    ("Role", "maas-api-organizations"): {("", "configmaps"): READ},
    # The billing operator (manifests/base/billing); tests/billing run it as this ServiceAccount.
    ("ClusterRole", "billing-controller"): {
        **{(BILLING, r): READ
           for r in ("pricebooks", "plans", "tenantaccounts", "budgetpolicies", "reservations", "billingconsoles")},
        **{(BILLING, f"{r}/status"): frozenset({"patch"})
           for r in ("pricebooks", "plans", "tenantaccounts", "budgetpolicies", "reservations", "billingconsoles")},
        ("", "nodes"): READ,
        **{("kuadrant.io", r): GENERATED for r in ("authpolicies", "ratelimitpolicies", "tokenratelimitpolicies")},
        ("kueue.x-k8s.io", "clusterqueues"): GENERATED,
        ("kueue.x-k8s.io", "resourceflavors"): READ | {"create", "patch"},
        ("kueue.x-k8s.io", "workloads"): READ,
        ("gateway.networking.k8s.io", "gateways"): READ,
        ("gateway.networking.k8s.io", "httproutes"): READ,
        ("", "secrets"): frozenset({"get"}),  # the cost Secrets PriceBooks name, by name only
        ("events.k8s.io", "events"): frozenset({"create", "patch"}),
        # spec.auth.roles: bindings of the billing console's three ClusterRoles, and of no other role
        (RBAC, "clusterrolebindings"): READ | {"create"},
        (RBAC, f"clusterrolebindings[{CONSOLE_ROLES}]"): frozenset({"patch", "delete"}),
        (RBAC, f"clusterroles[{CONSOLE_ROLES}]"): frozenset({"bind"}),
        # the tenant portal's read API: who is asking, and may they read that ledger (asks only)
        ("authentication.k8s.io", "tokenreviews"): frozenset({"create"}),
        ("authorization.k8s.io", "subjectaccessreviews"): frozenset({"create"}),
    },
    # The tenant portal's members: the subscription namespace's MaaSSubscriptions, read only.
    ("Role", "billing-controller-subscriptions"): {(MAAS, "maassubscriptions"): READ},
    # What the billing console's users do as themselves (console/billing/rbac.py), bound by the billing operator.
    # `tenantaccounts/ledger`: a tenant's ledger through the billing operator's portal API (SubjectAccessReview).
    ("ClusterRole", "billing-console-viewer"): {
        **{(BILLING, r): READ for r in BILLING_KINDS}, (BILLING, "tenantaccounts/ledger"): frozenset({"get"}),
        ("events.k8s.io", "events"): frozenset({"get", "list"})},
    ("ClusterRole", "billing-console-operator"): {
        **{(BILLING, r): READ for r in BILLING_KINDS}, (BILLING, "tenantaccounts"): READ | {"patch"},
        (BILLING, "tenantaccounts/ledger"): frozenset({"get"}),
        ("events.k8s.io", "events"): frozenset({"get", "list", "create"})},
    ("ClusterRole", "billing-console-admin"): {
        **{(BILLING, r): READ for r in BILLING_KINDS}, (BILLING, "tenantaccounts/ledger"): frozenset({"get"}),
        **{(BILLING, r): READ | {"create", "update", "patch", "delete"}
           for r in ("pricebooks", "plans", "tenantaccounts", "budgetpolicies")},
        ("events.k8s.io", "events"): frozenset({"get", "list", "create"}),
        # a credit to a wallet through the portal API; the walkthroughs read the published models and subscriptions
        (BILLING, "tenantaccounts/credits"): frozenset({"create"}),
        (MAAS, "maasmodelrefs"): frozenset({"get", "list"}), (MAAS, "maassubscriptions"): frozenset({"get", "list"})},
    # Its Lease, and the billing console it deploys (BillingConsole), in its own namespace only.
    ("Role", "billing-controller"): {
        ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update", "watch"}),
        ("apps", "deployments"): GENERATED,
        ("", "services"): GENERATED,
        ("route.openshift.io", "routes"): GENERATED,
        ("route.openshift.io", "routes/custom-host"): frozenset({"create"}),
        ("gateway.networking.k8s.io", "httproutes"): frozenset({"create", "patch", "delete"}),
    },
    # The payload processor (manifests/base/payload-processor): what the data plane watches, read-only.
    ("ClusterRole", "maas-payload-processor"): {
        ("gateway.networking.k8s.io", "httproutes"): READ,
        ("", "services"): READ,
        ("", "secrets"): READ,
        **{("kuadrant.io", r): READ for r in ("authpolicies", "tokenratelimitpolicies", "ratelimitpolicies")},
    },
    # The psp-connector (manifests/base/psp-connector); tests/billing/connector run it as this ServiceAccount.
    # Secrets by name only (no list/watch); no Lease (no leader election).
    ("ClusterRole", "psp-connector"): {
        **{(BILLING, r): READ for r in ("billingconnectors", "tenantaccounts", "plans", "pricebooks")},
        **{(BILLING, f"{r}/status"): frozenset({"patch"}) for r in ("billingconnectors", "tenantaccounts")},
        ("", "secrets"): frozenset({"get"}),
        ("networking.k8s.io", "ingresses"): frozenset({"create", "patch", "delete"}),
        ("", "services"): frozenset({"create", "patch", "delete"}),  # the webhook Service outside its namespace
        ("events.k8s.io", "events"): frozenset({"create", "patch"}),
    },
    # The console's administrators (manifests/base/console, generated from console/rbac.py): what the admin pages
    # do as the signed-in user. The console's own ServiceAccount has only system:auth-delegator.
    ("ClusterRole", "maas-console-admin"): {
        **{(MAAS, r): frozenset({"get", "list", "create", "update", "patch", "delete"})
           for r in (*MAAS_KINDS, *GUARDRAILS_KINDS)},
        ("", "secrets"): frozenset({"get", "list", "create", "patch", "delete"}),
        ("", "namespaces"): frozenset({"get", "list"}),
        ("serving.kserve.io", "llminferenceservices"): frozenset({"get", "list"}),
        **{(BILLING, r): frozenset({"get", "list"}) for r in ("plans", "tenantaccounts")},  # a sub's billing terms
    },
}
ALLOWED_VERBS = frozenset({"get", "list", "watch", "create", "patch", "update", "delete", "bind"})


def grants(role: dict[str, Any]) -> dict[tuple[str, str], frozenset[str]]:
    """(group, resource) -> verbs; a rule limited to names is keyed `resource[name,name]`."""
    out: dict[tuple[str, str], frozenset[str]] = {}
    for rule in role["rules"]:
        assert not rule.get("nonResourceURLs")
        names = ",".join(sorted(rule.get("resourceNames") or ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = (group, f"{resource}[{names}]" if names else resource)
                out[key] = out.get(key, frozenset()) | frozenset(rule["verbs"])
    return out


def roles(overlay: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in render(overlay) if d["kind"] in ("ClusterRole", "Role")}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_roles_have_no_wildcard_and_no_verb_beyond_the_allow_list(overlay: Any) -> None:
    found = roles(overlay)
    assert set(found) == set(EXPECTED)
    for key, role in found.items():
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{key}: wildcard in {field}"
            assert set(rule["verbs"]) <= ALLOWED_VERBS, key
        assert grants(role) == EXPECTED[key], key


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_bindings_grant_each_role_to_its_own_service_account_only(overlay: Any) -> None:
    docs = render(overlay)
    expected = {"maas-controller": "maas-controller", "maas-controller-guardrails": "maas-controller",
                "maas-api": "maas-api", "maas-api-organizations": "maas-api",
                "billing-controller": "billing-controller", "psp-connector": "psp-connector",
                "billing-controller-subscriptions": "billing-controller",
                "maas-payload-processor": "maas-payload-processor", "system:auth-delegator": "maas-console"}
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == 12
    # The one binding to people: the console administrators' ClusterRole, to the install-config's group.
    (admins,) = [b for b in bindings if b["roleRef"]["name"] == "maas-console-admin"]
    assert admins["kind"] == "ClusterRoleBinding" and [s["kind"] for s in admins["subjects"]] == ["Group"]
    for b in bindings:
        if b is admins:
            continue
        assert [s["kind"] for s in b["subjects"]] == ["ServiceAccount"]
        assert b["subjects"][0]["name"] == expected[b["roleRef"]["name"]]
        assert b["roleRef"]["kind"] == ("ClusterRole" if b["kind"] == "ClusterRoleBinding" else "Role")


def test_only_generated_kinds_are_writable_by_the_controller() -> None:
    table = grants(roles(MANIFESTS / "overlays" / "default")[("ClusterRole", "maas-controller")])
    writable = {res for (_, res), verbs in table.items() if verbs & {"create", "delete", "update"}}
    assert writable == {"httproutes", "services", "authpolicies", "tokenratelimitpolicies", "inferenceobjectives",
                        "envoyfilters", "envoyextensionpolicies", "events", "maasmodelrefs/finalizers",
                        "externalmodels", "externalmodels/finalizers"}
    assert not table[(INFERENCE, "externalmodels")] & {"create", "patch", "update", "delete"}  # read, never write
    assert not table[(INFERENCE, "externalproviders")] & {"create", "patch", "update", "delete"}


# -- as the API server sees it ------------------------------------------------------------------------------


def can_i(cp: ControlPlane, sa: str, *question: str) -> bool:
    out = kubectl("auth", "can-i", *question, f"--as=system:serviceaccount:{DEFAULT_CONTROLLER_NS}:{sa}",
                  kubeconfig=cp.kubeconfig, check=False)
    return out.stdout.strip() == "yes"


@pytest.fixture
async def installed_rbac(control_plane: ControlPlane) -> AsyncIterator[ControlPlane]:
    """The default overlay's RBAC, and the MaaS CRDs it grants on (this test may run before any other that
    installs them)."""
    admin = await connect(str(control_plane.kubeconfig))
    try:
        await install_crds(admin, subscription_namespace=DEFAULT_SUBSCRIPTION_NS)
    finally:
        await admin.close()
    docs = [d for d in render(MANIFESTS / "overlays" / "default")
            if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                             "RoleBinding")]
    await apply_docs(control_plane, docs)
    yield control_plane


async def test_maas_api_reviews_tokens_and_reads_maas_resources_but_writes_nothing(
    installed_rbac: ControlPlane,
) -> None:
    cp = installed_rbac
    api = await service_account_api(cp, DEFAULT_CONTROLLER_NS, "maas-api",
                                    ready_checks=[("create", "tokenreviews.authentication.k8s.io")])
    try:
        alice = cp.users["alice"]
        review = await k8s.AuthenticationV1Api(api).create_token_review(
            k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=alice.token)))
        assert review.status.authenticated and review.status.user.username == "alice"
        sar = await k8s.AuthorizationV1Api(api).create_subject_access_review(k8s.V1SubjectAccessReview(
            spec=k8s.V1SubjectAccessReviewSpec(user="alice", groups=list(alice.groups), resource_attributes=
                                               k8s.V1ResourceAttributes(group=MAAS, resource="maasauthpolicies",
                                                                        verb="create",
                                                                        namespace=DEFAULT_SUBSCRIPTION_NS))))
        assert sar.status.allowed is False
        custom = k8s.CustomObjectsApi(api)
        for plural in MAAS_KINDS:
            for _ in range(60):  # a CRD just installed answers 429 while its storage initialises
                try:
                    await custom.list_cluster_custom_object(MAAS, "v1alpha1", plural)
                    break
                except k8s.ApiException as exc:
                    if exc.status != 429:
                        raise
                    await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"{plural} still initialising")
        with pytest.raises(k8s.ApiException) as denied:
            await custom.create_namespaced_custom_object(
                MAAS, "v1alpha1", DEFAULT_SUBSCRIPTION_NS, "maassubscriptions",
                {"apiVersion": f"{MAAS}/v1alpha1", "kind": "MaaSSubscription", "metadata": {"name": "x"},
                 "spec": {"owner": {"groups": [{"name": "g"}]}, "modelRefs": []}})
        assert denied.value.status == 403
        with pytest.raises(k8s.ApiException) as no_secrets:
            await k8s.CoreV1Api(api).list_namespaced_secret(DEFAULT_CONTROLLER_NS)
        assert no_secrets.value.status == 403
    finally:
        await api.close()
    for verb in ("create", "update", "patch", "delete", "deletecollection"):
        for plural in MAAS_KINDS:
            assert not can_i(cp, "maas-api", verb, f"{plural}.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS), (verb, plural)
    assert not can_i(cp, "maas-api", "get", "secrets", "-A")
    # the organization-admin mapping: read ConfigMaps of the subscription namespace, nothing else
    for verb in ("get", "list", "watch"):
        assert can_i(cp, "maas-api", verb, "configmaps", "-n", DEFAULT_SUBSCRIPTION_NS), verb
    assert not can_i(cp, "maas-api", "list", "configmaps", "-A")
    assert not can_i(cp, "maas-api", "get", "configmaps", "-n", DEFAULT_CONTROLLER_NS)
    for verb in ("create", "update", "patch", "delete"):
        assert not can_i(cp, "maas-api", verb, "configmaps", "-n", DEFAULT_SUBSCRIPTION_NS), verb


async def test_controller_service_account_is_bounded(installed_rbac: ControlPlane) -> None:
    cp = installed_rbac

    def ctrl(*question: str) -> bool:
        return can_i(cp, "maas-controller", *question)

    assert ctrl("patch", "httproutes.gateway.networking.k8s.io", "-n", "some-model-ns")
    assert ctrl("create", "jobs.batch", "-n", DEFAULT_CONTROLLER_NS)
    assert not ctrl("create", "jobs.batch", "-n", "some-model-ns")
    assert not ctrl("create", "leases.coordination.k8s.io", "-n", "some-model-ns")
    assert ctrl("get", "secrets", "-n", "some-model-ns") and ctrl("patch", "secrets", "-n", "some-model-ns")
    for verb in ("create", "update", "delete"):
        assert not ctrl(verb, "secrets", "-n", "some-model-ns"), verb
    for plural in MAAS_KINDS:
        if plural != "externalmodels":  # the generated ones (from inference.opendatahub.io) are created and deleted
            assert not ctrl("delete", f"{plural}.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS), plural
        assert not ctrl("update", f"{plural}.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS), plural
    assert ctrl("create", f"externalmodels.{MAAS}", "-n", "some-model-ns")
    for plural in INFERENCE_KINDS:  # the reference's kinds: read and status only
        assert ctrl("watch", f"{plural}.{INFERENCE}", "-n", "some-model-ns")
        assert ctrl("patch", f"{plural}.{INFERENCE}", "--subresource=status", "-n", "some-model-ns")
        for verb in ("create", "update", "patch", "delete"):
            assert not ctrl(verb, f"{plural}.{INFERENCE}", "-n", "some-model-ns"), (verb, plural)
    assert not ctrl("create", f"maasauthpolicies.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS)  # no maas-api admin
    assert not ctrl("create", f"maasauthpolicies.{MAAS}", "-n", "some-model-ns")
    for verb in ("get", "list", "create", "delete"):  # the cleanup Job's identity has no Kubernetes power at all
        assert not can_i(cp, "maas-key-cleanup", verb, "pods", "-n", DEFAULT_CONTROLLER_NS), verb
        assert not can_i(cp, "maas-key-cleanup", verb, f"maassubscriptions.{MAAS}", "-n",
                         DEFAULT_SUBSCRIPTION_NS), verb
    assert not ctrl("create", f"maassubscriptions.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS)
    assert not ctrl("create", "pods", "-n", DEFAULT_CONTROLLER_NS)
    assert not ctrl("create", "clusterroles.rbac.authorization.k8s.io")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_the_cleanup_jobs_identity_has_no_rbac_and_the_controller_is_no_maas_api_admin(overlay: Any) -> None:
    """The key cleanup Job runs as its own ServiceAccount with no Kubernetes permission at all (maas-api's
    allow-list is its only power), and nothing grants the controller maas-api's admin check."""
    docs = render(overlay)
    assert any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "maas-key-cleanup" for d in docs)
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert all(s["name"] != "maas-key-cleanup" for s in b["subjects"])
    for key, role in roles(overlay).items():
        # (maas-console-admin is for people: MaaS administrators are maas-api admins by design)
        if key[1] not in ("maas-api", "maas-console-admin"):
            assert (MAAS, "maasauthpolicies") not in grants(role) or "create" not in grants(role)[
                (MAAS, "maasauthpolicies")], key


def test_the_processor_reads_exactly_what_the_data_plane_watches() -> None:
    """The processor runs the data plane's GatewayState: its role is that watch list, read-only."""
    from maasctl.gateway.state import WATCHED

    plurals = {"HTTPRoute": "httproutes", "AuthPolicy": "authpolicies", "Service": "services", "Secret": "secrets",
               "TokenRateLimitPolicy": "tokenratelimitpolicies", "RateLimitPolicy": "ratelimitpolicies"}
    table = grants(roles(MANIFESTS / "overlays" / "default")[("ClusterRole", "maas-payload-processor")])
    assert table == {(g.group, plurals[g.kind]): READ for g in WATCHED}


async def test_processor_service_account_reads_and_writes_nothing(installed_rbac: ControlPlane) -> None:
    cp = installed_rbac

    def proc(*question: str) -> bool:
        return can_i(cp, "maas-payload-processor", *question)

    for resource in ("httproutes.gateway.networking.k8s.io", "authpolicies.kuadrant.io", "services",
                     "tokenratelimitpolicies.kuadrant.io", "ratelimitpolicies.kuadrant.io", "secrets"):
        assert proc("watch", resource, "-A"), resource
        for verb in ("create", "patch", "update", "delete"):
            assert not proc(verb, resource, "-n", "some-model-ns"), (verb, resource)
    for question in (("create", "tokenreviews.authentication.k8s.io"),
                     ("create", "subjectaccessreviews.authorization.k8s.io"),
                     ("get", "configmaps", "-n", DEFAULT_CONTROLLER_NS),
                     ("list", f"maassubscriptions.{MAAS}", "-A"),
                     ("create", "pods", "-n", DEFAULT_CONTROLLER_NS),
                     ("patch", "envoyfilters.networking.istio.io", "-n", "openshift-ingress")):
        assert not proc(*question), question


async def test_billing_controller_reads_kueue_workloads_and_never_writes_them(installed_rbac: ControlPlane) -> None:
    """GPU metering (docs/billing.md): the Workloads' admission and conditions are Kueue's, read only."""
    cp = installed_rbac
    for verb in ("get", "list", "watch"):
        assert can_i(cp, "billing-controller", verb, "workloads.kueue.x-k8s.io", "-A"), verb
    for verb in ("create", "update", "patch", "delete"):
        assert not can_i(cp, "billing-controller", verb, "workloads.kueue.x-k8s.io", "-A"), verb
        assert not can_i(cp, "billing-controller", verb, "workloads.kueue.x-k8s.io", "--subresource=status",
                         "-A"), verb
    assert not can_i(cp, "billing-controller", "update", "workloads.kueue.x-k8s.io", "--subresource=finalizers",
                     "-A")
    assert not can_i(cp, "billing-controller", "delete", "resourceflavors.kueue.x-k8s.io")


async def test_console_reviews_tokens_and_nothing_else_and_its_administrators_only_what_the_pages_do(
    installed_rbac: ControlPlane, tmp_path: Any,
) -> None:
    """The console process, as its ServiceAccount with exactly the manifests' RBAC: a user's token sign-in
    works (TokenReview); the ServiceAccount can do nothing else. Its administrators (the install-config's
    group) may do what the admin pages do and no more."""
    import socket

    import httpx

    from maasctl.localstack import maasctl_argv
    from maasctl.testenv.controlplane import ManagedProcess

    cp = installed_rbac
    api = await service_account_api(cp, DEFAULT_CONTROLLER_NS, "maas-console",
                                    ready_checks=[("create", "tokenreviews.authentication.k8s.io")])
    await api.close()
    kubeconfig = cp.root / f"sa-{DEFAULT_CONTROLLER_NS}-maas-console.kubeconfig"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = ManagedProcess("console", maasctl_argv("console", f"--port={port}", f"--kubeconfig={kubeconfig}",
                                                  "--maas-api-url=http://127.0.0.1:1"), tmp_path / "console.log")
    proc.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", verify=default_tls()) as client:
            for _ in range(300):
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.alive(), proc.log_tail()
                await asyncio.sleep(0.1)
            page = await client.get("/signin")
            csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
            refused = await client.post("/signin", data={"token": "not-a-token", "csrf_token": csrf})
            assert refused.status_code == 401 and "did not accept" in refused.text  # reviewed, not a failure
            signed_in = await client.post("/signin", data={"token": cp.users["alice"].token, "csrf_token": csrf})
            assert signed_in.status_code == 303, signed_in.text
            assert (await client.get("/")).headers["location"] == "/my/subscriptions"  # signed in as alice
        assert "console_token_review_failed" not in proc.log_path.read_text()
    finally:
        proc.stop()

    def console(*question: str) -> bool:
        return can_i(cp, "maas-console", *question)

    assert console("create", "tokenreviews.authentication.k8s.io")
    for question in (("get", "secrets", "-A"), ("list", "secrets", "-n", DEFAULT_CONTROLLER_NS),
                     ("list", f"maassubscriptions.{MAAS}", "-A"), ("create", f"maasmodelrefs.{MAAS}", "-n", "llm"),
                     ("get", "configmaps", "-n", DEFAULT_CONTROLLER_NS), ("impersonate", "users"),
                     ("create", "pods", "-n", DEFAULT_CONTROLLER_NS), ("impersonate", "groups"),
                     ("list", "namespaces")):
        assert not console(*question), question

    def admin(*question: str) -> bool:
        out = kubectl("auth", "can-i", *question, "--as=someone", "--as-group=maas-admins",
                      "--as-group=system:authenticated", kubeconfig=cp.kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    for verb in ("get", "list", "create", "update", "patch", "delete"):
        assert admin(verb, f"maassubscriptions.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS), verb
        assert admin(verb, f"guardrailconfigs.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS), verb
    assert admin("create", "secrets", "-n", "llm") and admin("list", "llminferenceservices.serving.kserve.io", "-A")
    for question in (("watch", f"maassubscriptions.{MAAS}", "-A"), ("update", "secrets", "-n", "llm"),
                     ("create", "namespaces"), ("create", "pods", "-n", "llm"),
                     ("create", "clusterrolebindings.rbac.authorization.k8s.io"), ("impersonate", "users"),
                     ("update", f"maassubscriptions.{MAAS}", "-n", DEFAULT_SUBSCRIPTION_NS, "--subresource=status")):
        assert not admin(*question), question
