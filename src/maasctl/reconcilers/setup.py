"""Register the four MaaS controllers, their indexes and watches with a Manager."""

from __future__ import annotations

from collections.abc import Iterable

from maasctl.builders import names
from maasctl.reconcilers.aggregate import MODEL_INDEX, SOURCE_INDEX, annotation_index, model_index
from maasctl.reconcilers.authpolicy import AuthPolicyReconciler
from maasctl.reconcilers.cleanup import JOB
from maasctl.reconcilers.context import Context
from maasctl.reconcilers.externalmodel import ExternalModelReconciler
from maasctl.reconcilers.kinds import (
    AUTH_POLICY,
    EXTERNAL_MODEL,
    GATEWAY,
    HTTP_ROUTE,
    INFERENCE_OBJECTIVE,
    INFERENCE_POOL,
    LLM_INFERENCE_SERVICE,
    MAAS_AUTH_POLICY,
    MAAS_MODEL_REF,
    MAAS_SUBSCRIPTION,
    SERVICE,
    TOKEN_RATE_LIMIT_POLICY,
)
from maasctl.reconcilers.modelref import ModelRefReconciler
from maasctl.reconcilers.subscription import SubscriptionReconciler
from maasctl.runtime import Cache, GroupVersionKind, Manager, Request
from maasctl.runtime.controller import ControllerBuilder, MapFunc
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import annotations_changed, any_of, deletion, generation_changed, labels_changed
from maasctl.settings import ControllerSettings

TARGET_INDEX = "maas.target"
SPEC_OR_META = any_of(generation_changed, deletion, labels_changed, annotations_changed)


def _target_index(obj: FrozenObject) -> list[str]:
    target = (obj.get("spec") or {}).get("modelRef") or {}
    ns = obj["metadata"]["namespace"]
    return [f"{ns}/{target.get('kind')}/{target.get('name')}"] if target.get("name") else []


def _requests(objs: Iterable[FrozenObject]) -> list[Request]:
    return [Request.for_object(o) for o in objs]


