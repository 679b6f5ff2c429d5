"""MaaS -> Subscriptions: list (name, models, subscribers, phase), create, view (limits and usage), edit and
delete. Each save writes the MaaSSubscription and its matching MaaSAuthPolicy as the signed-in
administrator (see `maasctl.console.subscriptions`)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError

from maasctl.api import DESCRIPTION_ANNOTATION, DISPLAY_NAME_ANNOTATION
from maasctl.api.guardrails import SETTINGS_NAME
from maasctl.console import forms, tiers, usage
from maasctl.console.edits import Edited, fingerprint, replace_as_seen
from maasctl.console.kube import (
    AUTH_POLICY,
    GUARDRAIL_CONFIG,
    GUARDRAILS_SETTINGS,
    MODEL_REF,
    PLAN,
    SUBSCRIPTION,
    TENANT_ACCOUNT,
    KubeError,
    UserKube,
)
from maasctl.console.maasapi_client import MaasApiError
from maasctl.console.subscriptions import (
    MANAGED_LABEL,
    FormError,
    ModelRow,
    SubscriptionForm,
    api_fields,
    auth_policy,
    desired,
    error_field,
    fill_row,
    form_fields,
    validate,
)
from maasctl.console.web import Admin, console, flash, kube_as, maasapi_as, q, redirect, render
from maasctl.contract.billing_terms import terms_for
from maasctl.contract.views import subscription_view

router = APIRouter()
NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


def _sub_ns(request: Request) -> str:
    return console(request).settings.subscription_namespace


def list_row(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    owner = spec.get("owner") or {}
    notes = meta.get("annotations") or {}
    return {
        "name": meta.get("name"), "display_name": notes.get(DISPLAY_NAME_ANNOTATION, ""),
        "description": notes.get(DESCRIPTION_ANNOTATION, ""),
        "models": [{"ref": f"{m['namespace']}/{m['name']}", "tiers": m.get("tokenRateLimits"),
                    "price": (m.get("billingRate") or {}).get("perToken"),
                    "guardrails": (m.get("guardrails") or {}).get("config") if (m.get("guardrails") or {}).get(
                        "enabled") else None} for m in spec.get("modelRefs") or []],
        "users": owner.get("users") or [], "groups": [g["name"] for g in owner.get("groups") or []],
        "priority": spec.get("priority", 0), "inference_priority": spec.get("inferencePriority"),
        "organization": (spec.get("organization") or {}).get("id"),
        "cost_center": (spec.get("tokenMetadata") or {}).get("costCenter"),
        "labels": (spec.get("tokenMetadata") or {}).get("labels") or {},
        "gateway": "{namespace}/{name}".format(**spec["gatewayRef"]) if spec.get("gatewayRef") else None,
        "phase": "Deleting" if meta.get("deletionTimestamp") else status.get("phase") or "Pending",
    }


@router.get("/admin/subscriptions")
async def subscriptions_page(request: Request, identity: Admin) -> Response:
    error = None
    rows: list[dict[str, Any]] = []
    try:
        rows = sorted(map(list_row, await kube_as(request, identity).list(SUBSCRIPTION, _sub_ns(request))),
                      key=lambda r: r["name"])
    except KubeError as exc:
        error = str(exc)
    return render(request, "admin/subscriptions.html", title="Subscriptions", rows=rows, error=error)


async def _model_rows(kube: UserKube, existing: dict[str, Any] | None) -> list[ModelRow]:
    """Every published model, plus models the subscription names that are not published (any more)."""
    rows = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": ModelRow(
        o["metadata"]["namespace"], o["metadata"]["name"], kind=(o.get("spec") or {}).get("modelRef", {}).get(
            "kind", "")) for o in await kube.list(MODEL_REF)}
    for m in ((existing or {}).get("spec") or {}).get("modelRefs") or []:
        fill_row(rows.setdefault(f"{m['namespace']}/{m['name']}",
                                 ModelRow(m["namespace"], m["name"], kind="missing")), m)
    return [rows[k] for k in sorted(rows)]


def _form_from(obj: dict[str, Any], models: list[ModelRow]) -> SubscriptionForm:
    return SubscriptionForm(**form_fields(obj), models=models)


async def _guardrails(kube: UserKube, ns: str, form: SubscriptionForm) -> SubscriptionForm:
    """The configurations a model can choose and the global switch (none offered when they cannot be read:
    a model's current choice is still shown and kept)."""
    try:
        form.guardrail_configs = sorted(o["metadata"]["name"] for o in await kube.list(GUARDRAIL_CONFIG, ns))
        settings = await kube.find(GUARDRAILS_SETTINGS, SETTINGS_NAME, ns)
        form.guardrails_enabled = bool(((settings or {}).get("spec") or {}).get("enabled"))
    except KubeError:
        form.guardrail_configs = []
    return form


def _guardrail_errors(form: SubscriptionForm, existing: dict[str, Any] | None, errors: dict[str, str]) -> None:
    """A model may choose an existing configuration, or keep the one it has (even when that one is gone)."""
    current = {f"{m.get('namespace')}/{m.get('name')}": str((m.get("guardrails") or {}).get("config") or "")
               for m in ((existing or {}).get("spec") or {}).get("modelRefs") or []}
    for i, row in enumerate(form.models):
        if row.include and row.guardrails and row.guardrails not in form.guardrail_configs \
                and row.guardrails != current.get(row.ref):
            errors[f"model-{i}-guardrails"] = f"There is no guardrail configuration {row.guardrails!r}: choose " \
                                              "one of the list, or none."


def _render_form(request: Request, form: SubscriptionForm, errors: dict[str, str], editing: bool,
                 status: int = 200) -> Response:
    return render(request, "admin/subscription_form.html", status,
                  title=f"Edit {form.name}" if editing else "Create Subscription", form=form, errors=errors,
                  editing=editing)


@router.get("/admin/subscriptions/new")
async def new_form(request: Request, identity: Admin) -> Response:
    try:
        models = await _model_rows(kube_as(request, identity), None)
    except KubeError as exc:
        return render(request, "error.html", 502, title="Create Subscription", message=str(exc))
    form = await _guardrails(kube_as(request, identity), _sub_ns(request), SubscriptionForm(models=models))
    return _render_form(request, form, {}, editing=False)


async def _read_form(request: Request, kube: UserKube, existing: dict[str, Any] | None) -> SubscriptionForm:
    data = await request.form()

    def text(key: str, limit: int = 4096) -> str:
        return str(data.get(key, ""))[:limit]

    models = await _model_rows(kube, existing)
    by_ref = {m.ref: m for m in models}
    i = 0
    while f"model-{i}-ref" in data and i < 1000:
        row = by_ref.get(text(f"model-{i}-ref", 317))
        if row is not None:
            row.include = data.get(f"model-{i}-include") == "on"
            row.unlimited = data.get(f"model-{i}-unlimited") == "on"
            row.tiers = text(f"model-{i}-tiers", 1024)
            row.price = text(f"model-{i}-price", 64)
            row.guardrails = text(f"model-{i}-guardrails", 63).strip()
        i += 1
    org = str(((existing or {}).get("spec") or {}).get("organization", {}).get("id") or "")
    return await _guardrails(kube, _sub_ns(request), SubscriptionForm(
        name=(existing or {}).get("metadata", {}).get("name") or text("name", 253).strip(),
        display_name=text("display_name", 256), description=text("description", 2048),
        users=text("users"), groups=text("groups"), priority=text("priority", 16),
        organization_id=text("organization_id", 300), organization_locked=bool(org),
        cost_center=text("cost_center", 300), labels=text("labels", 20000),
        inference_priority=text("inference_priority", 16), gateway_namespace=text("gateway_namespace", 70),
        gateway_name=text("gateway_name", 260), seen=text("seen", 64), models=models))


def _limits(form: SubscriptionForm, errors: dict[str, str]) -> dict[str, list[dict[str, Any]] | None]:
    """Each included row's tiers (None: unlimited, by the checkbox or by typing "unlimited")."""
    limits: dict[str, list[dict[str, Any]] | None] = {}
    for i, row in enumerate(form.models):
        if not row.include:
            continue
        if row.unlimited:
            limits[row.ref] = None
            continue
        try:
            limits[row.ref] = tiers.from_text(row.tiers)
        except tiers.TierError as exc:
            errors[f"model-{i}-tiers"] = str(exc)
    return limits


async def _save(request: Request, identity: Admin, existing: dict[str, Any] | None) -> Response:
    kube = kube_as(request, identity)
    form = await _read_form(request, kube, existing)
    editing = existing is not None
    errors: dict[str, str] = {}
    limits = _limits(form, errors)
    _guardrail_errors(form, existing, errors)
    if not form.name:
        errors["name"] = "Enter a subscription name."
    if not form.users.strip() and not form.groups.strip():
        errors["subscribers"] = "Add at least one subscriber: a username, a group, or * for all authenticated users."
    if not limits:
        errors["models"] = "Add at least one published model."
    if existing is not None and form.seen != fingerprint(existing):
        errors = {"_form": CONFLICT}
    if errors:
        return _render_form(request, form, errors, editing, 422)
    included: list[int] = []
    try:
        sub, included = desired(form, _sub_ns(request), existing, limits)
        validate(sub)
    except FormError as exc:
        return _render_form(request, form, {exc.field: str(exc)}, editing, 422)
    except ValidationError as exc:
        return _render_form(request, form, forms.pydantic_errors(exc, lambda loc: error_field(loc, included)),
                            editing, 422)
    namespace = _sub_ns(request)
    try:
        if existing is None:
            await kube.create(SUBSCRIPTION, sub)
        else:
            sub = await replace_as_seen(kube, SUBSCRIPTION, existing, form.seen,
                                        lambda base: desired(form, namespace, base, limits)[0])
    except Edited:
        return _render_form(request, form, {"_form": CONFLICT}, editing, 422)
    except KubeError as exc:
        errors = forms.kube_errors(exc, api_fields(included))
        if exc.status == 409 and exc.reason == "Conflict":
            errors = {"_form": CONFLICT}
        return _render_form(request, form, errors, editing, 422)
    try:
        await _save_policy(kube, sub)
    except (KubeError, ValidationError, _NotOurs, Edited) as exc:
        flash(request, "error", f"The subscription was saved, but its auth policy was not: {exc}. Subscribers "
                                "cannot call its models until a MaaSAuthPolicy admits them.")
        return redirect("/admin/subscriptions")
    flash(request, "ok", f"Saved subscription {form.name} and its auth policy.")
    return redirect("/admin/subscriptions")


CONFLICT = "Someone else changed this subscription meanwhile: reload the page and edit again."


class _NotOurs(Exception):
    pass


async def _save_policy(kube: UserKube, sub: dict[str, Any]) -> None:
    """Create the console's auth policy, or update its models and subjects (all else in it is kept)."""
    meta = sub["metadata"]
    current = await kube.find(AUTH_POLICY, meta["name"], meta["namespace"])
    if current is None:
        await kube.create(AUTH_POLICY, auth_policy(sub, None))
        return
    if ((current.get("metadata") or {}).get("labels") or {}).get(MANAGED_LABEL) != meta["name"]:
        raise _NotOurs(f"a MaaSAuthPolicy named {meta['name']} exists and was not created by the console")
    # a status write by the controller in between is retried, a change of the policy itself is not written over
    await replace_as_seen(kube, AUTH_POLICY, current, fingerprint(current), lambda base: auth_policy(sub, base))


@router.post("/admin/subscriptions/new")
async def create(request: Request, identity: Admin) -> Response:
    return await _save(request, identity, None)


async def _existing(request: Request, identity: Admin, name: str) -> dict[str, Any] | None:
    return await kube_as(request, identity).find(SUBSCRIPTION, name, _sub_ns(request))


@router.get("/admin/subscriptions/{name}/edit")
async def edit_form(request: Request, identity: Admin, name: Annotated[str, Path(pattern=NAME)]) -> Response:
    kube = kube_as(request, identity)
    existing = await _existing(request, identity, name)
    if existing is None:
        return render(request, "error.html", 404, title="Subscription", message="There is no such subscription.")
    form = await _guardrails(kube, _sub_ns(request), _form_from(existing, await _model_rows(kube, existing)))
    return _render_form(request, form, {}, editing=True)


@router.post("/admin/subscriptions/{name}/edit")
async def edit(request: Request, identity: Admin, name: Annotated[str, Path(pattern=NAME)]) -> Response:
    existing = await _existing(request, identity, name)
    if existing is None:
        return render(request, "error.html", 404, title="Subscription", message="There is no such subscription.")
    return await _save(request, identity, existing)


@router.get("/admin/subscriptions/{name}")
async def view(request: Request, identity: Admin, name: Annotated[str, Path(pattern=NAME)],
               range: str = "7d") -> Response:
    existing = await _existing(request, identity, name)
    if existing is None:
        return render(request, "error.html", 404, title="Subscription", message="There is no such subscription.")
    range_name = range if range in usage.RANGES else "7d"
    api, ns = maasapi_as(request, identity), _sub_ns(request)
    now = datetime.now(UTC)

    async def total(b: usage.Bucket) -> int:
        report = await api.subscription_usage(ns, name, {"from": usage.iso(b.start), "to": usage.iso(b.end)})
        return int((report.get("totals") or {}).get("totalTokens") or 0)

    error: str | None = None
    per_model: list[dict[str, Any]] = []
    points: list[tuple[str, int]] = []
    try:
        per_model = (await api.subscription_usage(ns, name, {"range": range_name})).get("models") or []
        points = await usage.series(usage.buckets(range_name, now), total)
    except MaasApiError as exc:
        error = str(exc)
    billing, billing_error = await _billing(request, identity, existing)
    return render(request, "admin/subscription.html", title=name, sub=list_row(existing), per_model=per_model,
                  points=points, range_name=range_name, ranges=usage.RANGES, error=error, billing=billing,
                  billing_error=billing_error)


async def _billing(request: Request, identity: Admin,
                   existing: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The billing Plan limits and tenant state of the subscription's organization on its Gateway, read with
    the administrator's own rights; (None, None) where billing is not installed."""
    kube = kube_as(request, identity)
    try:
        tenants, plans = await kube.list(TENANT_ACCOUNT), await kube.list(PLAN)
    except KubeError as exc:
        if exc.status == 404:
            return None, None
        return None, f"The billing Plans and tenants cannot be read: {exc}"
    view = subscription_view(existing)
    terms = terms_for(view.organization_id, view.tenant_gateway(console(request).settings.default_gateway),
                      tenants, plans)
    return [{**asdict(t), "enforced": t.enforced} for t in terms], None


@router.get("/admin/subscriptions/{name}/delete")
async def delete_form(request: Request, identity: Admin, name: Annotated[str, Path(pattern=NAME)]) -> Response:
    existing = await _existing(request, identity, name)
    if existing is None:
        return render(request, "error.html", 404, title="Subscription", message="There is no such subscription.")
    return render(request, "admin/subscription_delete.html", title=f"Delete {name}", sub=list_row(existing))


@router.post("/admin/subscriptions/{name}/delete")
async def delete(request: Request, identity: Admin, name: Annotated[str, Path(pattern=NAME)]) -> Response:
    kube, ns = kube_as(request, identity), _sub_ns(request)
    try:
        await kube.delete(SUBSCRIPTION, name, ns)
        policy = await kube.find(AUTH_POLICY, name, ns)
        if policy is not None and ((policy.get("metadata") or {}).get("labels") or {}).get(MANAGED_LABEL) == name:
            await kube.delete(AUTH_POLICY, name, ns)
    except KubeError as exc:
        flash(request, "error", f"{name} was not deleted: {exc}")
        return redirect(f"/admin/subscriptions/{q(name)}")
    flash(request, "ok", f"Deleted subscription {name}; its API keys are revoked by the controller's cleanup.")
    return redirect("/admin/subscriptions")
