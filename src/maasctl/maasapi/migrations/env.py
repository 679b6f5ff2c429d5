"""Alembic environment: always runs on a connection handed over by `maasctl.maasapi.migrate`."""

from __future__ import annotations

from alembic import context

from maasctl.maasapi.db import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("maas-api migrations run programmatically: use maasctl.maasapi.migrate.upgrade()")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
