"""Fixtures of the metric contract's tests: ``proc_tree`` (a recorded procfs tree under tmp_path,
tests/fleet/conftest.py), which the node sampler reads when a test exports a node's samples."""

from __future__ import annotations

from tests.fleet.conftest import proc_tree

__all__ = ["proc_tree"]
