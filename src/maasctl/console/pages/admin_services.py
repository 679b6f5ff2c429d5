"""MaaS -> Models, "Model Services" tab: import an external OpenAI-compatible service (its upstream key is
written once into a Secret and never read back) and "Publish Models": add, rename and remove the model
names a service exposes (see `maasctl.console.catalog` for the objects)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError

from maasctl.api import ExternalModelSpec
from maasctl.api._fields import DNS_LABEL_PATTERN
from maasctl.console import catalog, forms, providers
from maasctl.console.kube import EXTERNAL_MODEL, MODEL_REF, SECRET, KubeError, UserKube
from maasctl.console.web import Admin, console, flash, kube_as, q, redirect, render

router = APIRouter()
NS = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
BLANK_ROWS = 2


async def _services(kube: UserKube) -> list[catalog.Service]:
    items = await kube.list(SECRET, labels=catalog.SERVICE_LABEL, metadata_only=True)
    found = (catalog.service_from_metadata(o) for o in items)
    return sorted((s for s in found if s is not None), key=lambda s: (s.namespace, s.name))


async def _published(kube: UserKube, service: catalog.Service) -> list[catalog.Published]:
    items = await kube.list(EXTERNAL_MODEL, service.namespace, labels=f"{catalog.SERVICE_LABEL}={service.name}")
    return sorted((catalog.Published(o["metadata"]["name"], o["spec"]["targetModel"]) for o in items),
                  key=lambda p: p.name)


async def _service(kube: UserKube, namespace: str, name: str) -> catalog.Service | None:
    for service in await _services(kube):
        if service.namespace == namespace and service.name == name:
            return service
    return None


def _other_external_model(obj: dict[str, Any]) -> dict[str, str]:
    """An ExternalModel applied outside the console (kubectl, a sample, GitOps): what the table shows of it."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    return {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "endpoint": str(spec.get("endpoint") or ""), "target": str(spec.get("targetModel") or ""),
            "credential": str((spec.get("credentialRef") or {}).get("name") or ""),
            "phase": str(status.get("phase") or "Pending"), "message": str(ready.get("message") or "")}


async def _other_external_models(kube: UserKube) -> list[dict[str, str]]:
    """Every ExternalModel the console did not import (no service label), so none is invisible here."""
    items = await kube.list(EXTERNAL_MODEL)
    others = (o for o in items if catalog.SERVICE_LABEL not in ((o.get("metadata") or {}).get("labels") or {}))
    return sorted((_other_external_model(o) for o in others), key=lambda r: (r["namespace"], r["name"]))


@router.get("/admin/models/services")
async def services_page(request: Request, identity: Admin) -> Response:
    kube = kube_as(request, identity)
    rows: list[dict[str, Any]] = []
    others: list[dict[str, str]] = []
    error = None
    try:
        for service in await _services(kube):
            rows.append({"service": service, "models": await _published(kube, service)})
        others = await _other_external_models(kube)
    except KubeError as exc:
        error = str(exc)
    return render(request, "admin/services.html", title="Model Services", tab="services", rows=rows, others=others,
                  error=error)


def _import_form(request: Request, form: dict[str, str], errors: dict[str, str], status: int = 200) -> Response:
    return render(request, "admin/service_new.html", status, title="Import an external model service",
                  form=form, errors=errors)


@router.get("/admin/models/services/new")
async def import_form(request: Request, identity: Admin) -> Response:
    return _import_form(request, {"namespace": console(request).settings.model_namespace, "provider": "openai"}, {})


@router.post("/admin/models/services/new")
async def import_service(request: Request, identity: Admin,
                         name: Annotated[str, Form(max_length=253)] = "",
                         namespace: Annotated[str, Form(max_length=63)] = "",
                         endpoint: Annotated[str, Form(max_length=2048)] = "",
                         provider: Annotated[str, Form(max_length=63)] = "openai",
                         api_format: Annotated[str, Form(max_length=32)] = "openai-chat",
                         upstream_key: Annotated[str, Form(max_length=8192)] = "") -> Response:
    name, namespace, endpoint, provider = name.strip(), namespace.strip(), endpoint.strip(), provider.strip()
    api_format = api_format.strip()
    form = {"name": name, "namespace": namespace, "endpoint": endpoint, "provider": provider,
            "api_format": api_format}  # never the key
    errors: dict[str, str] = {}
    if not re.match(DNS_LABEL_PATTERN, name) or len(name) > 63 - len(catalog.SECRET_PREFIX):
        errors["name"] = ("Use lowercase letters, digits and hyphens, starting and ending with a letter or digit "
                          f"(at most {63 - len(catalog.SECRET_PREFIX)} characters).")
    try:  # the ExternalModel's own rules for the endpoint and provider
        ExternalModelSpec.model_validate({"provider": provider, "endpoint": endpoint, "targetModel": "x",
                                          "apiFormat": api_format})
    except ValidationError as exc:
        errors.update(forms.pydantic_errors(
            exc, lambda loc: ("api_format" if loc[0] == "apiFormat" else str(loc[0])) if loc else forms.FORM))
    listing = providers.ProviderListing()
    if not errors:
        # asked now, while the key is in hand: the console never reads it back from the Secret
        listing = await providers.list_provider_models(endpoint, upstream_key.strip(), namespace,
                                                       provider=provider, api_format=api_format)
        service = catalog.Service(name=name, namespace=namespace, endpoint=endpoint, provider=provider,
                                  has_key=bool(upstream_key.strip()), provider_models=listing.names,
                                  api_format=api_format)
        try:
            await kube_as(request, identity).create(SECRET, catalog.service_secret(service, upstream_key.strip()))
        except KubeError as exc:
            errors = forms.kube_errors(exc, {"metadata.name": "name", "metadata.labels": "name",
                                             "metadata.namespace": "namespace"})
            if exc.reason == "NotFound":
                errors = {"namespace": exc.message}
    if errors:
        return _import_form(request, form, errors, 422)
    found = (f"The provider lists {len(listing.names)} models, offered below." if listing.names
             else f"No model list from the provider ({listing.note}): type the names.")
    flash(request, "ok", f"Imported {namespace}/{name}. Now publish the models it serves. {found}")
    return redirect(f"/admin/models/services/{q(namespace)}/{q(name)}/publish")


