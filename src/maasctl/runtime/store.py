"""An indexed in-memory store of frozen objects, keyed by ``namespace/name``.

Index functions map an object to index values; lookups by value are O(result). Built-in indexes:
``namespace`` (the namespace), ``owner`` (each ownerReference uid) and ``label`` (``key=value`` per label).
Reconcilers register their own with ``Cache.add_index``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Set
from typing import Any

from maasctl.runtime.objects import FrozenObject

__all__ = ["DEFAULT_INDEXERS", "IndexFunc", "Store"]

IndexFunc = Callable[[FrozenObject], Iterable[str]]


def _namespace_index(obj: FrozenObject) -> Iterable[str]:
    ns = obj["metadata"].get("namespace")
    return (ns,) if ns else ()


def _owner_index(obj: FrozenObject) -> Iterable[str]:
    return tuple(str(ref["uid"]) for ref in obj["metadata"].get("ownerReferences") or () if "uid" in ref)


def _label_index(obj: FrozenObject) -> Iterable[str]:
    labels: Any = obj["metadata"].get("labels") or {}
    return tuple(f"{k}={v}" for k, v in labels.items())


DEFAULT_INDEXERS: dict[str, IndexFunc] = {
    "namespace": _namespace_index,
    "owner": _owner_index,
    "label": _label_index,
}


_NO_KEYS: frozenset[str] = frozenset()


class Store:
    """Objects by key plus secondary indexes. Not thread-safe; used from one event loop."""

    def __init__(self, indexers: dict[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, FrozenObject] = {}
        self._indexers: dict[str, IndexFunc] = dict(DEFAULT_INDEXERS if indexers is None else indexers)
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[FrozenObject]:
        return iter(list(self._items.values()))

    def keys_in(self, namespace: str | None = None) -> list[str]:
        """All keys, or those of one namespace."""
        if namespace is None:
            return list(self._items)
        prefix = namespace + "/"
        return [k for k in self._items if k.startswith(prefix)]

    def get(self, key: str) -> FrozenObject | None:
        return self._items.get(key)

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """Register an index and build it over the current contents. Raises ValueError on a duplicate."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._indices[name] = {}
        for key, obj in self._items.items():
            self._index(name, key, obj)

    def by_index(self, name: str, value: str) -> list[FrozenObject]:
        """Objects whose index ``name`` yields ``value``. Raises KeyError for an unknown index."""
        keys = self._indices[name].get(value, ())
        return [self._items[k] for k in keys]

    def index_keys(self, name: str, value: str) -> Set[str]:
        """Keys of the objects whose index ``name`` yields ``value``, without materialising the objects: a live,
        read-only view that changes with the store (copy it to keep it across an await). Raises KeyError for an
        unknown index."""
        return self._indices[name].get(value, _NO_KEYS)

    def _index(self, name: str, key: str, obj: FrozenObject) -> None:
        index = self._indices[name]
        for value in self._indexers[name](obj):
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: FrozenObject) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            for value in fn(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def upsert(self, key: str, obj: FrozenObject) -> FrozenObject | None:
        """Insert or replace; returns the previous object."""
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        for name in self._indexers:
            self._index(name, key, obj)
        return old

    def delete(self, key: str) -> FrozenObject | None:
        """Remove; returns the removed object, if any."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old
