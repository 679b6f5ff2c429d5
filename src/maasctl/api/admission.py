"""ValidatingAdmissionPolicy keeping MaaSSubscription, MaaSAuthPolicy and the guardrails kinds (GuardrailsSettings,
GuardrailConfig) in the subscription namespace.

A CRD's CEL rules cannot see the request namespace, so this rule is an in-process admission policy (no
webhook server). The namespace is fixed when the policy is rendered, i.e. at install time; the checked-in
manifest uses the default ``models-as-a-service``. Only CREATE is checked: a namespace never changes
afterwards, and checking UPDATE would block finalizer removal on objects created before the policy existed.
"""

from __future__ import annotations

import re
from typing import Any

from maasctl.api._base import DEFAULT_SUBSCRIPTION_NAMESPACE, GROUP
from maasctl.api._fields import DNS_LABEL_PATTERN
from maasctl.api.authpolicy import MaaSAuthPolicy
from maasctl.api.guardrails import GuardrailConfig, GuardrailsSettings
from maasctl.api.subscription import MaaSSubscription

POLICY_NAME = "maas-subscription-namespace"
FILE_NAME = f"{POLICY_NAME}.yaml"
RESTRICTED_KINDS = (MaaSSubscription, MaaSAuthPolicy, GuardrailsSettings, GuardrailConfig)


def message(namespace: str) -> str:
    """The denial message (also used by tests to recognise the rule)."""
    return (f"MaaSSubscription, MaaSAuthPolicy, GuardrailsSettings and GuardrailConfig objects are only accepted in "
            f"the subscription namespace {namespace}")


def manifests(subscription_namespace: str | None = None) -> list[dict[str, Any]]:
    """The policy and its binding for ``subscription_namespace`` (default ``models-as-a-service``)."""
    namespace = subscription_namespace or DEFAULT_SUBSCRIPTION_NAMESPACE
    if not re.fullmatch(DNS_LABEL_PATTERN, namespace) or len(namespace) > 63:
        raise ValueError(f"subscription namespace {namespace!r} is not a valid namespace name")
    labels = {"app.kubernetes.io/part-of": "maasctl"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": [kind.crd.plural for kind in RESTRICTED_KINDS],
                    }
                ]
            },
            "variables": [{"name": "subscriptionNamespace", "expression": f"'{namespace}'"}],
            "validations": [
                {
                    "expression": "request.namespace == variables.subscriptionNamespace",
                    "message": message(namespace),
                    "messageExpression": (
                        "request.kind.kind + ' objects are only accepted in the subscription namespace ' "
                        "+ variables.subscriptionNamespace + ', not in ' + request.namespace"
                    ),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }
    return [policy, binding]
