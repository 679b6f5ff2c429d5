"""The Kubernetes API as the console uses it: plain HTTPS calls with the signed-in user's bearer token (so
RBAC and admission apply exactly as for kubectl), plus TokenReview with the console's own credential.

Errors keep what the API server said (`Status.message`, `details.causes[].field`) so forms can show each
message next to the field it is about.
"""

from __future__ import annotations

import json as jsonlib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

MAAS = "maas.opendatahub.io/v1alpha1"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class Resource:
    """A resource type: API path prefix and plural."""

    api_version: str
    plural: str
    kind: str

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        return base


MODEL_REF = Resource(MAAS, "maasmodelrefs", "MaaSModelRef")
EXTERNAL_MODEL = Resource(MAAS, "externalmodels", "ExternalModel")
SUBSCRIPTION = Resource(MAAS, "maassubscriptions", "MaaSSubscription")
AUTH_POLICY = Resource(MAAS, "maasauthpolicies", "MaaSAuthPolicy")
GUARDRAILS_SETTINGS = Resource(MAAS, "guardrailssettings", "GuardrailsSettings")
GUARDRAIL_CONFIG = Resource(MAAS, "guardrailconfigs", "GuardrailConfig")
SECRET = Resource("v1", "secrets", "Secret")
NAMESPACE = Resource("v1", "namespaces", "Namespace")
LLM_SERVICE = Resource("serving.kserve.io/v1alpha2", "llminferenceservices", "LLMInferenceService")
LLM_SERVICE_V1ALPHA1 = Resource("serving.kserve.io/v1alpha1", "llminferenceservices", "LLMInferenceService")
TENANT_ACCOUNT = Resource("billing.opendatahub.io/v1alpha1", "tenantaccounts", "TenantAccount")
PLAN = Resource("billing.opendatahub.io/v1alpha1", "plans", "Plan")
LLM_SERVICES = (LLM_SERVICE, LLM_SERVICE_V1ALPHA1)  # whichever version the cluster serves, v1alpha2 first


@dataclass
class KubeError(Exception):
    """A refused or failed API call, in the API server's words."""

    status: int
    reason: str
    message: str
    causes: list[tuple[str, str]] = field(default_factory=list)  # (field path, message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ClusterAccess:
    """Where the API server is and how the console itself authenticates to it."""

    server: str
    verify: ssl.SSLContext | bool
    own_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    own_token_file: str | None = None  # in a pod: the projected token, re-read as the kubelet rotates it


async def cluster_access(kubeconfig: str | None) -> ClusterAccess:
    """Read a kubeconfig (or the in-cluster service account) into what plain HTTPS calls need."""
    cfg = k8s.Configuration()
    token_file = None
    if kubeconfig:
        await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        token_file = SERVICE_ACCOUNT_TOKEN
    verify: ssl.SSLContext | bool = True
    if cfg.ssl_ca_cert:
        verify = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    elif not cfg.verify_ssl:
        verify = False
    if cfg.cert_file and cfg.key_file and isinstance(verify, ssl.SSLContext):
        # httpx takes the client certificate through the SSL context.
        verify.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers: dict[str, str] = {}
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if auth:
        prefix = (cfg.api_key_prefix or {}).get("authorization", "")
        headers["Authorization"] = f"{prefix} {auth}".strip() if prefix else str(auth)
    return ClusterAccess(server=str(cfg.host).rstrip("/"), verify=verify, own_headers=headers,
                         own_token_file=token_file)


def _error(resp: httpx.Response) -> KubeError:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    details = body.get("details") or {}
    causes = [(str(c.get("field") or ""), str(c.get("message") or "")) for c in details.get("causes") or []]
    message = str(body.get("message") or resp.reason_phrase or f"HTTP {resp.status_code}")
    return KubeError(resp.status_code, str(body.get("reason") or ""), message, causes)


