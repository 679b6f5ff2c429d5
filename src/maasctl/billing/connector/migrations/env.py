"""Alembic environment: always runs on a connection handed over by `maasctl.billing.ledger.migrate`."""

from __future__ import annotations

from alembic import context

attrs = context.config.attributes
connection = attrs.get("connection")
if connection is None:
    raise RuntimeError("the billing migrations run programmatically: use maasctl.billing.ledger.migrate")

context.configure(
    connection=connection,
    target_metadata=attrs["metadata"],
    version_table=attrs["version_table"],
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
