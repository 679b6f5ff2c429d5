"""Every overlay renders with `kubectl kustomize`, moves every name it configures and keeps the hardening."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.install.manifests import MANIFESTS, OVERLAYS, find, render


def overlay_config(overlay: Any) -> dict[str, str]:
    doc = yaml.safe_load((overlay / "install-config.yaml").read_text())
    return dict(doc["data"])


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_there_are_default_and_dev_overlays() -> None:
    assert {p.name for p in OVERLAYS} >= {"default", "dev"}


def test_api_bundle_lists_every_generated_file() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    generated = {f"{d}/{p.name}" for d in ("crds", "admission") for p in (MANIFESTS / d).glob("*.yaml")}
    assert set(kustomization["resources"]) == generated
    kinds = [d["kind"] for d in render(MANIFESTS)]
    assert kinds.count("CustomResourceDefinition") == len(list((MANIFESTS / "crds").glob("*.yaml")))
    assert "ValidatingAdmissionPolicy" in kinds and "ValidatingAdmissionPolicyBinding" in kinds


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_moves_every_configured_name(overlay: Any) -> None:
    cfg = overlay_config(overlay)
    ctrl_ns, sub_ns = cfg["controllerNamespace"], cfg["subscriptionNamespace"]
    docs = render(overlay)
    namespaces = {d["metadata"]["labels"]["maas.opendatahub.io/namespace-role"]: d["metadata"]["name"]
                  for d in docs if d["kind"] == "Namespace"}
    assert namespaces == {"controller": ctrl_ns, "subscriptions": sub_ns}
    assert not any(d["kind"] == "ConfigMap" and d["metadata"]["name"] == "maas-install-config" for d in docs)
    for d in docs:
        ns = d["metadata"].get("namespace")
        assert ns in (None, ctrl_ns, sub_ns), f"{d['kind']} {d['metadata']['name']} left in {ns}"
        for subject in d.get("subjects") or ():
            if subject["kind"] == "ServiceAccount":
                assert subject["namespace"] == ctrl_ns
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "maasctl"
    assert find(docs, "ServiceAccount", "maas-key-cleanup")["metadata"]["namespace"] == ctrl_ns
    manager = find(docs, "Deployment", "maas-controller")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(manager)
    assert env["MAASCTL_SUBSCRIPTION_NAMESPACE"] == sub_ns
    assert env["MAASCTL_GATEWAY_NAME"] == cfg["gatewayName"]
    assert env["MAASCTL_GATEWAY_NAMESPACE"] == cfg["gatewayNamespace"]
    assert env["MAASCTL_MAAS_API_URL"] == f"http://maas-api.{ctrl_ns}.svc.cluster.local:8080"
    assert env["MAASCTL_LEADER_ELECTION_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    api = find(docs, "Deployment", "maas-api")["spec"]["template"]["spec"]["containers"][0]
    assert env_of(api)["MAASCTL_SUBSCRIPTION_NAMESPACE"] == sub_ns
    assert env_of(api)["MAASCTL_DATABASE_URL"] == {"secretKeyRef": {"name": "maas-api-db", "key": "database-url"}}
    # maas-api holds requests to the default Gateway the controller uses (docs/tenant-gateways.md)
    assert env_of(api)["MAASCTL_GATEWAY_NAME"] == cfg["gatewayName"]
    assert env_of(api)["MAASCTL_GATEWAY_NAMESPACE"] == cfg["gatewayNamespace"]
    # the billing operator rates maas-api's usage into the ledger the psp-connector credits
    billing = env_of(find(docs, "Deployment", "billing-controller")["spec"]["template"]["spec"]["containers"][0])
    assert billing["MAASCTL_BILLING_LEDGER_URL"] == {
        "secretKeyRef": {"name": "billing-ledger", "key": "ledger-url", "optional": True}}
    assert billing["MAASCTL_BILLING_USAGE_DATABASE_URL"] == {
        "secretKeyRef": {"name": "maas-api-db", "key": "database-url", "optional": True}}
    parent = find(docs, "HTTPRoute", "maas-api")["spec"]["parentRefs"][0]
    assert (parent["name"], parent["namespace"]) == (cfg["gatewayName"], cfg["gatewayNamespace"])
    # the payload processor: the controller wires Gateways to its Service, maas-api's route bypasses it
    assert env["MAASCTL_PAYLOAD_PROCESSOR_SERVICE"] == f"{ctrl_ns}/maas-payload-processor"
    bypass = manager["args"][manager["args"].index("run") + 2:]
    assert bypass == ["--payload-processor-bypass-route", f"{ctrl_ns}/maas-api",
                      "--payload-processor-bypass-route", f"{ctrl_ns}/maas-console"]  # the console's route too
    assert "MAASCTL_PAYLOAD_PROCESSOR_BYPASS_ROUTES" not in env  # the flags win over it: one place only
    processor = env_of(find(docs, "Deployment", "maas-payload-processor")["spec"]["template"]["spec"]["containers"][0])
    assert processor["MAASCTL_GATEWAY_NAME"] == cfg["gatewayName"]
    assert processor["MAASCTL_GATEWAY_NAMESPACE"] == cfg["gatewayNamespace"]
    assert processor["MAASCTL_SUBSCRIPTION_NAMESPACE"] == sub_ns
    assert processor["MAASCTL_USAGE_URL"] == f"http://maas-api.{ctrl_ns}.svc.cluster.local:8080"
    assert processor["MAASCTL_REDIS_URL"] == {"secretKeyRef": {"name": "maas-payload-processor-redis",
                                                               "key": "redis-url"}}
    assert processor["MAASCTL_WORKERS"] == {"resourceFieldRef": {  # a worker per core of the limit, on Redis
        "containerName": "processor", "resource": "limits.cpu", "divisor": "1"}}
    policy = find(docs, "NetworkPolicy", "maas-payload-processor")["spec"]["ingress"][0]["from"]
    assert policy[0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": cfg["gatewayNamespace"]}
    assert policy[1]["podSelector"]["matchLabels"] == {
        "gateway.envoyproxy.io/owning-gateway-namespace": cfg["gatewayNamespace"]}
    # the console: maas-api, the subscription namespace, its hostname, its administrators' group
    console = env_of(find(docs, "Deployment", "maas-console")["spec"]["template"]["spec"]["containers"][0])
    assert console["MAASCTL_CONSOLE_MAAS_API_URL"] == f"http://maas-api.{ctrl_ns}.svc.cluster.local:8080"
    assert console["MAASCTL_CONSOLE_SUBSCRIPTION_NAMESPACE"] == sub_ns
    assert console["MAASCTL_CONSOLE_PUBLIC_URL"] == f"https://{cfg['consoleHostname']}"
    assert console["MAASCTL_CONSOLE_ADMIN_GROUP"] == cfg["consoleAdminGroup"]
    assert console["MAASCTL_CONSOLE_DEFAULT_GATEWAY"] == f"{cfg['gatewayNamespace']}/{cfg['gatewayName']}"
    route = find(docs, "HTTPRoute", "maas-console")["spec"]
    assert route["hostnames"] == [cfg["consoleHostname"]]
    assert (route["parentRefs"][0]["name"], route["parentRefs"][0]["namespace"]) == (
        cfg["gatewayName"], cfg["gatewayNamespace"])
    assert find(docs, "ClusterRoleBinding", "maas-console-admin")["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": cfg["consoleAdminGroup"]}]
    assert find(docs, "NetworkPolicy", "maas-console")["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cfg["gatewayNamespace"]}}}]
    grant = find(docs, "ReferenceGrant", "maas-payload-processor")["spec"]
    assert grant["from"] == [{"group": "gateway.envoyproxy.io", "kind": "EnvoyExtensionPolicy",
                              "namespace": cfg["gatewayNamespace"]}]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_payload_processor_is_reachable_only_by_the_gateway_and_monitoring(overlay: Any) -> None:
    docs = render(overlay)
    service = find(docs, "Service", "maas-payload-processor")["spec"]
    assert {p["name"]: (p["port"], p.get("appProtocol")) for p in service["ports"]} == {
        "grpc": (9004, "grpc"), "relay": (9005, "http"), "metrics": (9090, None)}
    pod = find(docs, "Deployment", "maas-payload-processor")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:2] == ["payload-processor", "--host=0.0.0.0"] and "--port=9004" in c["args"]
    assert "--relay-port=9005" in c["args"]  # the provider relay, where models with several providers go
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    ingress = find(docs, "NetworkPolicy", "maas-payload-processor")["spec"]["ingress"]
    assert [[p["port"] for p in rule["ports"]] for rule in ingress] == [[9004, 9005], [9090]]
    assert all("podSelector" in peer for peer in ingress[0]["from"])  # gateway pods, not whole namespaces
    pdb = find(docs, "PodDisruptionBudget", "maas-payload-processor")["spec"]
    hpa = find(docs, "HorizontalPodAutoscaler", "maas-payload-processor")["spec"]
    assert pdb["minAvailable"] == 1 and hpa["scaleTargetRef"]["name"] == "maas-payload-processor"
    if overlay.name == "default":
        assert find(docs, "Deployment", "maas-payload-processor")["spec"]["replicas"] == 2
        assert hpa["minReplicas"] == 2


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_deployments_are_hardened(overlay: Any) -> None:
    docs = render(overlay)
    for name in ("maas-controller", "maas-api", "billing-controller", "psp-connector", "maas-payload-processor",
                 "maas-console"):
        pod = find(docs, "Deployment", name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["serviceAccountName"] == name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["runAsNonRoot"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert set(c["resources"]["requests"]) == {"cpu", "memory"}
            assert "memory" in c["resources"]["limits"]
            assert c["livenessProbe"] and c["readinessProbe"]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_controller_runs_with_leader_election_probes_and_metrics(overlay: Any) -> None:
    docs = render(overlay)
    manager = find(docs, "Deployment", "maas-controller")["spec"]["template"]["spec"]["containers"][0]
    assert manager["command"] == ["maasctl"] and manager["args"][0] == "run"
    assert "--leader-elect" in manager["args"]
    ports = {p["name"]: p["containerPort"] for p in manager["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert manager["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert manager["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = env_of(manager)
    assert (env["MAASCTL_METRICS_BIND_ADDRESS"], env["MAASCTL_HEALTH_PROBE_BIND_ADDRESS"]) == (":8080", ":8081")
    svc = find(docs, "Service", "maas-controller-metrics")["spec"]
    assert svc["ports"][0]["targetPort"] == "metrics"
    assert svc["selector"] == {"app.kubernetes.io/name": "maas-controller"}
    api = find(docs, "Deployment", "maas-api")["spec"]["template"]["spec"]["containers"][0]
    assert api["args"][0] == "api"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_gateway_exposes_only_the_public_maas_api(overlay: Any) -> None:
    docs = render(overlay)
    route = find(docs, "HTTPRoute", "maas-api")
    prefixes = [m["path"]["value"] for r in route["spec"]["rules"] for m in r["matches"]]
    assert prefixes == ["/maas-api/v1", "/maas-api/health", "/v1/models"]  # the listing on the one base URL
    assert [m.get("method") for m in route["spec"]["rules"][2]["matches"]] == ["GET"]
    assert all(b["name"] == "maas-api" for r in route["spec"]["rules"] for b in r["backendRefs"])
    # maas-api authenticates callers itself: their credentials reach it on Envoy (no filter removes them) and
    # on the local data plane (the opt-in of a non-model route)
    assert route["metadata"]["annotations"]["maas.opendatahub.io/forward-credentials"] == "true"
    assert "maas.opendatahub.io/model" not in (route["metadata"].get("labels") or {})
    assert not [f for r in route["spec"]["rules"] for f in r.get("filters") or ()
                if f["type"] == "RequestHeaderModifier"]
    policy = find(docs, "AuthPolicy", "maas-api")
    assert policy["spec"]["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                           "name": "maas-api"}
    assert "kubernetesTokenReview" in policy["spec"]["rules"]["authentication"]["kubernetes-token"]
    assert "response" not in policy["spec"]["rules"], "maas-api trusts no identity header: inject none"


def test_examples_render_the_documented_samples() -> None:
    docs = render(MANIFESTS / "examples")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ExternalModel", "GuardrailConfig", "GuardrailsSettings", "MaaSAuthPolicy", "MaaSModelRef",
                     "MaaSSubscription", "MaaSSubscription", "Namespace", "Secret", "Secret"]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_console_runs_as_replicas_behind_the_gateway(overlay: Any) -> None:
    """Two replicas sharing their sessions in Redis (the dev overlay: one, sessions in the process), probes on
    liveness and on the session store, the session key from a Secret, and a route of its own on the MaaS
    Gateway with an AuthPolicy that lets the console authenticate users itself (the Gateway's default denies)."""
    docs = render(overlay)
    deployment = find(docs, "Deployment", "maas-console")
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["console", "--host=0.0.0.0", "--port=8095"]
    env = env_of(c)
    if overlay.name == "default":
        assert deployment["spec"]["replicas"] == 2
        assert env["MAASCTL_CONSOLE_REDIS_URL"] == {"secretKeyRef": {"name": "maas-console-redis", "key": "redis-url"}}
        assert find(docs, "PodDisruptionBudget", "maas-console")["spec"]["minAvailable"] == 1
    else:
        assert deployment["spec"]["replicas"] == 1 and "MAASCTL_CONSOLE_REDIS_URL" not in env
    secret_file = env["MAASCTL_CONSOLE_SESSION_SECRET_FILE"]
    mount = next(m for m in c["volumeMounts"] if secret_file.startswith(m["mountPath"] + "/"))
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["secret"] == {"secretName": "maas-console-session"} and mount["readOnly"] is True
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert find(docs, "Service", "maas-console")["spec"]["ports"] == [
        {"name": "http", "port": 8095, "targetPort": "http", "protocol": "TCP"}]
    route = find(docs, "HTTPRoute", "maas-console")["spec"]
    assert [r["backendRefs"] for r in route["rules"]] == [[{"name": "maas-console", "port": 8095}]]
    policy = find(docs, "AuthPolicy", "maas-console")["spec"]
    assert policy["targetRef"] == {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "maas-console"}
    assert policy["rules"] == {"authentication": {"console-sessions": {"anonymous": {}}}}


def test_console_rbac_is_what_maasctl_dev_and_the_tests_run_with() -> None:
    """manifests/base/console/rbac.yaml is generated from console/rbac.py (gen-crds --check keeps it so): the
    install grants exactly what the console's tests run with."""
    from maasctl.console import rbac

    docs = [d for d in render(MANIFESTS / "overlays" / "default")
            if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            and d["metadata"]["name"].startswith("maas-console")]
    for d in docs:
        d["metadata"].pop("labels")
    assert sorted(docs, key=lambda d: (d["kind"], d["metadata"]["name"])) == sorted(
        [*rbac.console_identity("opendatahub"), *rbac.admin_access(rbac.DEFAULT_ADMIN_GROUPS)],
        key=lambda d: (d["kind"], d["metadata"]["name"]))
