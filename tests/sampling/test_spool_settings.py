"""Settings (``flops_per_step``, ``recompute_factor`` ...) that a writer's records declare
before its metadata file can be read: the reader keeps them per writer and merges them into the
metadata it gives out once the file is there, and gives the metadata out again when they change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.sampling.channel import SETTING, SpoolReader, StepRecord, StepWriter

META = {"name": "train", "started_mono": 5.0, "total_steps": 100}


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture
def writer(spool: Path) -> Iterator[StepWriter]:
    w = StepWriter(spool, META)
    yield w
    w.close()


def _set(writer: StepWriter, key: str, value: float) -> None:
    writer.append((SETTING, writer.name_id(key), value, None, None, None, None))


def _hide_meta(spool: Path, pid: int) -> Path:
    """Move the writer's metadata file out of the reader's sight; returns where it went."""
    hidden = spool / f".meta-{pid}.json.hidden"
    (spool / f"meta-{pid}.json").rename(hidden)
    return hidden


def test_settings_read_before_the_metadata_file_are_merged_into_it(
    writer: StepWriter, spool: Path
) -> None:
    pid = os.getpid()
    hidden = _hide_meta(spool, pid)
    _set(writer, "flops_per_step", 3e12)
    _set(writer, "recompute_factor", 4 / 3)
    writer.append((10.0, 8.0, None))
    writer.flush()
    reader = SpoolReader(spool)
    try:
        assert reader.poll() == [StepRecord(pid, 10.0, 8.0, None)]
        assert reader.new_metas() == []  # no metadata yet: nothing to give out, nothing lost
        hidden.rename(spool / f"meta-{pid}.json")
        assert reader.poll() == []
        merged = {
            **META,
            "pid": pid,
            "settings": {"flops_per_step": 3e12, "recompute_factor": 4 / 3},
        }
        assert reader.new_metas() == [(pid, merged)]
        assert reader.new_metas() == []  # given out once
        # A later setting gives the metadata out again, with every setting so far.
        _set(writer, "flops_per_step", 5e12)
        _set(writer, "peak_flops", 989e12)
        writer.flush()
        assert reader.poll() == []
        again = {
            **META,
            "pid": pid,
            "settings": {"flops_per_step": 5e12, "recompute_factor": 4 / 3, "peak_flops": 989e12},
        }
        assert reader.new_metas() == [(pid, again)]
        # What was given out before is not changed behind the caller's back.
        assert merged["settings"] == {"flops_per_step": 3e12, "recompute_factor": 4 / 3}
    finally:
        reader.close()


def test_settings_before_metadata_stay_with_their_own_writer(spool: Path) -> None:
    # Two writers' files, written as two processes would: the one with settings has no
    # metadata file yet; the other's metadata must not pick its settings up.
    first = StepWriter(spool, {"name": "rank0"})
    first_pid = os.getpid()
    hidden = _hide_meta(spool, first_pid)
    _set(first, "flops_per_token", 6e9)
    first.close()
    (spool / f"steps-{first_pid}.bin").rename(spool / "steps-1001.bin")
    hidden.write_text(hidden.read_text().replace(f'"pid": {first_pid}', '"pid": 1001'))
    other = StepWriter(spool, {"name": "rank1"})
    other.close()
    reader = SpoolReader(spool)
    try:
        reader.poll()
        assert reader.new_metas() == [(first_pid, {"name": "rank1", "pid": first_pid})]
        hidden.rename(spool / "meta-1001.json")
        reader.poll()
        assert reader.new_metas() == [
            (1001, {"name": "rank0", "pid": 1001, "settings": {"flops_per_token": 6e9}})
        ]
    finally:
        reader.close()


def test_settings_wait_for_a_torn_metadata_file(writer: StepWriter, spool: Path) -> None:
    pid = os.getpid()
    meta_file = spool / f"meta-{pid}.json"
    whole = meta_file.read_text()
    meta_file.write_text(whole[: len(whole) // 2])  # as if read while being written
    _set(writer, "flops_per_step", 2e12)
    writer.flush()
    reader = SpoolReader(spool)
    try:
        reader.poll()
        assert reader.new_metas() == []
        meta_file.write_text(whole)
        reader.poll()
        assert reader.new_metas() == [
            (pid, {**META, "pid": pid, "settings": {"flops_per_step": 2e12}})
        ]
    finally:
        reader.close()
