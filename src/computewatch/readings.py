"""The one kind of reading every source produces and every reader consumes.

A reading is a series key (metric name plus labels), a value in SI base units and a kind.
Counters stay cumulative (seconds, bytes, joules); rates are derived when reading.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

Labels = tuple[tuple[str, str], ...]
"""Sorted ``(key, value)`` pairs: hashable, so a series key can index a dict."""


class Kind(enum.IntEnum):
    """How a series' values relate over time."""

    GAUGE = 0
    COUNTER = 1


class Reading(NamedTuple):
    """One value of one series at one tick."""

    name: str
    labels: Labels
    value: float
    kind: Kind = Kind.GAUGE


def labels(**pairs: object) -> Labels:
    """Build a canonical label tuple: keys sorted, values as strings."""
    return tuple(sorted((k, str(v)) for k, v in pairs.items()))


def gauge(name: str, value: float, lbl: Labels = ()) -> Reading:
    return Reading(name, lbl, float(value), Kind.GAUGE)


def counter(name: str, value: float, lbl: Labels = ()) -> Reading:
    return Reading(name, lbl, float(value), Kind.COUNTER)


_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_seconds_total", "seconds"),
    ("_bytes_total", "bytes"),
    ("_joules_total", "joules"),
    ("_seconds", "seconds"),
    ("_bytes", "bytes"),
    ("_joules", "joules"),
    ("_watts", "watts"),
    ("_ratio", "ratio"),
    ("_celsius", "celsius"),
    ("_hertz", "hertz"),
    ("_cores", "cores"),
    ("_total", "count"),
)


def unit_of(name: str) -> str:
    """The unit a metric name carries in its suffix (Prometheus naming), or ``""``."""
    for suffix, unit in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            return unit
    return ""
