"""A thin async client for any kind, on kubernetes-asyncio's ``ApiClient`` but with dicts, not models.

Why not the generated API classes: typed deserialization costs ~20x ``json.loads`` and the classes cannot pass
every watch option for custom resources. Every request goes through ``_send``, which applies a deadline,
counts ``rest_client_requests_total{code,method,host}`` and maps failures to ``maasctl.runtime.errors``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any
from urllib.parse import urlparse

import aiohttp
from kubernetes_asyncio.client import ApiClient

from maasctl.runtime.errors import NotLeader, ServerError, error_from_response
from maasctl.runtime.gvk import GroupVersionKind, ResourceInfo, RestMapper
from maasctl.runtime.metrics import Metrics
from maasctl.runtime.objects import FrozenObject, frozen_loads, thaw

__all__ = ["APPLY_PATCH", "JSON_PATCH", "MERGE_PATCH", "Client", "ObjectList"]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_DEFAULT_TIMEOUT = 30.0
_PAGE_SIZE = 500

Obj = dict[str, Any]


class ObjectList:
    """The result of a (fully paginated) LIST: the items and the collection's resourceVersion."""

    __slots__ = ("items", "resource_version")

    def __init__(self, items: list[Obj], resource_version: str) -> None:
        self.items = items
        self.resource_version = resource_version


class FrozenList:
    """A LIST decoded read-only (``Client.list_frozen``): frozen items and the collection's resourceVersion."""

    __slots__ = ("items", "resource_version")

    def __init__(self, items: list[FrozenObject], resource_version: str) -> None:
        self.items = items
        self.resource_version = resource_version


def _resource_version(last_page: Mapping[str, Any]) -> str:
    """A LIST's resourceVersion: its last page's."""
    return str((last_page.get("metadata") or {}).get("resourceVersion", ""))


