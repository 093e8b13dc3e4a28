"""Fixtures of the server database's tests, shared with tests/server (tests/server/conftest.py
documents them): ``db`` (sqlite, postgresql), ``db_url`` (a fresh, empty database of that
kind) and the throw-away PostgreSQL clusters behind it; :func:`migrate_to` moves a database to
a given Alembic revision, up or down."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from tests.server.conftest import db, db_url, make_postgres_cluster, postgres_cluster

from computewatch.serverdb.engine import MIGRATIONS, Database

__all__ = ["db", "db_url", "make_postgres_cluster", "migrate_to", "postgres_cluster"]


def migrate_to(db: Database, revision: str, *, down: bool = False) -> None:
    """Alembic ``upgrade`` (``downgrade`` with ``down``) of ``db`` to ``revision``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)
        conn.commit()
