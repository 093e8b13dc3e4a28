"""What the integration tests share: reading back what a run stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from computewatch.store import PhaseRow, RunRow, StepRow, Store


@dataclass
class Stored:
    """One run's rows, as the store holds them."""

    run: RunRow
    steps: list[StepRow]
    phases: list[PhaseRow]
    writers: dict[int, tuple[float, dict[str, Any]]]

    def phase_names(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.phases:
            counts[p.name] = counts.get(p.name, 0) + 1
        return counts

    def phases_of_step(self, i: int) -> list[PhaseRow]:
        """The phases of step ``i`` as the channel defines them: same process, ending after
        the previous step and no later than this one."""
        step = self.steps[i]
        prev = self.steps[i - 1].mono if i else float("-inf")
        return sorted(
            (p for p in self.phases if p.pid == step.pid and prev < p.end <= step.mono),
            key=lambda p: p.start,
        )


@pytest.fixture
def stored(cw_home: Path) -> Callable[[str], Stored]:
    def read(ref: str = "last") -> Stored:
        with Store.open(cw_home / "computewatch.db", create=False) as store:
            run = store.find_run(ref)
            return Stored(run, store.steps(run.key), store.phases(run.key), store.writers(run.key))

    return read
