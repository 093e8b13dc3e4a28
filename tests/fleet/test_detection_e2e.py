"""Training detection end to end: ``computewatch run --model`` puts the declaration in its
command's environment; ``computewatch agent --detect`` exports the detection families; a real
``computewatch server`` child process denies an account whose cap the undeclared training job
would break, and the built-in ``UndeclaredTrainingOverCap`` rule fires to a real webhook."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT
from tests.server.conftest import ServerProcess

from computewatch.alerts.sink import sink_from_args
from computewatch.fleet.agent import Agent
from computewatch.fleet.attribution import Attributor, TeamMap
from computewatch.fleet.detection import DetectOptions, HttpAccountChecker, TrainingDetector
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset

GIB = 2**30
SHOW_ENV = (
    "import os; print(os.environ.get('COMPUTEWATCH_MODEL'), os.environ.get('COMPUTEWATCH_STAGE'))"
)


def test_run_puts_the_declared_model_in_the_command_environment(cw: Any) -> None:
    r = cw.ok("run", "--quiet", "--model", "acme-7b", "--stage", "finetune", "--",
              sys.executable, "-c", SHOW_ENV)  # fmt: skip
    assert r.stdout.split() == ["acme-7b", "finetune"]
    plain = cw.ok("run", "--quiet", "--", sys.executable, "-c", SHOW_ENV)
    assert plain.stdout.split() == ["None", "None"]


def test_agent_detect_exports_the_families(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    """A real agent with --detect on a fake GPU held by a tagged process: after the minimum
    data, /metrics carries the job's training probability and flags."""
    job = f"det-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"COMPUTEWATCH_TAGS": f"job={job},team=lab", "PATH": "/usr/bin:/bin"},
    )
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        "[agent]\ndetect_every = 1\ndetect_min_seconds = 2\ndetect_window = 30\n"
        'accounts = { lab = "lab-account" }\n'
    )
    port = free_port()
    proc = cw.popen(
        "agent", "--config", cfg, "--detect", "--listen", f"127.0.0.1:{port}", "--interval",
        "0.2", "--node", "n1", "--gpu-backend", "fake:1xH100-SXM", "--fake-gpu-pid", holder.pid,
    )  # fmt: skip
    try:

        def scraped() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                return None
            return body if f'computewatch_job_training_probability{{job="{job}"' in body else None

        body = cw.wait_for(scraped, timeout=90, what="the detection families on /metrics")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, err
    assert "training detection on: every 1 s" in err
    lines = {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in body.splitlines() if job in ln}
    prob = next(v for k, v in lines.items() if k.startswith("computewatch_job_training_prob"))
    detected = next(v for k, v in lines.items() if k.startswith("computewatch_job_detected_"))
    undeclared = next(v for k, v in lines.items() if k.startswith("computewatch_job_undeclared"))
    uncertain = next(v for k, v in lines.items() if k.startswith("computewatch_job_detection_un"))
    assert 0 <= prob <= 1
    assert detected + uncertain <= 1.0  # uncertain is never training
    assert detected == 0.0 or prob >= 0.5
    assert uncertain == 1.0 or detected == (1.0 if prob >= 0.5 else 0.0)
    assert any(k.startswith("computewatch_job_review_flag") for k in lines)
    assert undeclared == detected  # the holder declares no model
    assert not any(k.startswith("computewatch_job_cap_breach") for k in lines)  # no server
    assert "computewatch_agent_detection_duration_seconds" in body


# -- a real server ------------------------------------------------------------------------------


@pytest.fixture
def account_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    """A ``computewatch server`` on SQLite with account ``acme`` capped at 0.1 GPU-hour a month,
    and an admin token."""
    srv = ServerProcess(f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "server-home")
    try:
        token = srv.token("ops", "admin")
        add = subprocess.run(
            [*CW, "accounts", "add", "acme", "--legal-name", "Acme Research Ltd", "--email",
             "ops@acme.example", "--db", srv.db_url, "--gpu-hours-per-month", "0.1"],
            capture_output=True, text=True, env=srv.env(), timeout=TIMEOUT, check=False,
        )  # fmt: skip
        assert add.returncode == 0, add.stderr
        yield srv, token
    finally:
        srv.close()


