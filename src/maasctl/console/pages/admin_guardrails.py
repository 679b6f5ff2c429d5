"""MaaS -> Guardrails: the global settings (switch and failure policy), the configurations (create, view with
the controller's verdict, edit, delete) and which subscription models attach each one. Every write is made as
the signed-in administrator (see `maasctl.console.guardrails` for the objects); guard model keys go into
Secrets the console writes and never reads back."""

from __future__ import annotations

import re
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError

from maasctl.api._fields import DNS_LABEL_PATTERN
from maasctl.api.guardrails import SETTINGS_NAME
from maasctl.console import forms
from maasctl.console import guardrails as gr
from maasctl.console.edits import Edited, fingerprint, replace_as_seen
from maasctl.console.kube import GUARDRAIL_CONFIG, GUARDRAILS_SETTINGS, SECRET, SUBSCRIPTION, KubeError, UserKube
from maasctl.console.subscriptions import FormError
from maasctl.console.web import Admin, console, flash, kube_as, q, redirect, render

log = structlog.get_logger("maasctl.console")
router = APIRouter()
ID = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
CONFLICT = "Someone else changed this configuration meanwhile: reload the page and edit again."
KEY_NOT_KEPT = "Not saved: an API key is never sent back to the browser, so enter it again."


def _ns(request: Request) -> str:
    return console(request).settings.subscription_namespace


async def _settings(kube: UserKube, ns: str) -> dict[str, Any] | None:
    return await kube.find(GUARDRAILS_SETTINGS, SETTINGS_NAME, ns)


@router.get("/admin/guardrails")
async def guardrails_page(request: Request, identity: Admin) -> Response:
    kube, ns = kube_as(request, identity), _ns(request)
    error = None
    settings: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    missing: list[tuple[str, dict[str, str]]] = []
    try:
        settings = await _settings(kube, ns)
        attached = gr.attachments(await kube.list(SUBSCRIPTION, ns))
        configs = await kube.list(GUARDRAIL_CONFIG, ns)
        rows = sorted((gr.config_row(o, attached) for o in configs), key=lambda r: r["name"])
        known = {r["name"] for r in rows}
        missing = [(c, use) for c, uses in sorted(attached.items()) if c not in known for use in uses]
    except KubeError as exc:
        error = str(exc)
    return render(request, "admin/guardrails.html", title="Guardrails", settings=gr.settings_view(settings),
                  rows=rows, missing=missing, error=error, disabled_note=gr.DISABLED_NOTE)


# -- settings --------------------------------------------------------------------------------------------------

def _settings_form(request: Request, values: dict[str, Any], errors: dict[str, str], status: int = 200) -> Response:
    return render(request, "admin/guardrails_settings.html", status, title="Guardrails settings", form=values,
                  errors=errors, policies=gr.POLICIES, disabled_note=gr.DISABLED_NOTE)


@router.get("/admin/guardrails/settings")
async def settings_form(request: Request, identity: Admin) -> Response:
    try:
        current = await _settings(kube_as(request, identity), _ns(request))
    except KubeError as exc:
        return render(request, "error.html", 502, title="Guardrails settings", message=str(exc))
    return _settings_form(request, gr.settings_view(current), {})


@router.post("/admin/guardrails/settings")
async def save_settings(request: Request, identity: Admin) -> Response:
    data = await request.form()
    enabled, policy = data.get("enabled") == "on", str(data.get("failure_policy", ""))[:32]
    values = {"enabled": enabled, "failure_policy": policy}
    kube, ns = kube_as(request, identity), _ns(request)
    try:
        spec = gr.settings_spec(enabled, policy)
        current = await _settings(kube, ns)
        if current is None:
            await kube.create(GUARDRAILS_SETTINGS, gr.new_settings(ns, spec))
        else:
            await kube.merge_patch(GUARDRAILS_SETTINGS, SETTINGS_NAME, ns, {"spec": spec})
    except FormError as exc:
        return _settings_form(request, values, {exc.field: str(exc)}, 422)
    except ValidationError as exc:
        return _settings_form(request, values, forms.pydantic_errors(exc, lambda loc: forms.FORM), 422)
    except KubeError as exc:
        return _settings_form(request, values, forms.kube_errors(
            exc, {"spec.failurePolicy": "failure_policy", "spec.enabled": "enabled"}), 422)
    log.info("console_guardrails_settings_saved", user=identity.username, enabled=enabled, failure_policy=policy)
    state = f"enabled ({policy}: {gr.POLICIES[policy]})" if enabled else "disabled"
    flash(request, "ok", f"Saved the guardrails settings: guardrails are {state}.")
    return redirect("/admin/guardrails")


