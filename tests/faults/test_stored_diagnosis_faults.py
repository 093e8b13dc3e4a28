"""A stored diagnosis of an odd shape (written by an older version, edited by hand, truncated):
``show``, ``report`` and ``diagnose`` of a run whose samples gc deleted still answer, with
``n/a`` where a value is missing, and never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from computewatch.store import Store

ODD_FINDING = {
    "id": "odd",
    "at_stake": "not a mapping",
    "evidence": {"lines": None, "time_ranges": [None, {"start_seconds": 1.0}]},
}

ODD_SECTIONS: list[Any] = [
    {"schema_version": 1, "findings": None, "not_applicable": ["not", "a", "mapping"]},
    {"schema_version": 1, "findings": ["not a finding", ODD_FINDING], "failed": None},
    {"findings": [{"id": "bare", "evidence": "not a mapping", "at_stake": None}]},
]


def _store_diagnosis(db: Path, diagnosis: Any) -> None:
    with Store.open(db, create=False) as store:
        run = store.find_run("last")
        store.update_run(run.key, summary={**(run.summary or {}), "diagnosis": diagnosis})


def _labels(text: str) -> list[str]:
    """The first word of each line of ``show``: the rows' labels."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def _no_traceback(r: Any) -> None:
    assert "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("diagnosis", ODD_SECTIONS, ids=["null-findings", "odd-finding", "bare"])
def test_an_odd_stored_diagnosis_still_shows(cw: Any, tmp_path: Path, diagnosis: Any) -> None:
    cw.ok("run", "--quiet", "--interval", "0.1", "--", sys.executable, "-c", "pass")
    _store_diagnosis(cw.db, diagnosis)
    assert "diagnosis" in _labels(cw.ok("show", "last").stdout)
    page = tmp_path / "r.html"
    cw.ok("report", "last", "-o", page)
    assert 'id="section-diagnosis"' in page.read_text()
    cw.ok("gc", "--older-than", "0s")  # diagnose now shows the stored one
    r = cw("diagnose", "last")
    assert r.returncode == 0, r.stderr
    _no_traceback(r)
    assert "samples deleted by gc" in r.stdout
    if diagnosis["findings"] and len(diagnosis["findings"]) == 2:
        # the finding that is not a mapping is skipped; the other has no title or severity
        assert "1. [n/a] n/a" in r.stdout and "when: 1.0-0.0 s" in r.stdout


def test_a_stored_diagnosis_that_is_not_a_mapping_is_absent(cw: Any) -> None:
    cw.ok("run", "--quiet", "--interval", "0.1", "--", sys.executable, "-c", "pass")
    _store_diagnosis(cw.db, "not a mapping")
    assert "diagnosis" not in _labels(cw.ok("show", "last").stdout)
    cw.ok("gc", "--older-than", "0s")
    r = cw("diagnose", "last")
    assert r.returncode == 1
    _no_traceback(r)
    assert r.stderr.strip().endswith("were deleted by gc and it has no stored diagnosis")
