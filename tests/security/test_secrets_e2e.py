"""Secrets in a monitored command's arguments reach no stored or exported output, and the
database is private to its user: through the real CLI."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

SECRETS = ("hunter2", "SECRET123", ":pw@", "zebra-wandb")
ARGV = [
    sys.executable,
    "-c",
    "pass",
    "--password=hunter2",
    "--api-token",
    "SECRET123",
    "postgres://u:pw@h/db",
    "--wandb-thing=zebra-wandb",
]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def assert_clean(text: str | bytes, where: str) -> None:
    data = text.encode() if isinstance(text, str) else text
    for s in SECRETS:
        assert s.encode() not in data, f"{s!r} leaked into {where}"


def test_argv_secrets_are_stored_redacted(cw: Any, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[privacy]\nredact = ["wandb_thing"]\n')
    cw.ok("run", "--quiet", "--config", config, "--interval", "0.1", "--", *ARGV)

    shown = cw.ok("show", "last", "--json").stdout
    assert_clean(shown, "show --json")
    assert '"--password=***"' in shown and '"postgres://u:***@h/db"' in shown
    assert '"--wandb-thing=***"' in shown  # the configured name
    assert_clean(cw.ok("show", "last").stdout, "show")
    assert_clean(cw.ok("runs", "--json").stdout, "runs --json")
    assert_clean(cw.ok("runs").stdout, "runs")
    report = tmp_path / "r.html"
    cw.ok("report", "last", "-o", report)
    html = report.read_text()
    assert_clean(html, "the HTML report")
    assert "--password=***" in html
    for fmt in ("csv", "jsonl"):
        assert_clean(cw.ok("export", "last", "--format", fmt).stdout, f"export {fmt}")
    for f in cw.home.iterdir():  # the database and its -wal/-shm, byte for byte
        if f.is_file():
            assert_clean(f.read_bytes(), f.name)


def test_home_and_database_are_private(cw: Any) -> None:
    old = os.umask(0o022)  # the usual umask: what would make them 0755 and 0644
    try:
        cw.ok("run", "--quiet", "--", sys.executable, "-c", "pass")
    finally:
        os.umask(old)
    assert mode(cw.home) == 0o700
    assert mode(cw.db) == 0o600
    for suffix in ("-wal", "-shm"):  # SQLite gives them the database's mode
        side = cw.db.with_name(cw.db.name + suffix)
        if side.exists():
            assert mode(side) == 0o600
    spool = cw.home / "spool"
    if spool.exists():  # inside the private home whatever its own mode
        assert mode(cw.home) == 0o700


def test_an_existing_home_keeps_its_mode(cw: Any) -> None:
    cw.home.mkdir(mode=0o755)
    cw.home.chmod(0o755)
    cw.ok("run", "--quiet", "--", sys.executable, "-c", "pass")
    assert mode(cw.home) == 0o755  # the user chose it (docs/security.md)
    assert mode(cw.db) == 0o600


TRACKED = """
import computewatch

with computewatch.track(name="tracked", tags={"token": "SEKRITD", "api_key": "KEYVALUE7",
                                              "team": "vision"}) as run:
    run.step(samples=8)
"""


def test_secret_named_tags_from_track_are_stored_redacted(cw: Any, tmp_path: Path) -> None:
    """Tags that ``track()`` sets inside ``computewatch run`` reach the store through the
    writer's metadata and the run's final row: both redacted, as ``--tag`` is."""
    script = tmp_path / "t.py"
    script.write_text(TRACKED)
    cw.ok("run", "--quiet", "--interval", "0.1", "--", sys.executable, str(script))
    leaks = ("SEKRITD", "KEYVALUE7")

    def clean(data: str | bytes, where: str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        for s in leaks:
            assert s.encode() not in raw, f"{s!r} leaked into {where}"

    runs = cw.json("runs")
    assert runs[0]["tags"] == {"api_key": "***", "team": "vision", "token": "***"}
    clean(cw.ok("runs", "--json").stdout, "runs --json")
    shown = cw.ok("show", "last", "--json").stdout
    clean(shown, "show --json")
    report = tmp_path / "r.html"
    cw.ok("report", "last", "-o", report)
    clean(report.read_bytes(), "the HTML report")
    with sqlite3.connect(cw.db) as c:  # everything in the main file, not only in the WAL
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for f in cw.home.rglob("*"):  # the database, its -wal/-shm and the spool, byte for byte
        if f.is_file():
            clean(f.read_bytes(), str(f.relative_to(cw.home)))