# -- configurations --------------------------------------------------------------------------------------------

async def _read_form(request: Request, config_id: str | None) -> tuple[gr.ConfigForm, dict[int, str]]:
    """The submitted form, and the API keys typed per row (kept apart: they never go back into a page)."""
    data = await request.form()

    def text(key: str, limit: int) -> str:
        return str(data.get(key, ""))[:limit]

    def editor(key: str) -> str:  # browsers send a textarea's line breaks as CRLF
        return text(key, 256 * 1024 + 8192).replace("\r\n", "\n")

    form = gr.ConfigForm(config_id=config_id or text("config_id", 63).strip(), config_yaml=editor("config_yaml"),
                         rails_co=editor("rails_co"), seen=text("seen", 64))
    keys: dict[int, str] = {}
    i = 0
    while f"models-{i}-type" in data and i < 4 * gr.MAX_ROWS:  # more than the API allows: its error, not a loss
        key = text(f"models-{i}-api_key", 8192).strip()
        if key:
            keys[i] = key
        form.models.append(gr.ModelRow(
            type=text(f"models-{i}-type", 63).strip(), model=text(f"models-{i}-model", 253).strip(),
            base_url=text(f"models-{i}-base_url", 2048).strip(), original=text(f"models-{i}-original", 63).strip(),
            key_secret=text(f"models-{i}-key_secret", 253), remove_key=data.get(f"models-{i}-remove_key") == "on",
            new_key=bool(key)))
        i += 1
    return form, keys


def _config_form(request: Request, form: gr.ConfigForm, errors: dict[str, str], editing: bool,
                 status_row: dict[str, Any] | None = None, status: int = 200) -> Response:
    if errors:  # the typed keys were not stored: say so next to each (the key itself is never shown)
        for i, row in enumerate(form.models):
            if row.new_key:
                errors.setdefault(f"models-{i}-api_key", KEY_NOT_KEPT)
                row.new_key = False
    return render(request, "admin/guardrail_form.html", status,
                  title=f"Guardrail configuration {form.config_id}" if editing else "Create Config",
                  form=gr.with_blank_rows(form), errors=errors, editing=editing, status_row=status_row)


async def _store_key(kube: UserKube, ns: str, config: dict[str, Any], model_type: str, key: str) -> None:
    """Create the model's key Secret, or replace the key in the console's existing one (never another's)."""
    body = gr.key_secret(ns, config, model_type, key)
    name = body["metadata"]["name"]
    try:
        await kube.create(SECRET, body)
        return
    except KubeError as exc:
        if exc.reason != "AlreadyExists":
            raise
    ours = await kube.list(SECRET, ns, labels=f"{gr.CONFIG_LABEL}={config['metadata']['name']}", metadata_only=True)
    if name not in {o["metadata"]["name"] for o in ours}:
        raise KubeError(409, "AlreadyExists", f"a Secret named {name} exists and was not created by the console")
    meta = {k: body["metadata"][k] for k in ("labels", "ownerReferences")}
    await kube.merge_patch(SECRET, name, ns, {"metadata": meta, "stringData": body["stringData"]})


