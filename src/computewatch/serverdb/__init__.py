"""The server database: one schema (SQLAlchemy 2, Alembic migrations) on SQLite or PostgreSQL;
runs uploaded from every machine, teams, tokens, budgets, and the queries the API and pages use."""
