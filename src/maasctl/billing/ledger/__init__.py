"""The billing database: the ledger, the source of truth of every tenant's money (append-only, double-entry,
idempotent), and the bookkeeping beside it in the same database and schema history.

`entries` (pure) says what an entry is; `schema` the tables and `migrations/` their history (`migrate` runs it);
`store` the `Ledger` that writes and derives money; `rating_book` the rater's cursor and unpriced usage;
`budget_book` budget firings and their webhook outbox; `db` the engine and SQL helpers they share.
"""

from maasctl.billing.ledger.entries import Posting, Transaction, adjustment, credit, usage_charge, wallet
from maasctl.billing.ledger.store import Entry, Ledger, PostResult

__all__ = ["Entry", "Ledger", "PostResult", "Posting", "Transaction", "adjustment", "credit", "usage_charge", "wallet"]
