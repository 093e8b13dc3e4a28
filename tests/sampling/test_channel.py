"""The step channel: StepWriter (user process) to SpoolReader (sampler) through spool files."""

from __future__ import annotations

import json
import math
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.sampling.channel import (
    MAGIC,
    RECORD,
    PhaseRecord,
    RequestRecord,
    SpoolReader,
    StepRecord,
    StepWriter,
    _pack,
)


def _step(mono: float, samples: float, tokens: float) -> bytes:
    return _pack(
        (mono, None if math.isnan(samples) else samples, None if math.isnan(tokens) else tokens)
    )


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[StepWriter]:
    w = StepWriter(tmp_path / "spool", {"name": "train", "started_mono": 5.0})
    yield w
    w.close()


def test_round_trip_keeps_values_nones_and_order(writer: StepWriter, tmp_path: Path) -> None:
    reader = SpoolReader(tmp_path / "spool")
    assert reader.poll() == []  # the file holds only its magic header
    pid = os.getpid()
    recs = [(10.0, 32.0, 4096.0), (10.5, None, 100.0), (11.0, 16.0, None), (11.25, None, None)]
    for r in recs:
        writer.append(r)
    writer.flush()
    assert reader.poll() == [StepRecord(pid, *r) for r in recs]
    assert reader.poll() == []  # each record once
    writer.append((12.0, 0.0, 0.0))  # zero is a value, not "not given"
    writer.flush()
    assert reader.poll() == [StepRecord(pid, 12.0, 0.0, 0.0)]
    assert writer.errors == 0
    data = (tmp_path / "spool" / f"steps-{pid}.bin").read_bytes()
    assert data.startswith(MAGIC)
    assert len(data) == len(MAGIC) + 5 * RECORD.size


def test_close_flushes_what_is_queued(tmp_path: Path) -> None:
    w = StepWriter(tmp_path / "spool", {})
    w.append((1.0, None, None))
    w.close()
    w.close()  # idempotent
    assert SpoolReader(tmp_path / "spool").poll() == [StepRecord(os.getpid(), 1.0, None, None)]


def test_a_reopened_writer_appends_without_a_second_header(tmp_path: Path) -> None:
    for t in (1.0, 2.0):
        w = StepWriter(tmp_path / "spool", {})
        w.append((t, None, None))
        w.close()
    recs = SpoolReader(tmp_path / "spool").poll()
    assert [r.mono for r in recs] == [1.0, 2.0]


