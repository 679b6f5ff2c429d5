"""What the kind recipe (hack/kind-up.sh, docs/e2e.md) relies on in the repository's manifests."""

from __future__ import annotations

from typing import Any

from tests.install.manifests import MANIFESTS, find, render


def images(deployment: dict[str, Any]) -> set[str]:
    return {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}


def test_the_dev_overlay_runs_everything_with_the_image_kind_up_loads() -> None:
    docs = render(MANIFESTS / "overlays" / "dev")
    controller = find(docs, "Deployment", "maas-controller")
    assert images(controller) == images(find(docs, "Deployment", "maas-api")) == {"quay.io/opendatahub/maasctl:dev"}
    [manager] = controller["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in manager["env"]}
    assert env["MAASCTL_CLEANUP_JOB_IMAGE"] == "quay.io/opendatahub/maasctl:dev"  # cleanup Jobs pull nothing


def test_the_test_models_run_that_image_and_the_provider_demands_the_upstream_key() -> None:
    docs = render(MANIFESTS / "e2e")
    provider, incluster = find(docs, "Deployment", "e2e-provider"), find(docs, "Deployment", "e2e-incluster")
    assert images(provider) == images(incluster) == {"quay.io/opendatahub/maasctl:dev"}
    [model] = provider["spec"]["template"]["spec"]["containers"]
    assert model["args"][0] == "testmodel" and "--host=0.0.0.0" in model["args"]
    assert model["env"] == [{"name": "MAASCTL_TESTMODEL_REQUIRE_BEARER", "valueFrom": {
        "secretKeyRef": {"name": "e2e-upstream-key", "key": "api-key"}}}]
    assert "env" not in incluster["spec"]["template"]["spec"]["containers"][0]
    for name in ("e2e-provider", "e2e-incluster"):
        assert find(docs, "Service", name)["spec"]["ports"][0]["port"] == 8000  # the URLs `env` prints
