"""The shared informer cache: one informer per kind, shared by every controller that watches it.

Reads (``get``, ``list``) never hit the server and return frozen objects. Informers created after the cache
started are started at once, inside the cache's task group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from maasctl.runtime.client import Client
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.informer import Informer, InformerState, Transform, strip_managed_fields
from maasctl.runtime.objects import FrozenObject, labels_match
from maasctl.runtime.store import IndexFunc

__all__ = ["Cache", "CacheOptions"]


@dataclass(frozen=True, kw_only=True)
class CacheOptions:
    """How the cache watches.

    namespaces: restrict namespaced kinds to these namespaces (empty: all namespaces).
    keep_managed_fields_for: field managers whose managedFields entries stay cached (for the apply no-op
        guard); all other entries are stripped to save memory.
    resync_period: seconds between replays of the cache to handlers (None: never; controller-runtime uses
        10 h). Prefer ``Result.requeue_after`` for periodic work.
    crd_poll_interval: seconds between discovery checks for kinds that are not served yet.
    label_selectors: per kind, a server-side label selector (e.g. ``app.kubernetes.io/managed-by=x``) so
        only matching objects are cached; every controller sharing that kind sees only those.
    transforms: per kind, a transform applied to every object of that kind before it is cached (after the
        managedFields are stripped), e.g. to keep the key names of a Secret's data without its values.
    kind_namespaces: per kind, the namespaces to watch instead of ``namespaces`` (a kind the process writes
        in one namespace only, so its RBAC there can be a Role rather than a ClusterRole).
    """

    namespaces: tuple[str, ...] = ()
    keep_managed_fields_for: frozenset[str] = field(default_factory=frozenset)
    resync_period: float | None = None
    crd_poll_interval: float = 5.0
    label_selectors: Mapping[GroupVersionKind, str] = field(default_factory=dict)
    transforms: Mapping[GroupVersionKind, Transform] = field(default_factory=dict)
    kind_namespaces: Mapping[GroupVersionKind, tuple[str, ...]] = field(default_factory=dict)


def _then(first: Transform, second: Transform | None) -> Transform:
    if second is None:
        return first
    return lambda obj: second(first(obj))


class Cache:
    """Shared informers keyed by GroupVersionKind."""

    def __init__(self, client: Client, options: CacheOptions | None = None) -> None:
        self.client = client
        self.options = options or CacheOptions()
        self._informers: dict[GroupVersionKind, Informer] = {}
        self._tg: asyncio.TaskGroup | None = None

    def informer(self, gvk: GroupVersionKind) -> Informer:
        """The informer for ``gvk``, created (and started, if the cache runs) on first use."""
        inf = self._informers.get(gvk)
        if inf is None:
            opts = self.options
            inf = Informer(
                self.client,
                gvk,
                namespaces=opts.kind_namespaces.get(gvk) or opts.namespaces or None,
                label_selector=opts.label_selectors.get(gvk),
                transform=_then(strip_managed_fields(opts.keep_managed_fields_for), opts.transforms.get(gvk)),
                resync_period=opts.resync_period,
                crd_poll_interval=opts.crd_poll_interval,
            )
            self._informers[gvk] = inf
            if self._tg is not None:
                self._tg.create_task(inf.run(), name=f"informer {gvk}")
        return inf

    async def run(self) -> None:
        """Run all informers until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                for gvk, inf in list(self._informers.items()):
                    tg.create_task(inf.run(), name=f"informer {gvk}")
                await asyncio.Future()  # until cancelled
            finally:
                self._tg = None

    async def wait_for_sync(
        self, kinds: Iterable[GroupVersionKind] | None = None, *, deadline: float | None = 120
    ) -> bool:
        """Wait until the informers (all, or those of ``kinds``) have listed once. False on timeout."""
        informers = [self.informer(k) for k in kinds] if kinds is not None else list(self._informers.values())
        try:
            async with asyncio.timeout(deadline):
                for inf in informers:
                    await inf.wait_for_sync()
        except TimeoutError:
            return False
        return True

    def status(self) -> dict[str, InformerState]:
        """Each informer's state, for readiness reporting."""
        return {str(gvk): inf.state for gvk, inf in self._informers.items()}

    def add_index(self, gvk: GroupVersionKind, name: str, fn: IndexFunc) -> None:
        """Register a custom index for ``gvk`` (e.g. ``spec.modelRef``); query it with ``list(index=...)``."""
        self.informer(gvk).store.add_indexer(name, fn)

    def get(self, gvk: GroupVersionKind, name: str, namespace: str | None = None) -> FrozenObject | None:
        """The cached object, or None."""
        return self.informer(gvk).store.get(f"{namespace}/{name}" if namespace else name)

    def peek(self, gvk: GroupVersionKind, name: str, namespace: str | None = None) -> FrozenObject | None:
        """Like ``get`` but never creates an informer: None when ``gvk`` is not cached at all."""
        inf = self._informers.get(gvk)
        if inf is None:
            return None
        return inf.store.get(f"{namespace}/{name}" if namespace else name)

    def index_keys(self, gvk: GroupVersionKind, index: str, value: str) -> Set[str]:
        """`namespace/name` keys of the cached objects whose index `index` yields `value` (a live read-only view;
        cheaper than ``list`` when only names or the count matter)."""
        return self.informer(gvk).store.index_keys(index, value)

    def list(
        self,
        gvk: GroupVersionKind,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        index: tuple[str, str] | None = None,
    ) -> list[FrozenObject]:
        """Cached objects filtered by namespace, equality label selector and/or one index lookup."""
        store = self.informer(gvk).store
        if index is not None:
            items = store.by_index(*index)
            if namespace is not None:
                items = [o for o in items if o["metadata"].get("namespace") == namespace]
        elif namespace is not None:
            items = store.by_index("namespace", namespace)
        else:
            items = list(store)
        if labels:
            items = [o for o in items if labels_match(o, labels)]
        return items
