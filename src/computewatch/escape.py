"""The one way text that is not valid UTF-8 is shown, in every output.

Names, tags, command lines, paths and process names come from the system as bytes, and Python
hands undecodable bytes over as lone surrogates (argv and ``os`` functions use
``surrogateescape``, PEP 383). Such a string cannot be written to SQLite, a UTF-8 file or a
terminal. Text is made clean where it enters: each undecodable byte becomes the four characters
``\\xNN`` (Python's ``backslashreplace``), so ``$'bad\\xff'`` is stored and printed as
``bad\\xff`` in text, JSON, CSV, HTML and Prometheus label values alike. The command that runs
is still the original bytes; only what is stored and shown is escaped.
"""

from __future__ import annotations

__all__ = ["clean_text", "decode_text"]


def decode_text(raw: bytes) -> str:
    """Bytes read from the system (``/proc/PID/cmdline``, ``comm``, ``environ``) as text:
    UTF-8, each undecodable byte as ``\\xNN``."""
    return raw.decode("utf-8", "backslashreplace")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate escaped: an undecodable byte smuggled in by
    ``surrogateescape`` (U+DC80 to U+DCFF) as ``\\xNN``, any other lone surrogate as
    ``\\udNNN``. Valid text comes back as it is (the same object, at the cost of one check)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
