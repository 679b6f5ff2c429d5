"""Start `maasctl console` next to a LocalStack (used by `maasctl dev` and the tests): the console's
ServiceAccount and a kubeconfig with its token, the administrators' RBAC, then the process itself."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes_asyncio import client as k8s

from maasctl.console import rbac
from maasctl.localstack import LocalStack
from maasctl.runtime import Client


@dataclass(frozen=True, kw_only=True)
class OidcFlags:
    issuer: str
    client_id: str
    client_secret_file: Path
    ca_file: Path


async def console_kubeconfig(stack: LocalStack, path: Path) -> Path:
    """A kubeconfig holding a token of the console's ServiceAccount (it can only review tokens)."""
    ns = stack.settings.leader_election_namespace
    client = Client(stack.api)
    for obj in rbac.console_identity(ns):
        await client.apply(obj, field_manager="maasctl-console-setup")
    request = await k8s.CoreV1Api(stack.api).create_namespaced_service_account_token(
        rbac.CONSOLE_SA, ns, k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=86400)))
    cp = stack.control_plane
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cp.server, "certificate-authority-data": ca}}],
        "users": [{"name": rbac.CONSOLE_SA, "user": {"token": request.status.token}}],
        "contexts": [{"name": "console", "context": {"cluster": "local", "user": rbac.CONSOLE_SA}}],
        "current-context": "console",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


async def start_console(stack: LocalStack, port: int, *, admin_groups: tuple[str, ...] = rbac.DEFAULT_ADMIN_GROUPS,
                        rbac_groups: tuple[str, ...] | None = None, oidc: OidcFlags | None = None,
                        model_namespace: str = "llm", redis_url: str | None = None, name: str = "console",
                        public_url: str | None = None, extra_args: tuple[str, ...] = ()) -> str:
    """Spawn a console process (as `stack.processes[name]`); return its URL once it answers.
    `rbac_groups` (default: the admin groups) are bound to the administrators' ClusterRole. Consoles of one
    stack share the session secret, so those given the same `redis_url` are replicas serving one session.
    `extra_args` go to `maasctl console` as they are (e.g. the billing pages' flags)."""
    client = Client(stack.api)
    for obj in rbac.admin_access(admin_groups if rbac_groups is None else rbac_groups):
        await client.apply(obj, field_manager="maasctl-console-setup")
    kubeconfig = await console_kubeconfig(stack, stack.directory / "console.kubeconfig")
    secret = stack.directory / "console-session.key"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(32))
        secret.chmod(0o600)
    url = f"http://127.0.0.1:{port}"
    args = ["console", f"--port={port}", f"--public-url={public_url or url}", f"--kubeconfig={kubeconfig}",
            f"--maas-api-url={stack.api_url}", f"--gateway-url={stack.gateway_url}",
            f"--subscription-namespace={stack.settings.subscription_namespace}",
            f"--default-gateway={stack.settings.gateway_namespace}/{stack.settings.gateway_name}",
            f"--model-namespace={model_namespace}", f"--session-secret-file={secret}", "--log-format=json",
            *(f"--admin-group={g}" for g in admin_groups), *extra_args]
    if oidc is not None:
        args += [f"--oidc-issuer-url={oidc.issuer}", f"--oidc-client-id={oidc.client_id}",
                 f"--oidc-client-secret-file={oidc.client_secret_file}", f"--oidc-ca-file={oidc.ca_file}"]
    env = {"MAASCTL_CONSOLE_REDIS_URL": redis_url} if redis_url else None  # may hold a password: not in argv
    stack._spawn(name, *args, env=env)
    await stack._wait_http(f"{url}/readyz", name)
    return url
