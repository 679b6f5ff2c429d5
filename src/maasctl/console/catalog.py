"""Pure functions turning console forms into MaaS objects, and back (no I/O).

An imported *model service* is one Secret `maas-service-<name>` in the model namespace: its annotations
hold the provider endpoint and provider id, its data the upstream API key when there is one (the console
writes it once and only ever lists Secrets' metadata). Each model the service publishes is an ExternalModel
(endpoint + credentialRef to that Secret + the provider's model name in `targetModel`) and a MaaSModelRef of
the same name: one subscribable model per published name, all sharing the endpoint and the key. A published
name may differ from the provider's model name ("rename").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from maasctl.api import DESCRIPTION_ANNOTATION, DISPLAY_NAME_ANNOTATION, ExternalModel, MaaSModelRef, dump

SERVICE_LABEL = "maas.opendatahub.io/model-service"
ENDPOINT_ANNOTATION = "maas.opendatahub.io/endpoint"
PROVIDER_ANNOTATION = "maas.opendatahub.io/provider"
HAS_KEY_ANNOTATION = "maas.opendatahub.io/upstream-key"
PROVIDER_MODELS_ANNOTATION = "maas.opendatahub.io/provider-models"  # JSON list of the provider's model ids
API_FORMAT_ANNOTATION = "maas.opendatahub.io/api-format"  # the ExternalModels' apiFormat (absent: openai-chat)
MAX_PROVIDER_MODELS: Final = 200
_PROVIDER_MODEL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,252}")


def is_provider_model_name(name: str) -> bool:
    """A model id a provider listed that the console will offer (no quotes, spaces or control characters)."""
    return _PROVIDER_MODEL_NAME.fullmatch(name) is not None


def names_to_annotation(names: tuple[str, ...]) -> str:
    return json.dumps(list(names[:MAX_PROVIDER_MODELS]), separators=(",", ":"))


def names_from_annotation(value: str | None) -> tuple[str, ...]:
    """The provider's model ids kept on the service's Secret (anything unreadable is no names)."""
    try:
        data = json.loads(value or "[]")
    except ValueError:
        return ()
    if not isinstance(data, list):
        return ()
    return tuple(n for n in data if isinstance(n, str) and is_provider_model_name(n))[:MAX_PROVIDER_MODELS]
KEY_FIELD = "api-key"
SECRET_PREFIX = "maas-service-"


@dataclass(frozen=True)
class Service:
    name: str
    namespace: str
    endpoint: str
    provider: str
    has_key: bool
    provider_models: tuple[str, ...] = ()  # what the provider listed at import (`console.providers`)
    api_format: str = "openai-chat"  # the provider's API (ExternalModel.spec.apiFormat)

    @property
    def secret_name(self) -> str:
        return SECRET_PREFIX + self.name


@dataclass(frozen=True)
class Published:
    """A model a service publishes: the MaaS name and the provider's model name."""

    name: str
    target: str


def service_secret(service: Service, upstream_key: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": service.secret_name, "namespace": service.namespace, "labels": {SERVICE_LABEL: service.name},
        "annotations": {ENDPOINT_ANNOTATION: service.endpoint, PROVIDER_ANNOTATION: service.provider,
                        HAS_KEY_ANNOTATION: "true" if upstream_key else "false"},
    }
    if service.provider_models:
        meta["annotations"][PROVIDER_MODELS_ANNOTATION] = names_to_annotation(service.provider_models)
    if service.api_format != "openai-chat":
        meta["annotations"][API_FORMAT_ANNOTATION] = service.api_format
    secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta}
    if upstream_key:
        secret["stringData"] = {KEY_FIELD: upstream_key}
    return secret


def service_from_metadata(obj: dict[str, Any]) -> Service | None:
    """A service from a Secret's metadata (PartialObjectMetadata), or None for other Secrets."""
    meta = obj.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    name = labels.get(SERVICE_LABEL)
    if not name or meta.get("name") != SECRET_PREFIX + name:
        return None
    return Service(name=name, namespace=str(meta.get("namespace", "")), endpoint=notes.get(ENDPOINT_ANNOTATION, ""),
                   provider=notes.get(PROVIDER_ANNOTATION, "openai"), has_key=notes.get(HAS_KEY_ANNOTATION) == "true",
                   provider_models=names_from_annotation(notes.get(PROVIDER_MODELS_ANNOTATION)),
                   api_format=notes.get(API_FORMAT_ANNOTATION, "openai-chat"))


def external_model(service: Service, model: Published) -> ExternalModel:
    """The ExternalModel for one published model (raises pydantic.ValidationError on invalid input)."""
    spec: dict[str, Any] = {"provider": service.provider, "endpoint": service.endpoint, "targetModel": model.target}
    if service.has_key:
        spec["credentialRef"] = {"name": service.secret_name, "key": KEY_FIELD}
    if service.api_format != "openai-chat":
        spec["apiFormat"] = service.api_format
    return ExternalModel.model_validate({
        "metadata": {"name": model.name, "namespace": service.namespace, "labels": {SERVICE_LABEL: service.name}},
        "spec": spec,
    })


def model_ref(namespace: str, name: str, kind: str, target: str, *, labels: dict[str, str] | None = None,
              display_name: str = "", description: str = "") -> MaaSModelRef:
    notes = {k: v for k, v in ((DISPLAY_NAME_ANNOTATION, display_name), (DESCRIPTION_ANNOTATION, description)) if v}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if notes:
        meta["annotations"] = notes
    return MaaSModelRef.model_validate({"metadata": meta, "spec": {"modelRef": {"kind": kind, "name": target}}})


def service_objects(service: Service, model: Published) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ExternalModel, MaaSModelRef) as API payloads."""
    ref = model_ref(service.namespace, model.name, "ExternalModel", model.name, labels={SERVICE_LABEL: service.name})
    return dump(external_model(service, model)), dump(ref)


@dataclass(frozen=True)
class Change:
    """One step of saving a service's model list: create, retarget or delete a published model."""

    action: str  # "create" | "retarget" | "delete"
    model: Published
    row: int  # the form row it comes from (for errors next to the field)


def plan(current: list[Published], rows: list[tuple[str, str, str, bool]]) -> list[Change]:
    """Changes turning `current` into the form's rows (original name, name, target, remove).

    A renamed model is created under the new name before the old one is deleted (MaaS names are immutable).
    """
    by_name = {p.name: p for p in current}
    creates: list[Change] = []
    updates: list[Change] = []
    deletes: list[Change] = []
    for i, (original, name, target, remove) in enumerate(rows):
        old = by_name.get(original) if original else None
        if old is not None and (remove or name != old.name):
            deletes.append(Change("delete", old, i))
        if remove or not name:
            continue
        if old is None or name != old.name:
            creates.append(Change("create", Published(name, target or name), i))
        elif (target or name) != old.target:
            updates.append(Change("retarget", Published(name, target or name), i))
    return [*creates, *updates, *deletes]