def training_util(t: float) -> int:
    return 30 if t % 60 < 5 else 97


def test_over_cap_undeclared_training_fires_the_alert(
    proc_tree: Any, account_server: tuple[ServerProcess, str], receiver: Any
) -> None:
    srv, token = account_server
    clock = ManualClock(1_790_000_000.0)
    fake = from_preset("2xH100-SXM", clock=clock)
    for d in fake.devices:
        d.script("gpu_util_percent", training_util).script("memory_used_bytes", 60 * GIB)
    proc_tree.add(100, "train", uid=1000, environ={"COMPUTEWATCH_TAGS": "job=big,team=acme"})
    proc_tree.add(200, "small", uid=1000, environ={"COMPUTEWATCH_TAGS": "job=ok,team=other"})
    fake.devices[0].add_process(100, 40 * GIB)
    fake.devices[1].add_process(200, 40 * GIB)
    att = Attributor(
        str(proc_tree.root), TeamMap(), user_name=lambda u: "alice", pod_logs_root=None
    )
    node = NodeSampler(
        NodeOptions(node="n1", procfs_root=str(proc_tree.root), filesystems=()), att, clock=clock
    )
    node.gpus = [
        NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(proc_tree.root))
    ]
    said: list[str] = []
    detector = TrainingDetector(
        DetectOptions(every=60, min_seconds=600, window=3600, accounts={"acme": "acme",
                      "other": "nobody-knows"}),
        "n1",
        checker=HttpAccountChecker(srv.url, token, timeout=10),
        background=False,
        say=said.append,
    )  # fmt: skip
    log = open(proc_tree.root.parent / "alerts.log", "w")  # noqa: SIM115 - closed below
    alerts = sink_from_args(
        None, notify=[f"webhook:{receiver.url}/hook"], budget_usd=None, budget_kwh=None, out=log
    )
    agent = Agent(node, [alerts], 5.0, wall=clock, detector=detector)
    try:
        for _ in range(130):  # 650 s at 5 s: one round past the 600 s minimum
            clock.advance(5.0)
            agent.tick()
        receiver.wait(
            lambda r: (
                {a["rule"] for a in r.alerts()}
                >= {"UndeclaredTraining", "UndeclaredTrainingOverCap"}
            ),
            timeout=60,
        )
    finally:
        alerts.close()
        log.close()
        detector.close()
        node.close()
    results = detector.results()
    big = results["big"]
    assert big.label == "training" and big.undeclared and big.account == "acme"
    assert big.answer is not None and not big.answer.allow
    assert any("GPU-hour cap" in r for r in big.answer.reasons), big.answer
    # "nobody-knows" has no account on the server: unknown customers are denied too.
    assert results["ok"].answer is not None and not results["ok"].answer.allow
    over = [a for a in receiver.alerts() if a["rule"] == "UndeclaredTrainingOverCap"]
    jobs = {a["labels"]["job"]: a for a in over}
    assert set(jobs) == {"big", "ok"}
    a = jobs["big"]
    assert a["severity"] == "critical" and a["status"] == "firing"
    assert a["labels"]["account"] == "acme" and a["labels"]["node"] == "n1"
    assert "account acme's caps do not allow" in a["annotations"]["summary"]
    warn = [a for a in receiver.alerts() if a["rule"] == "UndeclaredTraining"]
    assert {a["labels"]["job"] for a in warn} == {"big", "ok"}
    assert all(a["severity"] == "warning" for a in warn)
    assert any("account acme denies 1 GPU(s)" in t for t in said), said
    body = json.dumps(receiver.bodies)
    assert "cmdline" not in body and "--secret-flag" not in body  # aggregates only


