"""An nvidia-smi ``--query-gpu`` log without a device column (no ``index``, ``uuid`` or
``pci.bus_id``): the devices numbered by their order in each poll, stretched polls and a log
stopped mid-poll handled, and an ambiguous poll structure refused with the fix named. The logs
are synthetic, shaped as nvidia-smi writes them: one row per device per poll, in device order,
the same millisecond or a few apart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from computewatch.traces import TraceError, read_nvidia_smi, read_trace
from computewatch.traces.polls import PollError, number_by_poll

HEADER = "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"


def _stamp(ms: int) -> str:
    s, ms = divmod(ms, 1000)
    return f"2025/07/27 00:{s // 60:02d}:{s % 60:02d}.{ms:03d}"


def _row(ms: int, g: int, p: int = 0) -> str:
    """Device ``g``'s row at poll ``p``: utilization 10 g + 1 %, memory 1000 (g + 1) MiB (so
    that a row filed under the wrong device shows), power 100 + p % 7 W."""
    return f"{_stamp(ms)}, {100 + p % 7}.00 W, {10 * g + 1} %, {1000 * (g + 1)} MiB"


def _log(
    polls: int,
    gpus: int,
    *,
    every_ms: int = 100,
    step_ms: int = 1,
    stall: dict[int, tuple[int, int]] | None = None,
    missing: dict[int, int] | None = None,
    header: str | None = HEADER,
) -> str:
    """An index-less log: ``polls`` polls of ``gpus`` rows, ``every_ms`` apart, the rows of one
    poll ``step_ms`` apart; ``stall``: poll -> (device, ms) the device's row comes late by
    (and so every row after it: nvidia-smi waits the interval after a poll ends); ``missing``:
    poll -> a device whose row is not written."""
    lines = [] if header is None else [header]
    late = 0
    for p in range(polls):
        for g in range(gpus):
            if (missing or {}).get(p) == g:
                continue
            if stall and p in stall and stall[p][0] == g:
                late += stall[p][1]
            lines.append(_row(p * every_ms + g * step_ms + late, g, p))
    return "\n".join(lines) + "\n"


def _check_devices(path: Path, gpus: int, polls: int | None = None) -> list[str]:
    t = read_trace(path, "nvidia-smi", utc=True)
    (job,) = t.jobs
    assert [g.index for g in job.gpus] == list(range(gpus))
    assert [g.key for g in job.gpus] == [f"index:{g}" for g in range(gpus)]
    for g in job.gpus:
        assert g.index is not None
        util = g.metrics["gpu_utilization_ratio"]
        assert list(util) == pytest.approx([(10 * g.index + 1) / 100] * len(util))
        assert set(g.metrics["gpu_memory_used_bytes"]) == {1000 * (g.index + 1) * 2**20}
        if polls is not None:
            assert len(g.times) == polls
    return t.notes


def test_eight_gpus_without_index_are_eight(tmp_path: Path) -> None:
    p = tmp_path / "h100.csv"
    p.write_text(_log(60, 8))
    notes = _check_devices(p, 8, polls=60)
    assert (
        "no device column: devices numbered by their order in each poll "
        "(8 rows a poll, every 0.1 s)"
    ) in notes


def test_rows_of_one_poll_with_the_same_millisecond(tmp_path: Path) -> None:
    p = tmp_path / "same.csv"
    p.write_text(_log(40, 4, step_ms=0, every_ms=1000))
    notes = _check_devices(p, 4, polls=40)
    assert any("4 rows a poll, every 1 s" in n for n in notes)


def test_one_gpu_stays_one_without_a_note(tmp_path: Path) -> None:
    p = tmp_path / "one.csv"
    p.write_text(_log(50, 1))
    assert not any("device column" in n for n in _check_devices(p, 1, polls=50))


def test_a_stretched_poll_is_kept_together(tmp_path: Path) -> None:
    """nvidia-smi slow on device 5 at poll 7 (its row comes 60 ms after device 4's, more than
    half the interval): still one poll, counted."""
    p = tmp_path / "stall.csv"
    p.write_text(_log(30, 8, stall={7: (5, 60)}))
    notes = _check_devices(p, 8, polls=30)
    assert any(n.startswith("1 of 30 polls spread over more than half") for n in notes)


def test_a_log_stopped_mid_poll_keeps_the_first_devices(tmp_path: Path) -> None:
    """The last poll lost its last three rows (the log was cut there): its rows are devices 0-4."""
    p = tmp_path / "cut.csv"
    text = _log(30, 8)
    p.write_text("".join(text.splitlines(keepends=True)[:-3]))
    t = read_nvidia_smi(p, utc=True)
    assert [len(g.times) for g in t.jobs[0].gpus] == [30] * 5 + [29] * 3
    assert any(n.startswith("1 poll cut short") for n in t.notes)


def test_a_restart_after_a_poll_cut_short(tmp_path: Path) -> None:
    """Killed mid-poll (two rows of eight written), started again 5 s later."""
    p = tmp_path / "restart.csv"
    first = _log(20, 8).splitlines()[: 1 + 19 * 8 + 2]
    later = [_row(7000 + q * 100 + g, g, q) for q in range(20) for g in range(8)]
    p.write_text("\n".join([*first, *later]) + "\n")
    t = read_nvidia_smi(p, utc=True)
    assert [len(g.times) for g in t.jobs[0].gpus] == [40, 40] + [39] * 6
    assert any(n.startswith("1 poll cut short") for n in t.notes)


def test_a_device_missing_from_a_poll_is_refused_naming_the_fix(tmp_path: Path) -> None:
    p = tmp_path / "lost.csv"
    p.write_text(_log(30, 8, missing={12: 3}))
    with pytest.raises(TraceError) as e:
        read_nvidia_smi(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{2 + 12 * 8}: no device column (index, uuid, pci.bus_id)")
    assert "a poll of 7 rows where the others have 8" in msg
    assert "--query-gpu=timestamp,index" in msg and "--columns" in msg


def test_no_dominant_poll_size_is_refused(tmp_path: Path) -> None:
    lines = [HEADER]
    ms = 0
    for p, size in enumerate([1, 2, 3, 4, 5, 6, 7, 3, 2, 5, 1, 6]):
        lines += [_row(ms + g, g, p) for g in range(size)]
        ms += 100
    path = tmp_path / "odd.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"odd\.csv: no device column .* polls of one size"):
        read_nvidia_smi(path)


def test_a_single_poll(tmp_path: Path) -> None:
    """nvidia-smi without -l: one row per device, all at once."""
    p = tmp_path / "once.csv"
    p.write_text(_log(1, 4))
    t = read_nvidia_smi(p)
    assert [g.index for g in t.jobs[0].gpus] == [0, 1, 2, 3]


def test_noheader_with_columns_and_jobs(tmp_path: Path) -> None:
    """Without a header (--columns) and with a job column a wrapper wrote: each job's polls."""
    p = tmp_path / "jobs.csv"
    rows = []
    for q in range(30):
        for job, gpus in (("a", 2), ("b", 4)):
            rows += [f"{job}, {_row(q * 100 + g, g, q)}" for g in range(gpus)]
    p.write_text("\n".join(rows) + "\n")
    cols = ["job", "timestamp", "power.draw", "utilization.gpu", "memory.used"]
    t = read_nvidia_smi(p, columns=cols)
    assert [(j.job, len(j.gpus)) for j in t.jobs] == [("a", 2), ("b", 4)]
    assert [len(g.times) for j in t.jobs for g in j.gpus] == [30] * 6
    assert any("no device column of job b" in n and "4 rows a poll" in n for n in t.notes)