class Kube:
    """One HTTP connection pool to the API server, shared by the console's own calls and users' calls."""

    def __init__(self, access: ClusterAccess, timeout: float = 15.0) -> None:
        self.access = access
        self._user_http = httpx.AsyncClient(base_url=access.server, verify=self._user_verify(access),
                                            timeout=timeout)
        self._own_http = httpx.AsyncClient(base_url=access.server, verify=access.verify, timeout=timeout,
                                           headers=dict(access.own_headers))

    @staticmethod
    def _user_verify(access: ClusterAccess) -> ssl.SSLContext | bool:
        """Users' calls carry only their bearer token, never the console's client certificate."""
        if isinstance(access.verify, ssl.SSLContext):
            ctx = ssl.create_default_context()
            ctx.load_verify_locations(cadata=_ca_pem(access.verify))
            return ctx
        return access.verify

    async def close(self) -> None:
        await self._user_http.aclose()
        await self._own_http.aclose()

    async def token_review(self, token: str) -> tuple[str, tuple[str, ...]] | None:
        """The user behind a bearer token (a Kubernetes token or an OIDC ID token the API server trusts)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        headers = None
        if self.access.own_token_file:
            own = Path(self.access.own_token_file).read_text().strip()
            headers = {"Authorization": f"Bearer {own}"}
        resp = await self._own_http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=body, headers=headers)
        if resp.status_code >= 300:
            raise _error(resp)
        status = resp.json().get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None
        return str(user["username"]), tuple(str(g) for g in user.get("groups") or ())

    def as_user(self, token: str) -> UserKube:
        return UserKube(self._user_http, token)


def _ca_pem(context: ssl.SSLContext) -> str:
    certs = context.get_ca_certs(binary_form=True)
    return "".join(ssl.DER_cert_to_PEM_cert(c) for c in certs)


class UserKube:
    """API calls made as one user (their bearer token)."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self._http = http
        self._headers = {"Authorization": f"Bearer {token}"}

    async def _send(self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None,
                    content_type: str | None = None, accept: str | None = None) -> Any:
        headers = dict(self._headers)
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        kwargs: dict[str, Any] = {"headers": headers, "params": params}
        if json is not None:
            headers.setdefault("Content-Type", "application/json")
            kwargs["content"] = jsonlib.dumps(json).encode()
        try:
            resp = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise KubeError(503, "ServiceUnavailable", "the Kubernetes API cannot be reached") from exc
        if resp.status_code >= 300:
            raise _error(resp)
        return resp.json()

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = await self._send("GET", res.path(namespace, name))
        return out

    async def find(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return await self.get(res, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, res: Resource, namespace: str | None = None, *, labels: str | None = None,
                   metadata_only: bool = False) -> list[dict[str, Any]]:
        """Items of a list; `metadata_only` asks for PartialObjectMetadata (no Secret data ever read)."""
        params = {"labelSelector": labels} if labels else None
        accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" if metadata_only else None
        body = await self._send("GET", res.path(namespace), params=params, accept=accept)
        items: list[dict[str, Any]] = list(body.get("items") or [])
        return items

    async def create(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        ns = (obj.get("metadata") or {}).get("namespace")
        out: dict[str, Any] = await self._send("POST", res.path(ns), json=dict(obj),
                                               params={"fieldManager": "maas-console"})
        return out

    async def merge_patch(self, res: Resource, name: str, namespace: str | None,
                          patch: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = await self._send(
            "PATCH", res.path(namespace, name), json=dict(patch), content_type="application/merge-patch+json",
            params={"fieldManager": "maas-console"})
        return out

    async def replace(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        out: dict[str, Any] = await self._send("PUT", res.path(meta.get("namespace"), meta.get("name")),
                                               json=dict(obj), params={"fieldManager": "maas-console"})
        return out

    async def apply(self, res: Resource, obj: Mapping[str, Any], field_manager: str, *,
                    dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply of exactly the fields in `obj`, owned by `field_manager` (forced: the form is what the
        user decided); fields other managers own and `obj` does not name stay as they are."""
        meta = obj.get("metadata") or {}
        params = {"fieldManager": field_manager, "force": "true", **({"dryRun": "All"} if dry_run else {})}
        out: dict[str, Any] = await self._send("PATCH", res.path(meta.get("namespace"), meta.get("name")),
                                               json=dict(obj), content_type="application/apply-patch+yaml",
                                               params=params)
        return out

    async def delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        await self._send("DELETE", res.path(namespace, name))

    async def can_i(self, verb: str, res: Resource, namespace: str | None = None) -> bool:
        """SelfSubjectAccessReview: whether this user may `verb` the resource (for showing or hiding actions)."""
        group = res.api_version.rpartition("/")[0]
        attrs: dict[str, str] = {"verb": verb, "group": group, "resource": res.plural}
        if namespace:
            attrs["namespace"] = namespace
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        out = await self._send("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=body)
        return bool((out.get("status") or {}).get("allowed"))


def names(items: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(str((i.get("metadata") or {}).get("name", "")) for i in items)
