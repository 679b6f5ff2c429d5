"""RBAC the console relies on, as objects: its own ServiceAccount may review tokens (nothing else), and
members of the administrator groups get the rights the admin pages use. The console never acts with its
own rights on a user's behalf; these rules are what the signed-in user's own requests need.

Used by `maasctl dev` and the tests, and rendered into the install (`manifests/base/console/rbac.yaml`,
`maasctl gen-crds`), whose overlays move the namespace and the administrators' group.
"""

from __future__ import annotations

from typing import Any

CONSOLE_SA = "maas-console"
ADMIN_ROLE = "maas-console-admin"
DEFAULT_ADMIN_GROUPS = ("maas-admins",)
MAAS_RESOURCES = ["maasmodelrefs", "externalmodels", "maassubscriptions", "maasauthpolicies", "guardrailssettings",
                  "guardrailconfigs"]
ADMIN_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["maas.opendatahub.io"], "resources": MAAS_RESOURCES,
     "verbs": ["get", "list", "create", "update", "patch", "delete"]},  # the console never watches
    # Upstream provider and guardrail model keys: written, never read back (the console lists metadata only).
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "list", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]},
    {"apiGroups": ["serving.kserve.io"], "resources": ["llminferenceservices"], "verbs": ["get", "list"]},
    # A subscription's billing Plan limits and tenant state, shown beside its limits (read only).
    {"apiGroups": ["billing.opendatahub.io"], "resources": ["plans", "tenantaccounts"], "verbs": ["get", "list"]},
]


def console_identity(namespace: str) -> list[dict[str, Any]]:
    """The console's ServiceAccount, allowed to create TokenReviews (system:auth-delegator)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CONSOLE_SA, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{CONSOLE_SA}-auth-delegator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
         "subjects": [{"kind": "ServiceAccount", "name": CONSOLE_SA, "namespace": namespace}]},
    ]


def admin_access(groups: tuple[str, ...]) -> list[dict[str, Any]]:
    """The ClusterRole of MaaS administrators and its binding to the console's administrator groups."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ADMIN_ROLE},
         "rules": ADMIN_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": ADMIN_ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ADMIN_ROLE},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups]},
    ]
