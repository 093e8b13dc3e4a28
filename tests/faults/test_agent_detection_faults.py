"""Faults of the agent's training detection: bad configuration is one line naming the key and
exit 2; numpy missing is said before the agent starts; a slow, refusing or garbled server
answers the check with a readable error and never holds a tick; telemetry the detector cannot
use is a note, not a crash; a detector that breaks is switched off and the agent goes on."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT
from tests.fleet.conftest import ProcTree

from computewatch.fleet.agent import Agent
from computewatch.fleet.agent_config import AgentConfigError, parse_agent_config
from computewatch.fleet.attribution import Attributor, TeamMap
from computewatch.fleet.detection import (
    CheckError,
    CheckRequest,
    DetectOptions,
    HttpAccountChecker,
    TrainingDetector,
)
from computewatch.fleet.node import JobGpus, NodeOptions, NodeSampler
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import FakeDevice, FakeNVML, ManualClock

REQ = CheckRequest(gpus=1, hours=1.0, gpu_model="NVIDIA H100 80GB HBM3")


@pytest.fixture
def proc_tree(tmp_path: Path) -> ProcTree:
    """A recorded procfs tree a test edits (tests/fleet/conftest.py)."""
    return ProcTree(tmp_path / "proc")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agent]\ndetect = 1\n", ":2: agent.detect = 1 must be true or false"),
        ("[agent]\ndetect_every = 0\n", ":2: agent.detect_every"),
        ("[agent]\ndetect_window = -5\n", ":2: agent.detect_window"),
        ("[agent]\ndetect_hours_factor = 0\n", ":2: agent.detect_hours_factor"),
        ("[agent]\ndetect_check_timeout = 1e9\n", ":2: agent.detect_check_timeout"),
        (
            "[agent]\naccounts = { nlp = 3 }\n",
            ":2: agent.accounts = {'nlp': 3} must be a table of name = \"account\"",
        ),
        ('[agent]\naccounts = ["x"]\n', ":2: agent.accounts"),
        (
            "[agent]\ndetect_window = 60\ndetect_min_seconds = 600\n",
            ":3: agent.detect_min_seconds = 600 must not exceed agent.detect_window = 60",
        ),
        ("[agent]\ndetect_evry = 5\n", ":2: unknown key agent.detect_evry"),
    ],
)
def test_bad_detection_settings_name_the_key(text: str, message: str) -> None:
    with pytest.raises(AgentConfigError) as e:
        parse_agent_config(text, Path("/etc/cw.toml"))
    assert message in str(e.value)
    assert str(e.value).startswith("/etc/cw.toml:")


def test_good_detection_settings() -> None:
    cfg = parse_agent_config(
        "[agent]\ndetect = true\ndetect_every = 60\ndetect_min_seconds = 120\n"
        'detect_window = 1800\naccounts = { nlp = "acme", bob = "bob-lab" }\n'
    )
    assert cfg.detect and cfg.detect_every == 60 and cfg.detect_window == 1800
    assert dict(cfg.accounts) == {"nlp": "acme", "bob": "bob-lab"}
    default = parse_agent_config("")
    assert not default.detect and default.detect_every == 300
    assert default.detect_min_seconds == 600 and default.detect_window == 3600


def test_bad_config_is_one_line_and_exit_2(cw: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text("[agent]\ndetect = true\ndetect_every = -1\n")
    r = cw("agent", "--config", cfg, "--once", "--gpu-backend", "none")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "agent.detect_every" in r.stderr
    assert "Traceback" not in r.stderr


def test_detection_without_numpy_is_said_before_the_agent_starts(cw: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "nonumpy" / "numpy"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('numpy is not installed here')\n")
    env = cw.env()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(blocker.parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    r = subprocess.run(
        [*CW, "agent", "--detect", "--once", "--gpu-backend", "none", "--interval", "0.05"],
        capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "agent.detect = true needs numpy" in r.stderr and "computewatch[governance]" in r.stderr
    assert "Traceback" not in r.stderr


# -- the account check against servers that misbehave -----------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(5)
    for c in conns:
        c.close()
    srv.close()


def answering(status: int, body: bytes) -> Any:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_silent_server_times_out(silent_server: str) -> None:
    with pytest.raises(CheckError, match=r"did not answer within 0\.3 s"):
        HttpAccountChecker(silent_server, "s3cret", timeout=0.3).check("acme", REQ)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (403, b'{"detail": "admin only"}', "HTTP 403 (the agent's token must be an admin token)"),
        (500, b"boom s3cret", "HTTP 500"),
        (200, b"<html>not json</html>", "unreadable answer"),
        (200, b'{"decision": "maybe"}', "answered 'maybe'"),
        (200, b'["allow"]', "unreadable answer"),
    ],
)
def test_a_misbehaving_server_is_a_readable_error(status: int, body: bytes, message: str) -> None:
    srv = answering(status, body)
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        with pytest.raises(CheckError) as e:
            HttpAccountChecker(url, "s3cret", timeout=5).check("acme", REQ)
    finally:
        srv.shutdown()
        srv.server_close()
    assert message in str(e.value)
    assert "s3cret" not in str(e.value)


def test_a_refused_connection_is_a_readable_error(free_port: Any) -> None:
    url = f"http://user:pw@127.0.0.1:{free_port()}"
    with pytest.raises(CheckError, match="cannot reach the server") as e:
        HttpAccountChecker(url, "s3cret", timeout=2).check("a/b c", REQ)
    assert "pw@" not in str(e.value) and "s3cret" not in str(e.value)


def test_a_silent_server_never_holds_a_tick(proc_tree: Any, silent_server: str) -> None:
    """Checks wait on the detector's thread: ticks run while a check hangs."""
    node, _, clock = _node(proc_tree, util=97)
    said: list[str] = []
    det = TrainingDetector(
        DetectOptions(every=10, min_seconds=20, window=60, accounts={"": "acme"}),
        "n1",
        checker=HttpAccountChecker(silent_server, "s3cret", timeout=2),
        say=said.append,
    )
    agent = Agent(node, [], 1.0, wall=clock, detector=det)
    try:
        for _ in range(21):  # paced: every round done before the next tick
            clock.advance(1.0)
            agent.tick()
            assert det.wait_idle(60)
        clock.advance(10.0)
        agent.tick()  # the round at 31 s: its check hangs up to 2 s on the worker thread
        for _ in range(20):
            clock.advance(1.0)
            agent.tick()
        hanging = det.busy  # 20 ticks later the check still waits: no tick waited for it
        assert det.wait_idle(60)
    finally:
        det.close()
        node.close()
    assert hanging and agent.ticks == 42
    assert any("did not answer within 2 s" in t for t in said), said
    assert det.results()["j"].answer is None  # never answered: no breach exported
    assert "s3cret" not in " ".join(said)


