"""Register the MaaS controllers, their indexes and watches with a Manager.

Work is keyed by what it produces (N inputs -> 1 output): the MaaSModelRef controller owns everything
generated for a model (route, AuthPolicy, TokenRateLimitPolicy), so every input of those — the model, its
ExternalModel or LLMInferenceService, its routes, the MaaSAuthPolicies and MaaSSubscriptions naming it, the
InferencePools that name objectives, and the generated objects themselves (drift) — maps to the model. The
MaaSAuthPolicy and MaaSSubscription controllers write their own status (a function of the cache), the
InferenceObjectives and the cleanup Job, so they watch what their status reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from maasctl.builders import names
from maasctl.builders.gatewayauth import GATEWAY_AUTH_NAME
from maasctl.builders.payloadwiring import wiring_name
from maasctl.reconcilers.authpolicy import AuthPolicyReconciler
from maasctl.reconcilers.cleanup import JOB
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.externalmodel import SECRET_INDEX, ExternalModelReconciler, secret_index
from maasctl.reconcilers.gateway import GatewayReconciler
from maasctl.reconcilers.guardrails import GuardrailsReconciler, singleton_request
from maasctl.reconcilers.indexes import (
    ALIAS_INDEX,
    MODEL_INDEX,
    PRIORITY_INDEX,
    TARGET_INDEX,
    alias_index,
    model_index,
    models_by_target,
    models_in_namespace,
    models_of_generated,
    models_of_source,
    requests,
    siblings_by_alias,
    sources_in_namespace,
    sources_of_model,
    target_index,
)
from maasctl.reconcilers.inference import (
    PROVIDER_INDEX,
    ExternalProviderReconciler,
    InferenceModelReconciler,
    model_of_modelref,
    models_of_provider,
    provider_index,
)
from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    ENVOY_EXTENSION_POLICY,
    ENVOY_FILTER,
    EXTERNAL_MODEL,
    GATEWAY,
    GUARDRAIL_CONFIG,
    GUARDRAILS_SETTINGS,
    HTTP_ROUTE,
    INFERENCE_EXTERNAL_MODEL,
    INFERENCE_EXTERNAL_PROVIDER,
    INFERENCE_OBJECTIVE,
    INFERENCE_POOL,
    LLM_INFERENCE_SERVICES,
    MAAS_AUTH_POLICY,
    MAAS_MODEL_REF,
    MAAS_SUBSCRIPTION,
    SECRET,
    SERVICE,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.reconcilers.modelpolicies import compile_generated_cel
from maasctl.reconcilers.modelref import ModelRefReconciler
from maasctl.reconcilers.statushold import only_held
from maasctl.reconcilers.subscription import (
    PEERS_NAMED,
    SubscriptionReconciler,
    priority_group,
    priority_index,
    spec_priority,
)
from maasctl.runtime import Cache, Manager, Request
from maasctl.runtime.controller import MapFunc
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import SPEC_OR_META, not_observed
from maasctl.settings import ControllerSettings

STATUS_SETTLE = 1.0
"""Seconds a status that summarises many inputs waits for their burst to end (writes once per burst)."""


def _kserve_route_to_models(cache: Cache) -> MapFunc:
    by_target = models_by_target(cache, "LLMInferenceService")

    def map_to(route: FrozenObject) -> list[Request]:
        llm = ((route.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name")
        if not llm:
            return []
        return list(by_target({"metadata": {"namespace": route["metadata"]["namespace"], "name": llm}}))

    return map_to


def _cleanup_job_owner(job: FrozenObject) -> list[Request]:
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(names.SUBSCRIPTIONS_ANNOTATION, "")
    return [Request(*key.split("/", 1)) for key in str(value).split(",") if "/" in key]


def _same_priority(ctx: Context) -> MapFunc:
    """A subscription (old and new spec) -> the others of its namespace with that priority whose
    `SpecPriorityDuplicate` may have changed: only while the group is small enough for their message to name
    peers (a peer's condition is constant beyond PEERS_NAMED peers), so one subscription joining or leaving a
    large group of equal priorities requeues none of them."""

    def map_to(sub: FrozenObject) -> list[Request]:
        ns, name = sub["metadata"]["namespace"], sub["metadata"]["name"]
        group = priority_group(ctx, ns, spec_priority(sub))
        if len(group) > PEERS_NAMED + 2:  # each peer had and still has more than PEERS_NAMED others
            return []
        return [Request(ns, key.split("/", 1)[1]) for key in sorted(group) if key != f"{ns}/{name}"]

    return map_to


def names_guardrails(sub: FrozenObject) -> bool:
    """Whether a MaaSSubscription version names a GuardrailConfig (enabled or not) on any model: only those
    change which configurations are in use (old and new versions both map, so removing one counts)."""
    refs = (sub.get("spec") or {}).get("modelRefs")
    return isinstance(refs, (list, tuple)) and any(isinstance(r, Mapping) and r.get("guardrails") for r in refs)


def setup_controllers(manager: Manager, settings: ControllerSettings) -> Context:
    """Wire the MaaSModelRef, Gateway, ExternalModel, the reference's ExternalProvider / ExternalModel,
    MaaSAuthPolicy and MaaSSubscription controllers."""
    cache = manager.cache
    ctx = Context(cache=cache, client=manager.client, applier=manager.applier,
                  events=manager.event_recorder("maas-controller"), settings=settings)
    cache.add_index(MAAS_MODEL_REF, TARGET_INDEX, target_index)
    cache.add_index(MAAS_MODEL_REF, ALIAS_INDEX, alias_index)
    cache.add_index(MAAS_AUTH_POLICY, MODEL_INDEX, model_index)
    cache.add_index(MAAS_SUBSCRIPTION, MODEL_INDEX, model_index)
    cache.add_index(MAAS_SUBSCRIPTION, PRIORITY_INDEX, priority_index)
    cache.add_index(INFERENCE_EXTERNAL_MODEL, PROVIDER_INDEX, provider_index)
    in_namespace = models_in_namespace(cache)

    models = (manager.controller("maasmodelref")
        .for_(MAAS_MODEL_REF, predicates=[SPEC_OR_META], unfinished=not_observed)
        .owns(HTTP_ROUTE)
        .owns(SERVICE)
        .watches(MAAS_MODEL_REF, map_to=siblings_by_alias(cache), map_initial_list=False)
        .watches(EXTERNAL_MODEL, map_to=models_by_target(cache, "ExternalModel"), map_initial_list=False))
    for llm_version in LLM_INFERENCE_SERVICES:  # each version the cluster serves (seed 001 registers v1alpha1)
        models = models.watches(llm_version, map_to=models_by_target(cache, "LLMInferenceService"),
                                map_initial_list=False)
    (models
        .watches(HTTP_ROUTE, map_to=_kserve_route_to_models(cache), map_initial_list=False)
        .watches(GATEWAY, map_to=lambda gw: requests(cache.list(MAAS_MODEL_REF)), map_initial_list=False)
        .watches(MAAS_AUTH_POLICY, map_to=models_of_source, predicates=[SPEC_OR_META])
        .watches(MAAS_SUBSCRIPTION, map_to=models_of_source, predicates=[SPEC_OR_META])
        .watches(AUTH_POLICY, map_to=models_of_generated(cache), map_initial_list=False)
        .watches(TOKEN_RATE_LIMIT_POLICY, map_to=models_of_generated(cache), map_initial_list=False)
        .watches(INFERENCE_POOL, map_to=in_namespace, map_initial_list=False)
        .watches(GUARDRAILS_SETTINGS, map_to=lambda obj: requests(cache.list(MAAS_MODEL_REF)), map_initial_list=False)
        .watches(GUARDRAIL_CONFIG, map_to=lambda obj: requests(cache.list(MAAS_MODEL_REF)), map_initial_list=False)
        .complete(ModelRefReconciler(ctx)))

    gateways = ctx.gateways
    bypass = frozenset(settings.payload_processor_bypass_routes)

    def wiring_owner(obj: FrozenObject) -> list[Request]:
        return [Request(gw.namespace, gw.name) for gw in gateways
                if obj["metadata"]["namespace"] == gw.namespace and obj["metadata"]["name"] == wiring_name(gw)]

    (manager.controller("gateway")
        .for_(GATEWAY)
        .watches(AUTH_POLICY, map_to=lambda ap: [
            Request(gw.namespace, gw.name) for gw in gateways
            if ap["metadata"]["namespace"] == gw.namespace and ap["metadata"]["name"] == GATEWAY_AUTH_NAME])
        .watches(ENVOY_FILTER, map_to=wiring_owner)
        .watches(ENVOY_EXTENSION_POLICY, map_to=wiring_owner)
        .watches(HTTP_ROUTE, map_to=lambda route: [Request(gw.namespace, gw.name) for gw in gateways] if (
            f"{route['metadata']['namespace']}/{route['metadata']['name']}" in bypass) else [])
        .complete(GatewayReconciler(ctx)))

    # A labelled credential Secret (the only Secrets cached) changed: the ExternalModels naming it check again.
    cache.add_index(EXTERNAL_MODEL, SECRET_INDEX, secret_index)
    (manager.controller("externalmodel")
        .for_(EXTERNAL_MODEL, predicates=[SPEC_OR_META], unfinished=not_observed)
        .watches(SECRET, map_to=lambda secret: requests(cache.list(
            EXTERNAL_MODEL, index=(SECRET_INDEX, f"{secret['metadata']['namespace']}/{secret['metadata']['name']}"))),
            map_initial_list=False)
        .complete(ExternalModelReconciler(ctx)))

    # The reference's inference.opendatahub.io kinds: a provider's status (its Secret), and each model converted
    # into the maas.opendatahub.io ExternalModel it owns (docs/compatibility.md). Its status reads its providers'
    # status, the generated ExternalModel's status and the route of the MaaSModelRef publishing it.
    (manager.controller("externalprovider")
        .for_(INFERENCE_EXTERNAL_PROVIDER, predicates=[SPEC_OR_META])
        .complete(ExternalProviderReconciler(ctx)))
    (manager.controller("inferenceexternalmodel")
        .for_(INFERENCE_EXTERNAL_MODEL, predicates=[SPEC_OR_META])
        .owns(EXTERNAL_MODEL)
        .watches(INFERENCE_EXTERNAL_PROVIDER, map_to=models_of_provider(cache), map_initial_list=False)
        .watches(MAAS_MODEL_REF, map_to=model_of_modelref, map_initial_list=False)
        .complete(InferenceModelReconciler(ctx)))

    # A MaaSAuthPolicy's status summarises every model it names: settle on their bursts (issue 39: 5 policies
    # over 50 models being published were written ~27 times each, once per model becoming ready).
    (manager.controller("maasauthpolicy")
        .for_(MAAS_AUTH_POLICY, predicates=[SPEC_OR_META], unfinished=not_observed)
        .watches(MAAS_MODEL_REF, map_to=sources_of_model(cache, MAAS_AUTH_POLICY), settle=STATUS_SETTLE,
                 map_initial_list=False)
        .watches(AUTH_POLICY, map_to=sources_of_model(cache, MAAS_AUTH_POLICY), settle=STATUS_SETTLE,
                 map_initial_list=False)
        .watches(HTTP_ROUTE, map_to=sources_in_namespace(cache, MAAS_AUTH_POLICY), settle=STATUS_SETTLE,
                 map_initial_list=False)
        .complete(AuthPolicyReconciler(ctx)))

    # Request priority inputs (InferenceObjectives, ours and foreign ones holding our names; InferencePools;
    # LLMInferenceServices' status.router) map to every subscription naming a model in their namespace;
    # cleanup Jobs map back to their subscription. No predicates: status changes matter for all of them.
    by_namespace = sources_in_namespace(cache, MAAS_SUBSCRIPTION)
    subscriptions = SubscriptionReconciler(ctx)
    (manager.controller("maassubscription")
        .for_(MAAS_SUBSCRIPTION, predicates=[SPEC_OR_META], unfinished=not_observed)
        .watches(MAAS_SUBSCRIPTION, map_to=_same_priority(ctx), predicates=[SPEC_OR_META], map_initial_list=False)
        # its status lists its models and their shared TokenRateLimitPolicies: one write per burst of them
        .watches(MAAS_MODEL_REF, map_to=sources_of_model(cache, MAAS_SUBSCRIPTION), settle=STATUS_SETTLE,
                 map_initial_list=False)
        .watches(TOKEN_RATE_LIMIT_POLICY, map_to=sources_of_model(cache, MAAS_SUBSCRIPTION), settle=STATUS_SETTLE,
                 map_initial_list=False)
        # ... but one whose first status waits for its limit in that policy is told at once (statushold.py)
        .watches(TOKEN_RATE_LIMIT_POLICY, map_to=only_held(sources_of_model(cache, MAAS_SUBSCRIPTION),
                                                           subscriptions.hold), map_initial_list=False)
        .watches(HTTP_ROUTE, map_to=by_namespace, map_initial_list=False)
        .watches(INFERENCE_OBJECTIVE, map_to=by_namespace, map_initial_list=False)
        .watches(INFERENCE_POOL, map_to=by_namespace, map_initial_list=False)
        .watches(LLM_INFERENCE_SERVICES[0], map_to=by_namespace, map_initial_list=False)
        .watches(LLM_INFERENCE_SERVICES[1], map_to=by_namespace, map_initial_list=False)
        .watches(JOB, map_to=_cleanup_job_owner)
        .watches(GUARDRAILS_SETTINGS, map_to=lambda obj: requests(cache.list(MAAS_SUBSCRIPTION)),
                 map_initial_list=False)
        .watches(GUARDRAIL_CONFIG, map_to=lambda obj: requests(cache.list(MAAS_SUBSCRIPTION)), map_initial_list=False)
        .complete(subscriptions))

    # Guardrails: one reconcile for the engine and the status of the settings and every configuration.
    singleton = singleton_request(ctx)
    (manager.controller("guardrails")
        .for_(GUARDRAILS_SETTINGS)
        .watches(GUARDRAIL_CONFIG, map_to=lambda obj: [singleton], predicates=[SPEC_OR_META])
        .watches(MAAS_SUBSCRIPTION, map_to=lambda obj: [singleton] if names_guardrails(obj) else [],
                 predicates=[SPEC_OR_META])
        .complete(GuardrailsReconciler(ctx)))
    manager.add_warm_up(compile_generated_cel(cache))
    return ctx
