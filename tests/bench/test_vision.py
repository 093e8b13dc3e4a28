"""``bench compare`` on real torchvision models and real PyTorch quantization, on the CPU.

torchvision cannot be imported beside the suite's CPU-only torch (PyPI's torchvision for it is
a CUDA build), so this one test runs the CLI in a second virtual environment with torch 2.14.1
and torchvision 0.29.1, built once and cached outside the repository
(``~/.cache/computewatch-test/venv-vision``, or ``$COMPUTEWATCH_TEST_VISION_VENV``): about a
minute when pip finds the wheels locally. computewatch itself comes from this checkout
(PYTHONPATH), so the cached environment never goes stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [
    "torch==2.14.1", "torchvision==0.29.1", "mlcommons-loadgen>=4.1",
    "psutil>=5.9", "PyYAML>=6", "rich>=13", "ddsketch>=3",
    "msgspec>=0.18",
]  # fmt: skip
CHECK = "import torch, torchvision, mlperf_loadgen, psutil, yaml, rich, ddsketch, msgspec"


def _venv_dir() -> Path:
    given = os.environ.get("COMPUTEWATCH_TEST_VISION_VENV")
    return Path(given) if given else Path.home() / ".cache" / "computewatch-test" / "venv-vision"


@pytest.fixture(scope="session")
def vision_python() -> Path:
    return ensure_vision_venv()


def ensure_vision_venv() -> Path:
    """The vision environment's interpreter, built when missing (or incomplete). scripts/test
    calls it before pytest, so that the build is not part of a test's time."""
    venv = _venv_dir()
    python = venv / "bin" / "python"
    ready = venv / ".computewatch-ready"
    if ready.is_file() and python.is_file():
        probe = subprocess.run([python, "-c", CHECK], capture_output=True, timeout=300, check=False)
        if probe.returncode == 0:
            return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True, timeout=300)
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES],
        check=True, timeout=1800,
    )  # fmt: skip
    subprocess.run([python, "-c", CHECK], check=True, timeout=300)
    ready.write_text(" ".join(PACKAGES) + "\n")
    return python


@pytest.mark.slow
def test_compare_torchvision_and_quantization(vision_python: Path, cw, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = cw.env(PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO / "examples")]))

    def bench(*args: str) -> dict:  # type: ignore[type-arg]
        r = subprocess.run(
            [vision_python, "-m", "computewatch", "bench", "compare", "--repetitions", "1",
             "--duration", "0.3", "--min-queries", "8", "--json", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        doc: dict = json.loads(r.stdout)  # type: ignore[type-arg]
        return doc

    cv = bench("--queries", "bench_models:images", "--html", str(tmp_path / "cv.html"),
               "--variant", "mobilenet=bench_models:mobilenet",
               "--variant", "resnet=bench_models:resnet")  # fmt: skip
    by = {v["name"]: v for v in cv["variants"]}
    assert all(v["status"] == "ok" for v in by.values()), by
    # MobileNetV3-small has 2.5 M parameters, ResNet-18 11.7 M: the serialized sizes say so
    assert 5e6 < by["mobilenet"]["model_bytes"] < 15e6 < 40e6 < by["resnet"]["model_bytes"]
    for v in by.values():
        assert v["latency_p50_seconds"] > 0 and v["energy_per_query_joules"] > 0
    assert "<svg" in (tmp_path / "cv.html").read_text()

    q = bench("--queries", "bench_models:vectors", "--accuracy", "bench_models:agreement",
              "--variant", "fp32=bench_models:mlp_fp32", "--variant", "int8=bench_models:mlp_int8",
              "--variant", "pruned=bench_models:mlp_pruned")  # fmt: skip
    by = {v["name"]: v for v in q["variants"]}
    assert all(v["status"] == "ok" for v in by.values()), by
    assert by["fp32"]["accuracy"] == 1.0  # agreement with itself
    assert 0.5 < by["int8"]["accuracy"] <= 1.0
    # int8 weights: about a quarter of the float32 model's bytes
    assert by["int8"]["model_bytes"] < 0.4 * by["fp32"]["model_bytes"]
    assert by["pruned"]["model_bytes"] == pytest.approx(by["fp32"]["model_bytes"], rel=0.01)
    assert q["pareto_axes"] == ["energy_per_query_joules", "accuracy"]
    assert any(v["pareto"] for v in by.values())
    assert len(cw.json("runs", "--tag", "bench=compare", "--limit", "50")) == 5
