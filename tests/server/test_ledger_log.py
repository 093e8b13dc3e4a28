"""The transparency log on real servers, on SQLite and PostgreSQL: two server processes appending
at once make one tree (no gap, no duplicate, every stored subtree and head agreeing), heads signed
by the servers' upkeep and served, inclusion and consistency proofs over HTTP checked offline; and
witnesses: one cosigns each consistent head and the export then verifies with its key required;
when the operator rewrites entry 5 and signs the log again with the server's own key, the witness
refuses the new head (exit 1, evidence kept), ``verify --previous`` names entry 5 and the rewritten
export has no head the witness cosigned."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT
from tests.ledger.forge import rewrite_database
from tests.server.conftest import ServerProcess, batch

from computewatch.ledger.keys import load_private_key
from computewatch.upload.protocol import RunUpload


def _cli(
    srv: ServerProcess,
    *args: str,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    env = srv.env()
    env.pop("COMPUTEWATCH_SERVER", None)
    env.pop("COMPUTEWATCH_TOKEN", None)
    return subprocess.run(
        [*CW, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
        cwd=cwd or srv.home,
    )


def _governed(make_upload: Callable[..., RunUpload], i: int) -> RunUpload:
    up = make_upload(gpus=8, gpu_model="H100-SXM")
    flop = 1e21 * (i + 1)
    up["summary"]["flops"] = {
        "value": flop,
        "low": flop * 0.9,
        "high": flop * 1.1,  # type: ignore[index]
        "unit": "FLOP",
        "method": "estimated",
        "assumptions": [],
        "source": "test",
    }
    up["meta"]["governance"] = {
        "model": f"m{i % 2}",
        "base_model": None,
        "stage": "pretrain",
        "parameters": None,
    }
    return up


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One signing key for every server of the test (as servers of one organisation share it),
    and heads signed every second."""
    config = tmp_path / "config.toml"
    config.write_text("[governance]\nhead_interval = 1\n")
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    key = tmp_path / "ledger-ed25519.pem"
    monkeypatch.setenv("COMPUTEWATCH_LEDGER_KEY", str(key))
    return key


