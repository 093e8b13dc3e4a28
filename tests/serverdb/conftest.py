"""Fixtures of the server database's tests, shared with tests/server (tests/server/conftest.py
documents them): ``db`` (sqlite, postgresql), ``db_url`` (a fresh, empty database of that
kind) and the throw-away PostgreSQL clusters behind it."""

from __future__ import annotations

from tests.server.conftest import db, db_url, make_postgres_cluster, postgres_cluster

__all__ = ["db", "db_url", "make_postgres_cluster", "postgres_cluster"]
