"""Signed usage reports end to end: real ``computewatch run``, ``push``, ``node-key``, ``server
node-key ...`` and ``ledger ...`` child processes against a real ``computewatch server``. A
registered node's runs are ``valid`` and counted by ``ledger verify``; unknown keys are stored as
``unknown_key`` but refused under ``--require-signed``; a summary changed after signing is
refused and nothing is stored; a revoked key's later uploads are ``unknown_key``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tests.conftest import CLI, CW, TIMEOUT
from tests.ledger.forge import read_export, resign_export, write_export
from tests.server.conftest import ServerProcess, batch

from computewatch.ledger.jcs import dumps
from computewatch.store import Store
from computewatch.upload.payload import build_upload
from computewatch.upload.protocol import PROTOCOL_HEADER, RunUpload
from computewatch.upload.signing import ReportSigner

PY = sys.executable


def _srv(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``computewatch ARGS`` in the server's home (its ledger key), no upload settings."""
    env = srv.env()
    env.pop("COMPUTEWATCH_SERVER", None)
    env.pop("COMPUTEWATCH_TOKEN", None)
    return subprocess.run([*CW, *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, check=False, cwd=srv.home)  # fmt: skip


def _ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def _register(srv: ServerProcess, public_key: str, team: str, name: str = "node-a") -> str:
    r = _ok(_srv(srv, "server", "node-key", "add", public_key, "--team", team, "--name", name,
                 "--db", srv.db_url))  # fmt: skip
    return r.stdout.strip()


def _signature(srv: ServerProcess, token: str, run_id: str) -> dict[str, Any]:
    r = srv.client(token).get(f"/api/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    sig: dict[str, Any] = r.json()["signature"]
    return sig


def _verify(srv: ServerProcess, tmp_path: Path) -> dict[str, Any]:
    export = tmp_path / f"ledger-{srv.port}.jsonl"
    _ok(_srv(srv, "ledger", "export", "-o", str(export), "--db", srv.db_url))
    pub = tmp_path / "server.pub"
    pub.write_text(_ok(_srv(srv, "ledger", "public-key")).stdout)
    text = _ok(_srv(srv, "ledger", "verify", str(export), "--public-key", str(pub)))
    doc: dict[str, Any] = json.loads(
        _ok(_srv(srv, "ledger", "verify", str(export), "--public-key", str(pub), "--json")).stdout
    )
    doc["text"] = text.stdout
    doc["export"] = export
    return doc


@pytest.mark.slow
def test_a_registered_node_is_valid_and_the_export_counts_its_report(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    s = server()
    ingest, read = s.token("alpha", "ingest"), s.token("alpha", "read")
    cw.ok("run", "--quiet", "--name", "a1", "--", PY, "-c", "pass")
    node = cw.json("node-key")
    assert (cw.home / "node-key.pem").stat().st_mode & 0o777 == 0o600
    assert cw.json("node-key") == node  # the same key on every call
    kid = _register(s, node["public_key"], "alpha")
    assert kid == node["key_id"]
    listed = json.loads(_ok(_srv(s, "server", "node-key", "list", "--db", s.db_url,
                                 "--json")).stdout)  # fmt: skip
    assert [(k["key_id"], k["team"], k["name"], k["revoked_at"]) for k in listed] == [
        (kid, "alpha", "node-a", None)
    ]
    pushed = cw.ok("push", "--server", s.url, "--token", ingest)
    assert "unsigned" not in pushed.stderr
    (run,) = cw.json("runs")
    assert _signature(s, read, run["id"]) == {"status": "valid", "key_id": kid}
    page = s.client(read).get(f"/runs/{run['id']}")  # the dashboard's run page says so too
    assert page.status_code == 200 and f"signed by node key {kid} (registered)" in page.text
    v = _verify(s, tmp_path)
    assert v["ok"] and v["reports"] == {"total": 1, "signed": 1, "unsigned": 0, "unknown_key": 0,
                                        "figures_unsigned": 0}  # fmt: skip
    assert "1 run reports: 1 signed by known nodes, 0 unsigned" in v["text"]
    entries = [json.loads(x) for x in v["export"].read_text().splitlines()[1:]]
    kinds = [e["kind"] for e in entries]
    assert kinds.index("node_key") < kinds.index("run")
    body = next(e["body"] for e in entries if e["kind"] == "run")
    assert body["signature"] == "valid" and body["signed_report"]["signed_by"] == kid
    assert body["signed_report"]["summary_sha256"] == body["summary_sha256"]
    assert body["signed_report"]["figures"] == body["figures"]  # the figures the node signed
    assert "command" not in json.dumps(body) and "host" not in body["signed_report"]
    in_db = json.loads(_ok(_srv(s, "ledger", "verify", "--db", s.db_url, "--json")).stdout)
    assert in_db["ok"] and in_db["reports"]["signed"] == 1
    _tampered_reports_are_named(s, v["export"], tmp_path)


def _tampered_reports_are_named(srv: ServerProcess, export: Path, tmp_path: Path) -> None:
    """The run entry's signed report changed in the export: its node's signature fails; and
    with the log signed again by another key (verified without --public-key), named as a report
    whose signature fails."""
    header, lines = read_export(export)
    at = next(i for i, x in enumerate(lines) if json.loads(x)["kind"] == "run")
    seq = json.loads(lines[at])["seq"]

    def exit_code(doc: dict[str, Any]) -> None:
        doc["body"]["signed_report"]["exit_code"] = 9

    plain = tmp_path / "plain.jsonl"
    doc = json.loads(lines[at])
    exit_code(doc)
    write_export(plain, header, [*lines[:at], dumps(doc), *lines[at + 1 :]])
    r = _srv(srv, "ledger", "verify", str(plain))  # its node's signature fails before the root
    assert r.returncode == 1 and "TAMPERED (report)" in r.stdout, r.stdout
    assert f"run entry {seq}'s signed report does not match its signature" in r.stdout
    forger = Ed25519PrivateKey.generate()
    rehashed = tmp_path / "rehashed.jsonl"
    write_export(rehashed, *resign_export(header, lines, forger, {seq: exit_code}))
    r = _srv(srv, "ledger", "verify", str(rehashed), "--json")
    assert r.returncode == 1
    problem = json.loads(r.stdout)["problem"]
    assert problem["what"] == "report" and problem["seq"] == seq
    assert "changed after signing" in problem["message"]


def _upload(cw: CLI, seq: int = 1) -> RunUpload:
    """The last run of ``cw``'s home as the client uploads it, signed with its node key."""
    with Store.open(cw.db) as store:
        up = build_upload(store, store.find_run("last"), seq=seq, user="alice")
    return ReportSigner(cw.home / "node-key.pem").sign(up)


def _post(srv: ServerProcess, token: str, *runs: RunUpload) -> Any:
    return srv.client(token).post("/api/v1/runs", json=batch(*runs), headers={PROTOCOL_HEADER: "1"})


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_unknown_keys_are_stored_as_such_but_refused_when_signatures_are_required(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    cw.ok("run", "--quiet", "--name", "a1", "--", PY, "-c", "pass")
    s = server()
    ingest = s.token("alpha", "ingest")
    cw.ok("push", "--server", s.url, "--token", ingest)  # its key registered nowhere
    (run,) = cw.json("runs")
    node = cw.json("node-key")
    assert _signature(s, ingest, run["id"]) == {"status": "unknown_key", "key_id": node["key_id"]}
    # registered for another team: still unknown for this one
    _register(s, node["public_key"], "beta")
    up = _upload(cw, seq=2)
    assert _post(s, ingest, up).status_code == 200
    assert _signature(s, ingest, run["id"])["status"] == "unknown_key"
    unsigned = {k: v for k, v in _upload(cw, seq=3).items() if k != "signed_report"}
    assert _post(s, ingest, unsigned).status_code == 200  # type: ignore[arg-type]
    assert _signature(s, ingest, run["id"]) == {"status": "unsigned", "key_id": None}

    strict = server(db_url=f"sqlite:///{tmp_path / 'strict.db'}", args=["--require-signed"])
    token = strict.token("alpha", "ingest")
    refused = cw("push", "--server", strict.url, "--token", token)
    assert refused.returncode == 1
    assert "refused the upload (422)" in refused.stderr
    assert "computewatch node-key" in refused.stderr and run["id"] in refused.stderr
    r = _post(strict, token, unsigned)  # type: ignore[arg-type]
    assert r.status_code == 422 and r.json()["error"] == "signature"
    assert "unsigned" in r.json()["detail"]
    assert strict.client(token).get(f"/api/v1/runs/{run['id']}").status_code == 404
    # once registered for this team, the same push goes and is valid
    _register(strict, node["public_key"], "alpha")
    cw.ok("push", "--server", strict.url, "--token", token)
    assert _signature(strict, token, run["id"])["status"] == "valid"


@pytest.mark.slow
def test_a_summary_changed_after_signing_is_refused_and_nothing_is_stored(
    cw: CLI, server: Callable[..., ServerProcess]
) -> None:
    cw.ok("run", "--quiet", "--name", "a1", "--", PY, "-c", "pass")
    s = server()
    ingest = s.token("alpha", "ingest")
    _register(s, cw.json("node-key")["public_key"], "alpha")
    other = _upload(cw)
    other["id"] = "other-run-1"  # a second, valid run in the same batch: also not stored
    del other["signed_report"]
    ReportSigner(cw.home / "node-key.pem").sign(other)  # signed as itself
    up = _upload(cw)
    assert up["summary"] is not None
    up["summary"] = {**up["summary"], "duration_seconds": 86400.0}  # inflated after signing
    r = _post(s, ingest, other, up)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "signature"
    assert up["id"] in r.json()["detail"] and "summary" in r.json()["detail"]
    for run_id in (up["id"], "other-run-1"):
        assert s.client(ingest).get(f"/api/v1/runs/{run_id}").status_code == 404
    # the signed report itself changed (the signature no longer matches it)
    forged = _upload(cw)
    forged["signed_report"] = {**forged["signed_report"], "exit_code": 7}
    forged["exit_code"] = 7
    r = _post(s, ingest, forged)
    assert r.status_code == 422 and "changed after signing" in r.json()["detail"]
    # a malformed report is refused as malformed
    bad = _upload(cw)
    bad["signed_report"] = {"run_id": bad["id"]}  # type: ignore[typeddict-item]
    r = _post(s, ingest, bad)
    assert r.status_code == 422 and "signed_report" in r.json()["detail"]
    assert s.client(ingest).get(f"/api/v1/runs/{up['id']}").status_code == 404
    assert _post(s, ingest, _upload(cw)).status_code == 200  # as signed: stored
    assert _signature(s, ingest, up["id"])["status"] == "valid"


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_revoked_key_makes_later_uploads_unknown(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    s = server()
    ingest = s.token("alpha", "ingest")
    kid = _register(s, cw.json("node-key")["public_key"], "alpha")
    cw.ok("run", "--quiet", "--name", "before", "--", PY, "-c", "pass")
    cw.ok("push", "--server", s.url, "--token", ingest)
    gone = _ok(_srv(s, "server", "node-key", "revoke", kid, "--db", s.db_url))
    assert f"node key {kid}" in gone.stderr and "revoked" in gone.stderr
    again = _srv(s, "server", "node-key", "add", cw.json("node-key")["public_key"], "--team",
                 "alpha", "--name", "n", "--db", s.db_url)  # fmt: skip
    assert again.returncode == 2 and "revoked already" in again.stderr
    missing = _srv(s, "server", "node-key", "revoke", "0123456789abcdef", "--db", s.db_url)
    assert missing.returncode == 1 and "no node key" in missing.stderr
    assert "Traceback" not in missing.stderr + again.stderr
    cw.ok("run", "--quiet", "--name", "after", "--", PY, "-c", "pass")
    cw.ok("push", "--server", s.url, "--token", ingest)
    ids = {r["name"]: r["id"] for r in cw.json("runs")}
    assert _signature(s, ingest, ids["before"]) == {"status": "valid", "key_id": kid}
    assert _signature(s, ingest, ids["after"]) == {"status": "unknown_key", "key_id": kid}
    v = _verify(s, tmp_path)
    assert v["ok"], v
    assert v["reports"] == {"total": 2, "signed": 1, "unsigned": 0, "unknown_key": 1,
                            "figures_unsigned": 0}  # fmt: skip
    listed = _ok(_srv(s, "server", "node-key", "list", "--db", s.db_url)).stdout
    assert kid in listed and "node-a" in listed
