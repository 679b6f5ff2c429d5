"""maas-api's route and AuthPolicy: the manifests install what the builder renders (the local stack installs
the builder's), and the gateway's route table sends the base URL's model listing to maas-api."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from maasctl.builders.maasapi import maas_api_auth_policy, maas_api_route
from maasctl.builders.refs import GatewayRef
from maasctl.gateway.routes import build_route_table

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "maas-api"
GATEWAY = GatewayRef("openshift-ingress", "maas-default-gateway")
SERVICE = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "maas-api", "namespace": "opendatahub",
                        "annotations": {"maasctl.opendatahub.io/local-url": "http://127.0.0.1:8089"}},
           "spec": {"ports": [{"name": "http", "port": 8080}]}}


def _manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((MANIFESTS / name).read_text())  # type: ignore[no-any-return]


def test_manifests_equal_the_builder() -> None:
    assert _manifest("httproute.yaml") == maas_api_route("opendatahub", GATEWAY)
    assert _manifest("authpolicy.yaml") == maas_api_auth_policy("opendatahub")


def test_local_policy_leaves_the_audiences_to_the_data_plane() -> None:
    review = maas_api_auth_policy("opendatahub", ())["spec"]["rules"]["authentication"]["kubernetes-token"]
    assert review["kubernetesTokenReview"] == {}


@pytest.mark.parametrize(("method", "path", "upstream"), [
    ("GET", "/v1/models", "/v1/models"),
    ("GET", "/maas-api/v1/models", "/v1/models"),
    ("POST", "/maas-api/v1/api-keys", "/v1/api-keys"),
    ("GET", "/maas-api/health", "/health"),
    ("POST", "/v1/models", None),
    ("GET", "/v1/models/x", None),
    ("GET", "/v1/api-keys", None),
    ("GET", "/internal/v1/usage", None),
    ("GET", "/maas-api/internal/v1/usage", None),
    ("POST", "/v1/chat/completions", None),
])
def test_route_table(method: str, path: str, upstream: str | None) -> None:
    table = build_route_table([maas_api_route("opendatahub", GATEWAY)], lambda ns, name: SERVICE,
                              (GATEWAY.name, GATEWAY.namespace))
    match = table.match("gw", path, method, {})
    assert (match.upstream_path if match else None) == upstream
    if match is not None:
        assert match.rule.forward_credentials and match.rule.model is None
