"""Alembic environment: always runs on a connection handed over by `maasctl.billing.ledger.migrate`."""

from maasctl.billing.ledger.migrate import run_env

run_env()
