"""Pydantic models of the MaaS kinds (maas.opendatahub.io/v1alpha1) and of the external kinds we read.

The models are the single source of the CRDs in manifests/crds (see ``crdgen``); reconcilers use ``parse`` to
turn cached objects into typed models and ``dump`` to turn models back into API payloads.
"""

from maasctl.api._base import (
    API_VERSION,
    DEFAULT_SUBSCRIPTION_NAMESPACE,
    GROUP,
    VERSION,
    Condition,
    ConditionStatus,
    KubeObject,
    ObjectMeta,
    dump,
    parse,
)
from maasctl.api._common import (
    DESCRIPTION_ANNOTATION,
    DISPLAY_NAME_ANNOTATION,
    GroupReference,
    ModelReference,
    PolicyPhase,
    ResourceRefStatus,
)
from maasctl.api._fields import has_unsafe_chars
from maasctl.api.authpolicy import (
    MaaSAuthPolicy,
    MaaSAuthPolicySpec,
    MaaSAuthPolicyStatus,
    MeteringMetadata,
    Subjects,
)
from maasctl.api.external import HTTPRoute, LLMInferenceService
from maasctl.api.externalmodel import (
    ExternalModel,
    ExternalModelPhase,
    ExternalModelSpec,
    ExternalModelStatus,
    SecretKeyRef,
)
from maasctl.api.modelref import (
    MaaSModelRef,
    MaaSModelRefSpec,
    MaaSModelRefStatus,
    ModelKind,
    ModelPhase,
    ModelTarget,
    ObjectRef,
)
from maasctl.api.subscription import (
    ALL_AUTHENTICATED,
    BillingRate,
    FlowControlStatus,
    MaaSSubscription,
    MaaSSubscriptionSpec,
    MaaSSubscriptionStatus,
    ModelSubscriptionRef,
    OwnerSpec,
    PoolReference,
    SubscriptionOrganization,
    TokenMetadata,
    TokenRateLimit,
    TokenRateLimitStatus,
)

__all__ = [
    "ALL_AUTHENTICATED",
    "API_VERSION",
    "DEFAULT_SUBSCRIPTION_NAMESPACE",
    "DESCRIPTION_ANNOTATION",
    "DISPLAY_NAME_ANNOTATION",
    "GROUP",
    "VERSION",
    "BillingRate",
    "Condition",
    "ConditionStatus",
    "ExternalModel",
    "ExternalModelPhase",
    "ExternalModelSpec",
    "ExternalModelStatus",
    "FlowControlStatus",
    "GroupReference",
    "HTTPRoute",
    "KubeObject",
    "LLMInferenceService",
    "MaaSAuthPolicy",
    "MaaSAuthPolicySpec",
    "MaaSAuthPolicyStatus",
    "MaaSModelRef",
    "MaaSModelRefSpec",
    "MaaSModelRefStatus",
    "MaaSSubscription",
    "MaaSSubscriptionSpec",
    "MaaSSubscriptionStatus",
    "MeteringMetadata",
    "ModelKind",
    "ModelPhase",
    "ModelReference",
    "ModelSubscriptionRef",
    "ModelTarget",
    "ObjectMeta",
    "ObjectRef",
    "OwnerSpec",
    "PolicyPhase",
    "PoolReference",
    "ResourceRefStatus",
    "SecretKeyRef",
    "Subjects",
    "SubscriptionOrganization",
    "TokenMetadata",
    "TokenRateLimit",
    "TokenRateLimitStatus",
    "dump",
    "has_unsafe_chars",
    "parse",
]
