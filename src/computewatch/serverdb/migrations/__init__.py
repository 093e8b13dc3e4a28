"""Alembic migrations of the server database (``env.py``, ``versions/``)."""
