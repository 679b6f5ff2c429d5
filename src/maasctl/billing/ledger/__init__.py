"""The billing ledger: the source of truth of every tenant's money (append-only, double-entry, idempotent).

`entries` (pure) says what an entry is; `schema` the tables; `store` the `Ledger` that writes and derives.
"""

from maasctl.billing.ledger.entries import Posting, Transaction, adjustment, credit, usage_charge, wallet
from maasctl.billing.ledger.store import Entry, Ledger, Notice, PendingNotice, PostResult, Unpriced, make_engine

__all__ = ["Entry", "Ledger", "Notice", "PendingNotice", "PostResult", "Posting", "Transaction", "Unpriced",
           "adjustment", "credit", "make_engine", "usage_charge", "wallet"]
