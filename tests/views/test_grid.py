"""The summary's plain grid: laid out as rich lays out the same rows (the other tables'
library, the summary's before), styled only where a terminal takes styles."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from computewatch.views.grid import GridRow, cell_width, layout, print_grid, wrap


def _rich_lines(title: str, rows: list[GridRow], width: int) -> list[str]:
    """The same rows through rich, as the summary was printed before: a borderless table, but
    a word wider than the column folded (rich cut it short with an ellipsis: a path lost its
    end)."""
    out = io.StringIO()
    con = Console(file=out, highlight=False, soft_wrap=False, width=width)
    t = Table(title=Text(title), show_header=False, box=None, pad_edge=False, title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for r in rows:
        t.add_row(Text(r.label), Text(r.text))
    con.print(t)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _ours(title: str, rows: list[GridRow], width: int) -> list[str]:
    return [(line.label + line.text).rstrip() for line in layout(title, rows, width)]


_WORD = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789.,:;()%/-_·–é"), min_size=1)
_LONG = st.text(st.sampled_from("abcdef/0123"), min_size=40, max_size=130)  # paths, hashes
_VALUE = st.lists(
    st.tuples(st.one_of(_WORD, _WORD, _WORD, _LONG), st.sampled_from([" ", " ", "  "])),
    min_size=1,
    max_size=40,
).map(lambda ws: "".join(w + sep for w, sep in ws).strip())
_LABEL = st.sampled_from(
    [
        "run",
        "command",
        "cpu",
        "memory",
        "energy",
        "accelerator sw",
        "gpu 0",
        "diagnosis",
        "note",
        "",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    title=st.sampled_from(["run 1a2b3c4d5e6f", "run 1a2b3c4d5e6f · " + "x" * 150, "profiles"]),
    rows=st.lists(st.builds(GridRow, _LABEL, _VALUE), min_size=1, max_size=8),
    width=st.integers(min_value=60, max_value=160),
)
def test_the_grid_is_laid_out_as_rich_lays_out_the_same_rows(
    title: str, rows: list[GridRow], width: int
) -> None:
    assert _ours(title, rows, width) == _rich_lines(title, rows, width)


def test_a_real_summarys_rows_at_the_default_width() -> None:
    rows = [
        GridRow("command", "python train.py --epochs 3 --data /datasets/imagenet/train"),
        GridRow(
            "energy",
            "0.11 J (0.034 J–0.2 J) at the facility (PUE 1.56) · cpu 0.067 J modeled, memory 0 J "
            "modeled",
        ),
        GridRow("accelerator sw", "none found"),
        GridRow("note", "the store cannot take this run (database is locked)", "note"),
    ]
    assert _ours("run 0123456789ab", rows, 100) == _rich_lines("run 0123456789ab", rows, 100)
    lines = _ours("run 0123456789ab", rows, 100)
    assert lines[0] == "run 0123456789ab"
    assert lines[1] == "command         python train.py --epochs 3 --data /datasets/imagenet/train"
    assert all(len(line) <= 100 for line in lines)
    assert lines[3] == "                modeled"  # a continuation under the values' column


def test_wide_and_zero_width_characters() -> None:
    assert cell_width("GPU 训练") == 8
    assert cell_width("e\u0301") == 1  # a combining accent takes no column
    assert cell_width("a\tb") == 2  # a control character takes none
    assert wrap("训练 训练 训练", 5) == ["训练", "训练", "训练"]
    assert wrap("a " + "b" * 12, 5) == ["a", "bbbbb", "bbbbb", "bb"]  # folded over whole lines
    assert wrap("one\ntwo", 80) == ["one", "two"]
    assert wrap("", 10) == [""]


def _printed(rows: list[GridRow], monkeypatch: pytest.MonkeyPatch, tty: bool, **env: str) -> str:
    for name in ("FORCE_COLOR", "NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    class Out(io.StringIO):
        def isatty(self) -> bool:
            return tty

    out = Out()
    print_grid("run abc", rows, out)
    return out.getvalue()


ROWS = [GridRow("cpu", "1 CPU-second"), GridRow("note", "watch out", "note")]


def test_a_file_or_a_pipe_gets_no_styles(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _printed(ROWS, monkeypatch, tty=False)
    assert text == "run abc\ncpu   1 CPU-second\nnote  watch out\n"
    assert _printed(ROWS, monkeypatch, tty=True, TERM="dumb") == text


def test_a_terminal_gets_bold_labels_a_yellow_note_and_an_italic_title(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _printed(ROWS, monkeypatch, tty=True, TERM="xterm")
    assert text == (
        "\x1b[3mrun abc\x1b[0m\n"
        "\x1b[1mcpu\x1b[0m   1 CPU-second\n"
        "\x1b[1mnote\x1b[0m  \x1b[33mwatch out\x1b[0m\n"
    )
    assert _printed(ROWS, monkeypatch, tty=False, FORCE_COLOR="1") == text


def test_no_color_keeps_bold_and_italic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _printed(ROWS, monkeypatch, tty=True, TERM="xterm", NO_COLOR="1")
    assert "\x1b[33m" not in text
    assert "\x1b[1mnote\x1b[0m  watch out\n" in text
