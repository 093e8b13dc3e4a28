"""TPUs through the fake TPU VM everywhere GPUs appear: a run's summary, accounting and report,
``devices``, the agent's metrics."""

from __future__ import annotations

import json
import signal
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest


@pytest.mark.slow
def test_tpu_run_through_the_fake(cw: Any) -> None:
    cw.ok(
        "run", "--quiet", "--accelerator-backend", "fake:4xTPU-v5e",
        "--", sys.executable, "-c", "import time; time.sleep(1.5)",
    )  # fmt: skip
    s = cw.show()
    assert [g["model"] for g in s["gpus"]] == ["TPU-v5e"] * 4
    assert all(g["energy_method"] == "modeled" for g in s["gpus"])
    assert all(g["simulated"] for g in s["gpus"])
    gpu = s["energy"]["components"]["gpu"]
    assert gpu["method"] == "modeled" and any("TensorCore duty" in a for a in gpu["assumptions"])
    assert gpu["high"] / gpu["value"] == pytest.approx(1.5, rel=1e-3)  # data/tpu.csv: +/-50 %
    hours = s["energy"]["device_hours"]
    assert hours["gpu_hours"] == 0 and hours["tpu_hours"] == pytest.approx(
        4 * s["duration_seconds"] / 3600, rel=1e-3
    )
    assert s["flops"]["value"]  # the catalog's bf16 peak gives the hardware estimate
    devices = cw.json("devices", "--gpu-backend", "fake:8xTPU-v5p")
    assert devices["gpu_backends_used"] == ["tpu"] and len(devices["gpus"]) == 8
    assert devices["gpus"][0]["capabilities"]["energy_counter"] is False
    bad = cw("devices", "--gpu-backend", "fake:4xTPU-v9")
    assert bad.returncode == 2 and "TPU-v5e" in bad.stderr
    top = json.loads(cw.ok("top", "--once", "--json", "--gpu-backend", "fake:2xTPU-v5e").stdout)
    assert [g["name"] for g in top["gpus"]] == ["Google TPU v5e"] * 2
    assert top["gpus"][0]["utilization_ratio"] > 0 and top["gpus"][0]["power_watts"] is None
    text = cw.ok("show", "last").stdout
    assert "tpu 0 " in text and "tpu 3 " in text and "TPU-hours" in text
    report = cw.ok("report", "last", "-o", cw.tmp / "r.html")
    assert report.returncode == 0
    assert "TPU v5e" in (cw.tmp / "r.html").read_text()


@pytest.mark.slow
def test_agent_exports_tpus_in_the_gpu_names(cw: Any, free_port: Callable[[], int]) -> None:
    port = free_port()
    proc = cw.popen(
        "agent", "--listen", f"127.0.0.1:{port}", "--gpu-backend", "fake:2xTPU-v5e",
        "--interval", "0.2",
    )  # fmt: skip
    body = ""

    def scraped() -> bool:
        nonlocal body
        if proc.poll() is not None:
            pytest.fail(f"agent exited {proc.returncode}: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return False
        return "computewatch_tpu_hbm_bandwidth_utilization_ratio{" in body

    cw.wait_for(scraped, timeout=60, what="the agent's TPU metrics")
    lines = [ln for ln in body.splitlines() if 'gpu="TPU-0000:00:04.0"' in ln]
    names = {ln.split("{")[0] for ln in lines}
    assert {
        "computewatch_gpu_utilization_ratio",
        "computewatch_gpu_memory_used_bytes",
        "computewatch_gpu_memory_total_bytes",
        "computewatch_gpu_energy_joules_total",
        "computewatch_tpu_hbm_bandwidth_utilization_ratio",
    } <= names
    assert all('gpu_model="Google TPU v5e"' in ln and 'simulated="true"' in ln for ln in lines)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
