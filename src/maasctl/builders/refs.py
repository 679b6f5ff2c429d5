"""Small frozen input types shared by the builders.

The reconcilers translate CRD objects (maasctl.api) into these; builders never see the CRD models, so they
stay pure and testable on plain data.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GatewayRef", "ObjectRef", "OwnerRef"]


@dataclass(frozen=True, order=True)
class ObjectRef:
    """A namespaced object (MaaSModelRef, HTTPRoute, MaaSSubscription, InferencePool, ...)."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, order=True)
class GatewayRef:
    """The Gateway a route attaches to (`parentRefs`), also recorded in TRLP labels."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> GatewayRef:
        namespace, _, name = text.partition("/")
        return cls(namespace, name)


@dataclass(frozen=True)
class OwnerRef:
    """A same-namespace controller owner (cross-namespace children get labels instead)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def to_dict(self) -> dict[str, object]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
