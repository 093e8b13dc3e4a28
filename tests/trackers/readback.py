"""Read back what the real trackers wrote, through their own file formats (no network)."""

from __future__ import annotations

import glob
import json
import struct
import time
from pathlib import Path
from typing import Any

_BLOCK = 32768  # LevelDB log format, which W&B's .wandb transaction log uses
_HEADER = 7  # crc32 (4), length (2), type (1)


def wandb_records(run_dir: str | Path) -> list[Any]:
    """Every record of an offline W&B run (``wandb/offline-run-*``), from its ``.wandb`` file:
    a 7-byte W&B header, then LevelDB log records (full, or first/middle/last chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb  # the real library's own protobufs

    paths = glob.glob(str(Path(run_dir) / "run-*.wandb"))
    if len(paths) != 1:
        raise ValueError(f"no .wandb file in {run_dir}")
    path = paths[0]
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos = 7
    out: list[Any] = []
    pending = b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        pos += _HEADER
        chunk = data[pos : pos + length]
        pos += length
        if kind == 0 and length == 0:
            break
        if kind == 1:
            pending = chunk
        elif kind == 2:
            pending = chunk
            continue
        elif kind == 3:
            pending += chunk
            continue
        else:
            pending += chunk
        rec = pb.Record()
        rec.ParseFromString(pending)
        out.append(rec)
        pending = b""
    return out


def wandb_finished(run_dir: str | Path, timeout: float = 60.0) -> None:
    """Wait until W&B's service has written the run's ``exit`` record (it writes the file
    after ``finish()`` returns)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if any(r.WhichOneof("record_type") == "exit" for r in wandb_records(run_dir)):
                return
        except (ValueError, OSError):  # not there yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"W&B never finished writing {run_dir}")
        time.sleep(0.1)


def wandb_history(run_dir: str | Path) -> list[dict[str, Any]]:
    rows = []
    for rec in wandb_records(run_dir):
        if rec.WhichOneof("record_type") == "history":
            rows.append(
                {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json)
                    for i in rec.history.item
                }
            )
    return rows


def wandb_summary(run_dir: str | Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in wandb_records(run_dir):
        if rec.WhichOneof("record_type") == "summary":
            for i in rec.summary.update:
                out[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
    return out


def wandb_config(run_dir: str | Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in wandb_records(run_dir):
        if rec.WhichOneof("record_type") in ("config", "run"):
            cfg = rec.config if rec.WhichOneof("record_type") == "config" else rec.run.config
            for i in cfg.update:
                out[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
    return out


def neptune_ops(data_dir: str | Path) -> list[dict[str, Any]]:
    """The operations an offline Neptune run queued (``<data dir>/offline/run__*/data-*.log``,
    one JSON object per line)."""
    ops = []
    for log in sorted(glob.glob(str(Path(data_dir) / "offline" / "*" / "data-*.log"))):
        for line in Path(log).read_text().splitlines():
            if line.strip():
                ops.append(json.loads(line)["obj"])
    return ops


def neptune_fields(data_dir: str | Path) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """(assigned fields, float series) by path ``a/b/c``."""
    fields: dict[str, Any] = {}
    series: dict[str, list[float]] = {}
    for op in neptune_ops(data_dir):
        path = "/".join(op["path"])
        if op["type"].startswith("Assign"):
            fields[path] = op["value"]
        elif op["type"] == "LogFloats":
            series.setdefault(path, []).extend(v["value"] for v in op["values"])
    return fields, series
