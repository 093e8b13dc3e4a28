"""The reproducibility record as people read it: rows for ``show`` and the report (code,
Python, frameworks, accelerators, hardware, command, hyperparameters) and the configuration
and environment differences of ``compare``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from computewatch.analysis.compare import Comparison
from computewatch.analysis.repro import RecordChange, flatten
from computewatch.analysis.summary_types import RunSummary
from computewatch.units import format_bytes

__all__ = ["MAX_CONFIG_ROWS", "change_lines", "config_lines", "repro_lines"]

MAX_CONFIG_ROWS = 40
"""Hyperparameters shown by ``show`` (all of them are in ``--json`` and the report)."""


def plain(v: object) -> str:
    """A record's value as text: JSON for lists and mappings, ``n/a`` when absent."""
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list | dict):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _git_text(git: Mapping[str, Any] | None, why: str | None) -> str:
    if not git:
        return f"n/a ({why})" if why else "n/a"
    commit = str(git.get("commit") or "no commit")[:12]
    text = f"{commit} on {git.get('branch') or 'a detached HEAD'}"
    if git.get("dirty"):
        diff = git.get("diff_sha256")
        text += " · dirty" + (f" (diff sha256 {str(diff)[:12]})" if diff else " (untracked files)")
    else:
        text += " · clean"
    return text + f" · {git.get('root')}"


def repro_lines(s: RunSummary) -> list[tuple[str, str]]:
    """(label, text) rows of the record, [] when the run has none."""
    env = s.get("environment")
    out: list[tuple[str, str]] = []
    if env:
        out.append(("code", _git_text(env.get("git"), env.get("git_why"))))
        out.append(("cwd", str(env.get("cwd"))))
        argv = env.get("argv") or []
        if argv:
            out.append(("argv", shlex.join(str(a) for a in argv)))
        fw = env.get("frameworks") or {}
        sw = [f"python {env.get('python')}"] + [f"{k} {v}" for k, v in fw.items()]
        out.append(("software", " · ".join(sw) + f" ({len(env.get('packages') or {})} packages)"))
        acc = env.get("accelerators") or {}
        acc_text = [f"{k} {v}" for k, v in acc.items() if v]
        out.append(("accelerator sw", " · ".join(acc_text) if acc_text else "none found"))
        hw = env.get("hardware") or {}
        if hw:
            parts = [str(hw.get("cpu_model") or "unknown CPU")]
            if hw.get("logical_cpus"):
                parts.append(f"{hw['logical_cpus']} logical CPUs")
            if hw.get("memory_bytes"):
                parts.append(format_bytes(hw["memory_bytes"]))
            for g in hw.get("gpus") or []:  # a Google TPU chip is a TPU (docs/tpu.md)
                kind = "TPU" if str(g.get("model") or "").startswith("TPU-") else "GPU"
                parts.append(f"{kind} {g.get('index')} {g.get('name')}")
            out.append(("hardware", " · ".join(parts)))
    out += config_lines(s.get("config"), MAX_CONFIG_ROWS)
    return out


def config_lines(
    config: Mapping[str, Any] | None, limit: int | None = None
) -> list[tuple[str, str]]:
    """The hyperparameters as ``config`` rows, one ``key=value`` list per row."""
    if not config:
        return []
    flat = flatten(config)
    items = [f"{k}={plain(v)}" for k, v in sorted(flat.items())]
    more = 0
    if limit is not None and len(items) > limit:
        more = len(items) - limit
        items = items[:limit]
    text = " · ".join(items) + (f" · and {more} more (--json)" if more else "")
    return [("config", text)]


def change_lines(result: Comparison) -> list[tuple[str, str, str]]:
    """(key, A, B) of every hyperparameter and environment field that differs."""
    rows: list[tuple[str, str, str]] = []
    for what in ("config", "environment"):
        changes: list[RecordChange] = result.get(what) or []  # type: ignore[assignment]
        for c in changes:
            rows.append((f"{what}.{c['key']}", plain(c["a"]), plain(c["b"])))
    return rows
