"""Alembic's environment for the server database: run by ``serverdb.engine.upgrade`` with the
connection it hands over in ``config.attributes["connection"]`` (no alembic.ini, no URL here).
On PostgreSQL an advisory lock makes servers that start together migrate one after another."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from computewatch.serverdb.models import Base

MIGRATION_LOCK = 7_261_533_001
"""pg_advisory_lock key held while migrating (any constant number; ours)."""


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("serverdb migrations run through computewatch.serverdb.engine.upgrade")
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        connection.commit()
        try:
            _run(connection)
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            connection.commit()
    else:
        _run(connection)


run_migrations_online()
