"""maas-api as the console uses it: HTTP calls with the signed-in user's bearer token, so maas-api decides
what each user may see and do (its own TokenReview and admin check), exactly as for curl."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from maasctl.contract.errors import maas_api_error_fields


@dataclass
class MaasApiError(Exception):
    """maas-api refused or failed a call (`code` and `message` from its error body)."""

    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def _error(resp: httpx.Response) -> MaasApiError:
    try:
        code, message = maas_api_error_fields(resp.json())  # either envelope maas-api answers (`maasapi.errors`)
    except ValueError:
        code, message = "", ""
    return MaasApiError(resp.status_code, code or "error", message or f"maas-api answered HTTP {resp.status_code}")


class MaasApi:
    """The shared connection pool; `as_user(token)` gives the per-user view."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout)

    async def close(self) -> None:
        await self._http.aclose()

    def as_user(self, token: str) -> UserMaasApi:
        return UserMaasApi(self._http, token)


class UserMaasApi:
    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self._http = http
        self._headers = {"Authorization": f"Bearer {token}"}

    async def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                    json: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        try:
            resp = await self._http.request(method, path, params=_clean(params), json=json,
                                            headers={**self._headers, **(headers or {})})
        except httpx.HTTPError as exc:
            raise MaasApiError(503, "maas_api_unreachable", "maas-api cannot be reached right now") from exc
        if resp.status_code >= 300:
            raise _error(resp)
        return resp.json()

    async def subscriptions(self) -> list[dict[str, Any]]:
        """`/v1/subscriptions` (the reference's snake_case items) in the console's own terms."""
        items = await self._call("GET", "/v1/subscriptions")
        return [_subscription(item) for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    async def models(self, subscription: str | None = None) -> list[dict[str, Any]]:
        """Models the user can call (through `subscription` when given: the X-MaaS-Subscription header)."""
        headers = {"X-MaaS-Subscription": subscription} if subscription else None
        return list((await self._call("GET", "/v1/models", headers=headers)).get("data") or [])

    async def keys(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "/v1/api-keys", params={"limit": 100})).get("data") or [])

    async def key_config(self) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/v1/api-keys/config")
        return out

    async def mint(self, name: str, subscription: str | None, expires_in: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if subscription:
            body["subscription"] = subscription
        if expires_in:
            body["expiresIn"] = expires_in
        out: dict[str, Any] = await self._call("POST", "/v1/api-keys", json=body)
        return out

    async def revoke(self, key_id: str) -> None:
        await self._call("DELETE", f"/v1/api-keys/{quote(key_id, safe='')}", params={"reason": "revoked in console"})

    async def report(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/v1/usage/report", params=params)
        return out

    async def subscription_usage(self, namespace: str, name: str, params: Mapping[str, Any]) -> dict[str, Any]:
        path = f"/v1/usage/subscriptions/{quote(namespace, safe='')}/{quote(name, safe='')}"
        out: dict[str, Any] = await self._call("GET", path, params=params)
        return out

    @asynccontextmanager
    async def export(self, params: Mapping[str, Any]) -> AsyncIterator[httpx.Response]:
        """The CSV export as a streamed response (the caller iterates `aiter_bytes`)."""
        request = self._http.build_request("GET", "/v1/usage/export", params=_clean(params), headers=self._headers)
        try:
            resp = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise MaasApiError(503, "maas_api_unreachable", "maas-api cannot be reached right now") from exc
        try:
            if resp.status_code >= 300:
                await resp.aread()
                raise _error(resp)
            yield resp
        finally:
            await resp.aclose()


def _subscription(item: Mapping[str, Any]) -> dict[str, Any]:
    """A `SubscriptionListItem` as the pages use it: `id` (`namespace/name`), `ref`, `name`, `namespace`,
    `displayName`, `description`, `priority`, `phase`, `modelRefs[{name, namespace, tokenRateLimits}]`, and
    `billing` (maas-api's billing terms: Plan limits and tenant state; None when maas-api does not know them)."""
    namespace = str(item.get("namespace") or "")
    name = str(item.get("subscription_id_header") or "").rpartition("/")[2]
    display = item.get("display_name")
    description = item.get("subscription_description")
    billing = item.get("billing")
    return {
        "id": f"{namespace}/{name}",
        "ref": str(item.get("subscription_id_header") or ""),  # as keys and model listings name it
        "billing": [t for t in billing if isinstance(t, dict)] if isinstance(billing, list) else None,
        "name": name,
        "namespace": namespace,
        "displayName": display,
        "description": description if description not in (None, display, name) else None,
        "priority": item.get("priority", 0),
        "phase": item.get("phase"),
        "modelRefs": [
            {"name": m.get("name"), "namespace": m.get("namespace"), "unlimited": bool(m.get("unlimited")),
             "tokenRateLimits": list(m.get("token_rate_limits") or [])}
            for m in item.get("model_refs") or [] if isinstance(m, dict)
        ],
    }


def _clean(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    return {k: v for k, v in params.items() if v not in (None, "")}
