"""``computewatch import`` through the real CLI: the run it stores reads like a monitored one
(show --json, report), with the GPU energy integrated from the polled power and said so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def _smi_log(path: Path, seconds: int = 60) -> Path:
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for s in range(seconds):
        t = f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}"
        lines.append(f"{t}.100, 0, NVIDIA H100 80GB HBM3, 90 %, 40000 MiB, 200.00 W")
        lines.append(f"{t}.105, 1, NVIDIA H100 80GB HBM3, 50 %, 20000 MiB, 100.00 W")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_show_report(cw: Any, tmp_path: Path) -> None:
    log = _smi_log(tmp_path / "smi.csv")
    out = json.loads(cw.ok("import", log, "--name", "old-job", "--utc", "--json").stdout)
    (run,) = out["runs"]
    assert run["samples"] == 60 and run["gpus"] == 2
    # 59 s between the first and last sample: 200 W + 100 W
    assert run["gpu_energy_joules"] == pytest.approx(59 * 300, rel=1e-6)
    assert run["energy_method"].startswith("polled power")
    s = cw.show("old-job")
    assert s["status"] == "completed"
    assert s["started_at"] == "2024-01-31T12:00:00.100Z"
    assert s["duration_seconds"] == pytest.approx(59.005, abs=0.01)
    gpus = sorted(s["gpus"], key=lambda g: g["index"])
    assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert gpus[0]["energy_joules"] == pytest.approx(59 * 200, rel=1e-6)
    assert gpus[0]["energy_method"] == "polled"
    assert gpus[0]["utilization_mean"] == pytest.approx(0.9)
    gpu_energy = s["energy"]["components"]["gpu"]
    assert gpu_energy["method"] == "polled"
    assert gpu_energy["value"] == pytest.approx(59 * 300 / 3.6e6, rel=1e-3)  # kWh
    assert any("integral of polled power" in n for n in s["notes"])
    assert s["flops"]["value"] is not None  # the hardware estimate from the catalog
    text = cw.ok("show", "old-job").stdout
    assert "polled" in text
    html = tmp_path / "r.html"
    cw.ok("report", "old-job", "-o", html)
    assert "old-job" in html.read_text()
    assert any(r["name"] == "old-job" for r in cw.json("runs"))


def test_import_parquet_two_jobs(cw: Any, tmp_path: Path) -> None:
    n = 30
    table = pa.table(
        {
            "job": ["a"] * n + ["b"] * n,
            "timestamp": [1706702400.0 + i for i in range(n)] * 2,
            "gpu": ["0"] * (2 * n),
            "gpu_power_watts": [50.0] * n + [150.0] * n,
        }
    )
    p = tmp_path / "long.parquet"
    pq.write_table(table, p)
    out = json.loads(cw.ok("import", p, "--name", "batch", "--json").stdout)
    assert [r["name"] for r in out["runs"]] == ["batch/a", "batch/b"]
    assert [r["gpu_energy_joules"] for r in out["runs"]] == pytest.approx([29 * 50, 29 * 150])
    b = cw.show("batch/b")
    assert b["tags"]["format"] == "parquet"


def test_import_text_output(cw: Any, tmp_path: Path) -> None:
    r = cw.ok("import", _smi_log(tmp_path / "x.csv", 5))
    assert "integrated from polled power" in r.stdout


def test_network_traffic_when_known(cw: Any, tmp_path: Path) -> None:
    """The long format's job-level traffic becomes the run's network figures (integrated), and
    evidence for detection."""
    p = tmp_path / "net.csv"
    rows = [
        "job,timestamp,gpu,gpu_utilization_ratio,network_receive_bytes_per_second,"
        "network_transmit_bytes_per_second"
    ]
    rows += [f"j,{1706702400 + i},{g},0.9,1000,500" for i in range(31) for g in (0, 1)]
    p.write_text("\n".join(rows) + "\n")
    cw.ok("import", p, "--name", "net")
    s = cw.show("net")
    assert s["network"]["recv_bytes"] == 30 * 1000  # counted once for the job, not per GPU
    assert s["network"]["sent_bytes"] == 30 * 500
    (job,) = json.loads(cw.ok("detect", p, "--json").stdout)["jobs"]
    assert job["features"]["network_bytes_per_second_mean"] == 1500.0


def test_the_same_file_twice_is_refused_or_replaced(cw: Any, tmp_path: Path) -> None:
    log = _smi_log(tmp_path / "smi.csv", seconds=10)
    first = json.loads(cw.ok("import", log, "--utc", "--json").stdout)["runs"][0]["id"]
    r = cw("import", log, "--utc")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"imported already as run {first}" in line and "--replace" in line
    copy = tmp_path / "copy.csv"  # the same content under another name: the same log
    copy.write_bytes(log.read_bytes())
    assert cw("import", copy, "--utc").returncode == 1
    assert [x["id"] for x in cw.json("runs")] == [first]
    out = json.loads(cw.ok("import", log, "--utc", "--replace", "--json").stdout)
    second = out["runs"][0]["id"]
    assert second != first
    assert [x["id"] for x in cw.json("runs")] == [second]  # in its place, not beside it
    assert out["replaced"] == [first]
