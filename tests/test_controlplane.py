"""Smoke tests proving the local control plane is a real one: GC, namespace deletion, CRD schemas, RBAC."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.testenv import ControlPlane
from maasctl.testenv.seed import third_party_seed


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.2)


async def test_version_is_the_pinned_kubernetes(kube: k8s.ApiClient) -> None:
    info = await k8s.VersionApi(kube).get_code()
    assert info.git_version == "v1.36.3"


async def test_garbage_collector_deletes_dependent(kube: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube)
    owner = await core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="owner"), data={"a": "1"})
    )
    ref = k8s.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    await core.create_namespaced_config_map(
        namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="dependent", owner_references=[ref]))
    )
    await core.delete_namespaced_config_map("owner", namespace)

    async def dependent_gone() -> bool:
        names = {cm.metadata.name for cm in (await core.list_namespaced_config_map(namespace)).items}
        return "dependent" not in names

    await eventually(dependent_gone)


async def test_namespace_deletion_completes(kube: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kube)
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="smoke-ns-delete")))
    await core.create_namespaced_config_map(
        "smoke-ns-delete", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="content"))
    )
    await core.delete_namespace("smoke-ns-delete")

    async def gone() -> bool:
        try:
            await core.read_namespace("smoke-ns-delete")
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    await eventually(gone)


def _trlp(window: str) -> dict[str, object]:
    return {
        "apiVersion": "kuadrant.io/v1alpha1",
        "kind": "TokenRateLimitPolicy",
        "metadata": {"name": f"trlp-{window.replace('.', '-')}"},
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r"},
            "limits": {"free": {"rates": [{"limit": 100, "window": window}]}},
        },
    }


async def test_third_party_crd_schema_rejects_invalid_window(kube: k8s.ApiClient, namespace: str) -> None:
    custom = k8s.CustomObjectsApi(kube)
    args = ("kuadrant.io", "v1alpha1", namespace, "tokenratelimitpolicies")
    with pytest.raises(k8s.ApiException) as err:
        await custom.create_namespaced_custom_object(*args, _trlp("1d"))
    assert err.value.status == 422
    assert "window" in err.value.body
    created = await custom.create_namespaced_custom_object(*args, _trlp("24h"))
    assert created["spec"]["limits"]["free"]["rates"][0]["window"] == "24h"


async def test_rbac_forbids_a_non_admin_until_a_role_grants_access(
    kube: k8s.ApiClient, user_api: Callable[[str], Awaitable[k8s.ApiClient]], namespace: str
) -> None:
    bob = k8s.CoreV1Api(await user_api("bob"))
    with pytest.raises(k8s.ApiException) as err:
        await bob.list_namespaced_config_map(namespace)
    assert err.value.status == 403
    assert 'User "bob"' in json.loads(err.value.body)["message"]

    rbac = k8s.RbacAuthorizationV1Api(kube)
    await rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    })
    await rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "free-users-read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "free-users"}],
    })

    async def allowed() -> bool:
        try:
            await bob.list_namespaced_config_map(namespace)
        except k8s.ApiException as exc:
            assert exc.status == 403
            return False
        return True

    await eventually(allowed, timeout=10)


async def test_token_users_carry_their_groups(kube: k8s.ApiClient, control_plane: ControlPlane) -> None:
    review = await k8s.AuthenticationV1Api(kube).create_token_review(
        k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=control_plane.users["alice"].token))
    )
    assert review.status.authenticated
    assert review.status.user.username == "alice"
    assert "premium-users" in review.status.user.groups


def test_second_control_plane_runs_side_by_side_and_leaves_no_process(control_plane: ControlPlane) -> None:
    second = ControlPlane(with_controller_manager=False)
    with second:
        assert second.apiserver_port != control_plane.apiserver_port
        with second.http_client() as http:
            assert http.get("/readyz").status_code == 200
        popens = [p.popen for p in second._procs.values()]
        root = second.root
    assert all(p is not None and p.poll() is not None for p in popens)
    assert not root.exists()
    control_plane.check_healthy()


def test_a_seeded_control_plane_serves_the_third_party_kinds_at_start_and_leaves_the_seed_unchanged() -> None:
    """Control planes start from a copy of an etcd that holds the third-party CRDs (`seed.third_party_seed`): the
    kinds are served and discoverable as soon as `start()` returns, and what one control plane writes never
    reaches the seed the next one copies."""
    seed = third_party_seed()
    files = {p: p.read_bytes() for p in seed.rglob("*") if p.is_file()}
    gateway = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "seeded"},
               "spec": {"gatewayClassName": "x", "listeners": [{"name": "h", "port": 80, "protocol": "HTTP"}]}}
    with ControlPlane(with_controller_manager=False, etcd_seed=seed) as cp, cp.http_client() as http:
        groups = {g["name"] for g in http.get("/apis").json()["groups"]}
        assert {"gateway.networking.k8s.io", "kuadrant.io", "serving.kserve.io", "kueue.x-k8s.io"} <= groups
        created = http.post("/apis/gateway.networking.k8s.io/v1/namespaces/default/gateways", json=gateway)
        assert created.status_code == 201, created.text
        bad = {**gateway, "metadata": {"name": "no-listeners"}, "spec": {"gatewayClassName": "x", "listeners": []}}
        refused = http.post("/apis/gateway.networking.k8s.io/v1/namespaces/default/gateways", json=bad)
        assert refused.status_code == 422, refused.text  # the CRD's schema is in force, not just its name
    assert {p: p.read_bytes() for p in seed.rglob("*") if p.is_file()} == files


def test_free_ports_stay_out_of_the_ephemeral_range() -> None:
    """Outgoing connections take source ports from the ephemeral range; a listening port chosen there can be
    taken between choosing it and the child binding it (a CI run failed on exactly that)."""
    import socket

    from maasctl.testenv.controlplane import _ephemeral_range, free_port

    low, high = _ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert len(ports) > 40  # chosen at random, not one fixed port
    assert not any(low <= port <= high for port in ports)
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # and it is free right now


def test_a_port_is_handed_out_once_until_its_child_had_time_to_bind_it(tmp_path: Path) -> None:
    """Choosing a port does not bind it: the processes choosing side by side (test workers, a payload
    processor's three ports in a row) must not be handed the same one (a CI run failed on that). 4 processes x
    250 ports from ~12,700 would share about 40 ports if each chose on its own."""
    script = ("import sys; from maasctl.testenv.controlplane import free_port; "
              "sys.stdout.write(' '.join(str(free_port()) for _ in range(250)))")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # a ledger of its own, not the suite's
    children = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
    ports = [int(p) for child in children for p in child.communicate(timeout=60)[0].split()]
    assert all(child.returncode == 0 for child in children)
    assert len(ports) == 1000
    assert len(set(ports)) == 1000