def test_server_down_the_agent_keeps_ticking(proc_tree: Any, free_port: Callable[[], int]) -> None:
    """Nothing listens at the server's address: the check fails quickly, is said once, and
    every tick still runs and exports."""
    clock = ManualClock(0.0)
    fake = from_preset("1xH100-SXM", clock=clock)
    fake.devices[0].script("gpu_util_percent", training_util).script("memory_used_bytes", 60 * GIB)
    proc_tree.add(100, "train", uid=1000, environ={"SLURM_JOB_ACCOUNT": "acme",
                                                  "COMPUTEWATCH_TAGS": "job=big"})  # fmt: skip
    fake.devices[0].add_process(100, 40 * GIB)
    att = Attributor(
        str(proc_tree.root), TeamMap(), user_name=lambda u: "alice", pod_logs_root=None
    )
    node = NodeSampler(
        NodeOptions(node="n1", procfs_root=str(proc_tree.root), filesystems=()), att, clock=clock
    )
    node.gpus = [
        NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(proc_tree.root))
    ]
    said: list[str] = []
    detector = TrainingDetector(
        DetectOptions(every=60, min_seconds=120, window=600),
        "n1",
        checker=HttpAccountChecker(f"http://127.0.0.1:{free_port()}", "t0k3n", timeout=2),
        say=said.append,
    )
    agent = Agent(node, [], 5.0, wall=clock, detector=detector)
    try:
        for _ in range(200):
            clock.advance(5.0)
            samples = agent.tick()
            assert detector.wait_idle(60)  # paced as real 5 s ticks would be
        samples = agent.tick()
    finally:
        detector.close()
        node.close()
    assert agent.ticks == 201 and detector.rounds == 16
    assert any(s.name == "computewatch_job_undeclared_training" for s in samples)
    assert not any(s.name == "computewatch_job_cap_breach" for s in samples)  # never answered
    notes = [t for t in said if "account check failed" in t]
    assert len(notes) == 1 and "cannot reach the server" in notes[0]
    assert "t0k3n" not in " ".join(said)


def test_the_agent_configuration_reaches_the_server(
    account_server: tuple[ServerProcess, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``[agent] detect`` with ``[server] url`` and ``token_file``: the agent's detector asks that
    server with that token (the wiring ``computewatch agent`` does before it starts)."""
    import argparse

    from computewatch.cli.agent_run import _detector
    from computewatch.fleet.agent_config import parse_agent_config
    from computewatch.fleet.detection import CheckRequest

    monkeypatch.delenv("COMPUTEWATCH_SERVER", raising=False)
    monkeypatch.delenv("COMPUTEWATCH_TOKEN", raising=False)
    srv, token = account_server
    tok = tmp_path / "token"
    tok.write_text(token + "\n")
    tok.chmod(0o600)
    text = (
        "[agent]\ndetect = true\ndetect_every = 60\ndetect_check_timeout = 10\n"
        'accounts = { nlp = "acme" }\n'
        f'[server]\nurl = "{srv.url}"\ntoken_file = "{tok}"\n'
    )
    det = _detector(argparse.Namespace(detect=None), parse_agent_config(text), "n1")
    assert det is not None and det.checker is not None and det.options.every == 60
    assert dict(det.options.accounts) == {"nlp": "acme"}
    deny = det.checker.check("acme", CheckRequest(8, 10.0, "NVIDIA H100 80GB HBM3"))
    assert not deny.allow and "GPU-hour cap" in deny.reasons[0]
    small = det.checker.check("acme", CheckRequest(1, 0.05, None))
    assert small.allow
    assert f"accounts checked at {srv.url}" in capsys.readouterr().err
    # A server without a token: detection runs, accounts are not checked, and it says so.
    no_token = _detector(
        argparse.Namespace(detect=True),
        parse_agent_config(f'[server]\nurl = "{srv.url}"\n'),
        "n1",
    )
    assert no_token is not None and no_token.checker is None
    assert "no token for" in capsys.readouterr().err
    # Neither flag nor key: no detector at all.
    assert _detector(argparse.Namespace(detect=None), parse_agent_config(""), "n1") is None
