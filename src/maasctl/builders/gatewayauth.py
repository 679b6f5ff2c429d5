"""The Gateway-level default AuthPolicy: closed by default.

Kuadrant applies a Gateway-targeted policy's `defaults` to every route of that Gateway that has no
AuthPolicy of its own. `maas-gateway-auth` denies all of them, so a route the controller has not (or no
longer) covered with a model AuthPolicy — a model no MaaSAuthPolicy names, a model removed from its last one,
an ExternalModel whose route exists before its policy — is never served, and its provider key is never
injected. Routes that should be public or differently protected (maas-api's own route) carry their own
route-level AuthPolicy, which wins over defaults. Same name as the reference implementation's gateway policy.

It authenticates as the model routes' policies do (`credentials.credential_authentication`, the same entries by
name) before it denies, so a caller reads the MaaS answers on every route whether a MaaSAuthPolicy names the
model or not: no credential or a token the TokenReview refuses is 401 "Authentication required"; an API key
or a valid token is 403 (`DENY_MESSAGE`), the answer a caller the model's policy does not admit gets. A billing
Plan's AuthPolicy merged onto the Gateway's routes keeps these answers (`billing.rules.compile`, docs/billing.md).
"""

from __future__ import annotations

from typing import Any, Final

from maasctl.builders import names
from maasctl.builders.credentials import credential_authentication, unauthenticated_response
from maasctl.builders.refs import GatewayRef
from maasctl.builders.validation import check_dns_label, check_dns_subdomain

__all__ = ["DENY_MESSAGE", "GATEWAY_AUTH_NAME", "build_gateway_default_auth"]

GATEWAY_AUTH_NAME: Final = "maas-gateway-auth"
DENY_MESSAGE: Final = "no MaaS policy admits requests to this route"


def build_gateway_default_auth(gateway: GatewayRef) -> dict[str, Any]:
    """The default-deny AuthPolicy of `gateway` (no ownerReference: the controller does not own Gateways)."""
    check_dns_subdomain(gateway.name, "Gateway name")
    check_dns_label(gateway.namespace, "Gateway namespace")
    metadata: dict[str, Any] = {
        "name": GATEWAY_AUTH_NAME,
        "namespace": gateway.namespace,
        "labels": {
            names.MANAGED_BY_LABEL: names.MANAGED_BY,
            names.PART_OF_LABEL: GATEWAY_AUTH_NAME,
            names.COMPONENT_LABEL: "gateway-auth",
            **names.gateway_labels(gateway),
        },
    }
    return {
        "apiVersion": "kuadrant.io/v1",
        "kind": "AuthPolicy",
        "metadata": metadata,
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name},
            "defaults": {
                "strategy": "atomic",
                "rules": {
                    "authentication": credential_authentication(),
                    "authorization": {
                        "deny-uncovered-routes": {"patternMatching": {"patterns": [{"predicate": "false"}]}},
                    },
                    "response": {
                        "unauthenticated": unauthenticated_response(),
                        "unauthorized": {"code": 403, "message": {"value": DENY_MESSAGE}},
                    },
                },
            },
        },
    }
