"""The kinds the billing controllers read and write, in the versions the CRDs store."""

from __future__ import annotations

from typing import Final

from maasctl.billing.api import GROUP, VERSION
from maasctl.runtime import GroupVersionKind

PRICE_BOOK: Final = GroupVersionKind(GROUP, VERSION, "PriceBook")
PLAN: Final = GroupVersionKind(GROUP, VERSION, "Plan")
TENANT_ACCOUNT: Final = GroupVersionKind(GROUP, VERSION, "TenantAccount")
BUDGET_POLICY: Final = GroupVersionKind(GROUP, VERSION, "BudgetPolicy")
RESERVATION: Final = GroupVersionKind(GROUP, VERSION, "Reservation")
BILLING_CONSOLE: Final = GroupVersionKind(GROUP, VERSION, "BillingConsole")
NODE: Final = GroupVersionKind("", "v1", "Node")
SECRET: Final = GroupVersionKind("", "v1", "Secret")
SERVICE: Final = GroupVersionKind("", "v1", "Service")
DEPLOYMENT: Final = GroupVersionKind("apps", "v1", "Deployment")
ROUTE: Final = GroupVersionKind("route.openshift.io", "v1", "Route")  # OpenShift only: the console's Route
CLUSTER_ROLE_BINDING: Final = GroupVersionKind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding")

GATEWAY: Final = GroupVersionKind("gateway.networking.k8s.io", "v1", "Gateway")
HTTP_ROUTE: Final = GroupVersionKind("gateway.networking.k8s.io", "v1", "HTTPRoute")
AUTH_POLICY: Final = GroupVersionKind("kuadrant.io", "v1", "AuthPolicy")
RATE_LIMIT_POLICY: Final = GroupVersionKind("kuadrant.io", "v1", "RateLimitPolicy")
TOKEN_RATE_LIMIT_POLICY: Final = GroupVersionKind("kuadrant.io", "v1alpha1", "TokenRateLimitPolicy")
CLUSTER_QUEUE: Final = GroupVersionKind("kueue.x-k8s.io", "v1beta2", "ClusterQueue")
RESOURCE_FLAVOR: Final = GroupVersionKind("kueue.x-k8s.io", "v1beta2", "ResourceFlavor")
WORKLOAD: Final = GroupVersionKind("kueue.x-k8s.io", "v1beta2", "Workload")  # read only: GPU metering

KUADRANT_KINDS: Final = (AUTH_POLICY, RATE_LIMIT_POLICY, TOKEN_RATE_LIMIT_POLICY)
KUEUE_KINDS: Final = (CLUSTER_QUEUE, RESOURCE_FLAVOR)