def _by_target(cache: Cache, kind: str) -> MapFunc:
    def map_to(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata']['namespace']}/{kind}/{obj['metadata']['name']}"
        return _requests(cache.list(MAAS_MODEL_REF, index=(TARGET_INDEX, key)))

    return map_to


def _kserve_route_to_models(cache: Cache) -> MapFunc:
    def map_to(route: FrozenObject) -> list[Request]:
        llm = ((route.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/name")
        if not llm:
            return []
        key = f"{route['metadata']['namespace']}/LLMInferenceService/{llm}"
        return _requests(cache.list(MAAS_MODEL_REF, index=(TARGET_INDEX, key)))

    return map_to


def _sources_of_model(cache: Cache, source: GroupVersionKind) -> MapFunc:
    def map_to(model: FrozenObject) -> list[Request]:
        key = f"{model['metadata']['namespace']}/{model['metadata']['name']}"
        return _requests(cache.list(source, index=(MODEL_INDEX, key)))

    return map_to


def _sources_of_route(cache: Cache, source: GroupVersionKind) -> MapFunc:
    """Any route change in a namespace may change how that namespace's models resolve."""

    def map_to(route: FrozenObject) -> list[Request]:
        ns = route["metadata"]["namespace"]
        out: list[Request] = []
        for model in cache.list(MAAS_MODEL_REF, ns):
            out.extend(_requests(cache.list(source, index=(MODEL_INDEX, f"{ns}/{model['metadata']['name']}"))))
        return out

    return map_to


def _sources_of_generated(annotation: str) -> MapFunc:
    def map_to(obj: FrozenObject) -> list[Request]:
        value = ((obj.get("metadata") or {}).get("annotations") or {}).get(annotation, "")
        return [Request(*key.split("/", 1)) for key in str(value).split(",") if "/" in key]

    return map_to


def _subscription_watches(builder: ControllerBuilder, cache: Cache) -> ControllerBuilder:
    """Request priority and key cleanup inputs of the MaaSSubscription controller.

    InferenceObjectives (ours and foreign ones holding our names), InferencePools and LLMInferenceServices
    (status.router) map to every subscription naming a model in their namespace; cleanup Jobs map back through
    their source annotation. No predicates: status changes matter for all of them.
    """
    by_namespace = _sources_of_route(cache, MAAS_SUBSCRIPTION)
    return (builder
            .watches(INFERENCE_OBJECTIVE, map_to=by_namespace)
            .watches(INFERENCE_POOL, map_to=by_namespace)
            .watches(LLM_INFERENCE_SERVICE, map_to=by_namespace)
            .watches(JOB, map_to=_sources_of_generated(names.SUBSCRIPTIONS_ANNOTATION)))


def _objective_header_watches(builder: ControllerBuilder, cache: Cache) -> ControllerBuilder:
    """The AuthPolicy carries each subscription's InferenceObjective name: it changes with the subscriptions of
    a model (spec changes only) and with the pools KServe reports."""
    by_namespace = _sources_of_route(cache, MAAS_AUTH_POLICY)

    def subscription_models(sub: FrozenObject) -> list[Request]:
        keys = model_index(sub)
        return [r for key in keys for r in _requests(cache.list(MAAS_AUTH_POLICY, index=(MODEL_INDEX, key)))]

    return (builder
            .watches(MAAS_SUBSCRIPTION, map_to=subscription_models, predicates=[SPEC_OR_META])
            .watches(INFERENCE_POOL, map_to=by_namespace)
            .watches(LLM_INFERENCE_SERVICE, map_to=by_namespace))


def setup_controllers(manager: Manager, settings: ControllerSettings) -> Context:
    """Wire the MaaSModelRef, ExternalModel, MaaSAuthPolicy and MaaSSubscription controllers."""
    cache = manager.cache
    ctx = Context(cache=cache, client=manager.client, applier=manager.applier,
                  events=manager.event_recorder("maas-controller"), settings=settings)
    cache.add_index(MAAS_MODEL_REF, TARGET_INDEX, _target_index)
    cache.add_index(MAAS_AUTH_POLICY, MODEL_INDEX, model_index)
    cache.add_index(MAAS_SUBSCRIPTION, MODEL_INDEX, model_index)
    cache.add_index(AUTH_POLICY, SOURCE_INDEX, annotation_index(names.AUTH_POLICIES_ANNOTATION))
    cache.add_index(TOKEN_RATE_LIMIT_POLICY, SOURCE_INDEX, annotation_index(names.SUBSCRIPTIONS_ANNOTATION))

    (manager.controller("maasmodelref")
        .for_(MAAS_MODEL_REF, predicates=[SPEC_OR_META])
        .owns(HTTP_ROUTE)
        .owns(SERVICE)
        .watches(EXTERNAL_MODEL, map_to=_by_target(cache, "ExternalModel"))
        .watches(LLM_INFERENCE_SERVICE, map_to=_by_target(cache, "LLMInferenceService"))
        .watches(HTTP_ROUTE, map_to=_kserve_route_to_models(cache))
        .watches(GATEWAY, map_to=lambda gw: _requests(cache.list(MAAS_MODEL_REF)))
        .complete(ModelRefReconciler(ctx)))

    (manager.controller("externalmodel")
        .for_(EXTERNAL_MODEL, predicates=[SPEC_OR_META])
        .complete(ExternalModelReconciler(ctx)))

    for name, source, generated, annotation, reconciler in (
        ("maasauthpolicy", MAAS_AUTH_POLICY, AUTH_POLICY, names.AUTH_POLICIES_ANNOTATION,
         AuthPolicyReconciler(ctx)),
        ("maassubscription", MAAS_SUBSCRIPTION, TOKEN_RATE_LIMIT_POLICY, names.SUBSCRIPTIONS_ANNOTATION,
         SubscriptionReconciler(ctx)),
    ):
        builder = (manager.controller(name)
            .for_(source, predicates=[SPEC_OR_META])
            .watches(generated, map_to=_sources_of_generated(annotation))
            .watches(MAAS_MODEL_REF, map_to=_sources_of_model(cache, source))
            .watches(HTTP_ROUTE, map_to=_sources_of_route(cache, source)))
        if source == MAAS_SUBSCRIPTION:
            builder = _subscription_watches(builder, cache)
        else:
            builder = _objective_header_watches(builder, cache)
        builder.complete(reconciler)
    return ctx
