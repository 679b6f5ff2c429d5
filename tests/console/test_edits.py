"""A form's save is refused only when what the administrator saw changed (console.edits), on a real API server.

A controller writing status or a finalizer between the save's read and its write made the API server answer
409, and the console told the administrator "someone else changed this" although nobody had (CI saw it on a
loaded machine). Here the write in between is a finalizer added to a ConfigMap (like a status write, it is not
in the fingerprint); a label or an annotation changed in between must still be refused, never written over.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.console.edits import Edited, fingerprint, replace_as_seen
from maasctl.console.kube import Kube, KubeError, Resource, UserKube, cluster_access
from maasctl.testenv import ControlPlane

CONFIG_MAP = Resource("v1", "configmaps", "ConfigMap")


@pytest.fixture
async def alice(control_plane: ControlPlane, kube: k8s.ApiClient, namespace: str) -> AsyncIterator[UserKube]:
    """alice's own calls (her bearer token), allowed to edit ConfigMaps in `namespace` only."""
    rbac = k8s.RbacAuthorizationV1Api(kube)
    await rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "configmap-editor"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                   "verbs": ["get", "create", "update", "patch", "delete"]}]})
    await rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-editor"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})
    console = Kube(await cluster_access(str(control_plane.kubeconfig)))
    try:
        yield console.as_user(control_plane.users["alice"].token)
    finally:
        await console.close()


def with_colour(colour: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The form's part of the write: `data` set, everything else as in the object it is built on."""
    def build(base: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(base))
        obj["data"] = {"colour": colour}
        return obj
    return build


async def _created(alice: UserKube, namespace: str) -> dict[str, Any]:
    """The object, as the form read it (retried while alice's new RoleBinding reaches the authorizer)."""
    for _ in range(100):
        try:
            return await alice.create(CONFIG_MAP, {"metadata": {"name": "c", "namespace": namespace,
                                                                "labels": {"team": "a"}}, "data": {"colour": "red"}})
        except KubeError as exc:
            if exc.status != 403:
                raise
        await asyncio.sleep(0.1)
    raise AssertionError("alice's RoleBinding never took effect")


async def _meanwhile(alice: UserKube, namespace: str, patch: dict[str, Any]) -> None:
    await alice.merge_patch(CONFIG_MAP, "c", namespace, patch)


async def test_a_write_of_what_the_form_does_not_show_is_no_conflict(alice: UserKube, namespace: str) -> None:
    read = await _created(alice, namespace)
    await _meanwhile(alice, namespace, {"metadata": {"finalizers": ["example.com/hold"]}})
    saved = await replace_as_seen(alice, CONFIG_MAP, read, fingerprint(read), with_colour("blue"))
    assert saved["data"] == {"colour": "blue"}
    assert saved["metadata"]["finalizers"] == ["example.com/hold"]  # the write in between is kept, not undone
    assert saved["metadata"]["resourceVersion"] != read["metadata"]["resourceVersion"]
    await _meanwhile(alice, namespace, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("patch", [
    {"metadata": {"labels": {"team": "b"}}},
    {"metadata": {"labels": {"team": None}}},
    {"metadata": {"annotations": {"note": "mine"}}},
], ids=["label-changed", "label-removed", "annotation-added"])
async def test_a_change_of_what_the_form_shows_is_refused(alice: UserKube, namespace: str,
                                                          patch: dict[str, Any]) -> None:
    read = await _created(alice, namespace)
    await _meanwhile(alice, namespace, patch)
    with pytest.raises(Edited):
        await replace_as_seen(alice, CONFIG_MAP, read, fingerprint(read), with_colour("blue"))
    assert (await alice.get(CONFIG_MAP, "c", namespace))["data"] == {"colour": "red"}  # nothing written


async def test_a_form_filled_from_another_version_is_refused_before_any_write(alice: UserKube,
                                                                              namespace: str) -> None:
    read = await _created(alice, namespace)
    older = fingerprint({**read, "metadata": {**read["metadata"], "labels": {"team": "old"}}})
    with pytest.raises(Edited):
        await replace_as_seen(alice, CONFIG_MAP, read, older, with_colour("blue"))
    assert (await alice.get(CONFIG_MAP, "c", namespace))["data"] == {"colour": "red"}


async def test_a_deleted_object_is_not_recreated(alice: UserKube, namespace: str) -> None:
    read = await _created(alice, namespace)
    await alice.delete(CONFIG_MAP, "c", namespace)
    with pytest.raises((Edited, KubeError)):
        await replace_as_seen(alice, CONFIG_MAP, read, fingerprint(read), with_colour("blue"))
    assert await alice.find(CONFIG_MAP, "c", namespace) is None
