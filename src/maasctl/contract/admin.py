"""Who administers MaaS: whoever may `create` `maasauthpolicies.maas.opendatahub.io` in the subscription
namespace, as a Kubernetes SubjectAccessReview answers it. maas-api asks it (`maasapi.auth.KubeAuthenticator`)
and so does the gateway before it simulates a request for a user it did not authenticate
(`/_gateway/simulate`): one rule, one RBAC grant (`maas-admin` Role) for both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

__all__ = ["ADMIN_GROUP", "ADMIN_RESOURCE", "ADMIN_VERB", "admin_access_review"]

ADMIN_GROUP: Final = "maas.opendatahub.io"
ADMIN_RESOURCE: Final = "maasauthpolicies"
ADMIN_VERB: Final = "create"


def admin_access_review(username: str, groups: Sequence[str], namespace: str) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `username` (with `groups`) administers `namespace`."""
    return {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
        "spec": {"user": username, "groups": list(groups), "resourceAttributes": {
            "group": ADMIN_GROUP, "resource": ADMIN_RESOURCE, "verb": ADMIN_VERB, "namespace": namespace}},
    }
