"""Pure functions between the subscription form and the MaaSSubscription + its matching MaaSAuthPolicy.

Subscribers only reach a model when an auth policy admits them too (the gateway is closed by default), so
every subscription saved in the console has a MaaSAuthPolicy of the same name, labelled as the console's,
with the same models and subjects. Policies the console did not create are never changed.

A save never loses what the form does not show: the object written is the one read, with exactly the fields
the form owns (see `desired`) replaced. Every other field (`tokenMetadata.organizationId`, a model's disabled
guardrails entry, labels, annotations, fields of a newer CRD) is carried over verbatim. Per model the form
chooses a guardrail configuration or none. The write is a full update guarded by what the administrator saw
(`console.edits`: a status write by the controller meanwhile is no conflict, a spec or metadata change is).
Not a server-side apply: apply cannot remove a value another field manager also owns (a user or model added
with `kubectl apply`), so an edit that removes one would silently not happen.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from maasctl.api import (
    API_VERSION,
    DESCRIPTION_ANNOTATION,
    DISPLAY_NAME_ANNOTATION,
    MaaSAuthPolicy,
    MaaSSubscription,
)
from maasctl.console import tiers
from maasctl.console.edits import fingerprint

MANAGED_LABEL = "maas.opendatahub.io/console-subscription"


class FormError(ValueError):
    """A value the form cannot turn into the API's shape; `field` is the form field it is about."""

    def __init__(self, form_field: str, message: str) -> None:
        super().__init__(message)
        self.field = form_field


@dataclass
class ModelRow:
    """One published model in the form: included or not, its tiers as typed, unlimited, its price, and the
    guardrail configuration its requests are checked with ("" = none)."""

    namespace: str
    name: str
    kind: str = ""
    include: bool = False
    tiers: str = ""
    unlimited: bool = False
    price: str = ""  # billingRate.perToken, a decimal string (never a float)
    guardrails: str = ""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class SubscriptionForm:
    name: str = ""
    display_name: str = ""
    description: str = ""
    users: str = ""
    groups: str = ""
    priority: str = "0"
    organization_id: str = ""
    organization_locked: bool = False  # set on the object: shown read-only (the API forbids a change)
    cost_center: str = ""
    labels: str = ""  # one key=value per line
    inference_priority: str = ""  # empty: omitted (not the same as 0)
    gateway_namespace: str = ""
    gateway_name: str = ""
    seen: str = ""  # fingerprint of the object the form was filled from
    models: list[ModelRow] = field(default_factory=list)
    guardrail_configs: list[str] = field(default_factory=list)  # the configurations a model can choose
    guardrails_enabled: bool = False  # the global switch: while off, chosen configurations have no effect


def split_list(text: str) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in text.replace("\n", ",").split(",") if x.strip()))


