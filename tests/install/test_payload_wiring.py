"""The payload-processor wiring builders: the Istio EnvoyFilter and the Envoy Gateway EnvoyExtensionPolicy ask
Envoy for the same stages, in the order the data plane needs, fail closed by default, and pass the API server's
validation with the real Istio 1.32 and Envoy Gateway 1.9 CRDs."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.builders.envoyfilter import FILTER_NAMES, PRIORITY, WASM_FILTER, build_envoy_filter
from maasctl.builders.extensionpolicy import build_extension_policy
from maasctl.builders.payloadwiring import PROCESSING_MODES, ProcessorWiring, wiring_name
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError
from maasctl.contract.processor_stages import STAGE_METADATA_KEY, STAGE_POST, STAGE_PRE

GW = GatewayRef("openshift-ingress", "maas-default-gateway")
PROCESSOR = ObjectRef("opendatahub", "maas-payload-processor")


def wiring(**kw: Any) -> ProcessorWiring:
    base: dict[str, Any] = {"gateway": GW, "gateway_uid": "0f0e-uid", "processor": PROCESSOR,
                            "bypass_routes": ((ObjectRef("opendatahub", "maas-api"), 2),)}
    return ProcessorWiring(**(base | kw))


def inserts(ef: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in ef["spec"]["configPatches"] if p["applyTo"] == "HTTP_FILTER"]


def anchor(patch: dict[str, Any]) -> str:
    return str(patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"])


class TestEnvoyFilterOrder:
    """pre before Kuadrant's wasm filter (routing sees the body's model), post after it (auth done), for both
    names Kuadrant's filter has, applied after Kuadrant's own EnvoyFilter."""

    def test_each_anchor_gets_pre_before_and_post_after(self) -> None:
        ef = build_envoy_filter(wiring())
        got = {(anchor(p), p["patch"]["value"]["name"], p["patch"]["operation"]) for p in inserts(ef)}
        plugin = "extensions.istio.io/wasmplugin/openshift-ingress.kuadrant-maas-default-gateway"
        assert got == {(a, FILTER_NAMES[stage], op) for a in (plugin, WASM_FILTER)
                       for stage, op in ((STAGE_PRE, "INSERT_BEFORE"), (STAGE_POST, "INSERT_AFTER"))}

    def test_priority_above_kuadrant_and_only_the_gateways_pods(self) -> None:
        ef = build_envoy_filter(wiring())
        assert ef["spec"]["priority"] == PRIORITY > 0
        assert ef["spec"]["workloadSelector"] == {"labels": {"gateway.networking.k8s.io/gateway-name": GW.name}}
        assert all(p["match"]["context"] == "GATEWAY" for p in ef["spec"]["configPatches"])

    @pytest.mark.parametrize("gateway", [GatewayRef("gw-a", "tenant-one"), GatewayRef("openshift-ingress", "x")])
    def test_anchor_names_the_gateways_own_wasm_plugin(self, gateway: GatewayRef) -> None:
        ef = build_envoy_filter(wiring(gateway=gateway))
        assert {anchor(p) for p in inserts(ef)} == {
            f"extensions.istio.io/wasmplugin/{gateway.namespace}.kuadrant-{gateway.name}", WASM_FILTER}
        assert ef["metadata"]["namespace"] == gateway.namespace
        assert ef["metadata"]["name"] == wiring_name(gateway)


class TestStagesReachTheProcessor:
    """Both filters call the one processor Service and say which stage they are."""

    def test_stage_metadata_and_cluster(self) -> None:
        for p in inserts(build_envoy_filter(wiring(port=9100))):
            value = p["patch"]["value"]
            stage = STAGE_PRE if value["name"] == FILTER_NAMES[STAGE_PRE] else STAGE_POST
            grpc = value["typed_config"]["grpc_service"]
            assert grpc["initial_metadata"] == [{"key": STAGE_METADATA_KEY, "value": stage}]
            assert grpc["envoy_grpc"]["cluster_name"] == \
                "outbound|9100||maas-payload-processor.opendatahub.svc.cluster.local"
            assert value["typed_config"]["processing_mode"] == PROCESSING_MODES[stage]

    def test_pre_never_sees_the_response_post_streams_it(self) -> None:
        assert PROCESSING_MODES[STAGE_PRE]["response_header_mode"] == "SKIP"
        assert PROCESSING_MODES[STAGE_PRE]["response_body_mode"] == "NONE"
        assert PROCESSING_MODES[STAGE_POST]["response_body_mode"] == "STREAMED"
        for stage in (STAGE_PRE, STAGE_POST):
            assert PROCESSING_MODES[stage]["request_body_mode"] == "BUFFERED"  # an unread body is never forwarded

    def test_extension_policy_runs_the_same_stages_in_order(self) -> None:
        policy = build_extension_policy(wiring(port=9100))
        pre, post = policy["spec"]["extProc"]
        assert policy["spec"]["targetRefs"] == [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GW.name}]
        for entry in (pre, post):
            assert entry["backendRefs"] == [{"group": "", "kind": "Service", "name": PROCESSOR.name,
                                             "namespace": PROCESSOR.namespace, "port": 9100}]
            assert entry["processingMode"]["request"] == {"body": "Buffered"}
        assert "response" not in pre["processingMode"]  # how the processor tells pre from post on Envoy Gateway
        assert post["processingMode"]["response"] == {"body": "Streamed"}


class TestFailureMode:
    """Metering fails closed unless the operator chose otherwise, in every filter of both wirings."""

    @pytest.mark.parametrize("fail_open", [False, True])
    def test_rendered_from_the_setting(self, fail_open: bool) -> None:
        w = wiring(fail_open=fail_open)
        assert [p["patch"]["value"]["typed_config"]["failure_mode_allow"]
                for p in inserts(build_envoy_filter(w))] == [fail_open] * 4
        assert [e["failOpen"] for e in build_extension_policy(w)["spec"]["extProc"]] == [fail_open] * 2

    def test_default_is_closed(self) -> None:
        assert ProcessorWiring(GW, "uid", PROCESSOR).fail_open is False


class TestBypassRoutes:
    """maas-api's rules skip both filters; nothing else does."""

    @pytest.mark.parametrize("rules", [1, 2, 5])
    def test_every_rule_disabled_for_both_filters(self, rules: int) -> None:
        ef = build_envoy_filter(wiring(bypass_routes=((ObjectRef("opendatahub", "maas-api"), rules),)))
        routes = [p for p in ef["spec"]["configPatches"] if p["applyTo"] == "HTTP_ROUTE"]
        assert [p["match"]["routeConfiguration"]["vhost"]["route"]["name"] for p in routes] == [
            f"opendatahub.maas-api.{i}" for i in range(rules)]
        for p in routes:
            per_filter = p["patch"]["value"]["typed_per_filter_config"]
            assert set(per_filter) == set(FILTER_NAMES.values())
            assert all(v["disabled"] is True for v in per_filter.values())

    def test_no_bypass_no_route_patch(self) -> None:
        ef = build_envoy_filter(wiring(bypass_routes=()))
        assert all(p["applyTo"] == "HTTP_FILTER" for p in ef["spec"]["configPatches"])


