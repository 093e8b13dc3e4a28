"""The agent's loop: sample the node every interval, hand the samples to each sink.

Sinks (the ``/metrics`` endpoint's :class:`~computewatch.metrics.exposition.LatestSamples`,
alert rules) are called on the sampling thread once per tick and must not block. A sink that
raises is reported once and dropped: the agent goes on sampling (the monitor never takes the
monitored work down, and an agent that stops exporting helps no one).

With a :class:`~computewatch.fleet.detection.TrainingDetector` the tick also hands it the
node's jobs and adds its samples (training probability, undeclared training, cap breach) before
the sinks see them, so alert rules can use them; its classification runs on its own thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from computewatch.fleet.detection import TrainingDetector
from computewatch.fleet.node import NodeSampler
from computewatch.metrics.model import MetricSample, MetricsSink

__all__ = ["Agent"]


class Agent:
    """Runs a :class:`NodeSampler` and forwards every tick's samples to ``sinks``."""

    def __init__(
        self,
        node: NodeSampler,
        sinks: Sequence[MetricsSink],
        interval: float = 5.0,
        *,
        log: TextIO | None = None,
        wall: Callable[[], float] = time.time,
        detector: TrainingDetector | None = None,
    ) -> None:
        self.node = node
        self.sinks: list[MetricsSink] = list(sinks)
        self.interval = interval
        self.ticks = 0
        self.last_tick_seconds = 0.0
        self._log = log if log is not None else sys.stderr
        self._wall = wall
        self._notes_shown = 0
        self.detector = detector

    def tick(self) -> list[MetricSample]:
        """One sampling tick; returns the samples handed to the sinks."""
        t0 = time.perf_counter()
        samples = self.node.sample()
        self.ticks += 1
        node_lbl = (("node", self.node.options.node),)
        samples.append(MetricSample("computewatch_agent_ticks_total", node_lbl, float(self.ticks)))
        samples.append(
            MetricSample(
                "computewatch_agent_tick_duration_seconds", node_lbl, self.last_tick_seconds
            )
        )
        for name, up in sorted(self.node.source_up.items()):
            lbl = (("node", self.node.options.node), ("source", name))
            samples.append(MetricSample("computewatch_agent_source_up", lbl, 1.0 if up else 0.0))
        now = self._wall()
        if self.detector is not None:
            try:
                samples.extend(self.detector.observe(now, self.node.job_gpus()))
            except Exception as e:
                self.detector.close()
                self.detector = None
                self._say(f"training detection failed and was switched off: {e}")
        for sink in list(self.sinks):
            try:
                sink.on_metrics(now, samples)
            except Exception as e:
                self.sinks.remove(sink)
                self._say(f"a metrics sink ({type(sink).__name__}) failed and was dropped: {e}")
        self._show_notes()
        self.last_tick_seconds = time.perf_counter() - t0
        return samples

    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval`` seconds (on a fixed schedule, not drifting) until ``stop``
        is set; then close the sinks. An error inside a tick is reported and the loop goes on."""
        next_at = time.monotonic()
        failures = 0
        try:
            while not stop.is_set():
                try:
                    self.tick()
                    failures = 0
                except Exception as e:
                    failures += 1
                    if failures <= 3:
                        self._say(f"sampling tick failed: {type(e).__name__}: {e}")
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay < 0:  # fell behind (a slow tick, a suspended machine): start afresh
                    next_at = time.monotonic()
                    delay = 0.0
                stop.wait(delay)
        finally:
            if self.detector is not None:
                self.detector.close()
            for sink in self.sinks:
                try:
                    sink.close()
                except Exception as e:
                    self._say(f"closing a metrics sink failed: {e}")

    def _show_notes(self) -> None:
        notes = self.node.notes
        while self._notes_shown < len(notes):
            self._say(notes[self._notes_shown])
            self._notes_shown += 1

    def _say(self, text: str) -> None:
        try:
            print(f"computewatch agent: {text}", file=self._log, flush=True)
        except (OSError, ValueError):
            pass
