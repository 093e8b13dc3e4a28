"""``/metrics`` bodies: the latest samples in the Prometheus text format 0.0.4, or OpenMetrics
1.0 when the scrape's ``Accept`` header asks for it.

The text is built at scrape time from the samples the sampling thread handed over last (the
way prometheus_client's custom collectors work): :class:`LatestSamples` is the
:class:`~computewatch.metrics.model.MetricsSink` that keeps them, and :func:`render` groups them
into families with HELP and TYPE lines (computewatch.metrics.families) and lets
prometheus_client write the format. Counters are exported with ``_total``; ``*_info`` families
are OpenMetrics info metrics (a gauge of value 1 in the 0.0.4 format).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

from computewatch.metrics.families import family
from computewatch.metrics.model import MetricSample

__all__ = ["LatestSamples", "render", "to_families"]

_SUFFIX = {"counter": "_total", "info": "_info", "gauge": ""}


class LatestSamples:
    """Keeps the last tick's samples for the scrapes: a sink that never blocks the sampler
    (one reference swap under a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: tuple[MetricSample, ...] = ()
        self._at: float | None = None

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        snapshot = tuple(samples)
        with self._lock:
            self._samples = snapshot
            self._at = now

    def close(self) -> None:
        pass

    def get(self) -> tuple[float | None, tuple[MetricSample, ...]]:
        """(wall time of the last tick or None, its samples)."""
        with self._lock:
            return self._at, self._samples


def to_families(samples: Iterable[MetricSample]) -> list[object]:
    """prometheus_client metric families for ``samples``, in first-seen order. A sample whose
    labels repeat an earlier one of its name is dropped (Prometheus rejects duplicates)."""
    # prometheus_client is the optional [agent] extra: imported only when a scrape is served.
    from prometheus_client.metrics_core import Metric

    fams: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in samples:
        key = (s.name, s.labels)
        if key in seen:
            continue
        seen.add(key)
        f = family(s.name)
        suffix = _SUFFIX[f.type]
        base = s.name[: -len(suffix)] if suffix and s.name.endswith(suffix) else s.name
        m = fams.get(base)
        if m is None:
            m = fams[base] = Metric(base, f.help, f.type)
        m.add_sample(s.name, dict(s.labels), s.value)
    return list(fams.values())


class _Collector:
    def __init__(self, samples: Iterable[MetricSample]) -> None:
        self._samples = samples

    def collect(self) -> Iterator[object]:
        yield from to_families(self._samples)


def render(samples: Iterable[MetricSample], accept: str | None = None) -> tuple[bytes, str]:
    """The body and Content-Type of a scrape of ``samples`` for this ``Accept`` header."""
    # prometheus_client is the optional [agent] extra: imported only when a scrape is served.
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept or "")
    return encoder(_Collector(samples)), content_type  # type: ignore[arg-type]
