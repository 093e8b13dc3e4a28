"""What docs/server.md promises exists, and what the API answers is in docs/server.md: every
field of the run row, the run detail, usage rows and figures, events, and the error codes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from computewatch.server.api import MeOut, RunOut, UsageOut
from computewatch.serverdb.changes import Change
from computewatch.serverdb.queries import FigureSum, RunRow, SeriesRow, UsageRow

DOC = (Path(__file__).parents[2] / "docs" / "server.md").read_text()


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_every_answered_field_is_documented() -> None:
    documented = set(re.findall(r"`([a-z0-9_]+)`", DOC))
    for cls in (RunRow, RunOut, SeriesRow, UsageOut, UsageRow, FigureSum, MeOut):
        missing = _fields(cls) - documented
        assert not missing, (cls.__name__, sorted(missing))
    event = _fields(Change) - {"change"}  # the event's id line
    assert event <= documented | set(re.findall(r'"([a-z0-9_]+)"', DOC))


def test_every_error_code_is_documented() -> None:
    server = Path(__file__).parents[2] / "src" / "computewatch" / "server"
    src = [server / name for name in ("app.py", "api.py", "auth.py")]
    codes: set[str] = set()
    for path in src:
        text = path.read_text()
        codes |= set(re.findall(r'api_error\(\s*\d+,\s*"([a-z_]+)"', text))
        codes |= set(re.findall(r'"error": "([a-z_]+)"', text))
    codes |= {"bad_request", "unauthorized", "forbidden", "not_found", "encoding", "invalid"}
    assert codes
    for code in codes:
        assert f"`{code}`" in DOC, code
