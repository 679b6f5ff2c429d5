"""The billing console the BillingConsole resource deploys (docs/billing-console.md), pure: what to apply and
what the status says, from the resource, the cluster's facts (is the Route API served, the live Deployment and
route, the auth Secret's keys) and the operator's settings.

- **Objects**, in the console namespace (the billing operator's), named `billing-console`, owned by the
  BillingConsole (garbage-collected with it): a Deployment running `maasctl console` (the MaaS console with its
  billing pages: same app, same sign-in), a Service, and an OpenShift Route when `route.openshift.io/v1` is
  served, else an HTTPRoute on the operator's configured Gateway.
- **Auth**: OIDC signs in at `auth.oidc.issuerURL` with the client in `clientSecretRef` (keys `client-id`,
  `client-secret`, in the console namespace); Brokered with `existingIssuerURL` is OIDC at the broker with the
  client in the Secret `billing-console-broker` (BrokerConfig has no Secret field); Brokered `deploy: true` is
  refused (maasctl ships no identity broker: AuthConfigured False, the console still serves token sign-in);
  OpenShiftOAuth is token sign-in with OpenShift tokens (`oc whoami -t`, checked by TokenReview), on clusters
  that serve the Route API. Every mode keeps token sign-in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from maasctl.billing.api.console import SINGLETON, AuthMode, BillingConsoleSpec
from maasctl.billing.rules import names
from maasctl.contract.billing_console import (
    API_URL_FLAG,
    CONSOLE_PORT,
    ROLE_FLAGS,
    ROLES,
    TENANT_PORTAL_FLAG,
    role_binding,
)

__all__ = [
    "BROKER_SECRET",
    "COMPONENT_LABEL",
    "CONSOLE_NAME",
    "OIDC_KEYS",
    "ConsoleInput",
    "ConsoleTarget",
    "Verdict",
    "auth_verdict",
    "console_args",
    "console_objects",
    "deployed_verdict",
    "not_singleton",
    "oidc_client_secret",
    "public_url",
    "role_bindings",
    "route_verdict",
]

CONSOLE_NAME: Final = "billing-console"
SERVICE_ACCOUNT: Final = "maas-console"  # the MaaS console's: it may only create TokenReviews
BROKER_SECRET: Final = "billing-console-broker"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COMPONENT: Final = "billing-console"
OIDC_DIR: Final = "/etc/billing-console/oidc"
OIDC_KEYS: Final = ("client-id", "client-secret")
ROUTE_API_VERSION: Final = "route.openshift.io/v1"
HTTP_ROUTE_API_VERSION: Final = "gateway.networking.k8s.io/v1"
_SELECTOR: Final = {"app.kubernetes.io/name": CONSOLE_NAME}


@dataclass(frozen=True)
class Verdict:
    """One condition: status True/False, reason, message."""

    status: str
    reason: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "True"


@dataclass(frozen=True)
class ConsoleTarget:
    """Where and how the operator deploys the console (its settings)."""

    namespace: str
    gateway_namespace: str
    gateway_name: str
    metrics_url: str | None = None  # the billing operator's /metrics: the console's metering health page
    maas_api_url: str | None = None
    api_url: str | None = None  # the billing operator's tenant portal API (contract.billing_portal)


@dataclass(frozen=True)
class ConsoleInput:
    name: str
    uid: str
    spec: BillingConsoleSpec
    route_api: bool  # route.openshift.io/v1 is served
    url: str | None = None  # the console's public URL when known (public_url)


def _labels() -> dict[str, str]:
    return {**_SELECTOR, names.MANAGED_BY_LABEL: names.MANAGED_BY, COMPONENT_LABEL: COMPONENT,
            "app.kubernetes.io/part-of": "maasctl"}


def _meta(inp: ConsoleInput, target: ConsoleTarget | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": CONSOLE_NAME, "labels": _labels()}
    if target is not None:
        meta["namespace"] = target.namespace
    if inp.uid:
        meta["ownerReferences"] = [{"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "BillingConsole",
                                    "name": inp.name, "uid": inp.uid, "controller": True}]
    return meta


def _host(spec: BillingConsoleSpec) -> str | None:
    return spec.route.host if spec.route is not None and spec.route.host else None


def oidc_client_secret(spec: BillingConsoleSpec) -> str | None:
    """The Secret holding the console's OIDC client (client-id, client-secret), when it signs in with OIDC."""
    auth = spec.auth
    if auth is None:
        return None
    if auth.mode is AuthMode.OIDC and auth.oidc is not None:
        return auth.oidc.client_secret_ref.name
    if auth.mode is AuthMode.BROKERED and auth.broker is not None and auth.broker.existing_issuer_url \
            and not auth.broker.deploy:
        return BROKER_SECRET
    return None


