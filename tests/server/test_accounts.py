"""Know-your-customer accounts: caps and verification decide a scheduler's check; personal
data is encrypted at rest and absent from logs, the ledger and default exports."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT
from tests.server.conftest import ServerProcess, batch, started_this_month

from computewatch.governance import accounts
from computewatch.governance.ledger_ops import export, verify_database
from computewatch.ledger.keys import load_or_create_private_key
from computewatch.lineage.compute import GovernanceError
from computewatch.serverdb.engine import Database, open_database, upgrade
from computewatch.serverdb.ingest import store_batch
from computewatch.upload.protocol import RunUpload

PII = accounts.PersonalData(
    legal_name="Zebulon Quux Holdings",
    beneficial_owners=("Ada Quux",),
    email="ada@quux.example",
    phone="+44 20 7946 0000",
    payment_reference="IBAN-ending-4242",
    intended_use="fine-tuning only",
)


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    monkeypatch.setenv("COMPUTEWATCH_ACCOUNTS_KEY", str(tmp_path / "accounts.key"))
    d = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(d)
    yield d
    d.engine.dispose()


def _check(db: Database, name: str = "quux", **kw: Any) -> accounts.Decision:
    """The check, counting the synthetic uploads' simulated devices."""
    with db.session() as s:
        return accounts.check(s, name, **{"gpus": 8, "hours": 10.0, "gpu_model": "H100-SXM",
                                          "count_simulated": True, **kw})  # fmt: skip


def test_caps_and_verification_decide(
    database: Database, make_upload: Callable[..., RunUpload]
) -> None:
    db = database
    with db.session() as s:
        accounts.add_account(s, "quux", PII, country="gb", caps={"gpu_hours_per_month": 100})
        s.commit()
    assert _check(db).allow  # 80 GPU-hours of 100
    with db.session() as s:  # 8 GPUs for an hour already this month
        store_batch(
            s, "quux",
            batch(make_upload(gpus=8, duration=3600.0, started_at=started_this_month(3600.0))),
        )  # fmt: skip
    d = _check(db, hours=12.0)
    assert not d.allow and "GPU-hour cap" in d.reasons[0] and d.used_gpu_hours == pytest.approx(8)
    with db.session() as s:
        accounts.update_account(s, "quux", caps={"gpu_hours_per_month": None})
        s.commit()
    big: dict[str, Any] = {"gpus": 8192, "hours": 1000.0}  # up to 1.2e25 FLOP: past 1e25
    d = _check(db, **big)
    assert (
        not d.allow and "unverified account" in d.reasons[0] and "eu-systemic-risk" in d.reasons[0]
    )
    with db.session() as s:
        accounts.verify_account(s, "quux", valid_days=30, evidence="passport", by="ops")
        s.commit()
    assert _check(db, **big).allow
    with db.session() as s:  # 31 days later the verification has expired
        d = accounts.check(s, "quux", now=time.time() + 31 * 86400, gpu_model="H100-SXM", **big)
    assert not d.allow and "expired account" in d.reasons[0]
    with db.session() as s:
        accounts.update_account(s, "quux", status="suspended")
        s.commit()
    assert not _check(db).allow and "suspended" in _check(db).reasons[0]
    assert not _check(db, name="nobody").allow


