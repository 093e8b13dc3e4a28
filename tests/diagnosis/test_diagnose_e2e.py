"""`computewatch diagnose` end to end: real runs as child processes through the CLI."""

from __future__ import annotations

import json

import pytest

SLOWDOWN = """
import time
import computewatch

with computewatch.track(name="slowdown") as run:
    for i in range(100):
        time.sleep(0.03 if i < 50 else 0.06)  # steps 51..100 take twice as long
        run.step()
"""

STARVED = """
import sys
import time
import torch
from torch.utils.data import DataLoader, Dataset
import computewatch

DELAY = float(sys.argv[1])

class Slow(Dataset):
    def __len__(self):
        return 60
    def __getitem__(self, i):
        time.sleep(DELAY)  # an expensive decode, done in the training process (num_workers=0)
        return torch.randn(16), torch.randn(1)

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with computewatch.track(name="loader") as run:
    for x, y in run.data(DataLoader(Slow(), batch_size=2, num_workers=0)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.03)  # the rest of the step's work
        run.step(samples=len(x))
"""


def _diagnosis(cw, ref: str = "last") -> dict:
    r = cw.ok("diagnose", ref, "--json")
    assert r.stderr == ""
    return json.loads(r.stdout)


def _ids(result: dict) -> list[str]:
    return [f["id"] for f in result["findings"]]


def test_slowdown_halfway_is_found_and_stored(cw, make_script, tmp_path):
    script = make_script("slowdown.py", SLOWDOWN)
    cw.ok("run", "--quiet", "--interval", "0.2", "--", cw_python(), script)
    result = _diagnosis(cw)
    assert set(result) >= {"run", "findings", "checked", "not_applicable", "failed", "thresholds"}
    assert result["run"]["name"] == "slowdown"
    assert result["failed"] == {}
    (f,) = [f for f in result["findings"] if f["id"] == "step_regression"]
    assert set(f) == {"id", "title", "severity", "saving", "at_stake", "evidence", "suggestion"}
    assert set(f["evidence"]) == {"lines", "numbers", "time_ranges"}
    # The saving's field names are a contract (docs/diagnosis.md).
    assert set(f["saving"]) == {
        "seconds", "fraction", "low_seconds", "high_seconds", "usd", "kwh", "fix", "assumes",
        "part", "part_seconds",
    }  # fmt: skip
    s = f["saving"]
    assert 0 <= s["low_seconds"] <= s["seconds"] <= s["high_seconds"]
    # The estimate never exceeds the symptom's time; its range may, by the run's variation.
    assert s["seconds"] <= f["at_stake"]["seconds"] + 0.01  # both rounded to 1 ms
    assert s["high_seconds"] <= result["run"]["duration_seconds"]
    assert s["fraction"] == pytest.approx(s["seconds"] / result["run"]["duration_seconds"], 1e-2)
    assert set(result["saving"]) == {
        "seconds", "fraction", "low_seconds", "high_seconds", "usd", "kwh", "findings",
    }  # fmt: skip
    assert result["saving"]["seconds"] <= result["run"]["duration_seconds"]
    n = f["evidence"]["numbers"]
    assert n["kind"] == "regression"
    # Where the split falls and the medians on either side depend on how long the sleeps really
    # took, which a loaded machine stretches: what holds whatever the load is checked exactly,
    # the split's place with room for a few stretched steps around it.
    assert 41 <= n["step"] <= 61, f
    before, after = n["before_seconds"], n["after_seconds"]
    assert before >= 0.03 and after >= 0.06  # a sleep is never shorter than asked
    assert n["ratio"] == pytest.approx(after / before, rel=1e-4)  # all three rounded to 1e-6
    assert n["ratio"] >= 1.2 - 1e-6, f  # the rule's threshold, or it would not have fired
    # At least half of the steps from the split on took the "after" median or longer, so at
    # least that many times (after - before) is lost.
    assert f["at_stake"]["seconds"] >= (after - before) * ((101 - n["step"]) // 2) - 1e-3
    assert f["evidence"]["time_ranges"][0]["start_seconds"] > 0
    # the same diagnosis was stored in the summary when the run ended
    summary = cw.show()
    assert "step_regression" in _ids(summary["diagnosis"])
    text = " ".join(cw.ok("show", "last").stdout.split())
    assert "diagnosis" in text and "Step time regression from step" in text
    plain = cw.ok("diagnose", "last").stdout
    assert "suggestion:" in plain and "step time rose from" in " ".join(plain.split())
    page = tmp_path / "report.html"
    cw.ok("report", "last", "-o", page)
    html = page.read_text()
    assert 'id="section-diagnosis"' in html and "finding-step_regression" in html


def cw_python() -> str:
    import sys

    return sys.executable


@pytest.mark.slow
def test_a_slow_dataset_is_diagnosed_as_starved(cw, make_script):
    script = make_script("starved.py", STARVED)
    cw.ok("run", "--quiet", "--", cw_python(), script, "0.05")  # 0.1 s of data per 0.03 s step
    result = _diagnosis(cw)
    assert "data_starvation" in _ids(result)
    f = result["findings"][_ids(result).index("data_starvation")]
    assert f["evidence"]["numbers"]["data_wait_share"] > 0.5
    assert "num_workers=" in f["suggestion"] and "pin_memory=True" in f["suggestion"]


@pytest.mark.slow
def test_a_fast_dataset_is_not_starved(cw, make_script):
    script = make_script("fed.py", STARVED)
    cw.ok("run", "--quiet", "--", cw_python(), script, "0")
    result = _diagnosis(cw)
    assert "data_starvation" in result["checked"]
    assert "data_starvation" not in _ids(result)


def _fake_gpu_run(cw, tmp_path, seconds: float):
    """A run on a fake H100 with a configuration under which its 70-95 % utilization is low;
    returns the configuration file."""
    cfg = tmp_path / "config.toml"
    cfg.write_text("[diagnosis]\ngpu_utilization_low = 0.99\nmin_seconds_at_stake = 0\n")
    cw.ok(
        "run", "--quiet", "--interval", "0.1", "--gpu-backend", "fake:1xH100-SXM",
        "--config", cfg, "--", cw_python(), "-c", f"import time; time.sleep({seconds})",
    )  # fmt: skip
    return cfg


def test_fake_gpu_with_thresholds_from_the_configuration(cw, tmp_path):
    cfg = _fake_gpu_run(cw, tmp_path, 1.5)
    stored = cw.show()["diagnosis"]
    assert "low_gpu_utilization" in _ids(stored)  # the fake's 70-95 % is below 99 %
    f = stored["findings"][_ids(stored).index("low_gpu_utilization")]
    assert "(simulated)" in f["evidence"]["lines"][0]
    # without the configuration, the defaults: a busy fake GPU is not low
    result = _diagnosis(cw)
    for rule in ("low_gpu_utilization", "gpu_throttling", "idle_allocation"):
        assert rule in result["checked"] or rule in result["not_applicable"]
    assert "low_gpu_utilization" in result["checked"]
    assert "low_gpu_utilization" not in _ids(result)
    again = json.loads(cw.ok("diagnose", "last", "--json", "--config", cfg).stdout)
    assert "low_gpu_utilization" in _ids(again)
    assert again["thresholds"]["gpu_utilization_low"] == 0.99


def test_bad_run_id_and_bad_configuration(cw, tmp_path):
    r = cw("diagnose", "nosuchrun")
    assert r.returncode == 1
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    cw.ok("run", "--quiet", "--", cw_python(), "-c", "pass")
    r = cw("diagnose", "nosuchrun")
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == "computewatch: no run matches 'nosuchrun' (an id, id prefix, name or 'last')"
    )
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[diagnosis]\nidle_min_seconds = -5\n")
    r = cw("diagnose", "last", "--config", cfg)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "idle_min_seconds" in r.stderr


