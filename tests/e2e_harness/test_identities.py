"""Who the journeys' tokens belong to, asked of a real API server (TokenReview), for token-file users and for
the ServiceAccounts of hack/e2e-cluster.sh; wrong set-ups are named before any journey runs."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.identities import IdentityError, StaticTokens, TokenCommand, parse_group_map, resolve_identities
from kubernetes_asyncio import client as k8s

from maasctl.runtime import Client
from maasctl.testenv import ControlPlane
from tests.install.manifests import kubectl_argv

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def tokens_of(cp: ControlPlane, **override: str) -> StaticTokens:
    return StaticTokens({**{u.name: u.token for u in cp.users.values()}, **override})


async def test_token_file_users_are_themselves(control_plane: ControlPlane, kube: k8s.ApiClient) -> None:
    ids = await resolve_identities(Client(kube), tokens_of(control_plane), {})
    assert ids.usernames(["alice", "bob", "carol", "*"]) == ["alice", "bob", "carol", "*"]
    assert ids.groups(["premium-users", "system:authenticated"]) == ["premium-users", "system:authenticated"]
    assert ids.token("alice") == control_plane.users["alice"].token
    assert control_plane.users["alice"].token not in repr(ids)
    with pytest.raises(IdentityError, match="not one of the journeys' users"):
        ids.token("mallory")


async def test_wrong_set_ups_are_named_without_tokens(control_plane: ControlPlane, kube: k8s.ApiClient) -> None:
    client = Client(kube)
    with pytest.raises(IdentityError) as err:
        await resolve_identities(client, tokens_of(control_plane), {"premium-users": "gold"})
    assert "alice (alice) must be in premium-users (cluster group gold)" in str(err.value)

    bogus = "not-a-valid-token"
    alice = control_plane.users["alice"].token
    with pytest.raises(IdentityError) as err:
        await resolve_identities(client, tokens_of(control_plane, carol=bogus, bob=alice), {})
    text = str(err.value)
    assert "the token of carol" in text and "does not accept it" in text
    assert "bob (alice) must be in free-users" in text and "must not be in premium-users" in text
    assert "must belong to different people" in text
    assert bogus not in text and alice not in text


@pytest.fixture
def e2e_cluster_script(control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """hack/e2e-cluster.sh against the session control plane; its namespaces are removed afterwards."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    monkeypatch.setenv("KUBECTL", " ".join(kubectl_argv()))
    script = REPO / "hack" / "e2e-cluster.sh"
    yield script
    subprocess.run(["bash", str(script), "delete"], capture_output=True, check=True, timeout=120)


def evaluated(printed: str, *names: str) -> list[str]:
    """The values of `names` after bash evaluates the `export` lines of `hack/e2e-cluster.sh env`."""
    values = "".join(f'"${n}" ' for n in names)
    out = subprocess.run(["bash", "-c", f"{printed}\nprintf '%s\\0' {values}"], text=True, capture_output=True,
                         check=True, env=os.environ).stdout
    return out.split("\0")[:-1]


def run(script: Path, *args: str) -> str:
    proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{args}: {proc.stderr}"
    return proc.stdout


async def test_serviceaccounts_stand_in_for_people(e2e_cluster_script: Path, kube: k8s.ApiClient) -> None:
    script = e2e_cluster_script
    run(script, "users")
    run(script, "users")  # idempotent
    printed = run(script, "env")
    assert "E2E_MODEL_URL" not in printed  # no test models deployed yet
    command, group_map = evaluated(printed, "E2E_TOKEN_COMMAND", "E2E_GROUPS")
    groups = parse_group_map(group_map)
    hook = TokenCommand.parse(command)
    ids = await resolve_identities(Client(kube), hook, groups)
    assert ids.username("alice") == "system:serviceaccount:maas-e2e-premium-users:alice"
    assert ids.group("free-users") == "system:serviceaccounts:maas-e2e-free-users"
    assert run(script, "token", "carol").count(".") == 2  # a JWT


async def test_an_administrator_token_file(e2e_cluster_script: Path, kube: k8s.ApiClient, namespace: str,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = e2e_cluster_script
    run(script, "admin", namespace)  # namespace: the subscription namespace
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    [path] = evaluated(run(script, "env"), "E2E_ADMIN_TOKEN_FILE")
    token_file = Path(path)
    assert token_file.parent == tmp_path and token_file.stat().st_mode & 0o077 == 0
    review = await Client(kube).create({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                        "spec": {"token": token_file.read_text().strip()}})
    assert review["status"]["user"]["username"] == "system:serviceaccount:maas-e2e-users:e2e-admin"
    access = await Client(kube).create({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": review["status"]["user"]["username"], "groups": review["status"]["user"]["groups"],
                 "resourceAttributes": {"group": "maas.opendatahub.io", "resource": "maasauthpolicies",
                                        "verb": "create", "namespace": namespace}}})
    assert access["status"]["allowed"] is True  # maas-api's administrator check


async def test_test_models_are_deployed_with_a_generated_upstream_key(e2e_cluster_script: Path,
                                                                      kube: k8s.ApiClient) -> None:
    script = e2e_cluster_script
    run(script, "models")  # a cluster without nodes: applied, no rollout to wait for
    apps = k8s.AppsV1Api(kube)
    names = {d.metadata.name for d in (await apps.list_namespaced_deployment("maas-e2e-models")).items}
    assert names == {"e2e-provider", "e2e-incluster"}
    printed = run(script, "env")
    assert "E2E_MODEL_URL=http://e2e-provider.maas-e2e-models.svc.cluster.local:8000" in printed
    secret = await k8s.CoreV1Api(kube).read_namespaced_secret("e2e-upstream-key", "maas-e2e-models")
    key = base64.b64decode(secret.data["api-key"]).decode()
    assert len(key) == 48 and key not in printed  # the key is read when the line is evaluated, never printed
    assert evaluated(printed, "E2E_UPSTREAM_KEY") == [key]
    run(script, "models")  # idempotent: the key is kept
    again = await k8s.CoreV1Api(kube).read_namespaced_secret("e2e-upstream-key", "maas-e2e-models")
    assert again.data == secret.data
