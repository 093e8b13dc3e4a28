"""The external evaluation script's readers (scripts/evaluate_detection_external.py), on tiny
synthetic nvidia-smi logs written here: the GPU index derived from the rows' order, a
truncated last line, the repository layouts it indexes, duplicates, and its bad input."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from computewatch.detect import GpuTelemetry
from computewatch.traces import read_trace

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
    last row comes 80 ms after its first."""
    lines = [HEADER]
    for p in range(polls):
        for g, u in enumerate(utils):
            ms = p * 100 + g * 2 + (80 if p == stall and g == len(utils) - 1 else 0)
            s, ms = divmod(ms, 1000)
            lines.append(
                f"2025/07/27 00:{s // 60:02d}:{s % 60:02d}.{ms:03d}, 300.00 W, {u} %, "
                f"{1000 * (g + 1)} MiB"
            )
    text = "\n".join(lines)
    return text + ("\n2025/07/27 00:0" if truncated else "\n")


def test_index_from_row_order() -> None:
    ev = _script()
    prepared = ev.prepare_log(_log(50, [90, 30, 60], stall=7))
    assert prepared.gpus == 3
    assert prepared.index_derived
    assert prepared.polls == 50
    assert prepared.stretched_polls == 1
    assert prepared.dropped_tail == 0
    assert prepared.text.splitlines()[0].startswith("timestamp, index,")


def test_prepared_log_reads_one_series_per_gpu(tmp_path: Path) -> None:
    ev = _script()
    path = tmp_path / "run.csv"
    path.write_text(ev.prepare_log(_log(40, [90, 30])).text)
    (job,) = read_trace(path, "nvidia-smi").jobs
    assert [g.index for g in job.gpus] == [0, 1]
    assert [set(g.metrics["gpu_utilization_ratio"]) for g in job.gpus] == [{0.9}, {0.3}]
    assert [len(g.times) for g in job.gpus] == [40, 40]
    assert job.gpus[1].metrics["gpu_memory_used_bytes"][0] == 2000 * 2**20


def test_truncated_last_line_and_incomplete_poll_are_dropped() -> None:
    ev = _script()
    text = _log(30, [90, 30, 60], truncated=True)
    cut = text.splitlines()
    del cut[-2]  # the last poll lost its last GPU's row as well
    prepared = ev.prepare_log("\n".join(cut))
    assert prepared.gpus == 3
    assert prepared.polls == 29
    assert prepared.dropped_tail == 1 + 2  # the truncated line, then the incomplete poll


def test_nul_bytes_where_the_file_was_cut_are_dropped() -> None:
    ev = _script()
    prepared = ev.prepare_log(_log(30, [90, 30]) + "\x00" * 64)
    assert (prepared.gpus, prepared.polls, prepared.dropped_tail) == (2, 30, 1)
    assert "\x00" not in prepared.text


def test_one_gpu_log_and_given_count() -> None:
    ev = _script()
    assert ev.prepare_log(_log(30, [50])).gpus == 1
    assert ev.prepare_log(_log(30, [50, 60, 70, 80]), gpus=2).gpus == 2


def test_a_log_with_an_index_is_kept() -> None:
    ev = _script()
    text = "timestamp, index, utilization.gpu [%]\n" + "".join(
        f"2025/07/27 00:00:{s:02d}.000, {g}, 50 %\n" for s in range(30) for g in range(2)
    )
    prepared = ev.prepare_log(text)
    assert not prepared.index_derived
    assert prepared.gpus == 2
    assert prepared.text == text


@pytest.mark.parametrize(
    "text",
    ["", "datetime,power_watts,time_seconds\n2025-07-27 00:47:09.120,575.3,0.0\n"],
)
def test_not_an_nvidia_smi_log(text: str) -> None:
    ev = _script()
    with pytest.raises(ev.EvaluationError):
        ev.prepare_log(text)


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
    assert "index from row order (2 per poll" in out
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