def _issuer(spec: BillingConsoleSpec) -> str | None:
    auth = spec.auth
    if auth is None or oidc_client_secret(spec) is None:
        return None
    if auth.mode is AuthMode.OIDC and auth.oidc is not None:
        return auth.oidc.issuer_url
    return auth.broker.existing_issuer_url if auth.broker is not None else None



def console_args(spec: BillingConsoleSpec, url: str | None, target: ConsoleTarget) -> list[str]:
    """`maasctl console` flags of the deployed console (the OIDC client id comes from the Secret by env)."""
    args = ["console", "--host=0.0.0.0", f"--port={CONSOLE_PORT}", "--log-format=json"]
    if url:
        args.append(f"--public-url={url}")
    if target.maas_api_url:
        args.append(f"--maas-api-url={target.maas_api_url}")
    if target.metrics_url:
        args.append(f"--billing-metrics-url={target.metrics_url}")
    issuer = _issuer(spec)
    if issuer:
        args += [f"--oidc-issuer-url={issuer}", f"--oidc-client-secret-file={OIDC_DIR}/client-secret"]
    roles = spec.auth.roles if spec.auth is not None else None
    if roles is not None:
        for role, flag in ROLE_FLAGS.items():
            args += [f"{flag}={g}" for g in getattr(roles, role) or ()]
    if target.api_url:
        args.append(f"{API_URL_FLAG}={target.api_url}")
    if spec.tenant_portal is None or spec.tenant_portal.enabled:
        args.append(TENANT_PORTAL_FLAG)
    return args


def _deployment(inp: ConsoleInput, target: ConsoleTarget) -> dict[str, Any]:
    spec = inp.spec
    secret = oidc_client_secret(spec)
    container: dict[str, Any] = {
        "name": "console",
        "image": spec.image,
        "command": ["maasctl"],
        "args": console_args(spec, inp.url, target),
        "ports": [{"name": "http", "containerPort": CONSOLE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 20},
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"cpu": "500m", "memory": "384Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    if secret is not None:
        container["env"] = [{"name": "MAASCTL_CONSOLE_OIDC_CLIENT_ID",
                             "valueFrom": {"secretKeyRef": {"name": secret, "key": "client-id"}}}]
        container["volumeMounts"].append({"name": "oidc", "mountPath": OIDC_DIR, "readOnly": True})
        volumes.append({"name": "oidc", "secret": {"secretName": secret, "items": [
            {"key": "client-secret", "path": "client-secret"}]}})
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(inp, target),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": dict(_SELECTOR)},
            "template": {
                "metadata": {"labels": _labels()},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _service(inp: ConsoleInput, target: ConsoleTarget) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(inp, target),
            "spec": {"selector": dict(_SELECTOR),
                     "ports": [{"name": "http", "port": CONSOLE_PORT, "targetPort": "http", "protocol": "TCP"}]}}


def _route(inp: ConsoleInput, target: ConsoleTarget) -> dict[str, Any]:
    spec: dict[str, Any] = {"to": {"kind": "Service", "name": CONSOLE_NAME, "weight": 100},
                            "port": {"targetPort": "http"},
                            "tls": {"termination": "edge", "insecureEdgeTerminationPolicy": "Redirect"}}
    host = _host(inp.spec)
    if host:
        spec["host"] = host
    tls = inp.spec.route.tls_secret_ref if inp.spec.route is not None else None
    if tls is not None:
        spec["tls"]["externalCertificate"] = {"name": tls.name}
    return {"apiVersion": ROUTE_API_VERSION, "kind": "Route", "metadata": _meta(inp, target), "spec": spec}


def _http_route(inp: ConsoleInput, target: ConsoleTarget) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                        "namespace": target.gateway_namespace, "name": target.gateway_name}],
        "rules": [{"backendRefs": [{"name": CONSOLE_NAME, "port": CONSOLE_PORT}]}],
    }
    host = _host(inp.spec)
    if host:
        spec["hostnames"] = [host]
    return {"apiVersion": HTTP_ROUTE_API_VERSION, "kind": "HTTPRoute", "metadata": _meta(inp, target), "spec": spec}


