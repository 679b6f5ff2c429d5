"""Admission policies. A ValidatingAdmissionPolicy keeps MaaSSubscription, MaaSAuthPolicy and the guardrails
kinds (GuardrailsSettings, GuardrailConfig) in the subscription namespace.

A CRD's CEL rules cannot see the request namespace, so this rule is an in-process admission policy (no
webhook server). The namespace is fixed when the policy is rendered, i.e. at install time; the checked-in
manifest uses the default ``models-as-a-service``. Only CREATE is checked: a namespace never changes
afterwards, and checking UPDATE would block finalizer removal on objects created before the policy existed.

`finalizer_manifests`: the MutatingAdmissionPolicy that puts the controller's finalizer on new objects (one
write per created object fewer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from maasctl.api._base import DEFAULT_SUBSCRIPTION_NAMESPACE, GROUP
from maasctl.api._fields import DNS_LABEL_PATTERN
from maasctl.api.authpolicy import MaaSAuthPolicy
from maasctl.api.guardrails import GuardrailConfig, GuardrailsSettings
from maasctl.api.modelref import MaaSModelRef
from maasctl.api.subscription import MaaSSubscription

POLICY_NAME = "maas-subscription-namespace"
FILE_NAME = f"{POLICY_NAME}.yaml"
RESTRICTED_KINDS = (MaaSSubscription, MaaSAuthPolicy, GuardrailsSettings, GuardrailConfig)


def message(namespace: str) -> str:
    """The denial message (also used by tests to recognise the rule)."""
    return (f"MaaSSubscription, MaaSAuthPolicy, GuardrailsSettings and GuardrailConfig objects are only accepted in "
            f"the subscription namespace {namespace}")


def on_create(kinds: Sequence[Any]) -> list[dict[str, Any]]:
    """An admission policy's `resourceRules` matching creates of our `kinds` (any version)."""
    return [{"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE"],
             "resources": [kind.crd.plural for kind in kinds]}]


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
            "matchConstraints": {"resourceRules": on_create(RESTRICTED_KINDS)},
            "variables": [{"name": "subscriptionNamespace", "expression": f"'{namespace}'"}],
            "validations": [
                {
                    "expression": "request.namespace == variables.subscriptionNamespace",
                    "message": message(namespace),
                    "messageExpression": (
                        "request.kind.kind + ' objects are only accepted in the subscription namespace ' "
                        "+ variables.subscriptionNamespace + ', not in ' + request.namespace + '; create it in ' "
                        "+ variables.subscriptionNamespace + ', or reinstall maasctl for another subscription "
                        "namespace (hack/deploy.sh binds this policy to the subscriptions Namespace of its overlay, "
                        "docs/install.md)'"
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


FINALIZER = "maas.opendatahub.io/finalizer"
"""The controller's finalizer on MaaSModelRefs and MaaSSubscriptions (cleanup before they go)."""
FINALIZER_POLICY_NAME = "maas-finalizers"
FINALIZER_FILE_NAME = f"{FINALIZER_POLICY_NAME}.yaml"
FINALIZED_KINDS = (MaaSModelRef, MaaSSubscription)


def finalizer_manifests(namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
    """MutatingAdmissionPolicy (Kubernetes 1.36+, admissionregistration.k8s.io/v1) and binding that put the
    controller's finalizer on MaaSModelRefs and MaaSSubscriptions when they are created.

    Without it the controller's first act on every new object is a PATCH adding the finalizer: one of the two
    writes a new subscription costs, and a watch event every client of the kind decodes. The controller still
    adds the finalizer itself when it is missing (older clusters, objects created before the policy), so the
    policy only saves writes; `failurePolicy: Ignore` keeps a broken policy from blocking creates. It belongs
    to the controller's install, not the API's: a cluster without a controller must not collect finalizers
    nobody removes (hack/uninstall.sh deletes it with the controller). `namespaces` limits it to the
    namespaces a restricted controller watches (empty: all).
    """
    labels = {"app.kubernetes.io/part-of": "maasctl"}
    already = f"has(object.metadata.finalizers) && '{FINALIZER}' in object.metadata.finalizers"
    patch = (
        f"{already} ? [] : has(object.metadata.finalizers) ? "
        f"[JSONPatch{{op: 'add', path: '/metadata/finalizers/-', value: '{FINALIZER}'}}] : "
        f"[JSONPatch{{op: 'add', path: '/metadata/finalizers', value: ['{FINALIZER}']}}]"
    )
    constraints: dict[str, Any] = {"resourceRules": on_create(FINALIZED_KINDS)}
    if namespaces:
        constraints["namespaceSelector"] = {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(set(namespaces))}]}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": FINALIZER_POLICY_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": constraints,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": FINALIZER_POLICY_NAME, "labels": labels},
        "spec": {"policyName": FINALIZER_POLICY_NAME},
    }
    return [policy, binding]
