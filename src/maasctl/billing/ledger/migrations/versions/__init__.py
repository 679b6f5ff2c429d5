"""Alembic revisions (this file only makes the directory a package so it ships in wheels)."""
