"""Every overlay (and the API bundle) applies to a real API server: server-side dry run first, then for real.

There is no kubelet, so the Deployments get no Pods: the tests assert the objects the API server stored.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from maasctl.testenv import ControlPlane
from tests.install.manifests import FIELD_MANAGER, MANIFESTS, OVERLAYS, kubectl, render, render_text


def apply(cp: ControlPlane, docs: list[dict[str, Any]], *extra: str) -> str:
    return kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", *extra,
                   "-f", "-", kubeconfig=cp.kubeconfig, stdin=yaml.safe_dump_all(docs)).stdout


def live(cp: ControlPlane, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    args = ["get", kind, name, "-o", "yaml", "--ignore-not-found"]
    if namespace:
        args += ["-n", namespace]
    out = kubectl(*args, kubeconfig=cp.kubeconfig).stdout
    return yaml.safe_load(out) if out.strip() else None


def test_api_bundle_applies(control_plane: ControlPlane) -> None:
    text = render_text(MANIFESTS)
    dry = kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
                  "--dry-run=server", "-f", "-", kubeconfig=control_plane.kubeconfig, stdin=text).stdout
    assert "(server dry run)" in dry
    kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
            kubeconfig=control_plane.kubeconfig, stdin=text)
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(MANIFESTS / "crds"),
            kubeconfig=control_plane.kubeconfig)
    assert live(control_plane, "validatingadmissionpolicy", "maas-subscription-namespace") is not None


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_applies_with_dry_run_then_for_real(control_plane: ControlPlane, overlay: Any) -> None:
    cp = control_plane
    docs = render(overlay)
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    ctrl_ns = next(d["metadata"]["name"] for d in namespaces
                   if d["metadata"]["labels"]["maas.opendatahub.io/namespace-role"] == "controller")
    # A dry run cannot create namespaces, so namespaced objects are checked once their namespaces exist.
    assert "(server dry run)" in apply(cp, namespaces, "--dry-run=server")
    apply(cp, namespaces)
    out = apply(cp, docs, "--dry-run=server")
    assert out.count("(server dry run)") == len(docs)
    try:
        assert live(cp, "deployment", "maas-controller", ctrl_ns) is None, "dry run must not create anything"

        apply(cp, docs)
        for d in docs:
            obj = live(cp, d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
            assert obj is not None, (d["kind"], d["metadata"]["name"])
            assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "maasctl"
        deployment = live(cp, "deployment", "maas-controller", ctrl_ns)
        assert deployment is not None
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "maas-controller"
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        # Applying the same manifests again changes nothing.
        before = deployment["metadata"]["resourceVersion"]
        apply(cp, docs)
        after = live(cp, "deployment", "maas-controller", ctrl_ns)
        assert after is not None and after["metadata"]["resourceVersion"] == before
    finally:
        # Leave the cluster-wide RBAC to the next user (the reconciler fixtures re-apply theirs).
        objects = [d for d in docs if d["kind"] != "Namespace"]
        kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", kubeconfig=cp.kubeconfig,
                stdin=yaml.safe_dump_all(objects))