class Client:
    """Get, list, watch, create, delete, patch and server-side apply for any GroupVersionKind.

    Args:
        api: a kubernetes-asyncio ``ApiClient`` (its configuration supplies host, TLS and credentials).
        metrics: where to count requests; optional.
        write_gate: called before every write; when it returns False the write raises ``NotLeader``
            without reaching the server (used by leader election so a deposed leader writes nothing).
        timeout: deadline in seconds for each non-watch request.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        metrics: Metrics | None = None,
        write_gate: Callable[[], bool] | None = None,
        timeout: float = _DEFAULT_TIMEOUT,
        mapper: RestMapper | None = None,
    ) -> None:
        self.api = api
        self._metrics = metrics
        self._gate = write_gate
        self._timeout = timeout
        self._host = urlparse(str(api.configuration.host)).netloc
        self.mapper = mapper if mapper is not None else RestMapper(self._get_path)

    def with_write_gate(self, gate: Callable[[], bool]) -> Client:
        """A client sharing connection and discovery whose writes are refused when ``gate()`` is False."""
        return Client(self.api, metrics=self._metrics, write_gate=gate, timeout=self._timeout, mapper=self.mapper)

    # -- transport ---------------------------------------------------------------------------------------

    def _count(self, code: int | str, method: str) -> None:
        if self._metrics is not None:
            self._metrics.rest_client_requests_total.labels(str(code), method, self._host).inc()

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        if method != "GET" and self._gate is not None and not self._gate():
            raise NotLeader(f"refusing {method} {path}: not the leader")
        try:
            resp: aiohttp.ClientResponse = await self.api.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=thaw(body) if body is not None else None,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=request_timeout if request_timeout is not None else self._timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._count("<error>", method)
            raise ServerError(0, "ConnectionError", f"{method} {path}: {exc!r}") from exc
        self._count(resp.status, method)
        return resp

    async def _send(self, method: str, path: str, *, decode: Callable[[bytes], Any] = json.loads, **kw: Any) -> Any:
        resp = await self._open(method, path, **kw)
        try:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ServerError(0, "ConnectionError", f"{method} {path}: {exc!r}") from exc
        finally:
            resp.release()
        if not 200 <= resp.status < 300:
            raise error_from_response(resp.status, data)
        return decode(data) if data else {}

    async def ready(self, timeout: float = 2.0) -> bool:
        """Whether the server's ``/readyz`` answers 200 now (no error raised: an outage is a False)."""
        try:
            resp = await self._open("GET", "/readyz", request_timeout=timeout)
        except ServerError:
            return False
        resp.release()
        return resp.status == 200

    async def _get_path(self, path: str) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await self._send("GET", path)
        return result

    async def _resource(self, gvk: GroupVersionKind) -> ResourceInfo:
        return await self.mapper.resource_for(gvk)

    # -- reads -------------------------------------------------------------------------------------------

    async def get(self, gvk: GroupVersionKind, name: str, namespace: str | None = None) -> Obj:
        """GET one object. Raises ``NotFound`` when it does not exist."""
        res = await self._resource(gvk)
        obj: Obj = await self._send("GET", res.path(namespace, name))
        return obj

    async def list(
        self,
        gvk: GroupVersionKind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = _PAGE_SIZE,
    ) -> ObjectList:
        """LIST all pages; items get ``apiVersion``/``kind`` filled in (the server omits them in lists)."""
        items: list[Obj] = []
        api_version, kind = gvk.api_version, gvk.kind
        page: Mapping[str, Any] = {}
        async for page in self._pages(gvk, namespace, label_selector, field_selector, resource_version, page_size,
                                      json.loads):
            for item in page.get("items") or ():
                item["apiVersion"] = api_version
                item["kind"] = kind
                items.append(item)
        return ObjectList(items, _resource_version(page))

    async def list_frozen(
        self,
        gvk: GroupVersionKind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = _PAGE_SIZE,
    ) -> FrozenList:
        """``list``, decoded straight into read-only objects (``objects.frozen_loads``): what a cache keeps,
        without decoding into dicts first and copying them frozen after."""
        items: list[FrozenObject] = []
        identity = {"apiVersion": gvk.api_version, "kind": gvk.kind}
        page: Mapping[str, Any] = {}
        async for page in self._pages(gvk, namespace, label_selector, field_selector, None, page_size,
                                      frozen_loads):
            items.extend(MappingProxyType({**item, **identity}) for item in page.get("items") or ())
        return FrozenList(items, _resource_version(page))

    async def _pages(self, gvk: GroupVersionKind, namespace: str | None, label_selector: str | None,
                     field_selector: str | None, resource_version: str | None, page_size: int,
                     decode: Callable[[bytes], Any]) -> AsyncIterator[Mapping[str, Any]]:
        """The pages of one LIST, each decoded by ``decode``, until the one without a ``continue`` token."""
        res = await self._resource(gvk)
        cont = ""
        while True:
            query = [("limit", str(page_size))]
            if cont:
                query.append(("continue", cont))
            elif resource_version is not None:
                query.append(("resourceVersion", resource_version))
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            page: Mapping[str, Any] = await self._send("GET", res.path(namespace), query=query, decode=decode)
            yield page
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return

    async def watch(
        self,
        gvk: GroupVersionKind,
        namespace: str | None = None,
        *,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmarks: bool = True,
        frozen: bool = False,
    ) -> AsyncIterator[Mapping[str, Any]]:
        """Stream raw watch events (``{"type": ..., "object": ...}``) from ``resource_version``; ``frozen``:
        decoded read-only (``objects.frozen_loads``), as a cache keeps them.

        Ends when the server closes the stream (after ``timeout_seconds``). The socket read deadline is a
        little above the server timeout, so a half-open connection cannot hang forever.

        Raises:
            Gone: the resourceVersion is too old (HTTP 410 on connect; in-stream 410s arrive as ERROR events).
        """
        res = await self._resource(gvk)
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        resp = await self._open(
            "GET",
            res.path(namespace),
            query=query,
            request_timeout=aiohttp.ClientTimeout(connect=10.0, sock_connect=10.0, sock_read=timeout_seconds + 30.0),
        )
        decode = frozen_loads if frozen else json.loads
        try:
            if resp.status != 200:
                raise error_from_response(resp.status, await resp.read())
            try:
                async for line in resp.content:
                    if line.strip():
                        yield decode(line)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ServerError(0, "ConnectionError", f"watch {res.plural}: {exc!r}") from exc
        finally:
            resp.release()

    # -- writes ------------------------------------------------------------------------------------------

    async def create(self, obj: Mapping[str, Any], *, field_manager: str | None = None) -> Obj:
        """POST a new object. Raises ``Conflict`` (AlreadyExists) if it exists."""
        res = await self._resource(GroupVersionKind.of(obj))
        meta = obj.get("metadata") or {}
        query = [("fieldManager", field_manager)] if field_manager else []
        created: Obj = await self._send("POST", res.path(meta.get("namespace")), body=obj, query=query)
        return created

    async def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> Obj:
        """PUT the object; its ``metadata.resourceVersion`` is the optimistic-lock precondition."""
        res = await self._resource(GroupVersionKind.of(obj))
        meta = obj["metadata"]
        out: Obj = await self._send("PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=obj)
        return out

    async def delete(
        self,
        gvk: GroupVersionKind,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        """DELETE, optionally only if the object still has this uid/resourceVersion (else ``Conflict``)."""
        res = await self._resource(gvk)
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        pre = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if pre:
            body["preconditions"] = pre
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        out: Obj = await self._send("DELETE", res.path(namespace, name), body=body)
        return out

    async def patch(
        self,
        gvk: GroupVersionKind,
        name: str,
        namespace: str | None,
        patch: Any,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        """PATCH with a JSON patch (list of ops), merge patch (dict) or apply patch."""
        res = await self._resource(gvk)
        query = [("fieldManager", field_manager)] if field_manager else []
        if force:
            query.append(("force", "true"))
        out: Obj = await self._send(
            "PATCH",
            res.path(namespace, name, subresource),
            body=patch,
            query=query,
            content_type=content_type,
        )
        return out

    async def apply(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        subresource: str | None = None,
        force: bool = True,
    ) -> Obj:
        """Server-side apply ``obj`` as ``field_manager`` (force on: the controller owns its fields).

        Fields this manager applied before and that are absent from ``obj`` are removed by the server.
        Use a separate manager for ``subresource="status"``.
        """
        meta = obj["metadata"]
        return await self.patch(
            GroupVersionKind.of(obj),
            meta["name"],
            meta.get("namespace"),
            obj,
            content_type=APPLY_PATCH,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
        )