TORCH_SLOWDOWN = """
import time
import torch
import computewatch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
with computewatch.track(name="torch-slowdown") as run:
    for i in range(100):
        with run.phase("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with run.phase("backward"):
            loss.backward()
        with run.phase("optimizer"):
            opt.step()
            opt.zero_grad()
        time.sleep(0.01 if i < 60 else 0.08)  # from step 61 on, something else takes longer
        run.step(samples=32)
"""


@pytest.mark.slow
def test_a_real_training_loop_that_slows_down(cw, make_script):
    script = make_script("torch_slowdown.py", TORCH_SLOWDOWN)
    cw.ok("run", "--quiet", "--interval", "0.2", "--", cw_python(), script)
    result = _diagnosis(cw)
    (f,) = [f for f in result["findings"] if f["id"] == "step_regression"]
    # The loop's own work took 0.01-0.04 s a step on a loaded 2-core machine (0.02 s more than
    # idle), so the sleeps' 0.07 s step up stays clear of it: the ratio (0.08 + c) / (0.01 + c)
    # is above 1.5 while c, the work, stays under 0.13 s. With 0.02 -> 0.05 s it was not.
    assert abs(f["evidence"]["numbers"]["step"] - 61) <= 3, f
    assert f["evidence"]["numbers"]["ratio"] > 1.5


def test_after_gc_the_stored_diagnosis_is_shown_with_a_note(cw, tmp_path):
    _fake_gpu_run(cw, tmp_path, 1)
    stored = cw.show()["diagnosis"]
    assert "low_gpu_utilization" in _ids(stored)
    cw.ok("gc", "--older-than", "0s")
    result = _diagnosis(cw)
    # the stored section as it is, a note after it, then the thresholds (the JSON's order)
    note = "samples deleted by gc: the diagnosis stored when the run ended"
    assert list(result) == ["run", *stored, "note", "thresholds"]
    assert {k: result[k] for k in stored} == stored and result["note"] == note
    text = " ".join(cw.ok("diagnose", "last").stdout.split())
    assert note in text and "GPU utilization" in text