def test_personal_data_is_encrypted_and_kept_out_of_the_ledger(
    database: Database, tmp_path: Path
) -> None:
    db = database
    with db.session() as s:
        accounts.add_account(s, "quux", PII, country="GB")
        accounts.verify_account(s, "quux", evidence="passport P-991", by="Kim Ops")
        s.commit()
    raw = (tmp_path / "server.db").read_bytes()
    for secret in (PII.legal_name, "Ada Quux", "ada@quux.example", "IBAN-ending-4242",
                   "P-991", "Kim Ops"):  # fmt: skip
        assert secret.encode() not in raw
    with db.session() as s:
        shown = accounts.get_account(s, "quux", with_pii=True)
        hidden = accounts.get_account(s, "quux")
    assert shown.pii == replace(PII, verification_evidence="passport P-991", verified_by="Kim Ops")
    assert hidden.pii is None
    key = load_or_create_private_key(tmp_path / "ledger.pem")
    text = b"".join(export(db, key)).decode()
    assert PII.legal_name not in text and "ada@quux.example" not in text
    kinds = [json.loads(line)["kind"] for line in text.splitlines()[1:]]
    assert kinds == ["account-added", "account-verified"]  # heads are not entries
    assert verify_database(db, key.public_key()).ok
    other = accounts.cipher(tmp_path / "other.key")
    with db.session() as s, pytest.raises(GovernanceError, match="cannot be decrypted"):
        accounts.get_account(s, "quux", with_pii=True, key=other)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", PII), "team name"),
        (("bad name!", PII), "team name 'bad name!'"),
        (("x", accounts.PersonalData(legal_name=" ")), "legal name"),
    ],
)
def test_bad_accounts(
    database: Database, args: tuple[str, accounts.PersonalData], message: str
) -> None:
    db = database
    with db.session() as s, pytest.raises(GovernanceError, match=message):
        accounts.add_account(s, *args)
    with db.session() as s, pytest.raises(GovernanceError, match="ISO 3166"):
        accounts.add_account(s, "y", PII, country="Britain")
    with db.session() as s, pytest.raises(GovernanceError, match="unknown cap"):
        accounts.add_account(s, "z", PII, caps={"tokens": 5})


def _cli(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the server's own home (its key files)."""
    return subprocess.run([*CW, *args], capture_output=True, text=True, env=srv.env(),
                          timeout=TIMEOUT, check=False)  # fmt: skip


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_check_endpoint_and_the_access_log(
    server: Callable[..., ServerProcess], db_url: str
) -> None:
    srv = server()
    admin = srv.token("ops", "admin")
    add = _cli(srv, "accounts", "add", "quux", "--legal-name", PII.legal_name, "--email",
             "ada@quux.example", "--db", db_url, "--gpu-hours-per-month", "10")  # fmt: skip
    assert add.returncode == 0, add.stderr
    c = srv.client(admin)
    ok = c.post("/api/v1/accounts/quux/check", json={"gpus": 1, "hours": 5})
    assert ok.status_code == 200 and ok.json()["decision"] == "allow", ok.text
    no = c.post("/api/v1/accounts/quux/check", json={"gpus": 4, "hours": 5})
    assert no.json()["decision"] == "deny" and "GPU-hour cap" in no.json()["reasons"][0]
    assert c.post("/api/v1/accounts/quux/check", json={"gpus": 0, "hours": 5}).status_code == 422
    read = srv.client(srv.token("ops", "read"))
    assert read.post("/api/v1/accounts/quux/check", json={"gpus": 1, "hours": 1}).status_code == 403
    r = _cli(srv, "accounts", "check", "quux", "--gpus", "4", "--hours", "5", "--server", srv.url,
           "--token", admin)  # fmt: skip
    assert r.returncode == 1 and r.stdout.startswith("deny: GPU-hour cap"), r.stdout + r.stderr
    want = ("ops", "POST /api/v1/accounts/quux/check 200")

    def logged() -> list[Any] | None:  # written in batches, a quarter of a second apart
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute("SELECT team, action, ip FROM access_log ORDER BY id").fetchall()
        return rows if want in [(t, a) for t, a, _ in rows] else None

    deadline = time.monotonic() + 30
    while (rows := logged()) is None:
        assert time.monotonic() < deadline, "the access log row never came"
        time.sleep(0.1)
    c.get("/api/v1/runs")
    srv.stop()  # what is queued is written as the server stops
    assert ("ops", "GET /api/v1/runs 200") in [(t, a) for t, a, _ in logged() or rows]
    assert all(b"127.0.0.1" not in ip for _, _, ip in rows)  # encrypted
    shown = _cli(srv, "accounts", "show", "quux", "--pii", "--json", "--db", db_url)
    assert json.loads(shown.stdout)["pii"]["legal_name"] == PII.legal_name
    out = srv.output()
    assert PII.legal_name not in out and "ada@quux.example" not in out and admin not in out
