"""The report's downsampling: min/max envelopes per bucket, counters turned into rates. The
functions live in :mod:`computewatch.analysis.downsample` (the upload payload uses them too);
this module keeps the report's names."""

from __future__ import annotations

from computewatch.analysis.downsample import (
    MAX_BUCKETS,
    Band,
    Envelope,
    bucket_size,
    counter_rates,
    envelope,
    event_rate,
    grid_band,
    grid_times,
)

__all__ = [
    "MAX_BUCKETS",
    "Band",
    "Envelope",
    "bucket_size",
    "counter_rates",
    "envelope",
    "event_rate",
    "grid_band",
    "grid_times",
]