def test_a_partial_record_waits_until_complete(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    path = spool / "steps-4242.bin"
    first = _step(1.0, 8.0, math.nan)
    second = _step(2.0, math.nan, 64.0)
    half = RECORD.size // 2
    path.write_bytes(MAGIC + first + second[:half])
    reader = SpoolReader(spool)
    assert reader.poll() == [StepRecord(4242, 1.0, 8.0, None)]
    assert reader.poll() == []
    with open(path, "ab") as f:
        f.write(second[half:-1])
    assert reader.poll() == []  # one byte short
    with open(path, "ab") as f:
        f.write(second[-1:])
    assert reader.poll() == [StepRecord(4242, 2.0, None, 64.0)]
    assert reader.poll() == []


def test_a_file_with_only_part_of_its_header_yet(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    path = spool / "steps-7.bin"
    path.write_bytes(b"")
    reader = SpoolReader(spool)
    assert reader.poll() == []
    path.write_bytes(MAGIC + _step(3.0, 1.0, 2.0))
    assert reader.poll() == [StepRecord(7, 3.0, 1.0, 2.0)]


def test_several_writers_and_metas_once(writer: StepWriter, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    # A second writer process, written by hand (its pid is not ours).
    (spool / "meta-77.json").write_text(json.dumps({"name": "worker", "pid": 77}))
    (spool / "steps-77.bin").write_bytes(MAGIC + _step(9.0, math.nan, math.nan))
    (spool / ".meta-78.json").write_text("{")  # a writer's temp file: ignored
    (spool / "notes.txt").write_text("ignored")
    writer.append((8.0, 1.0, None))
    writer.flush()
    reader = SpoolReader(spool)
    assert reader.new_metas() == []
    recs = reader.poll()
    pid = os.getpid()
    assert sorted(recs, key=lambda r: r.pid) == sorted(
        [StepRecord(pid, 8.0, 1.0, None), StepRecord(77, 9.0, None, None)], key=lambda r: r.pid
    )
    metas = dict(reader.new_metas())
    assert metas == {
        pid: {"name": "train", "started_mono": 5.0, "pid": pid},
        77: {"name": "worker", "pid": 77},
    }
    reader.poll()
    assert reader.new_metas() == []  # picked up once
    (spool / "meta-79.json").write_text(json.dumps({"pid": 79}))
    reader.poll()
    assert reader.new_metas() == [(79, {"pid": 79})]


def test_a_torn_meta_file_is_retried(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "meta-5.json").write_text('{"name": ')
    reader = SpoolReader(spool)
    reader.poll()
    assert reader.new_metas() == []
    (spool / "meta-5.json").write_text('{"name": "x"}')
    reader.poll()
    assert reader.new_metas() == [(5, {"name": "x"})]


def test_remove_deletes_the_spool(writer: StepWriter, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    writer.append((1.0, None, None))
    writer.flush()
    reader = SpoolReader(spool)
    assert len(reader.poll()) == 1
    reader.remove()
    assert not spool.exists()
    reader.remove()  # already gone: no error
    assert reader.poll() == []


def test_reader_of_a_missing_spool(tmp_path: Path) -> None:
    reader = SpoolReader(tmp_path / "nowhere")
    assert reader.poll() == []
    assert reader.new_metas() == []


def test_writer_on_an_unusable_directory_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = StepWriter(blocker / "spool", {"name": "x"})  # mkdir fails: ENOTDIR, even for root
    try:
        assert w.errors == 1
        for i in range(1000):
            w.append((float(i), None, None))
        w.flush()
        assert len(w._buf) == 0  # not kept in memory for ever
    finally:
        w.close()
    assert blocker.read_text() == "not a directory"


def test_phases_requests_flops_and_settings_round_trip(writer: StepWriter, tmp_path: Path) -> None:
    from computewatch.sampling.channel import PHASE, REQUEST, SETTING, STEP

    pid = os.getpid()
    fwd = writer.name_id("forward")
    assert writer.name_id("forward") == fwd  # declared once
    long_name = "x" * 60
    gen = writer.name_id(long_name)
    knob = writer.name_id("flops_per_step")
    writer.append((PHASE, fwd, 1.0, 1.5, None, None, None))
    writer.append((PHASE, gen, 1.5, 1.75, 0.2, None, None))
    writer.append((STEP, 0, 2.0, 8.0, None, 3e12, None))
    writer.append((REQUEST, gen, 3.0, 3.25, 12.0, None, 0.0))
    writer.append((SETTING, knob, 3e12, None, None, None, None))
    writer.flush()
    reader = SpoolReader(tmp_path / "spool")
    assert reader.poll() == [
        PhaseRecord(pid, "forward", 1.0, 1.5, None),
        PhaseRecord(pid, "x" * 40, 1.5, 1.75, 0.2),  # names are cut at 40 bytes
        StepRecord(pid, 2.0, 8.0, None, 3e12),
        RequestRecord(pid, "x" * 40, 3.0, 3.25, 12.0, None, False),
    ]
    metas = dict(reader.new_metas())
    assert metas[pid]["settings"] == {"flops_per_step": 3e12}


def test_a_foreign_spool_file_is_ignored(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "steps-9.bin").write_bytes(b"CWSTEP1\n" + b"\0" * 48)
    assert SpoolReader(spool).poll() == []


def test_a_record_that_cannot_be_packed_is_dropped_alone_with_one_warning(
    writer: StepWriter, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What validation in track() keeps out, if it ever got in: the thread drops the record,
    keeps the others and says so once; nothing raises into the caller."""
    reader = SpoolReader(tmp_path / "spool")
    pid = os.getpid()
    writer.append((1.0, "32", None))  # a str where a count goes: struct cannot pack it
    writer.append((2.0, 8.0, None))
    writer.flush()
    writer.append((3.0, None, object()))
    writer.append((4.0, 8.0, None))
    writer.flush()
    assert reader.poll() == [StepRecord(pid, 2.0, 8.0, None), StepRecord(pid, 4.0, 8.0, None)]
    assert writer.errors == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("computewatch: warning: a step record")


def test_a_failed_write_leaves_no_torn_record(tmp_path: Path) -> None:
    """A write that fails part-way (a full disk) is cut back: the records after it still
    line up for the reader."""
    w = StepWriter(tmp_path / "spool", {})
    path = tmp_path / "spool" / f"steps-{os.getpid()}.bin"
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        w.append((1.0, 1.0, None))
        w.flush()
        # room for half a record: the next batch is written in part, then fails (EFBIG)
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (path.stat().st_size + RECORD.size // 2, old_limit[1])
        )
        w.append((2.0, 2.0, None))
        w.flush()
        assert w.errors == 1
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    w.append((3.0, 3.0, None))
    w.close()
    pid = os.getpid()
    assert SpoolReader(tmp_path / "spool").poll() == [
        StepRecord(pid, 1.0, 1.0, None),
        StepRecord(pid, 3.0, 3.0, None),
    ]