# -- telemetry and detectors that break ---------------------------------------------------------


def _node(proc_tree: Any, util: int | None) -> tuple[NodeSampler, FakeNVML, ManualClock]:
    clock = ManualClock(0.0)
    unsupported = () if util is not None else ("nvmlDeviceGetUtilizationRates",
                                               "nvmlDeviceGetMemoryInfo")  # fmt: skip
    dev = FakeDevice("NVIDIA H100 80GB HBM3", unsupported=unsupported)
    if util is not None:
        dev.script("gpu_util_percent", lambda t: 30 if t % 60 < 5 else util)
    fake = FakeNVML([dev], clock)
    proc_tree.add(100, "train", uid=1000, environ={"COMPUTEWATCH_TAGS": "job=j"})
    dev.add_process(100, 1 << 30)
    att = Attributor(str(proc_tree.root), TeamMap(), user_name=lambda u: "", pod_logs_root=None)
    node = NodeSampler(
        NodeOptions(node="n1", procfs_root=str(proc_tree.root), filesystems=()), att, clock=clock
    )
    node.gpus = [
        NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(proc_tree.root))
    ]
    return node, fake, clock


def test_telemetry_without_utilization_or_memory_is_a_note(proc_tree: Any) -> None:
    node, _, clock = _node(proc_tree, util=None)
    said: list[str] = []
    det = TrainingDetector(
        DetectOptions(every=10, min_seconds=20, window=60), "n1", background=False, say=said.append
    )
    agent = Agent(node, [], 1.0, wall=clock, detector=det)
    try:
        for _ in range(60):
            clock.advance(1.0)
            samples = agent.tick()
    finally:
        det.close()
        node.close()
    assert agent.ticks == 60 and agent.detector is det
    notes = [t for t in said if "neither GPU utilization nor memory" in t]
    assert len(notes) == 1  # once, not every round
    assert not any(s.name == "computewatch_job_training_probability" for s in samples)


class BrokenDetector(TrainingDetector):
    def observe(self, now: float, jobs: Any) -> Any:
        raise RuntimeError("window corrupted")


def test_a_broken_detector_is_switched_off_and_the_agent_goes_on(
    proc_tree: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    node, _, clock = _node(proc_tree, util=97)
    det = BrokenDetector(DetectOptions(), "n1", background=False)
    agent = Agent(node, [], 1.0, wall=clock, detector=det, log=sys.stderr)
    try:
        for _ in range(5):
            clock.advance(1.0)
            samples = agent.tick()
    finally:
        node.close()
    assert agent.ticks == 5 and agent.detector is None
    assert any(s.name == "computewatch_job_gpu_seconds_total" for s in samples)
    err = capsys.readouterr().err
    assert err.count("training detection failed and was switched off: window corrupted") == 1


def test_a_job_without_gpus_is_not_followed() -> None:
    from computewatch.fleet.attribution import JobIdentity

    det = TrainingDetector(DetectOptions(every=1, min_seconds=1, window=10), "n1")
    ident = JobIdentity("cpu-only", "process", "alice", "")
    for t in range(20):
        det.observe(float(t), [JobGpus(ident, ident.labels("n1"), {}, {})])
    assert det.samples_kept() == 0 and det.results() == {}
    det.close()
