"""Alembic migrations of maas-api, shipped in the package and run at startup (see `migrate.py`)."""
