"""The diagnosis in text and HTML, from its JSON form."""

from __future__ import annotations

import io

from computewatch.views.diagnosis import diagnosis_html, diagnosis_rows
from computewatch.views.text import print_diagnosis

FINDING = {
    "id": "data_starvation",
    "title": "Data-loader starvation: the loop waits for its batches",
    "severity": "high",
    "at_stake": {"seconds": 30.0, "usd": 1.25},
    "evidence": {
        "lines": ["50% of step time was spent waiting <for> data"],
        "numbers": {"data_wait_share": 0.5},
        "time_ranges": [{"start_seconds": 10.0, "end_seconds": 70.0}],
    },
    "suggestion": "DataLoader(num_workers=3, pin_memory=True)",
}
DIAG = {
    "findings": [FINDING],
    "checked": ["data_starvation"],
    "not_applicable": {"low_mfu": "no MFU"},
}


def test_summary_rows():
    rows = diagnosis_rows({"id": "abc", "duration_seconds": 100.0, "diagnosis": DIAG})
    assert rows[0] == (
        "diagnosis",
        "high: Data-loader starvation: the loop waits for its batches · 30 s (30% of the run), "
        "$1.25 at stake",
    )
    assert "computewatch diagnose abc" in rows[-1][1]
    empty = {"id": "abc", "diagnosis": {"findings": [], "checked": ["a", "b"]}}
    assert diagnosis_rows(empty) == [("diagnosis", "no bottleneck found (2 rules applied)")]
    assert diagnosis_rows({"id": "abc"}) == []  # a summary stored before diagnosis existed


def test_text_lists_evidence_ranges_and_suggestion():
    out = io.StringIO()
    print_diagnosis({"run": {"id": "abc", "duration_seconds": 100.0}, **DIAG}, out)
    text = out.getvalue()
    assert "1. [high] Data-loader starvation" in text
    assert "- 50% of step time was spent waiting <for> data" in text
    assert "when: 10.0-70.0 s from the run's start" in text
    assert "suggestion: DataLoader(num_workers=3, pin_memory=True)" in text
    assert "not checked: low_mfu: no MFU" in text


def test_html_section_escapes():
    page = diagnosis_html({"duration_seconds": 100.0, "diagnosis": DIAG})
    assert page.startswith('<section id="section-diagnosis"><h2>Diagnosis</h2>')
    assert "waiting &lt;for&gt; data" in page and "<for>" not in page
    assert 'id="finding-data_starvation"' in page
    assert "10.0-70.0 s" in page
    assert diagnosis_html({}) == ""