def _rows(form: Any) -> list[tuple[str, str, str, bool]]:
    out = []
    i = 0
    while f"models-{i}-name" in form or f"models-{i}-original" in form:
        out.append((str(form.get(f"models-{i}-original", "")).strip(), str(form.get(f"models-{i}-name", "")).strip(),
                    str(form.get(f"models-{i}-target", "")).strip(), form.get(f"models-{i}-remove") == "on"))
        i += 1
        if i > 200:
            break
    return out


def _publish_form(request: Request, service: catalog.Service, rows: list[dict[str, Any]], errors: dict[str, str],
                  status: int = 200) -> Response:
    return render(request, "admin/service_publish.html", status, title=f"Publish models of {service.name}",
                  service=service, rows=rows, errors=errors)


@router.get("/admin/models/services/{namespace}/{name}/publish")
async def publish_form(request: Request, identity: Admin, namespace: Annotated[str, Path(pattern=NS)],
                       name: Annotated[str, Path(pattern=NS)]) -> Response:
    kube = kube_as(request, identity)
    service = await _service(kube, namespace, name)
    if service is None:
        return render(request, "error.html", 404, title="Model service", message="There is no such model service.")
    rows = [{"original": p.name, "name": p.name, "target": p.target, "remove": False}
            for p in await _published(kube, service)]
    rows += [{"original": "", "name": "", "target": "", "remove": False} for _ in range(BLANK_ROWS)]
    return _publish_form(request, service, rows, {})


@router.post("/admin/models/services/{namespace}/{name}/publish")
async def publish_models(request: Request, identity: Admin, namespace: Annotated[str, Path(pattern=NS)],
                         name: Annotated[str, Path(pattern=NS)]) -> Response:
    kube = kube_as(request, identity)
    service = await _service(kube, namespace, name)
    if service is None:
        return render(request, "error.html", 404, title="Model service", message="There is no such model service.")
    rows = _rows(await request.form())
    errors: dict[str, str] = {}
    changes = catalog.plan(await _published(kube, service), rows)
    for change in changes:  # validate everything with the API types before writing anything
        if change.action == "create":
            try:
                catalog.service_objects(service, change.model)
            except ValidationError as exc:
                errors.update({f"models-{change.row}-{f}": m for f, m in forms.pydantic_errors(
                    exc, lambda loc: "target" if "targetModel" in loc else "name").items()})
    if not errors:
        for change in changes:
            try:
                await _apply(kube, service, change)
            except KubeError as exc:
                field = {"metadata.name": f"models-{change.row}-name", "spec.modelRef": f"models-{change.row}-name",
                         "spec.targetModel": f"models-{change.row}-target"}
                errors.update(forms.kube_errors(exc, field, default=f"models-{change.row}-name"))
                break
    if errors:
        view = [{"original": o, "name": n, "target": t, "remove": r} for o, n, t, r in rows]
        return _publish_form(request, service, view, errors, 422)
    flash(request, "ok", f"Saved the models of {namespace}/{name}.")
    return redirect("/admin/models/services")


async def _apply(kube: UserKube, service: catalog.Service, change: catalog.Change) -> None:
    if change.action == "create":
        em, ref = catalog.service_objects(service, change.model)
        await kube.create(EXTERNAL_MODEL, em)
        await kube.create(MODEL_REF, ref)
    elif change.action == "retarget":
        await kube.merge_patch(EXTERNAL_MODEL, change.model.name, service.namespace,
                               {"spec": {"targetModel": change.model.target}})
    else:
        for res in (MODEL_REF, EXTERNAL_MODEL):
            try:
                await kube.delete(res, change.model.name, service.namespace)
            except KubeError as exc:
                if exc.status != 404:
                    raise
