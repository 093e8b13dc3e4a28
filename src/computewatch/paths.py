"""Where computewatch keeps its data."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
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


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
"""What computewatch creates its home (and any directory it makes) and its database with: the
database holds command lines and the user's runs, so only the user reads it (docs/security.md).
An existing directory or file keeps the mode it has: the user chose it."""


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents, each one 0700 whatever the umask (an existing
    directory is left as it is)."""
    missing: list[Path] = []
    p = Path(path)
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made by another process meanwhile: its mode is its own
        os.chmod(d, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask (mkdir(2))


def create_private_file(path: str | os.PathLike[str]) -> bool:
    """Create an empty ``path`` with mode 0600 whatever the umask; False when it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # open's mode is masked by the umask (open(2))
    finally:
        os.close(fd)
    return True


def check_private_file(
    path: str | os.PathLike[str], what: str, error: Callable[[str], Exception]
) -> None:
    """Refuse a secret file (a token, a password, a TLS or signing key) that another user could
    read or change: its mode gives group or others any access, or another user owns it.

    The one check of every secret file computewatch reads (docs/security.md). ``what`` names
    the file in the message ("TLS key", "token file"); ``error`` builds the exception the caller
    raises, with the message: it names the file, its mode and the fix (``chmod 600 FILE``)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise error(f"cannot read the {what} {os.fspath(path)}: {e.strerror or e}") from None
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise error(
            f"the {what} {os.fspath(path)} is readable or writable by other users (mode "
            f"{mode:04o}): make it private with chmod 600 {os.fspath(path)}"
        )
    if st.st_uid != os.geteuid():
        raise error(
            f"the {what} {os.fspath(path)} belongs to another user (uid {st.st_uid}), who could "
            f"change it: use a copy of your own (cp {os.fspath(path)} FILE; chmod 600 FILE)"
        )


def current_dir() -> str | None:
    """The working directory, or None when it was deleted (or is unreadable): a run started
    there is still monitored and stored, without its cwd."""
    try:
        return os.getcwd()
    except OSError:
        return None