def role_bindings(inp: ConsoleInput) -> list[dict[str, Any]]:
    """`auth.roles` as RBAC: each role's ClusterRole (shipped with the operator) bound to its groups (none: no
    subject), so the API server lets each user do what their billing role does, as the console acts as them."""
    roles = inp.spec.auth.roles if inp.spec.auth is not None else None
    meta = {k: v for k, v in _meta(inp, None).items() if k != "name"}
    return [role_binding(role, (getattr(roles, role) or ()) if roles is not None else (), meta) for role in ROLES]


def console_objects(inp: ConsoleInput, target: ConsoleTarget) -> list[dict[str, Any]]:
    """Deployment, Service, a Route (Route API served) or an HTTPRoute on the configured Gateway, and the roles'
    ClusterRoleBindings."""
    route = _route(inp, target) if inp.route_api else _http_route(inp, target)
    return [_deployment(inp, target), _service(inp, target), route, *role_bindings(inp)]


# -- status ----------------------------------------------------------------------------------------------


def not_singleton(name: str) -> Verdict:
    return Verdict("False", "NotSingleton", f"only the BillingConsole named {SINGLETON} is acted on; {name} is "
                                            "ignored (delete it, or rename it to default)")


def public_url(spec: BillingConsoleSpec, route: Mapping[str, Any] | None) -> str | None:
    """https://<host>: the spec's host, else the host the router admitted the Route with."""
    host = _host(spec)
    if host:
        return f"https://{host}"
    if route is not None and route.get("kind") == "Route":
        for ingress in (route.get("status") or {}).get("ingress") or ():
            if ingress.get("host") and _admitted(ingress) == "True":
                return f"https://{ingress['host']}"
    return None


def _admitted(ingress: Mapping[str, Any]) -> str | None:
    for cond in ingress.get("conditions") or ():
        if cond.get("type") == "Admitted":
            return str(cond.get("status"))
    return None


def route_verdict(spec: BillingConsoleSpec, route: Mapping[str, Any] | None, route_api: bool,
                  gateway_api: bool, target: ConsoleTarget) -> Verdict:
    """RouteAdmitted: the Route's `Admitted` ingress condition, or the HTTPRoute's `Accepted` on our Gateway."""
    if not spec.enabled:
        return Verdict("False", "Disabled", "the console is disabled (spec.enabled: false)")
    if not route_api and not gateway_api:
        return Verdict("False", "NoRouteAPI", "neither route.openshift.io/v1 nor the Gateway API is served: "
                                              "the console is reachable through its Service only")
    kind = "Route" if route_api else "HTTPRoute"
    if route is None or route.get("kind") != kind:
        return Verdict("False", "Pending", f"{kind} {CONSOLE_NAME} is being created")
    if kind == "Route":
        ingresses = (route.get("status") or {}).get("ingress") or []
        for ingress in ingresses:
            if _admitted(ingress) == "True":
                return Verdict("True", "Admitted", f"Route {CONSOLE_NAME} admitted by router "
                                                   f"{ingress.get('routerName') or '(unnamed)'}")
        for ingress in ingresses:
            for cond in ingress.get("conditions") or ():
                if cond.get("type") == "Admitted" and cond.get("status") == "False":
                    return Verdict("False", "NotAdmitted", f"router {ingress.get('routerName') or '(unnamed)'}: "
                                   f"{cond.get('reason') or ''} {cond.get('message') or ''}".strip()[:1024])
        return Verdict("False", "Pending", f"no router has admitted Route {CONSOLE_NAME} yet")
    gateway = f"{target.gateway_namespace}/{target.gateway_name}"
    for parent in (route.get("status") or {}).get("parents") or ():
        ref = parent.get("parentRef") or {}
        if (ref.get("namespace") or route["metadata"].get("namespace"), ref.get("name")) != \
                (target.gateway_namespace, target.gateway_name):
            continue
        for cond in parent.get("conditions") or ():
            if cond.get("type") == "Accepted":
                if cond.get("status") == "True":
                    return Verdict("True", "Accepted", f"HTTPRoute {CONSOLE_NAME} accepted by Gateway {gateway}")
                return Verdict("False", "NotAccepted", f"Gateway {gateway}: {cond.get('reason') or ''} "
                               f"{cond.get('message') or ''}".strip()[:1024])
    return Verdict("False", "Pending", f"Gateway {gateway} has not accepted HTTPRoute {CONSOLE_NAME} yet "
                                       "(its listeners must allow routes from the console namespace)")


