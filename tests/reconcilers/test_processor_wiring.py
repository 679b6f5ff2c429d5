"""Each managed Gateway gets the payload-processor wiring of the proxy API the cluster serves, and a
`PayloadProcessorWired` condition saying which (or that there is none), against the real API server with the
controller running as its ServiceAccount (the RBAC of manifests/)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.builders.envoyfilter import FILTER_NAMES
from maasctl.reconcilers.processorwiring import processor_owns_credentials
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testenv.crds import (
    PROXY_API_GROUPS,
    apply_documents,
    third_party_crds,
    wait_established,
)
from tests.reconcilers.conftest import (
    GATEWAY_NAME,
    GATEWAY_NS,
    SETTINGS,
    eventually,
    own_maas_cluster,
    start_controller,
)

GW_API = ("gateway.networking.k8s.io", "v1")
ISTIO = ("networking.istio.io", "v1alpha3", "envoyfilters")
ENVOY_GATEWAY = ("gateway.envoyproxy.io", "v1alpha1", "envoyextensionpolicies")
WIRING = f"maas-payload-processor-{GATEWAY_NAME}"


async def get(custom: k8s.CustomObjectsApi, api: tuple[str, str, str], ns: str, name: str) -> dict[str, Any] | None:
    try:
        group, version, plural = api
        return await custom.get_namespaced_custom_object(group, version, ns, plural, name)  # type: ignore[no-any-return]
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


async def wired(custom: k8s.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    gw = await get(custom, (*GW_API, "gateways"), ns, name)
    for cond in ((gw or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == "PayloadProcessorWired":
            return dict(cond)
    return None


def gateway(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"gatewayClassName": "maasctl-local",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}


def bypass_route(ns: str, rules: int) -> dict[str, Any]:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "maas-api", "namespace": ns},
            "spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"}}],
                                "backendRefs": [{"name": "maas-api", "port": 8080}]} for i in range(rules)]}}


async def test_istio_wiring_follows_the_gateway_its_bypass_route_and_drift(
    maas_cluster: ControlPlane, kube: k8s.ApiClient, namespace: str
) -> None:
    """Both APIs served (the session control plane installs every shared CRD): Istio's is used, the other is
    not written; bypass rules follow the maas-api route; an edit is undone; deleting the Gateway removes it."""
    custom = k8s.CustomObjectsApi(kube)
    name = "tenant-gw"
    settings = dataclasses.replace(SETTINGS, tenant_gateways=(f"{namespace}/{name}",),
                                   payload_processor_bypass_routes=(f"{namespace}/maas-api",))
    await custom.create_namespaced_custom_object(*GW_API, namespace, "gateways", gateway(namespace, name))
    await custom.create_namespaced_custom_object(*GW_API, namespace, "httproutes", bypass_route(namespace, 2))
    running = await start_controller(maas_cluster, settings)
    ef_name = f"maas-payload-processor-{name}"
    try:
        async def route_patches(n: int) -> dict[str, Any] | None:
            ef = await get(custom, ISTIO, namespace, ef_name)
            routes = [p for p in (ef or {}).get("spec", {}).get("configPatches", ()) if p["applyTo"] == "HTTP_ROUTE"]
            return ef if len(routes) == n else None

        ef = await eventually(lambda: route_patches(2))
        assert [p["patch"]["value"]["name"] for p in ef["spec"]["configPatches"] if p["applyTo"] == "HTTP_FILTER"
                ] == [FILTER_NAMES["pre"], FILTER_NAMES["post"]] * 2
        cond = await eventually(lambda: wired(custom, namespace, name))
        assert (cond["status"], cond["reason"]) == ("True", "IstioEnvoyFilter")
        assert ef_name in cond["message"] and "opendatahub/maas-payload-processor:9004" in cond["message"]
        assert await get(custom, ENVOY_GATEWAY, namespace, ef_name) is None

        # The maas-api route gains a rule: its new rule is bypassed too.
        await custom.patch_namespaced_custom_object(
            *GW_API, namespace, "httproutes", "maas-api", {"spec": bypass_route(namespace, 3)["spec"]},
            _content_type="application/merge-patch+json")
        await eventually(lambda: route_patches(3))

        # Someone edits the EnvoyFilter: the controller puts it back.
        await custom.patch_namespaced_custom_object(ISTIO[0], ISTIO[1], namespace, ISTIO[2], ef_name,
                                                    {"spec": {"priority": 0}},
                                                    _content_type="application/merge-patch+json")

        async def restored() -> bool:
            live = await get(custom, ISTIO, namespace, ef_name)
            return live is not None and live["spec"]["priority"] == 10

        await eventually(restored)

        # The Gateway goes: garbage collection takes its wiring.
        await custom.delete_namespaced_custom_object(*GW_API, namespace, "gateways", name)

        async def gone() -> bool:
            return await get(custom, ISTIO, namespace, ef_name) is None

        await eventually(gone, timeout=60)
    finally:
        await running.stop()


async def test_wiring_turned_off_removes_it_and_says_so(
    maas_cluster: ControlPlane, kube: k8s.ApiClient, namespace: str
) -> None:
    custom = k8s.CustomObjectsApi(kube)
    name = "off-gw"
    await custom.create_namespaced_custom_object(*GW_API, namespace, "gateways", gateway(namespace, name))
    on = dataclasses.replace(SETTINGS, tenant_gateways=(f"{namespace}/{name}",))
    running = await start_controller(maas_cluster, on)
    try:
        await eventually(lambda: get(custom, ISTIO, namespace, f"maas-payload-processor-{name}"))
    finally:
        await running.stop()
    running = await start_controller(maas_cluster, dataclasses.replace(on, payload_processor_wiring=False))
    try:
        async def disabled() -> dict[str, Any] | None:
            cond = await wired(custom, namespace, name)
            return cond if cond and cond["reason"] == "Disabled" else None

        cond = await eventually(disabled)
        assert cond["status"] == "False"
        assert await get(custom, ISTIO, namespace, f"maas-payload-processor-{name}") is None
    finally:
        await running.stop()


async def test_a_gateway_name_istio_cannot_select_is_reported_not_rendered(
    maas_cluster: ControlPlane, kube: k8s.ApiClient, namespace: str
) -> None:
    """A Gateway name longer than a label value (Istio selects the Gateway's pods by it): nothing is written and
    the condition says why."""
    custom = k8s.CustomObjectsApi(kube)
    name = "g" * 70
    await custom.create_namespaced_custom_object(*GW_API, namespace, "gateways", gateway(namespace, name))
    running = await start_controller(maas_cluster, dataclasses.replace(SETTINGS, tenant_gateways=(
        f"{namespace}/{name}",)))
    try:
        cond = await eventually(lambda: wired(custom, namespace, name))
        assert (cond["status"], cond["reason"]) == ("False", "RenderFailed")
        assert "Gateway name" in cond["message"]
        listed = await custom.list_namespaced_custom_object(ISTIO[0], ISTIO[1], namespace, ISTIO[2])
        assert listed["items"] == []
    finally:
        await running.stop()


@pytest.fixture
async def no_proxy_api_cluster() -> AsyncIterator[ControlPlane]:
    """A control plane of its own with every shared CRD but neither Istio's nor Envoy Gateway's."""
    async with own_maas_cluster(exclude_groups=PROXY_API_GROUPS) as cp:
        yield cp


def install_group(cp: ControlPlane, group: str) -> None:
    with cp.http_client() as http:
        wait_established(http, apply_documents(http, third_party_crds(groups=[group]), field_manager="test"))


async def test_the_condition_names_the_missing_apis_then_follows_what_gets_installed(
    no_proxy_api_cluster: ControlPlane,
) -> None:
    cp = no_proxy_api_cluster
    running = await start_controller(cp)
    api = await connect(str(cp.kubeconfig))
    custom = k8s.CustomObjectsApi(api)
    try:
        async def reason(expected: str) -> dict[str, Any] | None:
            cond = await wired(custom, GATEWAY_NS, GATEWAY_NAME)
            return cond if cond and cond["reason"] == expected else None

        cond = await eventually(lambda: reason("NoSupportedProxyAPI"))
        assert cond["status"] == "False"
        assert "networking.istio.io/v1alpha3" in cond["message"] and "gateway.envoyproxy.io/v1alpha1" in cond["message"]

        await asyncio.to_thread(install_group, cp, "gateway.envoyproxy.io")
        cond = await eventually(lambda: reason("EnvoyGatewayExtensionPolicy"), timeout=90)
        assert cond["status"] == "True"
        policy = await get(custom, ENVOY_GATEWAY, GATEWAY_NS, WIRING)
        assert policy is not None and [e["failOpen"] for e in policy["spec"]["extProc"]] == [False, False]

        await asyncio.to_thread(install_group, cp, "networking.istio.io")
        await eventually(lambda: reason("IstioEnvoyFilter"), timeout=90)
        assert await get(custom, ISTIO, GATEWAY_NS, WIRING) is not None

        async def policy_gone() -> bool:
            return await get(custom, ENVOY_GATEWAY, GATEWAY_NS, WIRING) is None

        await eventually(policy_gone)
    finally:
        await api.close()
        await running.stop()


class TestProcessorOwnsCredentials:
    """An ExternalModel route may leave `authorization` to the processor only while the processor is certainly
    in the path; otherwise the caller's credential could reach the provider."""

    @staticmethod
    def gw(status: str | None, generation: int = 3, observed: int = 3) -> dict[str, Any]:
        conds = [] if status is None else [{"type": "PayloadProcessorWired", "status": status,
                                            "reason": "IstioEnvoyFilter", "observedGeneration": observed}]
        return {"metadata": {"name": "g", "namespace": "n", "generation": generation}, "status": {"conditions": conds}}

    def test_wired_and_failing_closed(self) -> None:
        assert processor_owns_credentials(self.gw("True"), fail_open=False)

    @pytest.mark.parametrize(("gateway", "fail_open"), [
        pytest.param(None, False, id="no-gateway"),
        pytest.param({"metadata": {"name": "g", "namespace": "n"}}, False, id="no-status"),
        pytest.param("False", False, id="not-wired"),
        pytest.param("Unknown", False, id="unknown"),
        pytest.param("True", True, id="fail-open"),
        pytest.param("stale", False, id="condition-of-an-older-generation"),
    ])
    def test_otherwise_the_route_removes_it(self, gateway: Any, fail_open: bool) -> None:
        if gateway == "stale":
            gateway = self.gw("True", generation=4, observed=3)
        elif isinstance(gateway, str):
            gateway = self.gw(gateway)
        assert not processor_owns_credentials(gateway, fail_open=fail_open)


class TestSettings:
    """The controller's wiring flags, and their MAASCTL_* variables (what the Deployment sets)."""

    def test_defaults_wire_and_fail_closed(self) -> None:
        from maasctl.cli import build_parser, settings_from_args

        s = settings_from_args(build_parser().parse_args(["run"]))
        assert (s.payload_processor_wiring, s.payload_processor_fail_open) == (True, False)
        assert s.payload_processor_service == "opendatahub/maas-payload-processor"
        assert (s.payload_processor_port, s.payload_processor_bypass_routes) == (9004, ("opendatahub/maas-api",))

    def test_flags(self) -> None:
        from maasctl.cli import build_parser, settings_from_args

        s = settings_from_args(build_parser().parse_args([
            "run", "--no-payload-processor-wiring", "--payload-processor-fail-open",
            "--payload-processor-service", "ns/p", "--payload-processor-port", "9100",
            "--payload-processor-bypass-route", "a/r", "--payload-processor-bypass-route", "b/r"]))
        assert (s.payload_processor_wiring, s.payload_processor_fail_open) == (False, True)
        assert (s.payload_processor_service, s.payload_processor_port) == ("ns/p", 9100)
        assert s.payload_processor_bypass_routes == ("a/r", "b/r")

    def test_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from maasctl.cli import build_parser, settings_from_args

        monkeypatch.setenv("MAASCTL_PAYLOAD_PROCESSOR_BYPASS_ROUTES", "x/maas-api, y/other ,")
        monkeypatch.setenv("MAASCTL_PAYLOAD_PROCESSOR_SERVICE", "x/maas-payload-processor")
        monkeypatch.setenv("MAASCTL_PAYLOAD_PROCESSOR_WIRING", "false")
        s = settings_from_args(build_parser().parse_args(["run"]))
        assert s.payload_processor_bypass_routes == ("x/maas-api", "y/other")
        assert s.payload_processor_service == "x/maas-payload-processor"
        assert s.payload_processor_wiring is False
