"""The administrators' forms for PriceBooks, Plans, TenantAccounts and BudgetPolicies, pure: which fields each
form shows, where each lives in the object, and the object a submitted form becomes (exactly those fields: the
console applies it with server-side apply under its own field manager, so every field it does not show stays as it
is).

Values are passed on as typed (amounts as decimal strings): the API server's own validation (the CRDs' OpenAPI
and CEL rules) judges them, and its refusals are shown next to the field they name (`forms.kube_errors`). Only
what the form itself must understand is parsed here: whole numbers, yes/no, lists, labels, the SKU lines and the
caps lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

__all__ = ["FIELD_MANAGER", "FORMS", "Field", "Form", "FormError", "build", "earliest_effective", "values_of"]

FIELD_MANAGER: Final = "maasctl-billing-console"
ORGANIZATION_LABEL: Final = "billing.opendatahub.io/organization-id"
_SKU_TOKEN: Final = re.compile(r"^([a-z_]+)=(.+)$")
_THRESHOLD: Final = re.compile(r"^([0-9]{1,3})%?:([A-Za-z]+)$")
EFFECTIVE_MARGIN_SECONDS: Final = 5
_DAYS: Final = re.compile(r"[0-9]{1,4}")  # ASCII digits only (str.isdigit also takes other scripts' digits)


class FormError(Exception):
    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = dict(errors)


@dataclass(frozen=True)
class Field:
    name: str  # the form field
    label: str
    path: tuple[str, ...]  # where it lives in the object
    kind: str = "text"  # text | int | bool | choice | list | labels | skus | caps | time
    choices: tuple[str, ...] = ()
    help: str = ""
    required: bool = False

    @property
    def api_path(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class Form:
    kind: str
    plural: str
    title: str
    fields: tuple[Field, ...]
    help: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    def field_map(self) -> dict[str, str]:
        """API field path -> form field (for the API server's refusals)."""
        return {f.api_path: f.name for f in self.fields}


_META = (Field("namespace", "Namespace", ("metadata", "namespace"), required=True,
               help="The namespace of the Gateway (or HTTPRoute) its Plans attach to."),
         Field("name", "Name", ("metadata", "name"), required=True, help="Lowercase letters, digits and dashes."))
CURRENCIES: Final = ("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF")

FORMS: Final[Mapping[str, Form]] = {
    "pricebooks": Form("PriceBook", "pricebooks", "PriceBook", (
        *_META,
        Field("currency", "Currency", ("spec", "currency"), "choice", CURRENCIES, required=True),
        Field("effectiveFrom", "Effective from (UTC)", ("spec", "effectiveFrom"), "time",
              help="YYYY-MM-DDTHH:MM:SSZ. At least noticeDays after the book is created, or it stays Draft. "
                   "Empty: as soon as the notice allows (noticeDays from now)."),
        Field("noticeDays", "Notice (days)", ("spec", "noticeDays"), "int", required=True,
              help="How long tenants are told before these prices apply."),
        Field("supersedes", "Supersedes", ("spec", "supersedes"),
              help="The PriceBook this one replaces once it is in force (empty: a first book)."),
        Field("providerFaultPolicy", "When the provider fails", ("spec", "providerFaultPolicy"), "choice",
              ("", "zero_charge", "bill_partial")),
        Field("clientDisconnectPolicy", "When the client disconnects", ("spec", "clientDisconnectPolicy"),
              "choice", ("", "bill_partial", "zero_charge")),
        Field("skus", "SKUs", ("spec", "skus"), "skus", required=True,
              help="One per line: SKU UNIT [geo=REGION] DIMENSION=RATE ... e.g. "
                   "llm/gpt-x per-1M-tokens prompt_tokens=2.50 completion_tokens=10.00"),
    )),
    "plans": Form("Plan", "plans", "Plan", (
        *_META,
        Field("targetKind", "Attached to", ("spec", "targetRef", "kind"), "choice", ("Gateway", "HTTPRoute"),
              required=True),
        Field("targetName", "Gateway or HTTPRoute name", ("spec", "targetRef", "name"), required=True),
        Field("priceBookRef", "PriceBook", ("spec", "priceBookRef"), help="The book its tenants are rated with."),
        Field("tokensPerMinute", "Tokens per minute", ("spec", "limits", "tokensPerMinute"), "int"),
        Field("tokensPerDay", "Tokens per day", ("spec", "limits", "tokensPerDay"), "int"),
        Field("requestsPerMinute", "Requests per minute", ("spec", "limits", "requestsPerMinute"), "int"),
        Field("maxConcurrency", "Concurrent requests (stored only)", ("spec", "limits", "maxConcurrency"), "int"),
        Field("gpuQuota", "GPU quota (Kueue)", ("spec", "limits", "gpuQuota"), "int"),
        Field("modelScopes", "Models (globs, comma-separated)", ("spec", "modelScopes"), "list"),
        Field("geoScopes", "Regions (comma-separated; * for all)", ("spec", "geoScopes"), "list"),
        Field("queueClass", "Queue class", ("spec", "queueClass")),
    ), extra={"targetGroup": "gateway.networking.k8s.io"}),
    "tenantaccounts": Form("TenantAccount", "tenantaccounts", "Tenant", (
        *_META,
        Field("displayName", "Display name", ("spec", "displayName"), required=True),
        Field("organization", "Organization id", ("metadata", "labels", ORGANIZATION_LABEL),
              help="The organization.id of its subscriptions (empty: the tenant's name)."),
        Field("planRef", "Plan", ("spec", "planRef", "name"), required=True),
        Field("billingMode", "Billing mode", ("spec", "billingMode"), "choice",
              ("Prepaid", "Invoiced", "ShowbackOnly"), required=True),
        Field("priceBookPin", "Pinned PriceBook", ("spec", "priceBookPin"),
              help="Grandfathering: keeps this tenant on that book when a newer one supersedes it."),
        Field("billingConnectorRef", "BillingConnector", ("spec", "billingConnectorRef", "name"),
              help="Needed for automatic reloads."),
        Field("pspCustomerSecretRef", "Payment customer Secret", ("spec", "pspCustomerSecretRef", "name")),
        Field("reloadEnabled", "Reload automatically", ("spec", "reloadPolicy", "enabled"), "bool"),
        Field("reloadThreshold", "Reload below", ("spec", "reloadPolicy", "thresholdAmount")),
        Field("reloadAmount", "Reload amount", ("spec", "reloadPolicy", "reloadAmount")),
        Field("reloadCap", "Reloads at most (a month)", ("spec", "reloadPolicy", "monthlyCapAmount")),
        Field("graceAmount", "Grace below zero", ("spec", "gracePolicy", "graceAmount")),
        Field("warningThreshold", "Warning below", ("spec", "gracePolicy", "warningThreshold")),
    )),
    "budgetpolicies": Form("BudgetPolicy", "budgetpolicies", "Budget", (
        Field("namespace", "Namespace", ("metadata", "namespace"), required=True, help="The tenant's namespace."),
        _META[1],
        Field("tenant", "Tenant", ("spec", "tenantRef", "name"), required=True,
              help="The TenantAccount (in the same namespace) whose spend it caps."),
        Field("keyLabels", "API keys (labels)", ("spec", "selector", "keyLabels"), "labels",
              help="KEY=VALUE, comma-separated: only the keys with all these labels (empty: every key)."),
        Field("caps", "Caps", ("spec", "caps"), "caps", required=True,
              help="One per line: AMOUNT PERIOD PCT:ACTION ... e.g. 100.00 Monthly 50:Notify 80:Throttle "
                   "100:Freeze (PERIOD: Monthly, Weekly or Daily; ACTION: Notify, Throttle or Freeze)."),
    )),
}


def earliest_effective(now: datetime, notice_days: str) -> str | None:
    """The effectiveFrom an empty field stands for: `noticeDays` from now, plus a few seconds so that it is not
    before the creationTimestamp the API server stamps (whole seconds, its own clock); None when the notice is not
    a whole number (the form then says so)."""
    days = notice_days.strip()
    if _DAYS.fullmatch(days) is None:
        return None
    when = now.astimezone(UTC).replace(microsecond=0) + timedelta(days=int(days), seconds=EFFECTIVE_MARGIN_SECONDS)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _lines(text: str, name: str, shape: str) -> Iterator[tuple[int, list[str]]]:
    """The non-blank lines of a textarea as (line number, words), each of at least three words."""
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if words and len(words) < 3:
            raise FormError({name: f"line {n}: {shape}"})
        if words:
            yield n, words


def caps_text(caps: Any) -> str:
    return "\n".join(" ".join([str(c.get("amount", "")), str(c.get("period", "")),
                               *(f"{t.get('pct')}:{t.get('action')}" for t in c.get("thresholds") or ())])
                     for c in caps or ())


def parse_caps(text: str) -> list[dict[str, Any]]:
    """`AMOUNT PERIOD PCT:ACTION ...` lines -> caps. The amount and the names are passed on as written (the API
    server judges them, next to this field); only the line's shape and the percentages are read here."""
    out = []
    for n, words in _lines(text, "caps", "AMOUNT, PERIOD and at least one PCT:ACTION"):
        thresholds = []
        for word in words[2:]:
            m = _THRESHOLD.match(word)
            if m is None:
                raise FormError({"caps": f"line {n}: {word!r} is not PCT:ACTION (e.g. 80:Throttle)"})
            thresholds.append({"pct": int(m.group(1)), "action": m.group(2)})
        out.append({"amount": words[0], "period": words[1], "thresholds": thresholds})
    return out


def labels_text(labels: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in (labels or {}).items())


def parse_labels(text: str, name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise FormError({name: f"{item!r} is not KEY=VALUE"})
        out[key.strip()] = value.strip()
    return out


def _get(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _set(obj: dict[str, Any], path: Sequence[str], value: Any) -> None:
    cur = obj
    for key in path[:-1]:
        cur = cur.setdefault(key, {})
    cur[path[-1]] = value


def skus_text(skus: Any) -> str:
    lines = []
    for s in skus or ():
        geo = f" geo={s['geo']}" if s.get("geo") else ""
        rates = " ".join(f"{k}={v}" for k, v in (s.get("rates") or {}).items())
        lines.append(f"{s.get('sku', '')} {s.get('unit', '')}{geo} {rates}".strip())
    return "\n".join(lines)


def parse_skus(text: str, old: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """`SKU UNIT [geo=REGION] DIM=RATE ...` lines -> SKU entries (a pass-through of the same SKU and region kept)."""
    kept = {(str(s.get("sku")), str(s.get("geo") or "")): s.get("passThrough") for s in old if s.get("passThrough")}
    out = []
    for n, words in _lines(text, "skus", "SKU, unit and at least one DIMENSION=RATE"):
        entry: dict[str, Any] = {"sku": words[0], "unit": words[1], "rates": {}}
        for word in words[2:]:
            m = _SKU_TOKEN.match(word)
            if m is None:
                raise FormError({"skus": f"line {n}: {word!r} is not DIMENSION=RATE"})
            if m.group(1) == "geo":
                entry["geo"] = m.group(2)
            else:
                entry["rates"][m.group(1)] = m.group(2)
        if not entry["rates"]:
            raise FormError({"skus": f"line {n}: at least one DIMENSION=RATE"})
        through = kept.get((entry["sku"], str(entry.get("geo") or "")))
        if through:
            entry["passThrough"] = through
        out.append(entry)
    return out


def values_of(form: Form, obj: Mapping[str, Any]) -> dict[str, str]:
    """The form's fields filled from an object."""
    out = {}
    for f in form.fields:
        value = _get(obj, f.path)
        if f.kind == "skus":
            out[f.name] = skus_text(value)
        elif f.kind == "caps":
            out[f.name] = caps_text(value)
        elif f.kind == "labels":
            out[f.name] = labels_text(value)
        elif f.kind == "list":
            out[f.name] = ", ".join(str(v) for v in value or ())
        elif f.kind == "bool":
            out[f.name] = "on" if value else ""
        else:
            out[f.name] = "" if value is None else str(value)
    return out


def build(form: Form, values: Mapping[str, str], old: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The object a submitted form applies: apiVersion, kind, name, namespace and exactly the form's fields that
    have a value. Raises FormError with the fields the form itself cannot read."""
    obj: dict[str, Any] = {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": form.kind, "metadata": {}}
    errors: dict[str, str] = {}
    for f in form.fields:
        raw = (values.get(f.name) or "").strip()
        if f.kind == "skus":
            raw = (values.get(f.name) or "").strip("\n")
        if not raw and f.kind != "bool":
            if f.required:
                errors[f.name] = "Required."
            continue
        value: Any = raw
        if f.kind == "int":
            if not raw.isdigit() or len(raw) > 18:
                errors[f.name] = "A whole number."
                continue
            value = int(raw)
        elif f.kind == "bool":
            value = raw == "on"
        elif f.kind == "choice" and raw not in f.choices:
            errors[f.name] = f"One of {', '.join(c for c in f.choices if c)}."
            continue
        elif f.kind == "list":
            value = [v.strip() for v in raw.split(",") if v.strip()]
        elif f.kind == "skus":
            try:
                value = parse_skus(raw, (old or {}).get("spec", {}).get("skus") or () if old else ())
            except FormError as exc:
                errors.update(exc.errors)
                continue
        elif f.kind in ("caps", "labels"):
            try:
                value = parse_caps(raw) if f.kind == "caps" else parse_labels(raw, f.name)
            except FormError as exc:
                errors.update(exc.errors)
                continue
            if not value:
                if f.required:
                    errors[f.name] = "Required."
                continue
        _set(obj, f.path, value)
    if errors:
        raise FormError(errors)
    if form.kind == "Plan":
        obj["spec"]["targetRef"]["group"] = form.extra["targetGroup"]
        obj["spec"].setdefault("limits", {})
    if form.kind == "TenantAccount" and "reloadPolicy" in obj["spec"] and set(obj["spec"]["reloadPolicy"]) == {
            "enabled"} and not obj["spec"]["reloadPolicy"]["enabled"]:
        del obj["spec"]["reloadPolicy"]  # an unticked box alone is no reload policy
    return obj
