"""The billing operator's tenant portal API (`contract.billing_portal`) as the console calls it: always with the
signed-in user's own credential, so the API decides who belongs to which tenant (TokenReview + its membership
rule), never the console. The console adds no tenant of its own choosing: a tenant is only ever the one in the
page's path, and the API answers 404 for any tenant that is not the user's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx

from maasctl.contract.billing_portal import API_PREFIX
from maasctl.tls import default_tls

TIMEOUT: Final = 30


@dataclass
class PortalError(Exception):
    status: int
    message: str

    def __str__(self) -> str:
        return self.message


def _tenant_path(namespace: str, name: str) -> str:
    return f"{API_PREFIX}/tenants/{quote(namespace, safe='')}/{quote(name, safe='')}"


class PortalApi:
    """One user's view of the portal API (a short-lived HTTP client per page: nothing is shared between users)."""

    def __init__(self, base_url: str, credential: str) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {credential}"}

    async def _request(self, method: str, path: str, params: Mapping[str, str] | None = None,
                       body: Mapping[str, str] | None = None) -> Any:
        """The API's JSON answer; PortalError with its message for anything but 2xx."""
        try:
            async with httpx.AsyncClient(base_url=self._base, timeout=TIMEOUT, verify=default_tls()) as http:
                resp = await http.request(method, path, params=dict(params or {}), headers=self._headers,
                                          json=dict(body) if body is not None else None)
        except httpx.HTTPError as exc:
            raise PortalError(503, "The billing operator cannot be reached right now.") from exc
        if not 200 <= resp.status_code < 300:
            raise _error(resp)
        return resp.json()

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return await self._request("GET", path, params)

    async def tenants(self) -> list[dict[str, Any]]:
        return list((await self._get(f"{API_PREFIX}/tenants")).get("tenants") or [])

    async def tenant(self, namespace: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(_tenant_path(namespace, name))
        return out

    async def entries(self, namespace: str, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(_tenant_path(namespace, name) + "/entries", params)
        return out

    async def entry(self, namespace: str, name: str, entry_id: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(f"{_tenant_path(namespace, name)}/entries/{quote(entry_id, safe='')}")
        return out

    async def invoices(self, namespace: str, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(_tenant_path(namespace, name) + "/invoices", params)
        return out

    async def invoice(self, namespace: str, name: str, key: str, params: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(f"{_tenant_path(namespace, name)}/invoices/{quote(key, safe='')}",
                                              params)
        return out

    async def spend(self, namespace: str, name: str, days: int) -> dict[str, Any]:
        out: dict[str, Any] = await self._get(_tenant_path(namespace, name) + "/spend", {"days": str(days)})
        return out

    async def credit(self, namespace: str, name: str, credit_id: str, amount: str, reason: str) -> dict[str, Any]:
        """Credit the tenant's wallet (a billing administrator; `credit_id` makes a retry record it once)."""
        out: dict[str, Any] = await self._request("POST", _tenant_path(namespace, name) + "/credits", body={
            "id": credit_id, "amount": amount, "reason": reason})
        return out

    @asynccontextmanager
    async def export(self, namespace: str, name: str, params: Mapping[str, str]) -> AsyncIterator[httpx.Response]:
        """The CSV export as a streamed response (the caller passes its bytes through)."""
        try:
            async with httpx.AsyncClient(base_url=self._base, timeout=TIMEOUT,
                                         verify=default_tls()) as http, http.stream(
                    "GET", _tenant_path(namespace, name) + "/export.csv", params=dict(params),
                    headers=self._headers) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise _error(resp)
                yield resp
        except httpx.HTTPError as exc:
            raise PortalError(503, "The billing operator cannot be reached right now.") from exc


def _error(resp: httpx.Response) -> PortalError:
    try:
        message = str(resp.json().get("error") or "")
    except ValueError:
        message = ""
    return PortalError(resp.status_code, message or f"The billing operator answered HTTP {resp.status_code}.")
