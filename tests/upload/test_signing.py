"""Uploads carry a usage report signed with the node key (push and the live stream, final or
not); the report binds exactly the summary and documents that travel with it; a key that cannot
be read means unsigned uploads and one notice, never a failed push."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tests.upload.conftest import T0, FakeIngest, stored_run, wait_until

from computewatch.ledger.keys import (
    decode_public,
    encode_public,
    key_id,
    load_or_create_private_key,
    report_valid,
)
from computewatch.ledger.reports import REPORT_FIELDS, binding_problem, report_of
from computewatch.store import COMPLETED, Store
from computewatch.upload.client import Client
from computewatch.upload.push import Planned, push_runs
from computewatch.upload.settings import ServerSettings
from computewatch.upload.signing import ReportSigner, node_key_path
from computewatch.upload.stream import LiveUploader


def _bound(run: dict[str, object]) -> str | None:
    report = run["signed_report"]
    assert isinstance(report, dict)
    return binding_problem(report, report_of(run))


def test_push_signs_each_upload_with_the_node_key(
    store: Store, ingest: FakeIngest, cw_home: Path
) -> None:
    run = stored_run(store, "aaaa0001")
    store.set_meta(run.key, "config", {"lr": 0.001, "name": "résumé"})
    signer = ReportSigner()
    plan = [Planned(run, 1)]
    report = push_runs(store, Client(ingest.url, "t"), plan, server=ingest.url, signer=signer)
    assert report.stored == [run.id] and report.notes == []
    path = node_key_path()
    assert path == cw_home / "node-key.pem"
    assert path.stat().st_mode & 0o777 == 0o600
    public = load_or_create_private_key(path).public_key()
    (sent,) = ingest.runs_seen()  # as the server parsed it from the wire
    signed = sent["signed_report"]
    assert set(signed) == {*REPORT_FIELDS, "figures", "signed_by", "signature"}
    assert signed["signed_by"] == key_id(public)
    assert report_valid(signed, public)
    assert _bound(sent) is None
    assert "host" not in signed and "command" not in json.dumps(signed)
    changed = {**sent, "summary": {**sent["summary"], "duration_seconds": 1e6}}
    assert "summary_sha256" in str(_bound(changed))


def test_sign_false_sends_no_report(store: Store, ingest: FakeIngest, cw_home: Path) -> None:
    run = stored_run(store, "aaaa0001")
    signer = ReportSigner(enabled=False)
    push_runs(store, Client(ingest.url, "t"), [Planned(run, 1)], server=ingest.url, signer=signer)
    (sent,) = ingest.runs_seen()
    assert "signed_report" not in sent
    assert not node_key_path().exists()  # no key made when signing is off


def test_a_key_that_cannot_be_loaded_uploads_unsigned_and_says_so_once(
    store: Store, ingest: FakeIngest, tmp_path: Path
) -> None:
    bad = tmp_path / "node-key.pem"
    bad.write_text("not a key\n")
    signer = ReportSigner(bad)
    client = Client(ingest.url, "t")
    a, b = stored_run(store, "aaaa0001"), stored_run(store, "bbbb0002")
    first = push_runs(store, client, [Planned(a, 1)], server=ingest.url, signer=signer)
    second = push_runs(store, client, [Planned(b, 1)], server=ingest.url, signer=signer)
    assert first.stored == [a.id] and second.stored == [b.id]
    assert len(first.notes) == 1 and "uploading unsigned" in first.notes[0]
    assert str(bad) in first.notes[0] and "node-key" in first.notes[0]
    assert second.notes == []  # said once
    assert all("signed_report" not in r for r in ingest.runs_seen())
    assert bad.read_text() == "not a key\n"  # never overwritten


def test_the_live_stream_signs_running_and_final_uploads(
    tmp_path: Path, ingest: FakeIngest
) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    up = LiveUploader(ServerSettings(ingest.url, "t", None, 0.05), db, stderr=io.StringIO())
    up.begin(run.id)
    wait_until(lambda: len(ingest.runs_seen()) >= 2)
    with Store.open(db) as store:
        store.update_run(run.key, status=COMPLETED, exit_code=0, ended_at=T0 + 60)
    assert up.close() is True
    seen = ingest.runs_seen()
    assert seen[-1]["final"] and not seen[0]["final"]
    key = decode_public(encode_public(load_or_create_private_key(node_key_path()).public_key()))
    for r in seen:
        assert report_valid(r["signed_report"], key)
        assert _bound(r) is None
        assert r["signed_report"]["final"] is r["final"]


def test_the_live_stream_says_once_when_it_cannot_sign(
    tmp_path: Path, ingest: FakeIngest, cw_home: Path
) -> None:
    cw_home.mkdir(parents=True)
    node_key_path().mkdir()  # a directory where the key file should be: unreadable as a key
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        run = stored_run(store, status="running")
    err = io.StringIO()
    up = LiveUploader(ServerSettings(ingest.url, "t", None, 0.05), db, stderr=err)
    up.begin(run.id)
    wait_until(lambda: len(ingest.runs_seen()) >= 3)
    with Store.open(db) as store:
        store.update_run(run.key, status=COMPLETED, exit_code=0, ended_at=T0 + 60)
    assert up.close() is True
    assert all("signed_report" not in r for r in ingest.runs_seen())
    lines = [x for x in err.getvalue().splitlines() if "unsigned" in x]
    assert len(lines) == 1 and run.id in lines[0], err.getvalue()