def deployed_verdict(spec: BillingConsoleSpec, deployment: Mapping[str, Any] | None, service: bool) -> Verdict:
    """Deployed: the Deployment has its replicas available and the Service exists."""
    if not spec.enabled:
        return Verdict("False", "Disabled", "the console is disabled (spec.enabled: false): nothing is deployed")
    if deployment is None or not service:
        return Verdict("False", "Pending", f"Deployment and Service {CONSOLE_NAME} are being created")
    status = deployment.get("status") or {}
    want = int(spec.replicas)
    available = int(status.get("availableReplicas") or 0)
    if (deployment.get("metadata") or {}).get("generation") != status.get("observedGeneration"):
        return Verdict("False", "Progressing", f"Deployment {CONSOLE_NAME} is rolling out")
    if available >= want:
        return Verdict("True", "Available", f"{available}/{want} replicas available")
    return Verdict("False", "ReplicasUnavailable", f"{available}/{want} replicas available")


def auth_verdict(spec: BillingConsoleSpec, secret_keys: Iterable[str] | None, route_api: bool) -> Verdict:
    """AuthConfigured. `secret_keys`: the keys with a non-empty value in the OIDC client Secret
    (`oidc_client_secret`), None when it does not exist (ignored for the modes without one)."""
    auth = spec.auth
    roles = auth.roles if auth is not None else None
    no_roles = roles is None or not any((roles.admin, roles.operator, roles.viewer))
    suffix = "; no group is mapped to a role (auth.roles): nobody sees the billing pages" if no_roles else ""
    if auth is None or auth.mode is None:
        return Verdict("True", "TokenSignIn", "users sign in with a Kubernetes bearer token (no auth.mode)" + suffix)
    if auth.mode is AuthMode.OPENSHIFT_OAUTH:
        if not route_api:
            return Verdict("False", "NotOpenShift", "OpenShiftOAuth needs an OpenShift cluster (route.openshift.io "
                                                    "is not served); users can still sign in with a token")
        return Verdict("True", "OpenShiftTokens", "users sign in with their OpenShift token (oc whoami -t), checked "
                                                  "by TokenReview; the OAuth redirect flow is not provided" + suffix)
    if auth.mode is AuthMode.BROKERED and auth.broker is not None and auth.broker.deploy:
        return Verdict("False", "BrokerNotProvided", "maasctl does not deploy an embedded identity broker: run one "
                                                     "(e.g. Keycloak) and set auth.broker.existingIssuerURL; "
                                                     "until then users sign in with a token")
    secret = oidc_client_secret(spec)
    if secret is None:
        return Verdict("False", "BrokerMissing", "auth.mode Brokered needs auth.broker.existingIssuerURL")
    if secret_keys is None:
        return Verdict("False", "SecretNotFound", f"Secret {secret} (the console's OIDC client: keys client-id, "
                                                  "client-secret) does not exist in the console namespace")
    missing = [k for k in OIDC_KEYS if k not in set(secret_keys)]
    if missing:
        return Verdict("False", "MissingKeys", f"Secret {secret} lacks {', '.join(missing)}")
    return Verdict("True", "OIDCConfigured", f"OIDC sign-in at {_issuer(spec)} with the client in Secret {secret}"
                   + suffix)