class TestOwnership:
    def test_owned_by_the_gateway_without_blocking_its_deletion(self) -> None:
        for obj in (build_envoy_filter(wiring()), build_extension_policy(wiring())):
            (owner,) = obj["metadata"]["ownerReferences"]
            assert owner == {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "name": GW.name,
                             "uid": "0f0e-uid"}
            assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "maas-controller"


class TestInvalidInput:
    @pytest.mark.parametrize("kw", [
        {"gateway": GatewayRef("openshift-ingress", "g" * 64)},
        {"gateway": GatewayRef("Bad_NS", "gw")},
        {"processor": ObjectRef("opendatahub", "Processor")},
        {"processor": ObjectRef("", "maas-payload-processor")},
        {"port": 0},
        {"port": 70000},
        {"gateway_uid": ""},
        {"bypass_routes": ((ObjectRef("opendatahub", "bad route"), 1),)},
    ], ids=["gateway-name", "gateway-ns", "service-name", "service-ns", "port-0", "port-high", "no-uid", "route"])
    def test_refused_before_rendering(self, kw: dict[str, Any]) -> None:
        for build in (build_envoy_filter, build_extension_policy):
            with pytest.raises(InvalidInputError):
                build(wiring(**kw))


# -- the real API server ----------------------------------------------------------------------------------------

PLURALS = {"EnvoyFilter": ("networking.istio.io", "v1alpha3", "envoyfilters"),
           "EnvoyExtensionPolicy": ("gateway.envoyproxy.io", "v1alpha1", "envoyextensionpolicies")}


def pruned(sent: Any, stored: Any, path: str = "spec") -> list[str]:
    """Paths of `sent` the server did not store (it may add defaults, never drop what we wrote)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in sent.items() for p in (pruned(v, stored[k], f"{path}.{k}") if k in stored
                                                      else [f"{path}.{k}"])]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=True)) for p in pruned(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [path]


@pytest.mark.parametrize("fail_open", [False, True])
async def test_rendered_wiring_passes_the_api_servers_validation(
    kube: k8s.ApiClient, namespace: str, fail_open: bool
) -> None:
    custom = k8s.CustomObjectsApi(kube)
    gw = GatewayRef(namespace, "maas-default-gateway")
    w = wiring(gateway=gw, fail_open=fail_open)
    for obj in (build_envoy_filter(w), build_extension_policy(w)):
        group, version, plural = PLURALS[obj["kind"]]
        obj["metadata"].pop("ownerReferences")  # no such Gateway here: GC would remove the object at once
        created = await custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
        missing = pruned(obj["spec"], created["spec"])
        assert not missing, f"{obj['kind']}: the schema dropped {missing}"  # every field we write is known
