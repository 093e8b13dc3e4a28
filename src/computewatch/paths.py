"""Where computewatch keeps its data."""

from __future__ import annotations

import os
from pathlib import Path

DB_FILENAME = "computewatch.db"


def data_home() -> Path:
    """``$COMPUTEWATCH_HOME``, else the XDG data directory (``~/.local/share/computewatch``)."""
    home = os.environ.get("COMPUTEWATCH_HOME")
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "computewatch"


def default_db_path() -> Path:
    return data_home() / DB_FILENAME


def resolve_db_path(db: str | os.PathLike[str] | None) -> Path:
    """The database a command uses: ``--db`` when given, else the default."""
    return Path(db).expanduser() if db else default_db_path()