async def _save(request: Request, identity: Admin, existing: dict[str, Any] | None) -> Response:
    kube, ns = kube_as(request, identity), _ns(request)
    editing = existing is not None
    form, keys = await _read_form(request, (existing or {}).get("metadata", {}).get("name"))
    errors: dict[str, str] = {}
    if not editing and (not re.match(DNS_LABEL_PATTERN, form.config_id) or len(form.config_id) > 63):
        errors["config_id"] = ("Enter a configuration ID of lowercase letters, digits and hyphens, starting and "
                               "ending with a letter or digit (at most 63 characters).")
    if not form.config_yaml.strip():
        errors["config_yaml"] = "Enter the config.yaml content (the rails and their prompts)."
    if existing is not None and form.seen != fingerprint(existing):
        errors = {"_form": CONFLICT}
    included: list[int] = []
    obj: dict[str, Any] = {}
    saved: dict[str, Any] = {}
    if not errors:
        try:
            obj, included = gr.desired(form, ns, existing)
            gr.validate(obj)
        except FormError as exc:
            errors = {exc.field: str(exc)}
        except ValidationError as exc:
            errors = forms.pydantic_errors(exc, lambda loc: gr.error_field(loc, included))
    if not errors:
        try:
            if existing is None:
                saved = await kube.create(GUARDRAIL_CONFIG, obj)
            else:
                saved = await replace_as_seen(kube, GUARDRAIL_CONFIG, existing, form.seen,
                                              lambda base: gr.desired(form, ns, base)[0])
        except Edited:
            errors = {"_form": CONFLICT}
        except KubeError as exc:
            errors = forms.kube_errors(exc, gr.api_fields(included))
            if exc.status == 409 and exc.reason == "Conflict":
                errors = {"_form": CONFLICT}
    if errors:
        status_row = await _status_row(request, identity, existing) if existing is not None else None
        return _config_form(request, form, errors, editing, status_row, status=422)
    name = form.config_id
    try:
        for i, key in keys.items():
            await _store_key(kube, ns, saved, form.models[i].type, key)
        for stale in gr.stale_secrets(name, existing, saved):
            await kube.delete(SECRET, stale, ns)
    except KubeError as exc:
        flash(request, "error", f"The configuration {name} was saved, but an API key was not: {exc}. Enter the key "
                                "again and save.")
        return redirect(f"/admin/guardrails/configs/{q(name)}")
    log.info("console_guardrail_config_saved", user=identity.username, config=name, created=not editing,
             keys_stored=len(keys))  # how many keys, never a key
    flash(request, "ok", f"Saved guardrail configuration {name}. The controller validates it: its verdict is shown "
                         "below.")
    return redirect(f"/admin/guardrails/configs/{q(name)}")


@router.get("/admin/guardrails/new")
async def new_config_form(request: Request, identity: Admin) -> Response:
    return _config_form(request, gr.ConfigForm(), {}, editing=False)


@router.post("/admin/guardrails/new")
async def create_config(request: Request, identity: Admin) -> Response:
    return await _save(request, identity, None)


async def _config(request: Request, identity: Admin, config_id: str) -> dict[str, Any] | None:
    return await kube_as(request, identity).find(GUARDRAIL_CONFIG, config_id, _ns(request))


async def _status_row(request: Request, identity: Admin, obj: dict[str, Any]) -> dict[str, Any]:
    subs = await kube_as(request, identity).list(SUBSCRIPTION, _ns(request))
    return gr.config_row(obj, gr.attachments(subs))


def _no_such(request: Request) -> Response:
    return render(request, "error.html", 404, title="Guardrail configuration",
                  message="There is no such guardrail configuration.")


@router.get("/admin/guardrails/configs/{config_id}")
async def config_page(request: Request, identity: Admin, config_id: Annotated[str, Path(pattern=ID)]) -> Response:
    existing = await _config(request, identity, config_id)
    if existing is None:
        return _no_such(request)
    return _config_form(request, gr.form_from(existing), {}, editing=True,
                        status_row=await _status_row(request, identity, existing))


@router.post("/admin/guardrails/configs/{config_id}")
async def edit_config(request: Request, identity: Admin, config_id: Annotated[str, Path(pattern=ID)]) -> Response:
    existing = await _config(request, identity, config_id)
    if existing is None:
        return _no_such(request)
    return await _save(request, identity, existing)


@router.post("/admin/guardrails/configs/{config_id}/delete")
async def delete_config(request: Request, identity: Admin, config_id: Annotated[str, Path(pattern=ID)]) -> Response:
    kube, ns = kube_as(request, identity), _ns(request)
    try:
        await kube.delete(GUARDRAIL_CONFIG, config_id, ns)
        for obj in await kube.list(SECRET, ns, labels=f"{gr.CONFIG_LABEL}={config_id}", metadata_only=True):
            await kube.delete(SECRET, obj["metadata"]["name"], ns)
    except KubeError as exc:
        flash(request, "error", f"{config_id} was not deleted: {exc}")
        return redirect(f"/admin/guardrails/configs/{q(config_id)}")
    log.info("console_guardrail_config_deleted", user=identity.username, config=config_id)
    flash(request, "ok", f"Deleted guardrail configuration {config_id} and the API keys the console stored for it.")
    return redirect("/admin/guardrails")
