"""GroupVersionKind and the mapping from kinds to REST resources, learned from API discovery.

Discovery is lazy and per group-version: the first use of a kind asks ``/api/v1`` or ``/apis/<g>/<v>``,
and a missing group-version (a CRD not installed yet) is remembered only until ``refresh`` is called.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from maasctl.runtime.errors import NotFound
from maasctl.runtime.singleflight import SingleFlight

__all__ = ["GroupVersionKind", "ResourceInfo", "RestMapper"]


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    """A kind in one API version; ``group`` is ``""`` for the core group."""

    group: str
    version: str
    kind: str

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> GroupVersionKind:
        """Parse ``apps/v1`` or ``v1`` plus a kind."""
        group, _, version = api_version.rpartition("/")
        return cls(group, version, kind)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> GroupVersionKind:
        """The GVK of an object from its ``apiVersion`` and ``kind``."""
        return cls.from_api_version(str(obj["apiVersion"]), str(obj["kind"]))

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    def __str__(self) -> str:
        return f"{self.api_version}, Kind={self.kind}"


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """How a kind is served: its plural resource name, scope and subresources."""

    gvk: GroupVersionKind
    plural: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path for a collection, one object or an object's subresource."""
        base = f"/apis/{self.gvk.group}/{self.gvk.version}" if self.gvk.group else f"/api/{self.gvk.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


Fetch = Callable[[str], Awaitable[Mapping[str, Any]]]


class RestMapper:
    """Maps GVKs to resources using discovery; answers "is this kind served?".

    ``fetch`` is a GET returning parsed JSON (``Client`` passes its own, so discovery is counted in metrics).
    Concurrent lookups of one group-version share a single request: at start every informer asks at once.
    """

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._by_gv: dict[str, dict[str, ResourceInfo] | None] = {}
        self._asking: SingleFlight[str, dict[str, ResourceInfo] | None] = SingleFlight()

    async def _load(self, group_version: str) -> dict[str, ResourceInfo] | None:
        if group_version in self._by_gv:
            return self._by_gv[group_version]
        task = self._asking.get(group_version)
        if task is None:
            task = self._asking.start(group_version, self._discover(group_version),
                                      lambda done, current: self._asked(group_version, done, current))
        return await self._asking.wait(task)

    def _asked(self, group_version: str, task: asyncio.Task[dict[str, ResourceInfo] | None], current: bool) -> None:
        """Keep the answer, unless ``refresh`` forgot this request while it was on its way (then it is stale)."""
        if task.cancelled() or task.exception() is not None:  # retrieved here too; the next lookup asks again
            return
        if current:
            self._by_gv[group_version] = task.result()

    async def _discover(self, group_version: str) -> dict[str, ResourceInfo] | None:
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        try:
            doc = await self._fetch(path)
        except NotFound:
            return None
        group, _, version = group_version.rpartition("/")
        found: dict[str, ResourceInfo] = {}
        subs: dict[str, set[str]] = {}
        for res in doc.get("resources", ()):
            name = str(res["name"])
            if "/" in name:
                parent, _, sub = name.partition("/")
                subs.setdefault(parent, set()).add(sub)
                continue
            gvk = GroupVersionKind(group, version, str(res["kind"]))
            found[gvk.kind] = ResourceInfo(gvk, name, bool(res.get("namespaced")))
        for kind, info in found.items():
            found[kind] = ResourceInfo(info.gvk, info.plural, info.namespaced, frozenset(subs.get(info.plural, ())))
        return found

    async def resource_for(self, gvk: GroupVersionKind) -> ResourceInfo:
        """The resource serving ``gvk``.

        Raises:
            NotFound: the server does not serve this kind (yet); call ``refresh`` to ask again.
        """
        kinds = await self._load(gvk.group_version)
        if kinds is None or gvk.kind not in kinds:
            raise NotFound(404, "NotFound", f"the server does not serve {gvk}")
        return kinds[gvk.kind]

    async def is_served(self, gvk: GroupVersionKind) -> bool:
        """True when the server serves ``gvk``, asking discovery again if it was missing before."""
        if gvk.group_version in self._by_gv:  # learnt: a kind missing then may be served now
            cached = self._by_gv[gvk.group_version]
            if cached is None or gvk.kind not in cached:
                self.refresh(gvk.group_version)
        try:
            await self.resource_for(gvk)
        except NotFound:
            return False
        return True

    def refresh(self, group_version: str | None = None) -> None:
        """Forget discovery results (all, or one group-version) so the next lookup asks the server."""
        if group_version is None:
            self._by_gv.clear()
        else:
            self._by_gv.pop(group_version, None)
        self._asking.forget(group_version)
