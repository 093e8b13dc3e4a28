"""An export file checked by workers that read their own spans of it
(:meth:`computewatch.ledger.log.ExportLines.spans`): the spans hold the lines the blocks read here
hold, wherever a span ends (at a line's end, inside a long line, at the end of a file with or
without its last newline, one line each); the verdict is the one the lines give one by one; a
file cut or replaced while its spans are read is named; a pipe is read in blocks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.ledger.test_transparency_log import (
    KEY,
    _export_file,
    _head,
    _header,
    _lines,
    _summary,
    _verify,
)

from computewatch.ledger import audit, log
from computewatch.ledger.audit import verify_log
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.log import ExportLines, Span, open_export, read_span
from computewatch.ledger.verify import Verdict


def _after_header(path: Path) -> ExportLines:
    f = open(path, "rb")  # noqa: SIM115 - closed by the ExportLines
    f.readline()
    return ExportLines(path, f)


def _blocks_and_spans(path: Path, size: int) -> tuple[list[bytes], list[bytes]]:
    blocks = list(_after_header(path).blocks(size))
    lines = _after_header(path)
    found = lines.spans(size)
    assert found is not None
    spans = []
    try:
        for span, data, n in found:
            assert read_span(span) == data[:n]  # what a worker reads is what was read here
            spans.append(data[:n])
    finally:
        lines.close()
    return blocks, spans


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\n",
        b"a\n",
        b"a",
        b"aaaa\nbbbb\n",  # a span ends exactly at a line's end (size 5)
        b"aaaa\nbbbb",  # and the last line has no newline
        b"a\nb\nc\nd\ne\n",  # one line a span (size 2)
        b"aaaaaaaaaaaaaaaaaaaaaaa\nb\n",  # a line longer than a span
        b"a\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",  # ... and the last, without its newline
        b"a\n\nb\n",  # an empty line
        b"a\nb\n\n",  # an empty last line
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 64])
def test_spans_hold_the_lines_the_blocks_hold(tmp_path: Path, body: bytes, size: int) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"{}\n" + body)
    blocks, spans = _blocks_and_spans(path, size)
    assert spans == blocks


def test_spans_end_at_line_ends(tmp_path: Path) -> None:
    """Spans of a size every line's length divides end exactly at line ends (three lines each
    here); each next one starts at the next line."""
    lines = [b"%09d" % i for i in range(40)]
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"{}\n" + b"\n".join(lines) + b"\n")
    blocks, spans = _blocks_and_spans(path, 3 * 10)
    assert spans == blocks and spans[:-1] == [b"\n".join(lines[i : i + 3]) for i in range(0, 39, 3)]
    assert spans[-1] == lines[-1]


def _check(path: Path, jobs: int) -> Verdict:
    ex = open_export(path)
    return verify_log(ex.header, ex.lines(), KEY.public_key(), jobs=jobs)


@pytest.mark.parametrize("block", [64, 256, 4096])
@pytest.mark.parametrize(
    "tail",
    ["newline", "no newline", "cut", "one line", "a line per unit"],
)
def test_workers_reading_their_spans_give_the_verdict_of_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, tail: str
) -> None:
    """Whatever the units' size (down to a line each: a span ends at every line's end), and
    whether the file's last line has its newline or was cut short, workers that read their
    own spans give the verdict of the lines checked one by one, and of one process."""
    monkeypatch.setattr(log, "BLOCK", block)
    monkeypatch.setattr(audit, "SPAN", 1)
    n = 1 if tail == "one line" else 120
    lines = _lines(n)
    heads = [_head(lines, n)] if n < 100 else [_head(lines, 100), _head(lines, n)]
    path = _export_file(tmp_path / "log.jsonl", lines, heads)
    if tail == "a line per unit":
        monkeypatch.setattr(log, "BLOCK", 1)
    if tail == "no newline":
        path.write_bytes(path.read_bytes()[:-1])
    edited = list(lines)
    if tail == "cut":
        path.write_bytes(path.read_bytes()[:-20])
        edited[-1] = edited[-1][:-19]
    by_line = _verify(edited, heads, header=_header(lines, heads))
    one, many = _check(path, 1), _check(path, 2)
    assert _summary(many) == _summary(one) == _summary(by_line)
    if tail == "cut":
        assert many.problem is not None and (many.problem.what, many.problem.seq) == (
            "altered",
            n,
        )
    else:
        assert many.ok and many.entries == n, many.problem


def test_a_file_cut_while_its_spans_are_read_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is cut after its spans were found, before the workers read them: the verdict
    says the file changed while it was read (its entries were not all checked)."""
    monkeypatch.setattr(log, "BLOCK", 4096)
    monkeypatch.setattr(audit, "SPAN", 1)
    lines = _lines(300)
    path = _export_file(tmp_path / "log.jsonl", lines, [_head(lines, 300)])
    count = audit._block_count

    def cut_then_count(data: bytes, n: int, first: int) -> int:
        os.truncate(path, 100)  # (the workers start after the first span is found)
        return count(data, n, first)

    monkeypatch.setattr(audit, "_block_count", cut_then_count)
    v = _check(path, 2)
    assert v.problem is not None and v.problem.what == "format"
    assert v.problem.message.startswith(f"{path} changed while it was read: it now ends before")
    assert v.entries == 0


