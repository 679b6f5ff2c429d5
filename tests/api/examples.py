"""Example objects from the seeds, completed minimally where the seed shows only part of them.

Shared by the unit tests (they must parse) and the integration tests (the API server must accept them).
Names are fixed; integration tests substitute the namespaces they run in.
"""

from __future__ import annotations

import copy
from typing import Any

SUB_NS = "models-as-a-service"
MODEL_NS = "llm"

# seed 000: the MaaSSubscription example (spec elided in the seed), completed from the seed's field tables.
SEED_000_PREMIUM_SUBSCRIPTION: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "MaaSSubscription",
    "metadata": {
        "name": "premium-subscription",
        "namespace": SUB_NS,
        "annotations": {
            "openshift.io/display-name": "Premium Subscription",
            "openshift.io/description": "Premium-tier subscription with 1000 tokens/min rate limit",
        },
    },
    "spec": {
        "owner": {"groups": [{"name": "premium-users"}], "users": ["alice"]},
        "organization": {"id": "acme-corp"},
        "modelRefs": [
            {
                "name": "granite-3b",
                "namespace": MODEL_NS,
                "tokenRateLimits": [{"limit": 1000, "window": "1m"}],
                "billingRate": {"perToken": "0.000002"},
            }
        ],
        "tokenMetadata": {"organizationId": "acme-corp", "costCenter": "ml-platform", "labels": {"tier": "premium"}},
        "priority": 10,
        "inferencePriority": 5,
    },
}

# seed 001: MaaSModelRef for an LLMInferenceService.
SEED_001_MODEL_REF: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "MaaSModelRef",
    "metadata": {"name": "granite-3b", "namespace": MODEL_NS},
    "spec": {"modelRef": {"kind": "LLMInferenceService", "name": "granite-3b"}},
}

# seed 001: MaaSAuthPolicy (modelRefs + subjects groups/users).
SEED_001_AUTH_POLICY: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "MaaSAuthPolicy",
    "metadata": {"name": "free-access", "namespace": SUB_NS},
    "spec": {
        "modelRefs": [{"name": "granite-3b", "namespace": MODEL_NS}],
        "subjects": {"groups": [{"name": "free-user"}, {"name": "premium-user"}], "users": []},
    },
}

# seed 001: MaaSSubscription (owner + modelRefs with required tokenRateLimits).
SEED_001_SUBSCRIPTION: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "MaaSSubscription",
    "metadata": {"name": "free-subscription", "namespace": SUB_NS},
    "spec": {
        "owner": {"groups": [{"name": "free-user"}]},
        "modelRefs": [
            {"name": "granite-3b", "namespace": MODEL_NS, "tokenRateLimits": [{"limit": 100, "window": "1m"}]}
        ],
    },
}

# seed 004: an imported external service (endpoint with API base path, upstream key in a Secret) publishing
# two model names that share the endpoint and the credential.
SEED_004_EXTERNAL_MODELS: list[dict[str, Any]] = [
    {
        "apiVersion": "maas.opendatahub.io/v1alpha1",
        "kind": "ExternalModel",
        "metadata": {"name": name, "namespace": MODEL_NS},
        "spec": {
            "provider": "openai",
            "endpoint": "https://host/v1",
            "targetModel": target,
            "credentialRef": {"name": "provider-api-key"},
        },
    }
    for name, target in (("gpt-4o", "gpt-4o"), ("gpt-4o-mini", "gpt-4o-mini"))
]

# seed 004: an endpoint that needs no credentials.
SEED_004_EXTERNAL_MODEL_NO_KEY: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "ExternalModel",
    "metadata": {"name": "local-llama", "namespace": MODEL_NS},
    "spec": {"provider": "vllm", "endpoint": "http://vllm.example.internal:8000/v1", "targetModel": "llama-3"},
}

SEED_004_MODEL_REFS: list[dict[str, Any]] = [
    {
        "apiVersion": "maas.opendatahub.io/v1alpha1",
        "kind": "MaaSModelRef",
        "metadata": {"name": name, "namespace": MODEL_NS},
        "spec": {"modelRef": {"kind": "ExternalModel", "name": name}},
    }
    for name in ("gpt-4o", "gpt-4o-mini")
]

# seed 004: subscription for every authenticated user (*), 100M tokens/hour and 1000M tokens/day (as 24h).
SEED_004_SUBSCRIPTION: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "MaaSSubscription",
    "metadata": {"name": "everyone", "namespace": SUB_NS},
    "spec": {
        "owner": {"users": ["*"]},
        "modelRefs": [
            {
                "name": "gpt-4o",
                "namespace": MODEL_NS,
                "tokenRateLimits": [
                    {"limit": 100_000_000, "window": "1h"},
                    {"limit": 1_000_000_000, "window": "24h"},
                ],
            },
            {"name": "gpt-4o-mini", "namespace": MODEL_NS, "unlimited": True},
        ],
    },
}

# issue 38: one model, several providers (ordered failover; a weighted one is a field away).
FALLBACKS_EXTERNAL_MODEL: dict[str, Any] = {
    "apiVersion": "maas.opendatahub.io/v1alpha1",
    "kind": "ExternalModel",
    "metadata": {"name": "chat-any", "namespace": MODEL_NS},
    "spec": {
        "provider": "openai", "endpoint": "https://api.openai.com/v1", "targetModel": "gpt-4o",
        "credentialRef": {"name": "openai-key"}, "weight": 3, "providerSelection": "Weighted", "maxAttempts": 3,
        "fallbacks": [
            {"name": "claude", "provider": "anthropic", "apiFormat": "messages",
             "endpoint": "https://api.anthropic.com/v1", "targetModel": "claude-sonnet-4-5",
             "credentialRef": {"name": "anthropic-key"}, "weight": 1},
            {"name": "azure-eu", "provider": "azure-openai", "endpoint": "eu.openai.azure.com",
             "targetModel": "gpt-4o", "credentialRef": {"name": "azure-key", "key": "token"}, "weight": 0},
        ],
    },
}

ALL: dict[str, dict[str, Any]] = {
    "seed000-premium-subscription": SEED_000_PREMIUM_SUBSCRIPTION,
    "seed001-model-ref": SEED_001_MODEL_REF,
    "seed001-auth-policy": SEED_001_AUTH_POLICY,
    "seed001-subscription": SEED_001_SUBSCRIPTION,
    "seed004-external-model-gpt-4o": SEED_004_EXTERNAL_MODELS[0],
    "seed004-external-model-gpt-4o-mini": SEED_004_EXTERNAL_MODELS[1],
    "seed004-external-model-no-key": SEED_004_EXTERNAL_MODEL_NO_KEY,
    "issue38-external-model-fallbacks": FALLBACKS_EXTERNAL_MODEL,
    "seed004-model-ref-gpt-4o": SEED_004_MODEL_REFS[0],
    "seed004-model-ref-gpt-4o-mini": SEED_004_MODEL_REFS[1],
    "seed004-subscription": SEED_004_SUBSCRIPTION,
}


def example(name: str, **namespaces: str) -> dict[str, Any]:
    """A deep copy of an example; ``sub_ns``/``model_ns`` replace the namespaces everywhere they appear."""
    obj = copy.deepcopy(ALL[name])
    mapping = {SUB_NS: namespaces.get("sub_ns", SUB_NS), MODEL_NS: namespaces.get("model_ns", MODEL_NS)}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (mapping.get(v, v) if k == "namespace" else walk(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    out: dict[str, Any] = walk(obj)
    return out
