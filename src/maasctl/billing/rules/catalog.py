"""The catalog: a snapshot of the billing objects that decide a price (tenants by organization, their PriceBooks
and the cost Secrets' rates by namespace), pure, built from dicts. It answers which tenant a usage record's
organization is and which PriceBook is in force for it at a time; the rater, re-rating, the GPU meter and the
wallet and reservation reconcilers read it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import structlog
from pydantic import ValidationError

from maasctl.api import parse
from maasctl.billing.api import Plan, PriceBook, TenantAccount
from maasctl.billing.rules import identity, lifecycle, rating

__all__ = ["COMMITTED_USE_ANNOTATION", "Catalog", "TenantRef", "build_catalog", "fingerprints", "month_start"]

log = structlog.get_logger("maasctl.billing.rater")
COMMITTED_USE_ANNOTATION = "billing.opendatahub.io/committed-use"


def charged_from(created: datetime) -> datetime:
    """The first instant whose usage is charged to a TenantAccount created at `created` (its creationTimestamp,
    whole seconds): records of the creation second itself predate the account (`TenantRef.predates`)."""
    return created + timedelta(seconds=1)


@dataclass(frozen=True)
class TenantRef:
    namespace: str
    name: str
    organization: str
    pin: str | None = None
    plan_book: str | None = None
    geo: str = ""
    committed_tier: str | None = None
    created: datetime | None = None  # the TenantAccount's creationTimestamp (whole seconds)

    def predates(self, when: datetime) -> bool:
        """A record at `when` was made before this TenantAccount existed (its creation second included, which
        a timestamp in whole seconds cannot order): the organization had no account then, so it is showback,
        whenever the rater reads it - never charged because a pass happened to re-read it after the creation."""
        return self.created is not None and when < charged_from(self.created)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class _BookEntry:
    facts: lifecycle.Book
    book: rating.Book


@dataclass
class Catalog:
    """The billing objects rating needs, by organization and namespace."""

    tenants: dict[str, TenantRef] = field(default_factory=dict)  # organization id -> tenant
    books: dict[str, dict[str, _BookEntry]] = field(default_factory=dict)  # namespace -> name -> book
    provider_costs: dict[str, dict[str, Mapping[str, Decimal]]] = field(default_factory=dict)  # ns -> secret
    provider_units: dict[str, dict[str, str]] = field(default_factory=dict)  # ns -> secret -> declared unit

    def tenant_for(self, organization: str) -> TenantRef | None:
        return self.tenants.get(organization) if organization else None

    def book_for(self, tenant: TenantRef, when: datetime) -> rating.Book | None:
        """The PriceBook in force for `tenant` at `when` (its pin, else follow its Plan's book)."""
        books = self.books.get(tenant.namespace, {})
        facts = {n: b.facts for n, b in books.items()}
        name = lifecycle.book_in_use(lifecycle.TenantUse(tenant.name, tenant.pin, tenant.plan_book), facts, when)
        if name is None or name not in books:
            return None
        entry = books[name]
        if tenant.pin and not lifecycle.in_force(entry.facts, when):
            return None  # a pinned book is used from its effectiveFrom on
        return entry.book


def build_catalog(tenants: Iterable[Mapping[str, Any]], plans: Iterable[Mapping[str, Any]],
                  books: Iterable[Mapping[str, Any]], gateway_geo: Mapping[str, str] | None = None,
                  provider_costs: Mapping[str, dict[str, Mapping[str, Decimal]]] | None = None,
                  provider_units: Mapping[str, dict[str, str]] | None = None) -> Catalog:
    """A catalog from the objects (unparseable ones are skipped). `gateway_geo` maps `ns/kind/name` of a Plan
    target to its region label; `provider_costs`/`provider_units` are the cost Secrets' rates and declared units
    by namespace and Secret name."""
    catalog = Catalog(provider_costs=dict(provider_costs or {}), provider_units=dict(provider_units or {}))
    for obj in books:
        try:
            model = parse(PriceBook, dict(obj))
        except ValidationError:
            continue
        meta = model.metadata
        if meta.creation_timestamp is None:
            continue
        ns = str(meta.namespace)
        facts = lifecycle.Book(str(meta.name), meta.creation_timestamp, model.spec.effective_from,
                               model.spec.notice_days, model.spec.supersedes)
        catalog.books.setdefault(ns, {})[str(meta.name)] = _BookEntry(
            facts, rating.Book(str(meta.name), int(meta.generation or 0), model.spec))
    plan_info: dict[tuple[str, str], tuple[str | None, str]] = {}
    for obj in plans:
        try:
            plan = parse(Plan, dict(obj))
        except ValidationError:
            continue
        ns = str(plan.metadata.namespace)
        ref = plan.spec.target_ref
        geo = (gateway_geo or {}).get(f"{ns}/{ref.kind}/{ref.name}", "")
        plan_info[(ns, str(plan.metadata.name))] = (plan.spec.price_book_ref, geo)
    for obj in sorted(tenants, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
        try:
            tenant = parse(TenantAccount, dict(obj))
        except ValidationError:
            continue
        ns = str(tenant.metadata.namespace)
        org = identity.tenant_id(obj)
        book, geo = plan_info.get((ns, tenant.spec.plan_ref.name), (None, ""))
        annotations = tenant.metadata.annotations or {}
        tref = TenantRef(ns, str(tenant.metadata.name), org, tenant.spec.price_book_pin, book, geo,
                         annotations.get(COMMITTED_USE_ANNOTATION) or None, tenant.metadata.creation_timestamp)
        if org in catalog.tenants:
            log.warning("two TenantAccounts answer to one organization; the first is charged", organization=org,
                        charged=catalog.tenants[org].key, ignored=tref.key)
            continue
        catalog.tenants[org] = tref
    return catalog


def month_start(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def fingerprints(catalog: Catalog, now: datetime) -> dict[str, str]:
    """Per namespace, a digest of what decides a price there now: its books (name, generation), the cost
    Secrets' rates, and each tenant's book in force. A change means unpriced records may now be priced."""
    parts: dict[str, list[str]] = {}
    for ns, books in catalog.books.items():
        parts.setdefault(ns, []).extend(f"book {n}@{b.book.generation}" for n, b in sorted(books.items()))
    for ns, secrets in catalog.provider_costs.items():
        units = catalog.provider_units.get(ns, {})
        parts.setdefault(ns, []).extend(f"cost {n} {units.get(n)} {sorted((k, str(v)) for k, v in c.items())}"
                                        for n, c in sorted(secrets.items()))
    for tenant in catalog.tenants.values():
        book = catalog.book_for(tenant, now)
        parts.setdefault(tenant.namespace, []).append(
            f"tenant {tenant.name} {book.name if book else ''}@{book.generation if book else ''} {tenant.geo} "
            f"{tenant.committed_tier}")
    return {ns: hashlib.sha256("\n".join(sorted(p)).encode()).hexdigest() for ns, p in parts.items()}
