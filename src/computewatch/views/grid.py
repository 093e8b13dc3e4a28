"""Labelled lines as a borderless two-column grid of plain text: the run summary that
``computewatch run`` and ``show`` print, without loading rich (about 20 ms of every run's fixed
cost: benchmarks/bench_end.py).

The layout is the one the other tables (``views.text``, rich) give the same rows: the labels'
column as wide as its widest label, two spaces, then the values, word-wrapped to the terminal's
width (a word wider than the column is folded), each line left-justified. Lines carry no
trailing spaces. On a terminal that takes them, labels are bold, notes yellow and the title
italic; ``NO_COLOR`` keeps bold and italic only, ``TERM=dumb`` and files get none
(``FORCE_COLOR`` forces them, as for rich).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

GAP = 2
"""Spaces between the labels and the values."""
DEFAULT_WIDTH = 100
"""The width when the output is not a terminal (a file, a pipe, a job's log)."""
MIN_WIDTH = 60

Style = Literal["", "note"]


@dataclass(frozen=True, slots=True)
class GridRow:
    label: str
    text: str
    style: Style = ""


def width_of(out: TextIO) -> int:
    """The terminal's width (at least :data:`MIN_WIDTH`), else :data:`DEFAULT_WIDTH`."""
    try:
        columns = os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return DEFAULT_WIDTH
    return max(columns, MIN_WIDTH)


def cell_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: East Asian wide and full-width characters take
    two, combining marks and other zero-width characters none."""
    if text.isascii():
        return sum(1 for c in text if c >= " " and c != "\x7f")
    return sum(_char_width(c) for c in text)


def _char_width(c: str) -> int:
    if c < " " or "\x7f" <= c < "\xa0":
        return 0
    if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns: broken before the first word that does
    not fit, a word wider than ``width`` folded over lines; blanks at the end of a line dropped.
    Newlines in ``text`` end lines; tabs are expanded to 8 columns."""
    lines: list[str] = []
    for para in text.expandtabs(8).split("\n"):
        lines += _wrap_line(para, max(width, 1))
    return lines


def _words(line: str) -> Iterable[str]:
    """Each word with the blanks after it (the first also with those before it)."""
    i, n = 0, len(line)
    while i < n:
        j = i
        while j < n and line[j].isspace():
            j += 1
        if j == n:  # blanks only: nothing printable is left
            return
        while j < n and not line[j].isspace():
            j += 1
        while j < n and line[j].isspace():
            j += 1
        yield line[i:j]
        i = j


def _wrap_line(line: str, width: int) -> list[str]:
    out: list[str] = []
    current, used = "", 0
    for word in _words(line):
        bare = cell_width(word.rstrip())
        if bare <= width - used:
            current += word
            used += cell_width(word)
            continue
        if current:
            out.append(current)
        if bare <= width:
            current, used = word, cell_width(word)
            continue
        *whole, current = _fold(word, width)  # no line holds it: folded over whole lines
        out += whole
        used = cell_width(current)
    out.append(current)
    return [o.rstrip() for o in out]


def _fold(word: str, width: int) -> list[str]:
    """``word`` cut into pieces of at most ``width`` columns."""
    pieces: list[str] = []
    piece, used = "", 0
    for c in word:
        w = _char_width(c)
        if used + w > width and piece:
            pieces.append(piece)
            piece, used = "", 0
        piece += c
        used += w
    pieces.append(piece)
    return pieces


LineKind = Literal["title", "row", "note"]


@dataclass(frozen=True, slots=True)
class GridLine:
    """One printed line: ``label`` padded to the labels' column and the gap (blank on a row's
    continuation lines; the title's text on a title line), ``text`` the value's part."""

    kind: LineKind
    label: str
    text: str = ""


def layout(title: str, rows: Sequence[GridRow], width: int) -> list[GridLine]:
    """The grid's lines for a terminal ``width`` columns wide: the labels' column as wide as
    its widest label, the values' as wide as the longest value where that fits, else the rest
    of the width; the title wrapped to the grid's width."""
    label_w = max((cell_width(r.label) for r in rows), default=0)
    longest = max((cell_width(line) for r in rows for line in r.text.split("\n")), default=0)
    value_w = max(min(longest, width - label_w - GAP), 1)
    lines = [GridLine("title", t) for t in wrap(title, label_w + GAP + value_w)] if title else []
    for r in rows:
        label = r.label + " " * (label_w - cell_width(r.label) + GAP)
        for text in wrap(r.text, value_w):
            lines.append(GridLine("note" if r.style == "note" else "row", label, text))
            label = " " * (label_w + GAP)
    return lines


_BOLD, _ITALIC, _YELLOW, _RESET = "\x1b[1m", "\x1b[3m", "\x1b[33m", "\x1b[0m"


def _styles(out: TextIO) -> tuple[bool, bool]:
    """(any style, colours) for ``out``, as rich decides them: a terminal, unless TERM says it
    takes none; FORCE_COLOR forces them; NO_COLOR drops the colours only."""
    env = os.environ
    if env.get("FORCE_COLOR"):
        styled = True
    elif env.get("TERM", "").lower() in ("dumb", "unknown"):
        styled = False
    else:
        try:
            styled = out.isatty()
        except (OSError, ValueError, AttributeError):
            styled = False
    return styled, styled and not env.get("NO_COLOR")


def print_grid(title: str, rows: Sequence[GridRow], out: TextIO) -> None:
    """``rows`` under ``title`` as :func:`layout` places them, written to ``out``."""
    styled, colours = _styles(out)
    parts: list[str] = []
    for line in layout(title, rows, width_of(out)):
        if not styled:
            parts.append((line.label + line.text).rstrip())
            continue
        if line.kind == "title":
            parts.append(f"{_ITALIC}{line.label}{_RESET}")
            continue
        name = line.label.rstrip()
        head = f"{_BOLD}{name}{_RESET}" if name else ""
        body = f"{_YELLOW}{line.text}{_RESET}" if line.kind == "note" and colours else line.text
        parts.append(f"{head}{line.label[len(name) :]}{body}".rstrip())
    out.write("\n".join(parts) + "\n")
