"""JSON output is standard JSON: a non-finite number is written as null, never ``NaN`` or
``Infinity`` (RFC 8259, section 6), in every kind of JSON the package writes."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from computewatch import jsonout
from computewatch.analysis.summary import build_summary
from computewatch.readings import Kind
from computewatch.store import COMPLETED, Store
from computewatch.views.html.page import json_for_script

T0 = 1_700_000_000.0


def strict(text: str) -> Any:
    """Parse ``text`` as a strict reader would: ``NaN``, ``Infinity`` and ``-Infinity`` fail."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_become_null_at_any_depth() -> None:
    doc = {"a": math.nan, "b": [1.5, math.inf, (2, -math.inf)], "c": {"d": {"e": math.nan}}}
    text = jsonout.dumps(doc, sort_keys=True)
    assert strict(text) == {"a": None, "b": [1.5, None, [2, None]], "c": {"d": {"e": None}}}
    out = io.StringIO()
    jsonout.dump(doc, out, indent=2)
    assert strict(out.getvalue())["b"] == [1.5, None, [2, None]]


def test_finite_documents_are_written_as_json_writes_them() -> None:
    doc = {"x": [1, 2.5, "é", None, True], "y": {"z": -0.0}}
    assert jsonout.dumps(doc) == json.dumps(doc)
    assert jsonout.dumps(doc, ensure_ascii=False, separators=(",", ":")) == json.dumps(
        doc, ensure_ascii=False, separators=(",", ":")
    )


def test_other_errors_still_raise() -> None:
    with pytest.raises(TypeError):
        jsonout.dumps({"x": object()})


def _run_with_infinities(store: Store, run_id: str) -> None:
    """A completed run whose samples and stored summary hold non-finite numbers."""
    rk = store.create_run(
        run_id=run_id, name=None, tags={"k": "v"}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 1.0},
    )  # fmt: skip
    n = 5
    store.write_batch(
        rk,
        series=[(0, "tree_cpu_seconds_total", (), Kind.COUNTER), (1, "gpu_power_watts", (), 0)],
        ticks=[(i, 100.0 + i, T0 + i) for i in range(n)],
        samples=[(rk, i, 0, float(i)) for i in range(n)]
        + [(rk, i, 1, math.inf if i == 2 else -math.inf if i == 3 else 100.0) for i in range(n)],
    )
    store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=T0 + n)
    summary: dict[str, Any] = dict(build_summary(store, store.run_by_key(rk)))
    summary["duration_seconds"] = math.inf
    summary["probe"] = {"nan": math.nan, "list": [math.inf, 1.0]}
    store.update_run(rk, summary=summary)


@pytest.fixture
def db_with_infinities(cw: Any) -> Path:
    cw.home.mkdir(parents=True, exist_ok=True)
    store = Store.open(cw.db)
    try:
        _run_with_infinities(store, "0a0a0a0a0a0a")
        _run_with_infinities(store, "0b0b0b0b0b0b")
    finally:
        store.close()
    return Path(cw.db)


def test_show_json(cw: Any, db_with_infinities: Path) -> None:
    doc = strict(cw.ok("show", "0a0a0a0a0a0a", "--json").stdout)
    assert doc["duration_seconds"] is None
    assert doc["probe"] == {"nan": None, "list": [None, 1.0]}


def test_runs_json(cw: Any, db_with_infinities: Path) -> None:
    runs = strict(cw.ok("runs", "--json").stdout)
    assert len(runs) == 2


def test_compare_json(cw: Any, db_with_infinities: Path) -> None:
    strict(cw.ok("compare", "0a0a0a0a0a0a", "0b0b0b0b0b0b", "--json").stdout)


def test_export_jsonl(cw: Any, db_with_infinities: Path) -> None:
    lines = cw.ok("export", "0a0a0a0a0a0a", "--format", "jsonl").stdout.splitlines()
    rows = [strict(line) for line in lines]
    values = [r["value"] for r in rows if r["metric"] == "gpu_power_watts"]
    assert values.count(None) == 2 and values.count(100.0) == 3


def test_html_report_embedded_data() -> None:
    assert strict(json_for_script({"a": math.nan, "b": [math.inf]})) == {"a": None, "b": [None]}


def test_html_report_of_a_run_with_infinities(cw: Any, db_with_infinities: Path) -> None:
    out = Path(cw.tmp) / "r.html"
    cw.ok("report", "0a0a0a0a0a0a", "-o", out)
    page = out.read_text()
    start = page.index('<script type="application/json"')
    body = page[page.index(">", start) + 1 : page.index("</script>", start)]
    strict(body)