def _wait_head(srv: ServerProcess, token: str, size: int, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = srv.client(token).get("/api/v1/ledger/head")
        if r.status_code == 200 and r.json()["size"] >= size:
            doc: dict[str, Any] = r.json()
            return doc
        time.sleep(0.3)
    pytest.fail(f"no head of size {size} after {timeout} s")


@pytest.mark.slow
def test_two_servers_appending_at_once_make_one_tree(
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    shared: Path,
    tmp_path: Path,
) -> None:
    a = server()
    b = server(db_url=a.db_url)
    tokens = [a.token("lab", "ingest"), b.token("lab", "ingest")]
    admin, read = a.token("lab", "admin"), a.token("lab", "read")
    errors: list[str] = []

    def post(srv: ServerProcess, token: str, offset: int) -> None:
        client = srv.client(token)
        for i in range(offset, offset + 12):
            r = client.post("/api/v1/runs", json=batch(_governed(make_upload, i)))
            if r.status_code != 200:
                errors.append(f"{r.status_code} {r.text}")

    threads = [
        threading.Thread(target=post, args=(s, t, o))
        for s, t, o in (
            (a, tokens[0], 0),
            (b, tokens[1], 100),
            (a, tokens[0], 200),
            (b, tokens[1], 300),
        )
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    export = tmp_path / "ledger.jsonl"
    ex = _cli(a, "ledger", "export", "-o", str(export), "--server", a.url, "--token", admin)
    assert ex.returncode == 0, ex.stderr
    lines = export.read_text().splitlines()[1:]
    seqs = [json.loads(x)["seq"] for x in lines]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate
    kinds = [json.loads(x)["kind"] for x in lines]
    assert kinds.count("run") == 48
    run_ids = [json.loads(x)["body"]["run_id"] for x in lines if json.loads(x)["kind"] == "run"]
    assert len(set(run_ids)) == 48
    pub = tmp_path / "server.pub"
    pub.write_text(_cli(a, "ledger", "public-key").stdout)
    ok = _cli(a, "ledger", "verify", str(export), "--public-key", str(pub), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    in_db = _cli(a, "ledger", "verify", "--db", a.db_url, "--public-key", str(pub), "--json")
    assert in_db.returncode == 0, in_db.stdout + in_db.stderr  # every leaf and stored head

    head = _wait_head(b, read, len(seqs))  # served by either server, signed by their upkeep
    old = tmp_path / "old-head.txt"
    r = a.client(read).get("/api/v1/ledger/head")
    assert r.status_code == 200
    old.write_text(r.json()["checkpoint"])
    assert (
        b.client(read).get("/api/v1/ledger/proof/inclusion", params={"seq": 3}).status_code == 403
    )
    inc = tmp_path / "inclusion.json"
    _ok(
        _cli(
            a,
            "ledger",
            "prove",
            "inclusion",
            "17",
            "--server",
            a.url,
            "--token",
            admin,
            "-o",
            str(inc),
        )
    )
    assert _ok(_cli(a, "ledger", "check-proof", str(inc), "--public-key", str(pub)))
    small = {**json.loads(inc.read_text())}
    small["entry"] = small["entry"].replace('"lab"', '"lax"')
    (tmp_path / "forged.json").write_text(json.dumps(small))
    bad = _cli(a, "ledger", "check-proof", str(tmp_path / "forged.json"), "--public-key", str(pub))
    assert bad.returncode == 1 and "DOES NOT HOLD" in bad.stdout
    b.client(tokens[1]).post("/api/v1/runs", json=batch(_governed(make_upload, 999)))
    _wait_head(a, read, head["size"] + 1)
    con = tmp_path / "consistency.json"
    _ok(
        _cli(
            b,
            "ledger",
            "prove",
            "consistency",
            str(old),
            "--server",
            b.url,
            "--token",
            read,
            "-o",
            str(con),
        )
    )
    proof = json.loads(con.read_text())
    assert proof["old_size"] == head["size"] < proof["size"]
    assert _ok(_cli(a, "ledger", "check-proof", str(con), "--public-key", str(pub), "--json"))


def _ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_witness_cosigns_consistent_heads_and_refuses_a_rewritten_history(
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    shared: Path,
    tmp_path: Path,
) -> None:
    srv = server()
    ingest, admin, read = (srv.token("lab", s) for s in ("ingest", "admin", "read"))
    client = srv.client(ingest)
    assert (
        client.post(
            "/api/v1/runs", json=batch(*[_governed(make_upload, i) for i in range(8)])
        ).status_code
        == 200
    )
    pub = tmp_path / "server.pub"
    pub.write_text(_ok(_cli(srv, "ledger", "public-key")).stdout)
    size = _wait_head(srv, read, 8)["size"]
    w1, w2 = tmp_path / "w1", tmp_path / "w2"

    def witness(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return _cli(
            srv,
            "ledger",
            "witness",
            "--log",
            srv.url,
            "--token",
            read,
            "--public-key",
            str(pub),
            "--state",
            str(state),
            "--once",
            *extra,
        )

    first = witness(w1, "--name", "witness.example/one")
    assert first.returncode == 0 and "cosigned the head" in first.stderr, first.stderr
    assert (w1 / "witness.vkey").read_text().startswith("witness.example/one+")
    assert client.post("/api/v1/runs", json=batch(_governed(make_upload, 8))).status_code == 200
    _wait_head(srv, read, size + 1)
    again = witness(w1)
    assert again.returncode == 0 and f"consistent with size {size}" in again.stderr, again.stderr
    _ok(witness(w2))  # a second witness, first seen now
    head = srv.client(read).get("/api/v1/ledger/head").json()["checkpoint"]
    assert head.count("\u2014 ") == 3  # the log's signature and two cosignatures

    honest = tmp_path / "honest.jsonl"
    _ok(_cli(srv, "ledger", "export", "-o", str(honest), "--server", srv.url, "--token", admin))
    keys = ["--witness-key", str(w1 / "witness.vkey"), "--witness-key", str(w2 / "witness.vkey")]
    v = _cli(
        srv,
        "ledger",
        "verify",
        str(honest),
        "--public-key",
        str(pub),
        *keys,
        "--witnesses-required",
        "2",
        "--json",
    )
    assert v.returncode == 0, v.stdout + v.stderr
    assert json.loads(v.stdout)["witnessed_size"] == json.loads(v.stdout)["size"]

    # the operator rewrites entry 5 and signs the whole log again with the server's key
    srv.stop()
    key = load_private_key(shared)

    def lighter(doc: dict[str, Any]) -> None:
        doc["body"]["figures"]["flops"]["hardware"]["high"] = 1.0

    seq5 = 5
    db_file = Path(srv.db_url.removeprefix("sqlite:///"))
    rewrite_database(db_file, key, {seq5: lighter})
    srv.restart()
    refused = witness(w1)
    assert refused.returncode == 1, refused.stderr
    assert "ALERT" in refused.stderr and "INCONSISTENT LOG" in refused.stderr
    evidence = list((w1 / "evidence").glob("*.json"))
    assert len(evidence) == 1 and json.loads(evidence[0].read_text())["cosigned_checkpoint"]
    state = json.loads((w1 / "state.json").read_text())
    assert parse_size(state["checkpoint"]) == parse_size(head)  # still the honest head
    # without --once it keeps watching, and alerting at every poll; the evidence is kept once
    env = srv.env()
    watching = subprocess.Popen(
        [*CW, "ledger", "witness", "--log", srv.url, "--token", read, "--public-key", str(pub),
         "--state", str(w1), "--interval", "0.2"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=srv.home,
    )  # fmt: skip
    try:
        time.sleep(6)
    finally:
        watching.terminate()
        _, alerts = watching.communicate(timeout=TIMEOUT)
    assert alerts.count("ALERT: witness refuses the log's head") >= 2, alerts
    assert len(list((w1 / "evidence").glob("*.json"))) == 1

    rewritten = tmp_path / "rewritten.jsonl"
    _ok(_cli(srv, "ledger", "export", "-o", str(rewritten), "--server", srv.url, "--token", admin))
    assert _cli(srv, "ledger", "verify", str(rewritten), "--public-key", str(pub)).returncode == 0
    fork = _cli(
        srv,
        "ledger",
        "verify",
        str(rewritten),
        "--public-key",
        str(pub),
        "--previous",
        str(honest),
        "--json",
    )
    assert fork.returncode == 1
    problem = json.loads(fork.stdout)["problem"]
    assert problem["what"] == "fork" and problem["seq"] == seq5, problem
    unwitnessed = _cli(
        srv, "ledger", "verify", str(rewritten), "--public-key", str(pub), *keys, "--json"
    )
    assert unwitnessed.returncode == 1
    assert json.loads(unwitnessed.stdout)["problem"]["what"] == "unwitnessed"


def parse_size(note: str) -> int:
    return int(note.split("\n")[1])
