"""Delegated administration: which groups administer which organization (seed 000 `organization.id`).

The mapping lives in ConfigMaps in the subscription namespace labelled `ORG_ADMINS_LABEL: "true"`, each with
one data key `ORG_ADMINS_KEY` holding a YAML list:

    - id: acme                       # a MaaSSubscription's spec.organization.id, matched exactly
      adminGroups: [acme-admins]     # identity groups, matched exactly (case-sensitive, as Kubernetes does)

Several ConfigMaps are merged (a group listed for an organization in any of them administers it), so each
organization's mapping can be owned by its own file or GitOps application. maas-api (and the console after it)
read this one parse; nothing else re-implements it.

Closed by default:
- a ConfigMap that does not parse exactly (unknown fields, wrong types, an empty or padded id or group, quotes,
  backslashes or control characters, too many entries) contributes nothing and is reported in `refused`;
  the others still apply;
- groups that hold everyone (`system:authenticated`, `system:unauthenticated`, `system:serviceaccounts`, the
  subscription wildcard `*`) can never administer an organization: such an entry refuses its ConfigMap;
- an organization nobody maps has no delegated administrators; only platform administrators see it.

Organization administrators list, search and revoke the API keys of their organizations' subscriptions and
read their organizations' usage; platform administrators keep full access (docs/organizations.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = [
    "BROAD_GROUPS",
    "MAX_ORGANIZATIONS",
    "ORG_ADMINS_KEY",
    "ORG_ADMINS_LABEL",
    "OrganizationAdmins",
    "OrganizationAdminsError",
    "merge_config_maps",
    "parse_document",
]

ORG_ADMINS_LABEL: Final = "maas.opendatahub.io/organization-admins"
ORG_ADMINS_KEY: Final = "organizations.yaml"
BROAD_GROUPS: Final = frozenset(("system:authenticated", "system:unauthenticated", "system:serviceaccounts", "*"))
MAX_ORGANIZATIONS: Final = 1000
MAX_GROUPS: Final = 100

# The characters `api._fields.UNSAFE_CHARS` refuses in organization ids (quotes, backslash, C0/C1 controls).
_UNSAFE = re.compile(r"[\x22\x27\x5c\x00-\x1f\x7f-\x9f]")


class OrganizationAdminsError(ValueError):
    """The document is not a valid mapping (the message names the problem, never a value)."""


def _clean(value: str) -> str:
    if value != value.strip():
        raise ValueError("must not start or end with whitespace")
    if _UNSAFE.search(value):
        raise ValueError("must not contain quotes, backslashes or control characters")
    return value


def _not_broad(value: str) -> str:
    if value in BROAD_GROUPS:
        raise ValueError("a group that holds everyone cannot administer an organization")
    return value


OrgId = Annotated[str, Field(strict=True, min_length=1, max_length=253), AfterValidator(_clean)]
Group = Annotated[str, Field(strict=True, min_length=1, max_length=253), AfterValidator(_clean),
                  AfterValidator(_not_broad)]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    id: OrgId
    admin_groups: Annotated[list[Group], Field(min_length=1, max_length=MAX_GROUPS, alias="adminGroups")]


_DOCUMENT: TypeAdapter[list[_Entry]] = TypeAdapter(
    Annotated[list[_Entry], Field(max_length=MAX_ORGANIZATIONS)])


def parse_document(text: str) -> dict[str, frozenset[str]]:
    """organization id -> admin groups of one `organizations.yaml`; raises `OrganizationAdminsError`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise OrganizationAdminsError("not valid YAML") from None
    if data is None:
        return {}
    try:
        entries = _DOCUMENT.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise OrganizationAdminsError(f"{where or 'document'}: {first.get('msg', 'invalid')}") from None
    out: dict[str, set[str]] = {}
    for entry in entries:
        out.setdefault(entry.id, set()).update(entry.admin_groups)
    return {org: frozenset(groups) for org, groups in out.items()}


@dataclass(frozen=True)
class OrganizationAdmins:
    """The merged mapping. `refused` names the ConfigMaps (`namespace/name: reason`) that contribute nothing."""

    by_organization: Mapping[str, frozenset[str]] = field(default_factory=dict)
    refused: tuple[str, ...] = ()
    _by_group: Mapping[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, set[str]] = {}
        for org, groups in self.by_organization.items():
            for group in groups:
                index.setdefault(group, set()).add(org)
        object.__setattr__(self, "_by_group", {g: frozenset(o) for g, o in index.items()})

    def organizations_of(self, groups: Iterable[str]) -> frozenset[str]:
        """The organizations whose administrators include one of `groups` (exact match)."""
        found: set[str] = set()
        for group in groups:
            found |= self._by_group.get(group, frozenset())
        return frozenset(found)


def merge_config_maps(config_maps: Iterable[Mapping[str, Any]]) -> OrganizationAdmins:
    """Merge labelled ConfigMaps (as read from the API server or a cache); an invalid one is refused whole."""
    merged: dict[str, set[str]] = {}
    refused: list[str] = []
    for cm in sorted(config_maps, key=_name):
        meta = cm.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        data = cm.get("data") or {}
        text = data.get(ORG_ADMINS_KEY) if isinstance(data, Mapping) else None
        if not isinstance(text, str):
            refused.append(f"{_name(cm)}: no {ORG_ADMINS_KEY} key")
            continue
        try:
            parsed = parse_document(text)
        except OrganizationAdminsError as exc:
            refused.append(f"{_name(cm)}: {exc}")
            continue
        for org, groups in parsed.items():
            merged.setdefault(org, set()).update(groups)
    return OrganizationAdmins({o: frozenset(g) for o, g in merged.items()}, tuple(refused))


def _name(cm: Mapping[str, Any]) -> str:
    meta = cm.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
