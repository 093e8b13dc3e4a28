"""The reproducibility record next to a summary: the run's ``environment`` and ``config``
documents (stored with ``Store.set_meta`` when the run ended; sampling/repro.py), and what
differs between two runs' records (``compare``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from computewatch.analysis.summary_types import RunSummary
from computewatch.sources.environment import Environment

__all__ = ["ENVIRONMENT_COMPARED", "RecordChange", "flatten", "record_changes", "with_repro"]

ENVIRONMENT_COMPARED = (
    "git.commit", "git.branch", "git.dirty", "git.diff_sha256", "python", "frameworks",
    "accelerators", "hardware.cpu_model", "hardware.gpus",
)  # fmt: skip
"""The environment's fields ``compare`` diffs (not the whole package list: the frameworks)."""


class RecordChange(TypedDict):
    """One key that differs between two runs' records: ``a``/``b`` are None where absent."""

    key: str
    a: Any
    b: Any


def with_repro(summary: RunSummary, meta: Mapping[str, Any]) -> RunSummary:
    """``summary`` with the run's ``environment`` and ``config`` (when recorded)."""
    out = cast(RunSummary, dict(summary))
    env = meta.get("environment")
    if isinstance(env, dict):
        out["environment"] = cast(Environment, env)
    config = meta.get("config")
    if isinstance(config, dict):
        out["config"] = config
    return out


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: ``{"optim": {"lr": 1}}`` → ``{"optim.lr": 1}``."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _pick(env: Mapping[str, Any]) -> dict[str, Any]:
    flat = flatten(env)
    out: dict[str, Any] = {}
    for key in ENVIRONMENT_COMPARED:
        for k, v in flat.items():
            if k == key or k.startswith(key + "."):
                out[k] = v
    return out


def record_changes(a: Mapping[str, Any], b: Mapping[str, Any], what: str) -> list[RecordChange]:
    """The keys whose values differ between ``a`` and ``b`` (``what``: ``config`` compares
    every hyperparameter, ``environment`` the fields of :data:`ENVIRONMENT_COMPARED`),
    sorted by key."""
    fa, fb = (flatten(a), flatten(b)) if what == "config" else (_pick(a), _pick(b))
    return [
        RecordChange(key=k, a=fa.get(k), b=fb.get(k))
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k) or (k in fa) != (k in fb)
    ]
