"""The PriceBook lifecycle as a pure function of the books, the tenants and the time.

    Draft --(notice ok)--> Announced --(effectiveFrom)--> Active --(successor Active)--> Superseded
                                                                        --(no tenant uses it)--> Retired

- Notice: `effectiveFrom >= creationTimestamp + noticeDays`. The API server cannot check it (CEL has no
  clock), so a book without enough notice stays Draft for good, with condition NoticeValid=False.
- A book is *in force* once its notice is valid and `effectiveFrom` has passed. It is Superseded when a book
  that `supersedes` it is in force; Retired when, in addition, no tenant uses it. Retired is final.
- A tenant uses the book it pins (`priceBookPin`, grandfathering); an unpinned tenant follows its Plan's
  `priceBookRef` forward through in-force successors to the newest one ("follow Active"), and uses it once
  it is in force.
- `next_transition` is the earliest future instant at which the answer can change by time alone (the book's
  own effectiveFrom, or a successor's), so the reconciler requeues exactly then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from maasctl.billing.api.pricebook import PriceBookState

__all__ = ["Book", "Lifecycle", "TenantUse", "book_in_use", "evaluate", "in_force", "notice_deadline"]


@dataclass(frozen=True)
class Book:
    """What the lifecycle needs of one PriceBook."""

    name: str
    created: datetime
    effective_from: datetime
    notice_days: int
    supersedes: str | None = None
    state: PriceBookState | None = None  # as last recorded in status


@dataclass(frozen=True)
class TenantUse:
    """What the lifecycle needs of one TenantAccount: its pin and its Plan's priceBookRef."""

    name: str
    pin: str | None = None
    plan_book: str | None = None


@dataclass(frozen=True)
class Lifecycle:
    state: PriceBookState
    notice_valid: bool
    message: str
    superseded_by: str | None
    active_tenants: int
    grandfathered: tuple[str, ...]
    next_transition: datetime | None


def notice_deadline(book: Book) -> datetime:
    """The earliest effectiveFrom that gives tenants the promised notice."""
    return book.created + timedelta(days=book.notice_days)


def in_force(book: Book, now: datetime) -> bool:
    return book.effective_from >= notice_deadline(book) and now >= book.effective_from


def _successor(name: str, books: Mapping[str, Book], now: datetime) -> Book | None:
    """The newest in-force book that supersedes `name`."""
    found = [b for b in books.values() if b.supersedes == name and b.name != name and in_force(b, now)]
    return max(found, key=lambda b: (b.effective_from, b.name), default=None)


def _follow(name: str, books: Mapping[str, Book], now: datetime) -> str:
    """`name`, moved forward through in-force successors (cycles stop the walk)."""
    seen = {name}
    while (nxt := _successor(name, books, now)) is not None and nxt.name not in seen:
        name = nxt.name
        seen.add(name)
    return name


def book_in_use(tenant: TenantUse, books: Mapping[str, Book], now: datetime) -> str | None:
    """The PriceBook `tenant` is rated with now, or None."""
    if tenant.pin:
        return tenant.pin
    if not tenant.plan_book:
        return None
    current = _follow(tenant.plan_book, books, now)
    book = books.get(current)
    return current if book is not None and in_force(book, now) else None


def evaluate(name: str, books: Iterable[Book], tenants: Iterable[TenantUse], now: datetime) -> Lifecycle:
    """The state of book `name` among `books` (same namespace) at `now`."""
    by_name = {b.name: b for b in books}
    book = by_name[name]
    tenants = list(tenants)
    users = sorted(t.name for t in tenants if book_in_use(t, by_name, now) == name)
    pinned = tuple(sorted(t.name for t in tenants if t.pin == name))
    deadline = notice_deadline(book)
    notice_valid = book.effective_from >= deadline
    successor = _successor(name, by_name, now)
    pending = [b.effective_from for b in by_name.values()
               if b.supersedes == name and b.name != name and b.effective_from > now
               and b.effective_from >= notice_deadline(b)]
    if notice_valid and book.effective_from > now:
        pending.append(book.effective_from)
    next_transition = min(pending, default=None)

    if book.state == PriceBookState.RETIRED:
        state, message = PriceBookState.RETIRED, "retired: no tenant uses it"
        next_transition = None
    elif not notice_valid:
        state = PriceBookState.DRAFT
        message = (f"effectiveFrom {_iso(book.effective_from)} gives less than {book.notice_days} days of notice: "
                   f"it must be {_iso(deadline)} or later; publish a new PriceBook with a later effectiveFrom")
        next_transition = None
    elif now < book.effective_from:
        state, message = PriceBookState.ANNOUNCED, f"announced; becomes Active at {_iso(book.effective_from)}"
    elif successor is not None:
        if users:
            state = PriceBookState.SUPERSEDED
            message = f"superseded by {successor.name}; still used by {len(users)} tenant(s)"
        else:
            state, message = PriceBookState.RETIRED, f"superseded by {successor.name} and no tenant uses it"
            next_transition = None
    else:
        state, message = PriceBookState.ACTIVE, f"active since {_iso(book.effective_from)}"
    return Lifecycle(
        state=state,
        notice_valid=notice_valid,
        message=message,
        superseded_by=successor.name if successor is not None else None,
        active_tenants=len(users),
        grandfathered=pinned,
        next_transition=next_transition,
    )


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
