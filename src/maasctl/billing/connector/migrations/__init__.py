"""The connector's Alembic history (run by `maasctl.billing.ledger.migrate`)."""
