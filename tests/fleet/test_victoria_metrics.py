"""Scale-out storage: a real Prometheus scrapes a real agent and remote-writes every sample into
a real VictoriaMetrics (Debian's ``victoria-metrics``); ``computewatch fleet --prometheus`` gives
the same report against either, so a fleet larger than one Prometheus keeps its reports on a
distributed store (docs/observability.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

VM = "/usr/bin/victoria-metrics"
DATA_SECONDS = 30

pytestmark = pytest.mark.slow


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
    except OSError:
        return []
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


@pytest.fixture
def victoria(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[str]:
    if not Path(VM).exists():
        pytest.skip("no victoria-metrics (apt-get install victoria-metrics); CI installs it")
    port = free_port()
    log = tmp_path / "vm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [VM, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={tmp_path / 'vm'}",
             "-retentionPeriod=1d", "-search.latencyOffset=1s", "-search.cacheTimestampOffset=1s",
             "-search.disableCache"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp_path / "vm", ignore_errors=True)


def _numbers(doc: Any, path: str = "") -> dict[str, float]:
    """Every number of a report by its path (rows keyed by their group)."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(_numbers(v, f"{path}.{k}"))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            key = v.get("group", i) if isinstance(v, dict) else i
            out.update(_numbers(v, f"{path}[{key}]"))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[path] = float(doc)
    return out


def test_remote_write_into_victoria_metrics_gives_the_same_fleet_report(
    cw: Any,
    tmp_path: Path,
    victoria: str,
    free_port: Callable[[], int],
    prometheus: Callable[..., Any],
    busy_process: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    team = f"nlp-{uuid.uuid4().hex[:8]}"  # unique: other tests' tagged processes run here too
    child = busy_process(f"team={team}")
    port = free_port()
    agent = cw.popen(
        "agent", "--listen", f"127.0.0.1:{port}", "--gpu-backend", "fake:2xH100-SXM",
        "--interval", "0.5", "--node", "node-1", "--fake-gpu-pid", str(child.pid),
    )  # fmt: skip
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n  - job_name: computewatch\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        f"remote_write:\n  - url: {victoria}/api/v1/write\n"
        "    queue_config:\n      batch_send_deadline: 1s\n      min_backoff: 100ms\n"
    )
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    try:
        with prometheus(config, tmp_path / "tsdb") as prom:
            cw.wait_for(lambda: prom.query(f'computewatch_job_info{{team="{team}"}}'), timeout=90,
                        what="the agent scraped")  # fmt: skip
            time.sleep(DATA_SECONDS)
            until = int(time.time()) - 5  # both stores hold every sample up to here
            cw.wait_for(
                lambda: _query(victoria, f'computewatch_job_info{{team="{team}"}} @ {until}'),
                timeout=60,
                what="the samples in VictoriaMetrics",
            )
            time.sleep(3)  # the last batches of remote_write
            reports = {}
            for name, url in (("prometheus", prom.url), ("victoria", victoria)):
                r = cw("fleet", "--prometheus", url, "--since", "20s", "--until", str(until),
                       "--by", "team", "--json", "--config", str(empty))  # fmt: skip
                assert r.returncode == 0, (name, r.stderr)
                reports[name] = json.loads(r.stdout)
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    a, b = reports["prometheus"], reports["victoria"]
    assert team in {g["group"] for g in a["groups"]} & {g["group"] for g in b["groups"]}
    na, nb = _numbers(a), _numbers(b)
    nlp_hours = next(g for g in a["groups"] if g["group"] == team)["gpu_hours"]["value"]
    assert nlp_hours == pytest.approx(2 * 20 / 3600, rel=0.1)  # two GPUs held all along
    # The window (20 s) lies inside the data, so both stores see every counter throughout it.
    # Prometheus's increase() extrapolates the samples inside the window to its edges,
    # VictoriaMetrics' takes the last sample before the window as the base: the two differ by
    # at most about one scrape interval's worth (1 s of 20 s).
    # Compared: the test's team (its own job, there all along), the fleet's GPUs and the
    # GPU time, which only that job holds. The other groups, and the total's CPU and energy,
    # are the machine's own busy processes (other tests', under load), which come and go inside
    # the window: a job seen in one sample only counts in VictoriaMetrics' increase(), which
    # takes its base from before the window, and not in Prometheus's, which needs two samples.
    kept = (f".groups[{team}].", ".fleet.", ".total.gpu_hours", ".total.idle_gpu_hours")
    compared = [k for k in na if k.startswith(kept)]
    assert compared == [k for k in nb if k.startswith(kept)]
    assert any(k.startswith(f".groups[{team}].gpu_hours") for k in compared), compared
    for key in compared:
        va, vb = na[key], nb[key]
        assert vb == pytest.approx(va, rel=0.08, abs=1e-6), (key, va, vb)
