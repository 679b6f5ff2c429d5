"""Cache indexes and watch mappings that connect inputs to the object they produce (N inputs -> 1 output).

- `MODEL_INDEX` on MaaSAuthPolicy and MaaSSubscription: `<ns>/<name>` of every model the spec references, so
  a model's reconcile finds all its sources, and a source's status finds its models.
- `TARGET_INDEX` on MaaSModelRef: `<ns>/<kind>/<name>` of the object that serves it.
- `PRIORITY_INDEX` on MaaSSubscription: `<ns>/<spec.priority>`, its group of equal priorities.
- `ALIAS_INDEX` on MaaSModelRef: its `status.resolvedModelAlias` (the name clients send), so a model finds the
  others publishing the same name (`siblings_by_alias`).
- Generated objects carry `maas.opendatahub.io/model` and `model-namespace` labels: `model_of_generated`
  maps them back to the MaaSModelRef that renders them (no bookkeeping annotations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from maasctl.builders import names
from maasctl.reconcilers.kinds import MAAS_MODEL_REF
from maasctl.runtime import Cache, GroupVersionKind, Request
from maasctl.runtime.controller import MapFunc
from maasctl.runtime.objects import FrozenObject

MODEL_INDEX = "maas.model"
TARGET_INDEX = "maas.target"
ALIAS_INDEX = "maas.alias"
PRIORITY_INDEX = "maas.priority"


def model_keys(refs: Iterable[Mapping[str, Any]] | None) -> list[str]:
    """`<namespace>/<name>` of each model reference in a spec list (`modelRefs`)."""
    return [f"{r['namespace']}/{r['name']}" for r in refs or () if "namespace" in r and "name" in r]


def model_index(obj: FrozenObject) -> list[str]:
    """Index function: the models a MaaSAuthPolicy's or MaaSSubscription's spec references."""
    return model_keys((obj.get("spec") or {}).get("modelRefs"))


def target_index(obj: FrozenObject) -> list[str]:
    target = (obj.get("spec") or {}).get("modelRef") or {}
    ns = obj["metadata"]["namespace"]
    return [f"{ns}/{target.get('kind')}/{target.get('name')}"] if target.get("name") else []


def alias_index(obj: FrozenObject) -> list[str]:
    alias = (obj.get("status") or {}).get("resolvedModelAlias")
    return [str(alias)] if alias else []


def siblings_by_alias(cache: Cache) -> MapFunc:
    """A MaaSModelRef (any change, status included) -> the others publishing the same name, so a conflict
    appears and clears on both sides."""

    def map_to(obj: FrozenObject) -> list[Request]:
        me = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        return [Request.for_object(o) for key in alias_index(obj)
                for o in cache.list(MAAS_MODEL_REF, index=(ALIAS_INDEX, key))
                if (o["metadata"]["namespace"], o["metadata"]["name"]) != me]

    return map_to


def requests(objs: Iterable[FrozenObject]) -> list[Request]:
    return [Request.for_object(o) for o in objs]


def models_of_source(obj: FrozenObject) -> list[Request]:
    """A MaaSAuthPolicy or MaaSSubscription -> the models it names (old and new specs both map)."""
    return [Request(*key.split("/", 1)) for key in model_index(obj)]


def models_of_generated(cache: Cache) -> MapFunc:
    """A generated AuthPolicy / TokenRateLimitPolicy -> the MaaSModelRef(s) whose generated name it has
    (names are derived from the model name, so this is exact even where a label value had to be shortened)."""

    def map_to(obj: FrozenObject) -> list[Request]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [Request(ns, m["metadata"]["name"]) for m in cache.list(MAAS_MODEL_REF, ns)
                if name in (names.authpolicy_name(m["metadata"]["name"]), names.trlp_name(m["metadata"]["name"]))]

    return map_to


def sources_of_model(cache: Cache, source: GroupVersionKind) -> MapFunc:
    """A MaaSModelRef, or an object generated for it, -> every source that names the model."""
    generated = models_of_generated(cache)

    def map_to(obj: FrozenObject) -> list[Request]:
        if GroupVersionKind.of(obj) == MAAS_MODEL_REF:
            keys = [f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"]
        else:
            keys = [f"{r.namespace}/{r.name}" for r in generated(obj)]
        return [r for key in keys for r in requests(cache.list(source, index=(MODEL_INDEX, key)))]

    return map_to


def sources_in_namespace(cache: Cache, source: GroupVersionKind) -> MapFunc:
    """Any route/pool change in a namespace may change how its models resolve: every source of them."""

    def map_to(obj: FrozenObject) -> list[Request]:
        ns = obj["metadata"]["namespace"]
        out: list[Request] = []
        for model in cache.list(MAAS_MODEL_REF, ns):
            out.extend(requests(cache.list(source, index=(MODEL_INDEX, f"{ns}/{model['metadata']['name']}"))))
        return out

    return map_to


def models_by_target(cache: Cache, kind: str) -> MapFunc:
    """An ExternalModel / LLMInferenceService -> the MaaSModelRefs that publish it."""

    def map_to(obj: FrozenObject) -> list[Request]:
        key = f"{obj['metadata']['namespace']}/{kind}/{obj['metadata']['name']}"
        return requests(cache.list(MAAS_MODEL_REF, index=(TARGET_INDEX, key)))

    return map_to


def models_in_namespace(cache: Cache) -> MapFunc:
    def map_to(obj: FrozenObject) -> list[Request]:
        return requests(cache.list(MAAS_MODEL_REF, obj["metadata"]["namespace"]))

    return map_to


POLICY_NOT_FOUND = "NotFound"
"""The generated policy's readiness reason while it does not exist."""


def kuadrant_ready(obj: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(ready, reason) from Kuadrant's Accepted/Enforced conditions; not reported yet is not ready."""
    if obj is None:
        return False, POLICY_NOT_FOUND
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
    for type_ in ("Accepted", "Enforced"):
        cond = conditions.get(type_)
        if cond is None:
            return False, f"{type_}Unknown"
        if cond.get("status") != "True":
            return False, str(cond.get("reason") or f"Not{type_}")
    return True, "Enforced"
