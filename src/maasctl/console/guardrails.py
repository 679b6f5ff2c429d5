"""Pure functions between the Guardrails pages and the GuardrailsSettings / GuardrailConfig objects.

The settings form owns `spec.enabled` and `spec.failurePolicy` only (a merge patch of those two: the timeout
and anything newer survive). The configuration form owns the configuration's models (type, model name, base
URL, key reference), `configYaml` and `railsCo`; like the subscription form, a save writes the object as read
with exactly those fields replaced, so a model's `engine` or a field of a newer CRD is kept.

A guard model's API key is written by the console into a Secret of its own (`secret_name`), never read back
(the console lists Secrets as metadata only) and never put in a page, a form value or a log line. The Secret is
owned by its GuardrailConfig (garbage-collected with it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from maasctl.api import API_VERSION, FailurePolicy, GuardrailConfig, GuardrailsSettingsSpec
from maasctl.api.guardrails import SETTINGS_NAME
from maasctl.console.edits import fingerprint
from maasctl.console.subscriptions import FormError

SECRET_PREFIX = "maas-guardrail-"
CONFIG_LABEL = "maas.opendatahub.io/guardrail-config"
KEY_FIELD = "api-key"
BLANK_ROWS = 2
MAX_ROWS = 16
POLICIES = {FailurePolicy.FAIL_CLOSED.value: "End request on guardrails failure",
            FailurePolicy.FAIL_OPEN.value: "Ignore guardrails on failure"}
DISABLED_NOTE = ("Disabling guardrails removes the data-plane integration: the guardrails engine is removed and no "
                 "request is checked. Guardrail settings that remain on subscriptions do not take effect while "
                 "guardrails are disabled.")

# -- settings --------------------------------------------------------------------------------------------------

def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def settings_view(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the page shows of the settings (None: never saved, i.e. disabled)."""
    spec, status = (obj or {}).get("spec") or {}, (obj or {}).get("status") or {}
    policy = str(spec.get("failurePolicy") or FailurePolicy.FAIL_CLOSED.value)
    return {
        "exists": obj is not None, "enabled": bool(spec.get("enabled")), "failure_policy": policy,
        "policy_label": POLICIES.get(policy, policy), "timeout": spec.get("timeoutSeconds", 10),
        "phase": status.get("phase") or ("Disabled" if not spec.get("enabled") else "Pending"),
        "message": str(condition(obj, "Ready").get("message") or ""),
    }


def settings_spec(enabled: bool, policy: str) -> dict[str, Any]:
    """The two fields the settings form writes, checked with the API types. Raises FormError."""
    if policy not in POLICIES:
        raise FormError("failure_policy", "Select a failure policy: FailClosed or FailOpen.")
    GuardrailsSettingsSpec.model_validate({"enabled": enabled, "failurePolicy": policy})
    return {"enabled": enabled, "failurePolicy": policy}


def new_settings(namespace: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GuardrailsSettings",
            "metadata": {"name": SETTINGS_NAME, "namespace": namespace}, "spec": dict(spec)}


# -- configurations --------------------------------------------------------------------------------------------

@dataclass
class ModelRow:
    """One guardrail model in the form. The API key itself is never kept here (nor shown): only whether one is
    stored (`key_secret`) and whether the administrator typed a new one."""

    type: str = ""
    model: str = ""
    base_url: str = ""
    original: str = ""  # the type as read (a row whose type is edited keeps the entry's other fields)
    key_secret: str = ""  # Secret the stored key is in ("" = none)
    remove_key: bool = False
    new_key: bool = False  # a key was typed in this submission

    @property
    def blank(self) -> bool:
        return not (self.type or self.model or self.base_url or self.new_key)


@dataclass
class ConfigForm:
    config_id: str = ""
    config_yaml: str = ""
    rails_co: str = ""
    seen: str = ""
    models: list[ModelRow] = field(default_factory=list)


def secret_name(config_id: str, model_type: str) -> str:
    """The console's Secret for one model's key (types have no hyphens, so `_` -> `-` cannot collide)."""
    return f"{SECRET_PREFIX}{config_id}-{model_type.replace('_', '-')}"


def form_from(obj: Mapping[str, Any]) -> ConfigForm:
    spec = obj.get("spec") or {}
    rows = [ModelRow(type=str(m.get("type") or ""), model=str(m.get("model") or ""),
                     base_url=str(m.get("baseUrl") or ""), original=str(m.get("type") or ""),
                     key_secret=str((m.get("apiKeySecretRef") or {}).get("name") or ""))
            for m in spec.get("models") or []]
    return ConfigForm(config_id=str((obj.get("metadata") or {}).get("name") or ""),
                      config_yaml=str(spec.get("configYaml") or ""), rails_co=str(spec.get("railsCo") or ""),
                      seen=fingerprint(obj), models=rows)


def with_blank_rows(form: ConfigForm) -> ConfigForm:
    while len(form.models) < MAX_ROWS and sum(1 for r in form.models if r.blank) < BLANK_ROWS:
        form.models.append(ModelRow())
    return form


def _model_entry(row: ModelRow, base: Mapping[str, Any] | None, config_id: str) -> dict[str, Any]:
    entry = copy.deepcopy(dict(base or {}))
    entry["type"], entry["model"], entry["baseUrl"] = row.type, row.model, row.base_url
    if row.new_key:
        entry["apiKeySecretRef"] = {"name": secret_name(config_id, row.type), "key": KEY_FIELD}
    elif row.remove_key:
        entry.pop("apiKeySecretRef", None)
    return entry


