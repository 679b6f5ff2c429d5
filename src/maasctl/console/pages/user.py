"""Pages for every signed-in user: My Subscriptions (limits, current usage, chart), API keys (mint, shown
once, list, revoke) and the models they can call, with a ready-to-paste curl for those on a MaaS gateway origin."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote, urlsplit, urlunsplit

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response

from maasctl.console import usage
from maasctl.console.maasapi_client import MaasApiError, UserMaasApi
from maasctl.console.web import User, console, ensure_session, flash, maasapi_as, redirect, render
from maasctl.contract.origins import origin

router = APIRouter()
NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
NS = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
EXPIRY_CHOICES = (("1d", "1 day"), ("7d", "7 days"), ("30d", "30 days"), ("90d", "90 days"))
ONCE_KEY = "minted-key"


async def _current_usage(api: UserMaasApi, sub: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Per model and tier window: tokens used in that window (`usage.usage_query`: the window itself up to an hour,
    whole hours beyond)."""
    windows = {t["window"] for m in sub.get("modelRefs") or [] for t in m.get("tokenRateLimits") or []}
    used: dict[tuple[str, str], int] = {}
    labels: dict[str, str] = {}
    for window in sorted(windows):
        query, label = usage.usage_query(window, now)
        labels[window] = label
        report = await api.subscription_usage(sub["namespace"], sub["name"], query)
        for m in report.get("models") or []:
            used[(m["model"], window)] = int(m.get("totalTokens") or 0)
    return {"used": used, "labels": labels}


@router.get("/my/subscriptions")
async def my_subscriptions(request: Request, identity: User) -> Response:
    api = maasapi_as(request, identity)
    error = None
    subs: list[dict[str, Any]] = []
    current: dict[str, dict[str, Any]] = {}
    try:
        subs = await api.subscriptions()
        now = datetime.now(UTC)
        for sub in subs:
            current[sub["id"]] = await _current_usage(api, sub, now)
    except MaasApiError as exc:
        error = str(exc)
    return render(request, "user/subscriptions.html", title="My Subscriptions", subs=subs, current=current,
                  error=error)


@router.get("/my/subscriptions/{namespace}/{name}")
async def my_subscription(request: Request, identity: User,
                          namespace: Annotated[str, Path(pattern=NS)], name: Annotated[str, Path(pattern=NAME)],
                          range: str = "7d") -> Response:
    range_name = range if range in usage.RANGES else "7d"
    api = maasapi_as(request, identity)
    try:
        subs = await api.subscriptions()
    except MaasApiError as exc:
        return render(request, "error.html", 502, title="Subscription", message=str(exc))
    sub = next((s for s in subs if s["namespace"] == namespace and s["name"] == name), None)
    if sub is None:
        return render(request, "error.html", 404, title="Subscription",
                      message="You are not a subscriber of this subscription.")
    now = datetime.now(UTC)

    async def total(b: usage.Bucket) -> int:
        report = await api.subscription_usage(namespace, name, {"from": usage.iso(b.start), "to": usage.iso(b.end)})
        return int((report.get("totals") or {}).get("totalTokens") or 0)

    try:
        current = await _current_usage(api, sub, now)
        points = await usage.series(usage.buckets(range_name, now), total)
    except MaasApiError as exc:
        return render(request, "error.html", 502, title="Subscription", message=str(exc))
    return render(request, "user/subscription.html", title=sub.get("displayName") or name, sub=sub,
                  current=current, points=points, range_name=range_name, ranges=usage.RANGES)


@router.get("/keys")
async def keys_page(request: Request, identity: User) -> Response:
    api = maasapi_as(request, identity)
    error = None
    keys: list[dict[str, Any]] = []
    subs: list[dict[str, Any]] = []
    try:
        keys = await api.keys()
        subs = await api.subscriptions()
    except MaasApiError as exc:
        error = str(exc)
    return render(request, "user/keys.html", title="API Keys", keys=keys, subs=subs, error=error,
                  expiry_choices=EXPIRY_CHOICES, form={}, errors={})


@router.post("/keys")
async def mint_key(request: Request, identity: User,
                   name: Annotated[str, Form(max_length=256)] = "",
                   subscription: Annotated[str, Form(max_length=317)] = "",
                   expires_in: Annotated[str, Form(max_length=16)] = "30d") -> Response:
    api = maasapi_as(request, identity)
    errors: dict[str, str] = {}
    name = name.strip()
    if not name:
        errors["name"] = "Enter a name for the key."
    if expires_in not in dict(EXPIRY_CHOICES):
        errors["expires_in"] = "Choose an expiry."
    if not errors:
        try:
            minted = await api.mint(name, subscription or None, expires_in)
        except MaasApiError as exc:
            field = ("subscription" if "subscription" in exc.code
                     else "name" if exc.code == "invalid_request" else "_form")
            errors[field] = str(exc)
        else:
            session = ensure_session(request)
            session.put_once(ONCE_KEY, json.dumps({"key": minted["key"], "name": minted["name"],
                                                   "subscription": minted["subscription"],
                                                   "expiresAt": minted["expiresAt"]}))
            return redirect("/keys/new")
    keys, subs = [], []
    try:
        keys, subs = await api.keys(), await api.subscriptions()
    except MaasApiError as exc:
        errors.setdefault("_form", str(exc))
    return render(request, "user/keys.html", 422, title="API Keys", keys=keys, subs=subs, error=None,
                  expiry_choices=EXPIRY_CHOICES, errors=errors,
                  form={"name": name, "subscription": subscription, "expires_in": expires_in})


