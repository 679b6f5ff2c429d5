"""PostgreSQL: every change to an API key row is announced on a NOTIFY channel (maas-api's key cache).

maas-api replicas keep the rows they validate in memory (`maasctl.maasapi.keycache`) and drop one as soon as
the database says it changed. A trigger, not the application, sends the notice, so every writer is covered:
revocation, bulk revocation, group refresh, purge, an operator's psql. Updates that change only
`last_used_at` (written by validation itself, at most once a minute per key) are not announced; TRUNCATE
announces "everything" (`*`). SQLite (single-process development) has no cache and gets no trigger.

Revision ID: 0009_key_change_notify
Revises: 0008_usage_user_rollups
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision: str = "0009_key_change_notify"
down_revision: str | None = "0008_usage_user_rollups"
branch_labels: str | None = None
depends_on: str | None = None

CHANNEL = "maasapi_api_keys"  # also in maasctl.maasapi.keycache (migrations stay frozen once released)

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION maasapi_api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('{CHANNEL}', '*');
        RETURN NULL;
    END IF;
    PERFORM pg_notify('{CHANNEL}', OLD.id);
    IF TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id THEN
        PERFORM pg_notify('{CHANNEL}', NEW.id);
    END IF;
    RETURN NULL;
END
$$
"""

_TRIGGERS = (
    "CREATE TRIGGER api_keys_notify_update AFTER UPDATE ON api_keys FOR EACH ROW "
    "WHEN ((to_jsonb(OLD) - 'last_used_at') IS DISTINCT FROM (to_jsonb(NEW) - 'last_used_at')) "
    "EXECUTE FUNCTION maasapi_api_keys_notify()",
    "CREATE TRIGGER api_keys_notify_delete AFTER DELETE ON api_keys FOR EACH ROW "
    "EXECUTE FUNCTION maasapi_api_keys_notify()",
    "CREATE TRIGGER api_keys_notify_truncate AFTER TRUNCATE ON api_keys FOR EACH STATEMENT "
    "EXECUTE FUNCTION maasapi_api_keys_notify()",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    for statement in _TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in ("api_keys_notify_truncate", "api_keys_notify_delete", "api_keys_notify_update"):
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON api_keys")
    op.execute("DROP FUNCTION IF EXISTS maasapi_api_keys_notify()")