def test_a_device_column_is_used_as_before(tmp_path: Path) -> None:
    """With an index the rows' order says nothing: a poll may lack a device."""
    p = tmp_path / "indexed.csv"
    lines = ["timestamp, index, utilization.gpu [%]"]
    lines += [
        f"{_stamp(q * 100 + g)}, {g}, 5 %" for q in range(20) for g in range(4) if (q, g) != (5, 2)
    ]
    p.write_text("\n".join(lines) + "\n")
    t = read_nvidia_smi(p)
    assert [len(g.times) for g in t.jobs[0].gpus] == [20, 20, 19, 20]
    assert not any("device column" in n for n in t.notes)


def test_time_going_back_is_still_said(tmp_path: Path) -> None:
    p = tmp_path / "back.csv"
    lines = _log(20, 2).splitlines()
    lines[1 + 10 * 2 : 1 + 10 * 2] = [_row(100, 0), _row(101, 1)]  # polls 0-1 written again
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"back\.csv:22: time goes backwards for GPU index:0"):
        read_nvidia_smi(p)


@pytest.mark.parametrize(
    ("times", "devices"),
    [
        ([], 1),
        ([0.0], 1),
        ([0.0, 1.0, 2.0, 3.0], 1),
        ([0.0, 1.0, 2.0, 3.0, 7200.0], 1),  # a gap, not a poll interval
        ([0.0, 0.0, 0.0], 3),
        ([0.0, 0.0, 1.0, 1.0, 2.0, 2.0], 2),
        ([0.0, 0.001, 0.002, 0.1, 0.101, 0.102, 0.2, 0.201, 0.202], 3),
    ],
)
def test_number_by_poll(times: Sequence[float], devices: int) -> None:
    polls = number_by_poll(times)
    assert polls.devices == devices
    assert list(polls.positions) == [i % devices for i in range(len(times))]


def test_two_polls_closer_than_half_the_interval_are_split() -> None:
    times = [q + g / 1000 for q in range(20) for g in range(3)]
    times += [19.3 + g / 1000 for g in range(3)]  # 0.3 s after the last poll
    polls = number_by_poll(times)
    assert polls.devices == 3 and polls.polls == 21
    assert list(polls.positions) == [0, 1, 2] * 21


def test_number_by_poll_refuses_a_missing_device() -> None:
    times = [q + g / 1000 for q in range(10) for g in range(4) if (q, g) != (4, 0)]
    with pytest.raises(PollError) as e:
        number_by_poll(times)
    assert e.value.row == 16