def test_a_span_of_a_file_cut_or_replaced_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"a\nb\nc\n")
    st = path.stat()
    span = Span(str(path), (st.st_dev, st.st_ino), 2, 5)
    assert read_span(span) == b"b\nc"
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"a\nb\nc\n")
    os.replace(other, path)
    replaced = Span(str(path), (st.st_dev, st.st_ino), 2, 5)  # (not held open here: opened)
    with pytest.raises(LedgerError, match="was replaced by another file while it was read"):
        read_span(replaced)
    st = path.stat()
    os.truncate(path, 4)
    with pytest.raises(LedgerError, match="changed while it was read: it now ends before byte 5"):
        read_span(Span(str(path), (st.st_dev, st.st_ino), 2, 5))


def test_a_pipe_is_read_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe cannot be read at an offset: its lines go to the workers in blocks, as before.
    (Written by another process: a thread here would leave the pipe's writing end open in the
    workers forked meanwhile, and the pipe would never end.)"""
    monkeypatch.setattr(log, "BLOCK", 4096)
    lines = _lines(300)
    path = _export_file(tmp_path / "log.jsonl", lines, [_head(lines, 300)])
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", 'cat "$0" > "$1"', str(path), str(fifo)])
    try:
        ex = open_export(fifo)
        lines_of = ex.lines()
        assert lines_of.spans() is None
        v = verify_log(ex.header, lines_of, KEY.public_key(), jobs=2)
    finally:
        assert writer.wait(timeout=60) == 0
    assert v.ok and v.entries == 300, v.problem
    assert _summary(v) == _summary(_check(path, 2))


@pytest.mark.parametrize("change", [None, 7, 150])
def test_an_earlier_export_is_compared_with_the_spans_workers_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: int | None
) -> None:
    """With an earlier export (or head), each entry of the spans the workers checked is compared
    with it here: a rewritten entry is named as a fork, in the first span or a later one, as one
    process names it."""
    from computewatch.ledger.audit import Previous  # (beside the helpers it goes with)
    from computewatch.ledger.note import parse_checkpoint  # (the earlier head, read)

    monkeypatch.setattr(log, "BLOCK", 4096)
    monkeypatch.setattr(audit, "SPAN", 1)
    old = _lines(200)
    old_path = _export_file(tmp_path / "old.jsonl", old, [_head(old, 200)])
    new = [*old, *_lines(100, 201)]
    if change is not None:
        new[change - 1] = new[change - 1].replace(b'"x":0.5', b'"x":0.6')
    path = _export_file(tmp_path / "new.jsonl", new, [_head(new, 300)])

    opened: list[ExportLines] = []

    def previous() -> Previous:
        ex = open_export(old_path)
        opened.append(ex.lines())
        return Previous(str(old_path), header=ex.header, lines=opened[-1])

    for earlier in (previous, lambda: Previous("head", head=parse_checkpoint(_head(old, 200)))):
        verdicts = []
        for jobs in (1, 2):
            ex = open_export(path)
            verdicts.append(
                verify_log(ex.header, ex.lines(), KEY.public_key(), previous=earlier(), jobs=jobs)
            )
        for lines in opened:  # (a fork stops the reading of the earlier export)
            lines.close()
        one, many = verdicts
        assert _summary(many) == _summary(one)
        if change is None:
            assert many.ok and many.entries == 300, many.problem
        else:
            assert many.problem is not None and many.problem.what == "fork"
            assert many.problem.seq == (change if earlier is previous else 200)
