"""The one escape for text that is not UTF-8 (computewatch.escape)."""

from __future__ import annotations

import os

from computewatch.escape import clean_text, decode_text


def test_undecodable_bytes_become_backslash_x_whichever_way_they_arrive() -> None:
    raw = b"bad\xff \xc3\xa9t\xe9"
    assert decode_text(raw) == "bad\\xff ét\\xe9"
    assert clean_text(os.fsdecode(raw)) == "bad\\xff ét\\xe9"  # argv's surrogateescape
    assert clean_text("lone \ud800") == "lone \\ud800"  # not from bytes: its code point


def test_valid_text_comes_back_unchanged() -> None:
    text = "résumé 日本 \\xff"
    assert clean_text(text) is text
    assert decode_text(text.encode()) == text
