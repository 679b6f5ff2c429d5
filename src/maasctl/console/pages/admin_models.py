"""MaaS -> Models, "Published Models" tab: every MaaSModelRef with its target and phase (type filter),
publishing an LLMInferenceService (optional display name and description) and unpublishing (with a warning
while subscriptions still reference the model). All calls are made as the signed-in administrator."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError

from maasctl.api import DISPLAY_NAME_ANNOTATION, dump
from maasctl.console import catalog, forms
from maasctl.console.kube import EXTERNAL_MODEL, LLM_SERVICES, MODEL_REF, SUBSCRIPTION, KubeError, UserKube
from maasctl.console.web import Admin, console, flash, kube_as, redirect, render

router = APIRouter()
NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
NS = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
TYPES = {"all": "All types", "ExternalModel": "External", "LLMInferenceService": "Inference Service"}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def model_row(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    target = spec.get("modelRef") or {}
    notes = meta.get("annotations") or {}
    return {"name": meta.get("name"), "namespace": meta.get("namespace"), "kind": target.get("kind", ""),
            "target": target.get("name", ""), "phase": "Deleting" if meta.get("deletionTimestamp") else
            status.get("phase") or "Pending", "endpoint": status.get("endpoint") or "",
            "display_name": notes.get(DISPLAY_NAME_ANNOTATION, ""), "service": (meta.get("labels") or {}).get(
                catalog.SERVICE_LABEL, "")}


async def subscriptions_using(kube: UserKube, sub_ns: str, namespace: str, name: str) -> list[str]:
    subs = await kube.list(SUBSCRIPTION, sub_ns)
    def uses(sub: dict[str, Any]) -> bool:
        refs = (sub.get("spec") or {}).get("modelRefs") or []
        return any(r.get("name") == name and r.get("namespace") == namespace for r in refs)

    return sorted(_meta(s).get("name", "") for s in subs if uses(s))


@router.get("/admin/models")
async def published_models(request: Request, identity: Admin, type: str = "all") -> Response:
    kind = type if type in TYPES else "all"
    error = None
    rows: list[dict[str, Any]] = []
    try:
        rows = [model_row(o) for o in await kube_as(request, identity).list(MODEL_REF)]
    except KubeError as exc:
        error = str(exc)
    if kind != "all":
        rows = [r for r in rows if r["kind"] == kind]
    rows.sort(key=lambda r: (r["namespace"], r["name"]))
    return render(request, "admin/models.html", title="Models", tab="published", rows=rows, types=TYPES, kind=kind,
                  error=error)


async def _unpublished_services(kube: UserKube) -> list[dict[str, str]]:
    published = {(r["namespace"], r["target"]) for r in map(model_row, await kube.list(MODEL_REF))
                 if r["kind"] == "LLMInferenceService"}
    services: list[dict[str, str]] = []
    for version in LLM_SERVICES:  # a cluster serving only v1alpha1 (older KServe, seed 001) answers 404 for v1alpha2
        try:
            found = await kube.list(version)
        except KubeError as exc:
            if exc.status == 404:
                continue
            raise
        services = [{"namespace": _meta(o).get("namespace", ""), "name": _meta(o).get("name", "")} for o in found]
        break
    return sorted((s for s in services if (s["namespace"], s["name"]) not in published),
                  key=lambda s: (s["namespace"], s["name"]))


@router.get("/admin/models/publish")
async def publish_form(request: Request, identity: Admin) -> Response:
    kube = kube_as(request, identity)
    try:
        services = await _unpublished_services(kube)
    except KubeError as exc:
        return render(request, "error.html", 502, title="Publish", message=str(exc))
    return render(request, "admin/publish.html", title="Publish an inference service", services=services, form={},
                  errors={})


@router.post("/admin/models/publish")
async def publish(request: Request, identity: Admin, service: Annotated[str, Form(max_length=317)] = "",
                  display_name: Annotated[str, Form(max_length=256)] = "",
                  description: Annotated[str, Form(max_length=2048)] = "") -> Response:
    kube = kube_as(request, identity)
    errors: dict[str, str] = {}
    namespace, _, name = service.partition("/")
    form = {"service": service, "display_name": display_name, "description": description}
    if not namespace or not name:
        errors["service"] = "Choose the LLMInferenceService to publish."
    else:
        try:
            ref = catalog.model_ref(namespace, name, "LLMInferenceService", name,
                                    display_name=display_name.strip(), description=description.strip())
            await kube.create(MODEL_REF, dump(ref))
        except ValidationError as exc:
            errors = forms.pydantic_errors(exc, lambda loc: "service")
        except KubeError as exc:
            errors = forms.kube_errors(exc, {"metadata.name": "service", "spec.modelRef": "service",
                                             "metadata.annotations": "display_name"})
    if errors:
        try:
            services = await _unpublished_services(kube)
        except KubeError:
            services = []
        return render(request, "admin/publish.html", 422, title="Publish an inference service", services=services,
                      form=form, errors=errors)
    flash(request, "ok", f"Published {namespace}/{name}: it can now be added to subscriptions.")
    return redirect("/admin/models")


@router.get("/admin/models/{namespace}/{name}/unpublish")
async def unpublish_form(request: Request, identity: Admin, namespace: Annotated[str, Path(pattern=NS)],
                         name: Annotated[str, Path(pattern=NAME)]) -> Response:
    kube = kube_as(request, identity)
    try:
        obj = await kube.get(MODEL_REF, name, namespace)
        using = await subscriptions_using(kube, console(request).settings.subscription_namespace, namespace, name)
    except KubeError as exc:
        return render(request, "error.html", 404 if exc.status == 404 else 502, title="Unpublish", message=str(exc))
    return render(request, "admin/unpublish.html", title=f"Unpublish {name}", model=model_row(obj), using=using)


@router.post("/admin/models/{namespace}/{name}/unpublish")
async def unpublish(request: Request, identity: Admin, namespace: Annotated[str, Path(pattern=NS)],
                    name: Annotated[str, Path(pattern=NAME)]) -> Response:
    kube = kube_as(request, identity)
    try:
        obj = await kube.get(MODEL_REF, name, namespace)
        await kube.delete(MODEL_REF, name, namespace)
        if model_row(obj)["service"]:  # the console created its ExternalModel too: it goes with it
            em = await kube.find(EXTERNAL_MODEL, name, namespace)
            if em is not None and (_meta(em).get("labels") or {}).get(catalog.SERVICE_LABEL):
                await kube.delete(EXTERNAL_MODEL, name, namespace)
    except KubeError as exc:
        flash(request, "error", f"{namespace}/{name} was not unpublished: {exc}")
        return redirect("/admin/models")
    flash(request, "ok", f"Unpublished {namespace}/{name}.")
    return redirect("/admin/models")