@router.get("/keys/new")
async def new_key(request: Request, identity: User) -> Response:
    """The minted key, exactly once: it is removed from the session as this page is rendered."""
    raw = ensure_session(request).take_once(ONCE_KEY)
    if raw is None:
        flash(request, "warning", "A key is shown only once, right after it is created.")
        return redirect("/keys")
    return render(request, "user/new_key.html", title="Your new API key", minted=json.loads(raw))


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, identity: User,
                     key_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]) -> Response:
    try:
        await maasapi_as(request, identity).revoke(key_id)
    except MaasApiError as exc:
        flash(request, "error", f"The key was not revoked: {exc}")
    else:
        flash(request, "ok", "The key is revoked; requests with it are refused from now on.")
    return redirect("/keys")


# RFC 3986 path characters a model's path keeps as written; anything else is percent-encoded, so the URL holds no
# shell or curl-glob character ({ } [ ] | ` < > " \ ^).
_PATH_SAFE = "/:@!$&'()*+,;=%"


def _rebuilt_url(url: str) -> str | None:
    """The model's URL rebuilt from its parsed parts (http/https, a host, no userinfo, query or fragment), or
    None: rebuilding, not pattern-matching, is what keeps text a model owner wrote from becoming shell syntax."""
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host or "@" in parts.netloc or parts.query or parts.fragment:
        return None
    host = f"[{host}]" if ":" in host else host
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, quote(parts.path, safe=_PATH_SAFE), "", ""))


def on_gateway(url: str, gateway_urls: Sequence[str]) -> bool:
    """Whether `url` is on one of the MaaS gateway origins: the only hosts a pasted command may send a key to."""
    mine = origin(url)
    return mine is not None and mine in {origin(g) for g in gateway_urls}


def curl_for(model: dict[str, Any], gateway_urls: Sequence[str]) -> str | None:
    """A ready-to-paste chat request for the model, reading the key from $MAAS_API_KEY; None unless the model is
    served on a gateway origin (the command carries the key, and `endpointOverride` is written by model owners).
    Every interpolated value is shell-quoted."""
    url, model_id = _rebuilt_url(str(model.get("url") or "")), str(model.get("id") or "")
    if url is None or not model_id or not on_gateway(url, gateway_urls):
        return None
    body = json.dumps({"model": model_id, "messages": [{"role": "user", "content": "Hello!"}]})
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    return (f"curl -s {shlex.quote(base + '/chat/completions')} \\\n"
            f"  -H \"Authorization: Bearer $MAAS_API_KEY\" \\\n"
            f"  -H 'Content-Type: application/json' \\\n"
            f"  -d {shlex.quote(body)}")


def chosen_key(keys: Sequence[dict[str, Any]], wanted: str | None) -> dict[str, Any] | None:
    """The active key the commands are for: the one asked for (only among the user's own), else the only one."""
    active = [k for k in keys if k.get("status") == "active"]
    if wanted:
        return next((k for k in active if str(k.get("id")) == wanted), None)
    return active[0] if len(active) == 1 else None


def key_subscription_name(key: dict[str, Any]) -> str:
    """The bound subscription's name as `/v1/models` lists it under a model (`ns/name` outside the namespace)."""
    return str(key.get("subscription") or "")


@router.get("/models")
async def models_page(request: Request, identity: User, key: str | None = None) -> Response:
    api = maasapi_as(request, identity)
    error = None
    models: dict[str, dict[str, Any]] = {}
    keys: list[dict[str, Any]] = []
    subs: list[dict[str, Any]] = []
    try:
        keys = [k for k in await api.keys() if k.get("status") == "active"]
        subs = await api.subscriptions()
        # One listing per subscription (X-MaaS-Subscription): each model with every subscription it is in.
        for sub in subs:
            for m in await api.models(sub["id"]):
                entry = models.setdefault(m["owned_by"], {**m, "subscriptions": []})
                names = (str(s.get("name")) for s in m.get("subscriptions") or [] if isinstance(s, dict))
                entry["subscriptions"] = sorted({*entry["subscriptions"], *names})
    except MaasApiError as exc:
        error = str(exc)
    selected = chosen_key(keys, key)
    gateways = console(request).settings.gateway_urls
    rows = []
    for _, m in sorted(models.items()):
        # a command is offered only for what the selected key can run: a key is bound to one subscription
        runs = selected is not None and key_subscription_name(selected) in m["subscriptions"]
        if selected is not None and not runs:
            continue
        rows.append({**m, "url": str(m.get("url") or ""), "curl": curl_for(m, gateways) if runs else None,
                     "needs_key": selected is None})
    # The billing Plan limits and tenant state beside them: of the chosen key's subscription, else of each one.
    billed = [s for s in subs if s.get("billing") and (selected is None or s["ref"] == key_subscription_name(selected))]
    return render(request, "user/models.html", title="Models", models=rows, keys=keys, selected=selected,
                  error=error, billed=billed)