def labels_from_text(text: str) -> dict[str, str]:
    """`key=value` lines -> a map (blank lines ignored)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FormError("labels", f"write each label as key=value on its own line, not {line.strip()!r}")
        if key in out:
            raise FormError("labels", f"label {key!r} is given twice")
        out[key] = value.strip()
    return out


def labels_to_text(labels: Mapping[str, Any] | None) -> str:
    return "\n".join(f"{k}={v}" for k, v in (labels or {}).items())


def integer(text: str, form_field: str, default: int | None) -> int | None:
    raw = text.strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise FormError(form_field, f"enter a whole number, not {raw!r}") from None


def form_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The form's values for an existing subscription (models are rows, see `model_row`)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    owner, notes = spec.get("owner") or {}, meta.get("annotations") or {}
    token_meta, gateway = spec.get("tokenMetadata") or {}, spec.get("gatewayRef") or {}
    org = str((spec.get("organization") or {}).get("id") or "")
    inference = spec.get("inferencePriority")
    return {
        "name": str(meta.get("name") or ""), "display_name": notes.get(DISPLAY_NAME_ANNOTATION, ""),
        "description": notes.get(DESCRIPTION_ANNOTATION, ""), "users": ", ".join(owner.get("users") or []),
        "groups": ", ".join(g["name"] for g in owner.get("groups") or []),
        "priority": str(spec.get("priority", 0)), "organization_id": org, "organization_locked": bool(org),
        "cost_center": str(token_meta.get("costCenter") or ""), "labels": labels_to_text(token_meta.get("labels")),
        "inference_priority": "" if inference is None else str(inference),
        "gateway_namespace": str(gateway.get("namespace") or ""), "gateway_name": str(gateway.get("name") or ""),
        "seen": fingerprint(obj),
    }


def fill_row(row: ModelRow, entry: Mapping[str, Any]) -> None:
    """Show an existing modelRefs entry in its row."""
    row.include = True
    row.unlimited = bool(entry.get("unlimited"))
    row.tiers = "" if row.unlimited else tiers.to_text(entry.get("tokenRateLimits") or [])
    row.price = str((entry.get("billingRate") or {}).get("perToken") or "")
    chosen = entry.get("guardrails") or {}
    row.guardrails = str(chosen.get("config") or "") if chosen.get("enabled") else ""


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    """Set a field, or remove it when the form leaves it empty (None)."""
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value


def _sub_map(target: dict[str, Any], key: str) -> dict[str, Any]:
    value = target.get(key)
    if not isinstance(value, dict):
        value = target[key] = {}
    return value


def _prune(target: dict[str, Any], key: str) -> None:
    if target.get(key) == {}:
        del target[key]


def _model_entry(row: ModelRow, base: Mapping[str, Any] | None, limits: list[dict[str, Any]] | None
                 ) -> dict[str, Any]:
    entry = copy.deepcopy(dict(base or {}))
    entry["name"], entry["namespace"] = row.name, row.namespace
    _set(entry, "tokenRateLimits", limits)
    _set(entry, "unlimited", True if limits is None else None)
    price = row.price.strip()
    if price:
        _sub_map(entry, "billingRate")["perToken"] = price
    else:
        (entry.get("billingRate") or {}).pop("perToken", None)
        _prune(entry, "billingRate")
    chosen = entry.get("guardrails") or {}
    if row.guardrails:
        entry["guardrails"] = {**chosen, "enabled": True, "config": row.guardrails}
    elif chosen.get("enabled"):  # "none" chosen: the model is no longer checked
        del entry["guardrails"]
    return entry  # a disabled guardrails entry is kept as it was


def desired(form: SubscriptionForm, namespace: str, base: Mapping[str, Any] | None,
            limits: Mapping[str, list[dict[str, Any]] | None]) -> tuple[dict[str, Any], list[int]]:
    """The object to write: `base` (the object as read; None when creating) with the form's fields set.

    `limits` maps each included row's ref to its tiers (None: unlimited). Also returns, per spec.modelRefs
    index, the form row it came from (to put errors next to the right row). Raises FormError.
    """
    obj = copy.deepcopy(dict(base or {}))
    obj["apiVersion"], obj["kind"] = API_VERSION, "MaaSSubscription"
    obj.pop("status", None)
    meta = _sub_map(obj, "metadata")
    meta.pop("managedFields", None)  # the API server keeps tracking ownership itself
    meta["name"], meta["namespace"] = form.name, namespace
    notes = _sub_map(meta, "annotations")
    _set(notes, DISPLAY_NAME_ANNOTATION, form.display_name.strip() or None)
    _set(notes, DESCRIPTION_ANNOTATION, form.description.strip() or None)
    _prune(meta, "annotations")  # metadata.resourceVersion stays the one read: a write in between conflicts

    spec = _sub_map(obj, "spec")
    owner = _sub_map(spec, "owner")
    _set(owner, "users", split_list(form.users) or None)
    _set(owner, "groups", [{"name": g} for g in split_list(form.groups)] or None)
    spec["priority"] = integer(form.priority, "priority", 0)
    _set(spec, "inferencePriority", integer(form.inference_priority, "inference_priority", None))

    org_id = form.organization_id.strip()
    if org_id:
        _sub_map(spec, "organization")["id"] = org_id
    elif (spec.get("organization") or {}).get("id"):
        raise FormError("organization_id", "organization.id cannot be removed once set")

    token_meta = _sub_map(spec, "tokenMetadata")
    _set(token_meta, "costCenter", form.cost_center.strip() or None)
    _set(token_meta, "labels", labels_from_text(form.labels) or None)
    _prune(spec, "tokenMetadata")

    gw_ns, gw_name = form.gateway_namespace.strip(), form.gateway_name.strip()
    if bool(gw_ns) != bool(gw_name):
        raise FormError("gateway", "enter both the Gateway's namespace and its name, or neither for the default "
                                   "Gateway")
    _set(spec, "gatewayRef", {"name": gw_name, "namespace": gw_ns} if gw_name else None)

    rows = {row.ref: (i, row) for i, row in enumerate(form.models) if row.include}
    refs: list[dict[str, Any]] = []
    included: list[int] = []
    for old in spec.get("modelRefs") or []:  # kept entries stay where they were
        key = f"{old.get('namespace')}/{old.get('name')}"
        if key in rows:
            i, row = rows.pop(key)
            refs.append(_model_entry(row, old, limits.get(key)))
            included.append(i)
    for key, (i, row) in rows.items():
        refs.append(_model_entry(row, None, limits.get(key)))
        included.append(i)
    spec["modelRefs"] = refs
    return obj, included


def validate(obj: Mapping[str, Any]) -> None:
    """Check the object with the API types (the CRD's own rules and messages). Fields this console does not
    know (a newer CRD) are left to the API server. Raises pydantic.ValidationError."""
    meta = obj.get("metadata") or {}
    try:
        MaaSSubscription.model_validate({
            "metadata": {k: meta[k] for k in ("name", "namespace", "annotations") if k in meta},
            "spec": obj.get("spec")})
    except ValidationError as exc:
        if any(e["type"] != "extra_forbidden" for e in exc.errors()):
            raise


def auth_policy(sub: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any]:
    """The auth policy admitting the subscription's subscribers to its models: `base` (the console's policy as
    read, None when there is none) with modelRefs and subjects.users/groups set, all else kept."""
    meta, spec = sub["metadata"], sub["spec"]
    owner = spec.get("owner") or {}
    obj = copy.deepcopy(dict(base or {}))
    obj["apiVersion"], obj["kind"] = API_VERSION, "MaaSAuthPolicy"
    obj.pop("status", None)
    pmeta = _sub_map(obj, "metadata")
    pmeta.pop("managedFields", None)
    pmeta["name"], pmeta["namespace"] = meta["name"], meta["namespace"]
    _sub_map(pmeta, "labels")[MANAGED_LABEL] = str(meta["name"])
    pspec = _sub_map(obj, "spec")
    old_refs = {f"{r.get('namespace')}/{r.get('name')}": r for r in pspec.get("modelRefs") or []}
    pspec["modelRefs"] = [{**copy.deepcopy(old_refs.get(f"{r['namespace']}/{r['name']}", {})),
                           "name": r["name"], "namespace": r["namespace"]} for r in spec["modelRefs"]]
    subjects = _sub_map(pspec, "subjects")
    _set(subjects, "users", list(owner["users"]) if owner.get("users") else None)
    _set(subjects, "groups", [{"name": g["name"]} for g in owner["groups"]] if owner.get("groups") else None)
    MaaSAuthPolicy.model_validate({"metadata": {"name": pmeta["name"], "namespace": pmeta["namespace"]},
                                   "spec": {k: v for k, v in pspec.items()
                                            if k in ("modelRefs", "subjects", "meteringMetadata")}})
    return obj


def _model_field(rest: tuple[str | int, ...], row: int) -> str:
    part = {"billingRate": "price", "guardrails": "guardrails"}.get(str(rest[0]) if rest else "", "tiers")
    return f"model-{row}-{part}"


def error_field(loc: tuple[str | int, ...], included: list[int]) -> str:
    """The form field of a pydantic error location; `included[i]` is the form row of spec.modelRefs[i]."""
    top = {"owner": "subscribers", "priority": "priority", "organization": "organization_id",
           "inferencePriority": "inference_priority", "gatewayRef": "gateway"}
    if loc[:1] == ("spec",) and len(loc) > 1 and isinstance(loc[1], str) and loc[1] in top:
        return top[loc[1]]
    if loc[:2] == ("spec", "tokenMetadata"):
        return {"costCenter": "cost_center", "labels": "labels"}.get(str(loc[2]) if len(loc) > 2 else "", "_form")
    if loc[:2] == ("spec", "modelRefs"):
        if len(loc) > 2 and isinstance(loc[2], int) and loc[2] < len(included):
            return _model_field(loc[3:], included[loc[2]])
        return "models"
    if loc and loc[0] == "metadata":
        return "display_name" if "annotations" in loc else "name"
    return "_form"


def api_fields(included: list[int]) -> dict[str, str]:
    """API server field paths -> form fields (for `forms.kube_errors`)."""
    out = {"metadata.name": "name", "metadata.annotations": "display_name", "spec.owner": "subscribers",
           "spec.priority": "priority", "spec.modelRefs": "models", "metadata.resourceVersion": "_form",
           "spec.organization": "organization_id", "spec.tokenMetadata.costCenter": "cost_center",
           "spec.tokenMetadata.labels": "labels", "spec.inferencePriority": "inference_priority",
           "spec.gatewayRef": "gateway"}
    for i, row in enumerate(included):
        out[f"spec.modelRefs[{i}]"] = f"model-{row}-tiers"
        out[f"spec.modelRefs[{i}].billingRate"] = f"model-{row}-price"
        out[f"spec.modelRefs[{i}].guardrails"] = f"model-{row}-guardrails"
    return out