def desired(form: ConfigForm, namespace: str, base: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[int]]:
    """The GuardrailConfig to write: `base` (as read; None when creating) with the form's fields set. Also
    returns, per spec.models index, the form row it came from. Raises FormError."""
    obj = copy.deepcopy(dict(base or {}))
    obj["apiVersion"], obj["kind"] = API_VERSION, "GuardrailConfig"
    obj.pop("status", None)
    meta = obj.setdefault("metadata", {})
    meta.pop("managedFields", None)
    meta["name"], meta["namespace"] = form.config_id, namespace
    spec = obj.setdefault("spec", {})
    old = {str(m.get("type")): m for m in spec.get("models") or []}
    models: list[dict[str, Any]] = []
    included: list[int] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(form.models):
        if row.blank:
            continue
        if not row.type:
            raise FormError(f"models-{i}-type", "Enter the model type (e.g. main).")
        if row.type in seen:
            raise FormError(f"models-{i}-type", f"Model type {row.type!r} is already used in this configuration: "
                                                "each model type at most once.")
        seen[row.type] = i
        models.append(_model_entry(row, old.get(row.original or row.type), form.config_id))
        included.append(i)
    if not models:
        raise FormError("models", "Add at least one guardrail model (type, model name and base URL).")
    spec["models"] = models
    spec["configYaml"] = form.config_yaml
    if form.rails_co.strip():
        spec["railsCo"] = form.rails_co
    else:
        spec.pop("railsCo", None)
    return obj, included


def validate(obj: Mapping[str, Any]) -> None:
    """The API types' rules (the CRD's own messages); fields of a newer CRD are left to the API server."""
    meta = obj.get("metadata") or {}
    try:
        GuardrailConfig.model_validate({"metadata": {k: meta[k] for k in ("name", "namespace") if k in meta},
                                        "spec": obj.get("spec")})
    except ValidationError as exc:
        if any(e["type"] != "extra_forbidden" for e in exc.errors()):
            raise


_ROW_FIELDS = {"type": "type", "model": "model", "baseUrl": "base_url", "apiKeySecretRef": "api_key"}


def error_field(loc: tuple[str | int, ...], included: list[int]) -> str:
    """The form field of a pydantic error location; `included[i]` is the form row of spec.models[i]."""
    if loc[:2] == ("spec", "models"):
        if len(loc) > 3 and isinstance(loc[2], int) and loc[2] < len(included):
            return f"models-{included[loc[2]]}-{_ROW_FIELDS.get(str(loc[3]), 'type')}"
        return "models"
    if loc[:2] == ("spec", "configYaml"):
        return "config_yaml"
    if loc[:2] == ("spec", "railsCo"):
        return "rails_co"
    if loc[:1] == ("metadata",):
        return "config_id"
    return "_form"


def api_fields(included: list[int]) -> dict[str, str]:
    """API server field paths -> form fields (for `forms.kube_errors`)."""
    out = {"metadata.name": "config_id", "spec.models": "models", "spec.configYaml": "config_yaml",
           "spec.railsCo": "rails_co", "metadata.resourceVersion": "_form"}
    for i, row in enumerate(included):
        for api, form_field in _ROW_FIELDS.items():
            out[f"spec.models[{i}].{api}"] = f"models-{row}-{form_field}"
        out[f"spec.models[{i}]"] = f"models-{row}-type"
    return out


def key_secret(namespace: str, config: Mapping[str, Any], model_type: str, key: str) -> dict[str, Any]:
    """The Secret holding one guard model's API key, owned by its configuration (deleted with it)."""
    meta = config["metadata"]
    owner = {"apiVersion": API_VERSION, "kind": "GuardrailConfig", "name": meta["name"], "uid": meta["uid"]}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(str(meta["name"]), model_type), "namespace": namespace,
                         "labels": {CONFIG_LABEL: str(meta["name"])}, "ownerReferences": [owner]},
            "stringData": {KEY_FIELD: key}}


def stale_secrets(config_id: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[str]:
    """The console's key Secrets the saved configuration no longer references (kubectl's are never touched)."""
    def refs(obj: Mapping[str, Any] | None) -> set[str]:
        return {str((m.get("apiKeySecretRef") or {}).get("name")) for m in ((obj or {}).get("spec") or {}).get(
            "models") or [] if m.get("apiKeySecretRef")}
    mine = f"{SECRET_PREFIX}{config_id}-"
    return sorted(n for n in refs(before) - refs(after) if n.startswith(mine))


# -- the list --------------------------------------------------------------------------------------------------

def attachments(subscriptions: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Config ID -> the subscription models that enable it (as the subscriptions say now)."""
    out: dict[str, list[dict[str, str]]] = {}
    for sub in subscriptions:
        name = str((sub.get("metadata") or {}).get("name") or "")
        for m in (sub.get("spec") or {}).get("modelRefs") or []:
            g = m.get("guardrails") or {}
            if g.get("enabled") and g.get("config"):
                out.setdefault(str(g["config"]), []).append(
                    {"subscription": name, "model": f"{m.get('namespace')}/{m.get('name')}"})
    return out


def config_row(obj: Mapping[str, Any], attached: Mapping[str, list[dict[str, str]]]) -> dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = str(meta.get("name") or "")
    current = status.get("observedGeneration") == meta.get("generation")
    valid = condition(obj, "Valid")
    return {
        "name": name,
        "models": [{"type": m.get("type"), "model": m.get("model"), "base_url": m.get("baseUrl"),
                    "key": bool(m.get("apiKeySecretRef"))} for m in spec.get("models") or []],
        "phase": ("Deleting" if meta.get("deletionTimestamp") else status.get("phase") if current else None)
        or "Pending",
        "problem": str(valid.get("message") or "") if current and valid.get("status") == "False" else "",
        "deployed": str(condition(obj, "Deployed").get("message") or "") if current else "",
        "attached": list(attached.get(name, [])),
    }
