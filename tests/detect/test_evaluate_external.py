"""The external evaluation script (scripts/evaluate_detection_external.py) on tiny synthetic
nvidia-smi logs written here: logs without a GPU index and logs cut while written, read by the
shipped reader as they are (its notes shown), the GPU count a label gives checked, the
repository layouts it indexes, duplicates, and its bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from computewatch.detect import CALIBRATED_FILE, GpuTelemetry, load_model

ROOT = Path(__file__).resolve().parents[2]
HEADER = "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"


def _script() -> ModuleType:
    name = "evaluate_detection_external"
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _log(polls: int, utils: list[int], *, truncated: bool = False, stall: int = -1) -> str:
    """An index-less nvidia-smi log polled every 100 ms: one row per GPU in index order, 2 ms
    apart (GPU g at utilization ``utils[g]`` and 1000 x (g + 1) MiB); ``stall``: a poll whose
    last row comes 80 ms late (and the polls after it: nvidia-smi waits its interval after a
    poll ends)."""
    lines = [HEADER]
    late = 0
    for p in range(polls):
        for g, u in enumerate(utils):
            late += 80 if p == stall and g == len(utils) - 1 else 0
            s, ms = divmod(p * 100 + g * 2 + late, 1000)
            lines.append(
                f"2025/07/27 00:{s // 60:02d}:{s % 60:02d}.{ms:03d}, 300.00 W, {u} %, "
                f"{1000 * (g + 1)} MiB"
            )
    text = "\n".join(lines)
    return text + ("\n2025/07/27 00:0" if truncated else "\n")


def _evaluate(path: Path, gpus: int | None = None) -> Any:
    ev = _script()
    spec = ev.JobSpec("lab", "setup", "training", path, gpus)
    forest = load_model(None, shipped=CALIBRATED_FILE)
    return ev.evaluate(spec, every=None, review_flop=1e25, forest=forest)


def test_an_index_less_log_is_read_by_poll_order(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_text(_log(400, [97, 30, 60], stall=7))
    r = _evaluate(path)
    assert r.error is None and r.gpus == 3 and r.verdict.gpu_count == 3
    assert any(n.startswith("no device column: devices numbered by") for n in r.notes)
    assert any(n.startswith("1 of 400 polls spread over more than half") for n in r.notes)


def test_a_log_cut_while_written(tmp_path: Path) -> None:
    path = tmp_path / "cut.csv"
    text = _log(400, [90, 30, 60], truncated=True)
    cut = text.splitlines()
    del cut[-2]  # the last poll lost its last GPU's row as well
    path.write_bytes("\n".join(cut).encode() + bytes(64))
    r = _evaluate(path)
    assert r.error is None and r.gpus == 3
    assert any(n.startswith("the last line was cut") for n in r.notes)
    assert any(n.startswith("1 poll cut short") for n in r.notes)
    assert any(n.startswith("the file ends in 64 NUL bytes") for n in r.notes)


def test_the_gpu_count_a_label_gives_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "four.csv"
    path.write_text(_log(400, [50, 60, 70, 80]))
    assert _evaluate(path, gpus=4).error is None
    assert _evaluate(path, gpus=2).error == "4 GPUs read where the label says 2"


def test_a_log_with_an_index(tmp_path: Path) -> None:
    path = tmp_path / "indexed.csv"
    path.write_text(
        "timestamp, index, utilization.gpu [%]\n"
        + "".join(
            f"2025/07/27 00:{s // 60:02d}:{s % 60:02d}.000, {g}, 50 %\n"
            for s in range(300)
            for g in range(2)
        )
    )
    r = _evaluate(path, gpus=2)
    assert r.error is None and r.gpus == 2
    assert not any("device column" in n for n in r.notes)


def test_not_an_nvidia_smi_log(tmp_path: Path) -> None:
    path = tmp_path / "aggregated.csv"
    path.write_text("datetime,power_watts,time_seconds\n2025-07-27 00:47:09.120,575.3,0.0\n")
    r = _evaluate(path)
    assert r.verdict is None and "no header line" in r.error


def test_subsample_keeps_one_sample_per_step() -> None:
    ev = _script()
    g = GpuTelemetry([i * 0.1 for i in range(100)], {"gpu_utilization_ratio": [0.5] * 100})
    sub = ev.subsample(g, 1.0)
    assert len(sub.times) == 10
    assert sub.times[1] == pytest.approx(1.0)


def test_repository_layouts(tmp_path: Path) -> None:
    ev = _script()
    tp = tmp_path / "training_profile"
    (tp / "h100-traces").mkdir(parents=True)
    (tp / "titanx-traces").mkdir()
    (tp / "h100-traces" / "ckpt1.csv").write_text(_log(30, [90] * 8))
    (tp / "h100-traces" / "copy.csv").write_text(_log(30, [90] * 8))
    (tp / "h100-traces" / "aggregated_power_data.csv").write_text(
        "datetime,power_watts,time_seconds\n2025-07-27 00:47:09.120,575.3,0.0\n"
    )
    (tp / "titanx-traces" / "power-trace_2gpu_with_burn_x.csv").write_text(_log(30, [80, 70]))
    specs = ev.training_profile_index(tp)
    assert [(s.path.name, s.setup, s.label) for s in specs] == [
        ("ckpt1.csv", "H100x8", "training"),
        ("copy.csv", "H100x8", "training"),
        ("power-trace_2gpu_with_burn_x.csv", "TitanXx2+burn", "training"),
    ]
    kept, dups = ev.dedupe(specs)
    assert [s.path.name for s in kept] == ["ckpt1.csv", "power-trace_2gpu_with_burn_x.csv"]
    assert [(d.path.name, o.path.name) for d, o in dups] == [("copy.csv", "ckpt1.csv")]

    ei = tmp_path / "energy-inference"
    run = ei / "stats" / "falcon-7b" / "2024-04-03" / "10-47-35"
    run.mkdir(parents=True)
    (run / "nvidia-smi.csv").write_text(_log(30, [95]))
    (run / "job_info.yaml").write_text("job:\n  details:\n    system_name: palmetto-a100\n")
    empty = ei / "stats" / "falcon-7b" / "2024-04-04" / "07-12-56"
    empty.mkdir(parents=True)
    (empty / "nvidia-smi.csv").write_text("")
    specs = ev.energy_inference_index(ei)
    assert [(s.setup, s.label) for s in specs] == [("palmetto-a100", "inference")]


def test_main_scores_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ev = _script()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.csv").write_text(_log(400, [97, 96]))
    (logs / "serve.csv").write_text(_log(400, [40]))
    before = sorted(p.name for p in logs.iterdir())
    code = ev.main(
        [
            "--job",
            f"lab,H100x2,training,{logs / 'train.csv'}",
            "--job",
            f"lab,H100x1,inference,{logs / 'serve.csv'}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "jobs: 1 training, 1 non-training" in out
    assert "recall of training:" in out
    assert "non-training called training:" in out
    assert "no device column: devices numbered by their order in each poll (2 rows a poll" in out
    assert sorted(p.name for p in logs.iterdir()) == before


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--job", "lab,H100,maybe,x.csv"],
        ["--job", "lab,H100,training,missing.csv"],
        ["--every", "0", "--job", "lab,H100,training,x.csv"],
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ev = _script()
    argv = [a.replace("missing.csv", str(tmp_path / "missing.csv")) for a in argv]
    try:
        code = ev.main(argv)
    except SystemExit as e:  # argparse's own usage error
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code not in (0, None)
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("evaluate_detection_external: ") or ": error: " in last
