"""paths.check_private_file: a token, password or key file others could read or change is refused
with one message (the file, its mode, the fix) at every entry point that reads a secret file."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewatch.carbon.records import ProviderError
from computewatch.config import load_config, parse_config
from computewatch.errors import UsageError
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import key_id, load_or_create_private_key
from computewatch.metrics.server import ServerError, ServerSecurity, read_token
from computewatch.paths import check_private_file
from computewatch.upload.settings import SettingsError, server_settings
from computewatch.upload.signing import ReportSigner

SHARED_MODES = [0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o666]


def _secret(path: Path, text: str = "t0k\n", mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _one_line_refusal(r: Any, path: Path, mode: int, code: int = 2) -> None:
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"(mode 0{mode:o}): make it private with chmod 600 {path}" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_private_modes_pass(tmp_path: Path, mode: int) -> None:
    f = _secret(tmp_path / "token", mode=mode)
    check_private_file(f, "token file", UsageError)
    assert read_token(f) == "t0k"


@pytest.mark.parametrize("mode", SHARED_MODES)
def test_shared_modes_are_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    f = _secret(tmp_path / "token", mode=mode)
    with pytest.raises(UsageError) as info:
        check_private_file(f, "token file", UsageError)
    assert str(info.value) == (
        f"the token file {f} is readable or writable by other users (mode 0{mode:o}): "
        f"make it private with chmod 600 {f}"
    )
    with pytest.raises(ServerError, match=f"mode 0{mode:o}.*chmod 600 {f}"):
        read_token(f)
    with pytest.raises(ServerError, match="chmod 600"):
        ServerSecurity.from_files(None, str(f), str(f))  # the key is checked, the cert not


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    f = _secret(tmp_path / "token")
    other = os.geteuid() + 1  # chown to another uid needs root, as tests run here and in CI
    os.chown(f, other, -1)
    with pytest.raises(ServerError, match=f"another user \\(uid {other}\\)"):
        read_token(f)


def test_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="cannot read the token file"):
        read_token(tmp_path / "nope")


def test_the_metrics_server_has_no_checker_of_its_own() -> None:
    import computewatch.metrics.server as server

    assert server.check_private_file is check_private_file


# --- computewatch server --tls-key -------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_server_refuses_a_shared_tls_key(
    cw: Any,
    self_signed: Callable[[], tuple[Path, Path]],
    free_port: Callable[[], int],
    mode: int,
) -> None:
    cert, key = self_signed()
    key.chmod(mode)
    listen = f"127.0.0.1:{free_port()}"
    r = cw("server", "--listen", listen, "--tls-cert", cert, "--tls-key", key)
    _one_line_refusal(r, key, mode)
    assert "TLS key (--tls-key)" in r.stderr


# --- [server] token_file (uploads) --------------------------------------------------------------


def test_upload_token_file_others_can_use_is_refused(tmp_path: Path) -> None:
    tok = _secret(tmp_path / "token", "filetok\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text('[server]\nurl = "http://127.0.0.1:9"\ntoken_file = "token"\n')
    s = server_settings(load_config(cfg), environ={})
    assert s is not None and s.token == "filetok"
    tok.chmod(0o666)
    with pytest.raises(SettingsError) as info:
        server_settings(load_config(cfg), environ={})
    assert str(info.value).startswith("[server] token_file: the token file ")
    assert f"(mode 0666): make it private with chmod 600 {tok}" in str(info.value)
    assert "filetok" not in str(info.value)


def test_push_refuses_a_shared_token_file(cw: Any, tmp_path: Path) -> None:
    tok = _secret(tmp_path / "token", mode=0o666)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[server]\nurl = "http://127.0.0.1:9"\ntoken_file = "{tok}"\n')
    r = cw("push", "--config", cfg)
    _one_line_refusal(r, tok, 0o666)


def test_run_with_a_shared_token_file_runs_the_job_without_uploading(
    cw: Any, tmp_path: Path
) -> None:
    tok = _secret(tmp_path / "token", mode=0o644)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[server]\nurl = "http://127.0.0.1:9"\ntoken_file = "{tok}"\n')
    marker = tmp_path / "ran"
    r = cw(
        "run", "--quiet", "--config", cfg, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"
    )
    assert r.returncode == 0 and marker.exists(), r.stderr
    assert "not uploading" in r.stderr and f"chmod 600 {tok}" in r.stderr, r.stderr


# --- [carbon] watttime_password_file ------------------------------------------------------------


def test_watttime_password_file_others_can_read_is_refused(tmp_path: Path) -> None:
    from computewatch.carbon.providers import settings_from_config

    pw = _secret(tmp_path / "wt-password", "hunter2\n")
    cfg = parse_config({"carbon": {"watttime_password_file": str(pw)}})
    assert settings_from_config(cfg, environ={}).watttime_password == "hunter2"
    pw.chmod(0o644)
    with pytest.raises(ProviderError, match=f"mode 0644.*chmod 600 {pw}") as info:
        settings_from_config(cfg, environ={})
    assert "hunter2" not in str(info.value)


def test_when_refuses_a_shared_watttime_password_file(cw: Any, tmp_path: Path) -> None:
    pw = _secret(tmp_path / "wt-password", "hunter2\n", mode=0o644)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[carbon]\nwatttime_username = "user"\nwatttime_password_file = "{pw}"\n'
        'watttime_url = "http://127.0.0.1:9"\n'
    )
    r = cw(
        "when", "--duration", "3h", "--provider", "watttime", "--provider-region", "CAISO_NORTH",
        "--config", cfg,
    )  # fmt: skip
    _one_line_refusal(r, pw, 0o644, code=r.returncode)
    assert r.returncode != 0 and "hunter2" not in r.stderr + r.stdout


# --- fleet --bearer-token-file ------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o606])
def test_fleet_refuses_a_shared_bearer_token_file(cw: Any, tmp_path: Path, mode: int) -> None:
    tok = _secret(tmp_path / "bearer", mode=mode)
    r = cw("fleet", "--prometheus", "http://127.0.0.1:9", "--bearer-token-file", tok)
    _one_line_refusal(r, tok, mode)
    assert "--bearer-token-file" in r.stderr


# --- signing keys: the ledger's and the node key ------------------------------------------------


def test_an_existing_signing_key_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "ledger.pem"
    key = load_or_create_private_key(path)  # created 0600
    assert key_id(load_or_create_private_key(path).public_key()) == key_id(key.public_key())
    assert (path.stat().st_mode & 0o777) == 0o600
    path.chmod(0o640)
    with pytest.raises(LedgerError, match=f"signing key {path} .*mode 0640.*chmod 600 {path}"):
        load_or_create_private_key(path)


def test_node_key_command_refuses_a_shared_key(cw: Any) -> None:
    cw.ok("node-key")  # creates $COMPUTEWATCH_HOME/node-key.pem, 0600
    path = cw.home / "node-key.pem"
    assert (path.stat().st_mode & 0o777) == 0o600
    path.chmod(0o644)
    r = cw("node-key")
    _one_line_refusal(r, path, 0o644, code=1)


def test_uploads_go_unsigned_with_a_shared_node_key(tmp_path: Path) -> None:
    path = tmp_path / "node-key.pem"
    load_or_create_private_key(path)
    path.chmod(0o604)
    signer = ReportSigner(path)
    assert signer._load() is None  # signing never raises into the upload
    notice = signer.notice()
    assert notice is not None and f"chmod 600 {path}" in notice


def test_run_prometheus_still_refuses(cw: Any, tmp_path: Path) -> None:
    tf = _secret(tmp_path / "token", mode=0o640)
    r = cw(
        "run", "--prometheus", "0", "--prometheus-token-file", tf, "--", sys.executable, "-c", ""
    )
    _one_line_refusal(r, tf, 0o640)


def test_an_accounts_key_others_can_read_is_refused(tmp_path: Path) -> None:
    from computewatch.governance.accounts import GovernanceError, cipher

    path = tmp_path / "accounts.key"
    token = cipher(path).encrypt(b"x")  # created 0600 on first use
    assert (path.stat().st_mode & 0o777) == 0o600
    assert cipher(path).decrypt(token) == b"x"
    path.chmod(0o644)
    with pytest.raises(GovernanceError, match=f"accounts key {path} .*mode 0644.*chmod 600 {path}"):
        cipher(path)


def test_the_servers_sqlite_database_is_created_private(tmp_path: Path) -> None:
    from computewatch.serverdb.engine import open_database

    path = tmp_path / "srv" / "server.db"
    db = open_database(f"sqlite:///{path}")
    try:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
            conn.commit()
    finally:
        db.engine.dispose()
    assert (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    for extra in (path.with_name("server.db-wal"), path.with_name("server.db-shm")):
        if extra.exists():  # SQLite gives them the database's mode
            assert (extra.stat().st_mode & 0o077) == 0
