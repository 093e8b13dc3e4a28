"""GPUs in runs, end to end: the real CLI on real child processes, with fake and replayed GPUs.

A fake backend places the monitored command on every simulated device, so the run uses them;
what the summary says is checked against ``computewatch devices`` for the same preset.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.track_waits import SOURCE

from computewatch.sources.gpus import open_backend

PY = sys.executable
NAP = "import time; time.sleep(0.6)"


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert "Traceback" not in r.stdout, r.stdout


def _flat(text: str) -> str:
    """Text output with rich's line wrapping undone."""
    return " ".join(text.split())


def _cw_env(cw, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``computewatch ARGS`` with extra environment variables (inherited by the command)."""
    r = subprocess.run(
        [PY, "-m", "computewatch", *args],
        capture_output=True,
        text=True,
        env=cw.env(**env),
        cwd=cw.tmp,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r


def _run_json(cw, tmp_path: Path, *options: str, **env: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "summary.json"
    r = _cw_env(
        cw, "run", "--interval", "0.1", "--json", str(out), *options, "--", PY, "-c", NAP, **env
    )
    _no_traceback(r)
    summary: dict[str, Any] = json.loads(out.read_text())
    return summary, r.stderr


def _uuids(cw, preset: str) -> list[str]:
    info = cw.json("devices", "--gpu-backend", preset)
    return [g["uuid"] for g in sorted(info["gpus"], key=lambda g: g["index"])]


def test_a_run_on_two_fake_a100s(cw, tmp_path):
    s, stderr = _run_json(cw, tmp_path, "--gpu-backend", "fake:2xA100-80GB")
    assert s["status"] == "completed"
    gpus = s["gpus"]
    assert len(gpus) == 2
    assert [g["uuid"] for g in gpus] == _uuids(cw, "fake:2xA100-80GB")
    for g in gpus:
        assert g["simulated"] is True
        assert g["model"] == "A100-80GB"
        assert g["scope"] == "used by the run"
        assert g["energy_method"] == "counter"
        assert g["energy_joules"] > 0
        assert 0 < g["utilization_mean"] <= 1
        assert g["process_memory_peak_bytes"] > 0  # the command, placed on every fake GPU
    assert any("simulated" in n for n in s["notes"])
    assert s["host"]["gpu_backend"] == "fake:2xA100-80GB"
    text = _flat(stderr)
    assert "gpu 0 NVIDIA A100-SXM4-80GB (simulated)" in text
    assert "gpu 1 NVIDIA A100-SXM4-80GB (simulated)" in text
    assert "(counter)" in text
    assert cw.show()["gpus"] == gpus  # the stored summary says the same


def test_cuda_visible_devices_picks_the_gpus_of_the_run(cw, tmp_path):
    every = _uuids(cw, "fake:4xL4")
    assert len(every) == 4
    s, _ = _run_json(cw, tmp_path, "--gpu-backend", "fake:4xL4", CUDA_VISIBLE_DEVICES="1,3")
    assert [(g["index"], g["uuid"]) for g in s["gpus"]] == [(1, every[1]), (3, every[3])]
    assert all(g["simulated"] for g in s["gpus"])


def test_all_gpus_lists_every_gpu(cw, tmp_path):
    every = _uuids(cw, "fake:4xL4")
    s, _ = _run_json(
        cw, tmp_path, "--gpu-backend", "fake:4xL4", "--all-gpus", CUDA_VISIBLE_DEVICES="1,3"
    )
    assert [g["uuid"] for g in s["gpus"]] == every
    assert {g["scope"] for g in s["gpus"]} == {"device"}


def test_an_unknown_fake_model_is_one_error_and_the_command_does_not_run(cw, tmp_path):
    marker = tmp_path / "ran"
    r = cw(
        "run",
        "--gpu-backend",
        "fake:nope",
        "--",
        PY,
        "-c",
        f"open({str(marker)!r}, 'w').close()",
    )
    assert r.returncode == 2
    _no_traceback(r)
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert "nope" in errors[0] and "A100-80GB" in errors[0]
    assert not marker.exists()
    assert not cw.db.exists()  # nothing was recorded either


def test_a_bad_replay_file_is_one_error_and_the_command_does_not_run(cw, tmp_path):
    marker = tmp_path / "ran"
    missing = tmp_path / "missing.jsonl"
    r = cw(
        "run", "--gpu-backend", f"replay:{missing}", "--", PY, "-c", f"open({str(marker)!r}, 'w')"
    )
    assert r.returncode == 2
    _no_traceback(r)
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and str(missing) in errors[0]
    assert not marker.exists()
    r = cw("devices", "--gpu-backend", f"replay:{missing}")
    assert r.returncode == 2
    _no_traceback(r)


def test_record_a_fake_t4_then_replay_it_in_a_run(cw, tmp_path):
    trace = tmp_path / "t4.jsonl"
    r = cw.ok(
        "devices",
        "--gpu-backend",
        "fake:1xT4",
        "--record",
        trace,
        "--seconds",
        "2",
        "--interval",
        "0.5",
    )
    assert f"replay:{trace}" in r.stderr
    header = json.loads(trace.read_text().splitlines()[0])
    [recorded] = header["devices"]
    assert recorded["name"] == "Tesla T4"

    s, stderr = _run_json(cw, tmp_path, "--gpu-backend", f"replay:{trace}")
    [g] = s["gpus"]
    assert g["uuid"] == recorded["uuid"]
    assert g["name"] == "Tesla T4"
    assert g["model"] == "T4"
    assert g["simulated"] is True
    assert g["energy_method"] == "counter"
    assert g["energy_joules"] > 0
    assert any("simulated" in n for n in s["notes"])
    assert "Tesla T4 (simulated)" in _flat(stderr)
    # The devices command says where the replayed GPU comes from.
    [dev] = cw.json("devices", "--gpu-backend", f"replay:{trace}")["gpus"]
    assert dev["capabilities"]["replayed_from"] == str(trace)
    assert dev["simulated"] is True


def _nvml_works() -> bool:
    b = open_backend("nvidia", all_gpus=True)
    b.close()
    return bool(b.sources)


def test_devices_here_says_why_gpu_backends_were_skipped(cw):
    info = cw.json("devices")
    assert info["gpu_backend"] == "auto"
    text = _flat(cw.ok("devices").stdout)
    assert text.startswith("host ")
    assert "CPU energy" in text
    for skipped in info["gpu_backends_skipped"]:
        assert f"GPU backend {skipped['backend']} skipped: {_flat(skipped['reason'])}" in text
    if _nvml_works():  # a GPU machine: NVIDIA is used, so only the AMD backend is skipped
        assert [x["backend"] for x in info["gpu_backends_skipped"]] == []
        assert info["gpus"] and "GPUs none" not in text
        return
    assert [x["backend"] for x in info["gpu_backends_skipped"]] == ["nvidia", "amd", "tpu"]
    assert all(x["reason"] for x in info["gpu_backends_skipped"])
    assert info["gpus"] == []
    assert "GPUs none" in text


def test_devices_text_lists_fake_gpus_as_simulated(cw):
    text = _flat(cw.ok("devices", "--gpu-backend", "fake:1xA100-80GB").stdout)
    assert "NVIDIA A100-SXM4-80GB" in text
    assert "(simulated)" in text  # the table may wrap the name's cell
    assert "counter" in text
    assert "before Hopper" in text  # why there is no GPM


def test_track_on_a_fake_h100_reads_gpm(cw, make_script, tmp_path):
    out = tmp_path / "summary.json"
    # GPM figures come from two consecutive samples: the block lasts until the sampler (which
    # may start late on a loaded machine) has stored three ticks.
    script = make_script(
        "track_h100.py",
        SOURCE
        + textwrap.dedent(
            """
            import json, sys, time
            import computewatch

            with computewatch.track(
                name="h100", interval=0.1, gpu_backend="fake:1xH100-SXM"
            ) as run:
                time.sleep(0.8)
                wait_for_ticks(run, 3)
            with open(sys.argv[1], "w") as f:
                json.dump(run.summary, f)
            """
        ),
    )
    r = subprocess.run(
        [PY, str(script), str(out)],
        capture_output=True,
        text=True,
        env=cw.env(),
        cwd=cw.tmp,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    _no_traceback(r)
    s = json.loads(out.read_text())
    [g] = s["gpus"]
    assert g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["model"] == "H100-SXM"
    assert g["simulated"] is True
    assert 0 < g["sm_active_mean"] <= 1  # GPM, on Hopper
    assert 0 < g["tensor_active_mean"] <= 1
    assert g["energy_method"] == "counter"
    assert cw.show("h100")["gpus"] == s["gpus"]


def test_record_into_a_missing_directory_is_a_clear_error(cw, tmp_path):
    target = tmp_path / "no" / "such" / "trace.jsonl"
    r = cw("devices", "--gpu-backend", "fake:1xT4", "--record", target, "--seconds", "1")
    assert r.returncode == 1
    _no_traceback(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(target) in lines[0] and "No such file or directory" in lines[0]


def test_record_without_a_gpu_leaves_no_file(cw, tmp_path):
    target = tmp_path / "trace.jsonl"
    r = cw("devices", "--gpu-backend", "none", "--record", target, "--seconds", "1")
    assert r.returncode == 1
    _no_traceback(r)
    assert "no GPU" in r.stderr
    assert not target.exists()
