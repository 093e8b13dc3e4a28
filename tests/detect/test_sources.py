"""The dataset builder's reader for labelled folders (traces recorded on a GPU machine, or any
further source converted to nvidia-smi logs or the long format), and the detector's bad input
at the command line: one readable line and a non-zero exit, no traceback."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from computewatch.detect import TABLE_FEATURES

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = Path(__file__).parent / "data" / "migprofiler_heldout.csv"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _smi_log(path: Path, seconds: int, util: int) -> None:
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB]"]
    lines += [
        f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}.000, 0, NVIDIA H100 80GB HBM3, "
        f"{util if s % 30 > 2 else 20} %, 30000 MiB"
        for s in range(seconds)
    ]
    path.write_text("\n".join(lines) + "\n")


def test_labelled_folder_reader(tmp_path: Path) -> None:
    build = _script("build_detection_dataset")
    _smi_log(tmp_path / "train.csv", 300, 97)
    _smi_log(tmp_path / "serve.csv", 300, 40)
    (tmp_path / "labels.csv").write_text(
        "file,job,label,setup,source,licence\n"
        "train.csv,,training,H100-1s,lab-recordings,CC0-1.0\n"
        "serve.csv,,inference,H100-1s,lab-recordings,CC0-1.0\n"
    )
    rows, notes = build.read_labelled(tmp_path)
    assert [r["label"] for r in rows] == ["training", "inference"]
    assert {r["source"] for r in rows} == {"lab-recordings"}
    assert {r["setup"] for r in rows} == {"H100-1s"}
    assert all(set(TABLE_FEATURES) <= set(r) for r in rows)
    assert rows[0]["util_p90"] == pytest.approx(0.97)
    assert notes == ["# source: lab-recordings: " + tmp_path.name + "/labels.csv; licence: CC0-1.0"]


def test_labelled_folder_refuses_an_unknown_label(tmp_path: Path) -> None:
    build = _script("build_detection_dataset")
    _smi_log(tmp_path / "x.csv", 60, 97)
    (tmp_path / "labels.csv").write_text(
        "file,job,label,setup,source,licence\nx.csv,,mining?,H100,s,CC0-1.0\n"
    )
    with pytest.raises(SystemExit, match="label 'mining\\?'"):
        build.read_labelled(tmp_path)


def test_bad_review_threshold_is_one_line(cw: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "cw.toml"
    cfg.write_text("[governance]\ndetect_review_flop = -1\n")
    r = cw("detect", HELDOUT, "--config", cfg)
    assert r.returncode != 0
    assert "detect_review_flop" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_calibration_in_a_model_file_is_one_line(cw: Any, tmp_path: Path) -> None:
    model = tmp_path / "m.json"
    leaf = {
        "left": [-1],
        "right": [-1],
        "feature": [0],
        "threshold": [0.0],
        "missing_left": [True],
        "p_training": [0.5],
    }
    doc = {
        "format": "computewatch-forest",
        "model_version": "x",
        "features": ["util_mean"],
        "trees": [leaf],
        "calibration": {"x": [0.0, 1.0], "y": [1.0, 0.0]},
    }
    model.write_text(json.dumps(doc))
    r = cw("detect", HELDOUT, "--model", model)
    assert r.returncode == 1
    assert "not a usable detector model: calibration: not monotone" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
