"""Sampled stacks (py-spy's ``raw`` output: one ``frame;frame;... count`` line per distinct
stack) written as a speedscope profile and as an SVG flame graph.

speedscope's file format: https://www.speedscope.app/file-format-schema.json (a ``sampled``
profile: frame indexes per sample and a weight per sample, here seconds). The flame graph is
Brendan Gregg's layout (flamegraph.pl): one row per stack depth, root at the bottom, each frame
as wide as its share of the samples, the full text of a frame in its ``<title>`` (shown on
hover).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import TypedDict

__all__ = [
    "SPEEDSCOPE_SCHEMA",
    "Stacks",
    "parse_raw",
    "write_flamegraph_svg",
    "write_speedscope",
]

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"

Stacks = dict[tuple[str, ...], int]
"""Distinct stack (root first) -> number of samples."""

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")
# Characters XML 1.0 does not allow (C0 controls but tab, newline, return; lone surrogates;
# U+FFFE, U+FFFF): a frame name carrying one is written with it escaped as \xNN.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    return escape(_NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def parse_raw(text: str) -> Stacks:
    """py-spy's raw (collapsed) output; lines that do not end in a count are skipped."""
    out: Stacks = {}
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        key = tuple(stack.split(";"))
        out[key] = out.get(key, 0) + int(count)
    return out


class SpeedscopeFrame(TypedDict, total=False):
    name: str
    file: str
    line: int


def write_speedscope(stacks: Mapping[tuple[str, ...], int], path: Path, *, name: str,
                     rate: float) -> None:  # fmt: skip
    """One sampled profile of ``stacks`` (``rate`` samples per second gives the weights)."""
    frames: list[SpeedscopeFrame] = []
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[float] = []
    for stack, count in stacks.items():
        ids = []
        for f in stack:
            i = index.get(f)
            if i is None:
                i = index[f] = len(frames)
                m = _FRAME.match(f)
                frame: SpeedscopeFrame = {"name": f}
                if m:
                    frame = {"name": m["name"], "file": m["file"], "line": int(m["line"])}
                frames.append(frame)
            ids.append(i)
        samples.append(ids)
        weights.append(count / rate)
    total = sum(weights)
    doc = {
        "$schema": SPEEDSCOPE_SCHEMA,
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "seconds",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            }
        ],
        "name": name,
        "activeProfileIndex": 0,
        "exporter": "computewatch (py-spy raw stacks)",
    }
    path.write_text(json.dumps(doc, separators=(",", ":")))


class _Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.count = 0
        self.children: dict[str, _Node] = {}


_W = 1200.0
_ROW = 16
_MIN_W = 0.3  # narrower frames are not drawn (flamegraph.pl's --minwidth)


def _color(name: str) -> str:
    h = 0
    for ch in name:
        h = (h * 31 + ord(ch)) & 0xFFFFFF
    return f"rgb({205 + h % 50},{(h >> 8) % 180 + 40},{(h >> 16) % 55})"


def write_flamegraph_svg(stacks: Mapping[tuple[str, ...], int], path: Path, *, title: str) -> None:
    """A flame graph of ``stacks`` as one self-contained SVG file."""
    root = _Node()
    depth = 0
    for stack, count in stacks.items():
        node = root
        node.count += count
        for f in stack:
            node = node.children.setdefault(f, _Node())
            node.count += count
        depth = max(depth, len(stack))
    total = max(root.count, 1)
    height = (depth + 3) * _ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W:.0f}" height="{height}" '
        f'viewBox="0 0 {_W:.0f} {height}" font-family="monospace" font-size="11">',
        f"<title>{_xml(title)}</title>",
        f'<text x="{_W / 2:.0f}" y="{_ROW}" text-anchor="middle" font-size="13">'
        f"{_xml(title)} ({root.count} samples)</text>",
    ]

    def draw(node: _Node, name: str, x: float, level: int) -> None:
        w = node.count / total * _W
        if w < _MIN_W:
            return
        y = height - (level + 1) * _ROW
        share = node.count / total
        label = f"{name} ({node.count} samples, {share:.1%})"
        parts.append(
            f'<g><title>{_xml(label)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
            f'height="{_ROW - 1}" fill="{_color(name)}" rx="2"/>'
        )
        chars = int(w / 7)
        if chars >= 3:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            parts.append(f'<text x="{x + 3:.2f}" y="{y + _ROW - 4}">{_xml(text)}</text>')
        parts.append("</g>")
        cx = x
        for child_name, child in sorted(node.children.items()):
            draw(child, child_name, cx, level + 1)
            cx += child.count / total * _W

    cx = 0.0
    for name, child in sorted(root.children.items()):
        draw(child, name, cx, 0)
        cx += child.count / total * _W
    parts.append("</svg>\n")
    path.write_text("\n".join(parts))
