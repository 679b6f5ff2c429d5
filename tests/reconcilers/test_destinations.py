"""An ExternalModel endpoint is a destination the gateway is sent to: the controller refuses the ones the
gateway's network position would lend to a namespace admin (docs/security.md) — with a status condition and a
Warning Event, never a crash — and withdraws a route it generated for one earlier."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.reconcilers.routes import UnsafeDestinationError, provider_endpoint
from tests.reconcilers.conftest import Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import create_secret, external_model, model_ref
from tests.reconcilers.test_events import events_for

NS = "team-a"
PLAIN = {"maas.opendatahub.io/tls": "false", "maas.opendatahub.io/port": "8080"}


@pytest.mark.parametrize(("endpoint", "annotations"), [
    ("http://169.254.169.254/latest", {}),
    ("http://169.254.169.254:80/latest/meta-data", {}),
    ("HTTP://169.254.169.254./v1", {}),
    ("http://user:pw@169.254.169.254/v1", {}),
    ("http://[::ffff:169.254.169.254]/v1", {}),
    ("http://[::ffff:a9fe:a9fe]:8080/v1", {}),
    ("http://[fe80::1]/v1", {}),
    ("http://[fe80::1%25eth0]:80/v1", {}),
    ("http://2130706433:8080/internal/v1", {}),
    ("http://0x7f000001/v1", {}),
    ("http://0177.0.0.1/v1", {}),
    ("http://127.1:8080/v1", {}),
    ("https://kubernetes.default.svc/api", {}),
    ("https://KUBERNETES.default.svc.cluster.local:443/api", {}),
    ("https://kubernetes/api", {}),
    ("http://granite-kserve-workload-svc.llm-team-b.svc.cluster.local:8000/v1", {}),
    ("http://x@granite.llm-team-b.svc:8000/v1", {}),
    ("maas-api.opendatahub.svc", PLAIN),
    ("maas-api.opendatahub.svc.cluster.local.", PLAIN),
    ("Maas-Api.OpenDataHub.Svc", {}),
    ("169.254.169.254", PLAIN),
    ("2130706433", PLAIN),
    ("kubernetes.default", {}),
    ("metadata.google.internal", PLAIN),
])
def test_unsafe_endpoints_are_refused(endpoint: str, annotations: dict[str, str]) -> None:
    with pytest.raises(UnsafeDestinationError, match="endpoint host"):
        provider_endpoint(endpoint, annotations, NS)


@pytest.mark.parametrize(("endpoint", "annotations", "expected"), [
    ("https://api.openai.com/v1", {}, ("api.openai.com", 443, True, "/v1")),
    ("https://API.OpenAI.com./v1", {}, ("api.openai.com", 443, True, "/v1")),
    ("api.openai.com", {}, ("api.openai.com", 443, True, "/v1")),
    ("http://localhost:15000/", {}, ("localhost", 15000, False, "/")),
    ("http://127.0.0.1:8000/v1", {}, ("127.0.0.1", 8000, False, "/v1")),
    ("http://10.0.0.1/v1", {}, ("10.0.0.1", 80, False, "/v1")),
    ("http://192.168.1.20:8000/v1", {}, ("192.168.1.20", 8000, False, "/v1")),
    ("http://granite.team-a.svc.cluster.local:8000/v1", {}, ("granite.team-a.svc.cluster.local", 8000, False, "/v1")),
    ("granite.team-a.svc", PLAIN, ("granite.team-a.svc", 8080, False, "/v1")),
])
def test_ordinary_local_private_and_own_namespace_endpoints_still_work(
    endpoint: str, annotations: dict[str, str], expected: tuple[str, int, bool, str]
) -> None:
    assert provider_endpoint(endpoint, annotations, NS) == expected


def test_without_a_namespace_only_the_other_namespace_rule_is_skipped() -> None:
    """The ExternalModel reconciler checks without a namespace; the MaaSModelRef reconciler (the route's only
    writer) passes it."""
    assert provider_endpoint("http://g.llm-team-b.svc:8000/v1", {})[0] == "g.llm-team-b.svc"
    with pytest.raises(UnsafeDestinationError):
        provider_endpoint("http://169.254.169.254/v1", {})


async def _ready(objs: Objects, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    mr = await objs.get("MaaSModelRef", ns, name)
    conds = ((mr or {}).get("status") or {}).get("conditions") or ()
    ready = next((c for c in conds if c["type"] == "Ready"), None)
    return mr if ready is not None and ready["reason"] == reason else None


def _ready_message(obj: dict[str, Any]) -> str:
    return str(next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")["message"])


async def test_another_namespaces_service_is_refused_with_a_condition_and_an_event(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await create_secret(kube, namespace, "provider-key")
    em = external_model(namespace, "sidestep")
    em["spec"]["endpoint"] = "http://granite-kserve-workload-svc.llm-team-b.svc.cluster.local:8000/v1"
    await objs.create(em)
    await objs.create(model_ref(namespace, "sidestep", "ExternalModel", "sidestep"))
    mr = await eventually(lambda: _ready(objs, namespace, "sidestep", "InvalidBackend"))
    assert mr["status"]["phase"] == "Failed"
    assert "namespace 'llm-team-b'" in _ready_message(mr)
    assert await objs.get("HTTPRoute", namespace, "maas-sidestep") is None

    async def warned() -> bool:
        return any(e.reason == "UnsafeDestination" and e.type == "Warning"
                   for e in await events_for(kube, namespace, "sidestep"))

    await eventually(warned)


async def test_a_route_generated_before_the_endpoint_turned_unsafe_is_withdrawn(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str
) -> None:
    await create_secret(kube, namespace, "provider-key")
    await objs.create(external_model(namespace, "drift"))
    await objs.create(model_ref(namespace, "drift", "ExternalModel", "drift"))
    await eventually(lambda: _ready(objs, namespace, "drift", "Ready"))
    assert await objs.get("HTTPRoute", namespace, "maas-drift") is not None

    await objs.patch("ExternalModel", namespace, "drift", {"spec": {"endpoint": "http://169.254.169.254/latest"}})
    mr = await eventually(lambda: _ready(objs, namespace, "drift", "InvalidBackend"))
    assert "link-local" in _ready_message(mr)

    async def withdrawn() -> bool:
        svc = await k8s.CoreV1Api(kube).list_namespaced_service(namespace, field_selector="metadata.name=maas-drift")
        return await objs.get("HTTPRoute", namespace, "maas-drift") is None and not svc.items

    await eventually(withdrawn)

    async def em_failed() -> dict[str, Any] | None:
        obj = await objs.get("ExternalModel", namespace, "drift")
        return obj if obj and (obj.get("status") or {}).get("phase") == "Failed" else None

    em = await eventually(em_failed)
    assert "link-local" in _ready_message(em)
