"""paths.make_private_dirs / create_private_file and Store.open: modes whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.paths import create_private_file, make_private_dirs
from computewatch.store import Store


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o077, 0o277])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(old)


def test_private_dirs_and_file_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    d = tmp_path / "a" / "b"
    make_private_dirs(d)
    assert mode(tmp_path / "a") == 0o700 and mode(d) == 0o700
    f = d / "x.db"
    assert create_private_file(f) is True
    assert mode(f) == 0o600 and f.read_bytes() == b""
    assert create_private_file(f) is False  # exists: left as it is


def test_existing_paths_keep_their_modes(tmp_path: Path) -> None:
    d = tmp_path / "home"
    d.mkdir()
    d.chmod(0o755)
    f = d / "x.db"
    f.write_bytes(b"")
    f.chmod(0o644)
    make_private_dirs(d)
    assert create_private_file(f) is False
    assert mode(d) == 0o755 and mode(f) == 0o644


def test_store_creates_a_private_database_with_private_wal(tmp_path: Path, umask: int) -> None:
    db = tmp_path / "home" / "cw.db"
    with Store.open(db) as s:
        s.create_run(
            run_id="r1",
            name=None,
            tags={"team": "a", "api_token": "SECRET123"},
            command=["x", "--password", "hunter2"],
            cwd=None,
            mode="run",
            started_at=1.0,
            interval_seconds=1.0,
            host={},
        )
        assert mode(db.parent) == 0o700 and mode(db) == 0o600
        for suffix in ("-wal", "-shm"):
            assert mode(db.with_name(db.name + suffix)) == 0o600
        row = s.conn.execute("SELECT command, tags FROM runs").fetchone()
    assert "hunter2" not in row[0] and "***" in row[0]
    assert "SECRET123" not in row[1] and '"team": "a"' in row[1]
