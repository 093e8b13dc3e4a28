"""Per-job features of GPU telemetry for training-run detection.

Each feature is computed per GPU from the series it has (any subset), then averaged over the
job's GPUs; a feature whose series is missing, or that needs more samples than there are, is
NaN ("not known"), which the model handles (its trees send a missing value down a learned
branch). :data:`MODEL_FEATURES` are those the shipped model was trained on (utilization and
memory only: the public labelled data has no other signal); the others are evidence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from computewatch.errors import ComputewatchError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "CALIBRATED_FEATURES",
    "EVIDENCE_FEATURES",
    "MIN_DURATION_SECONDS",
    "MIN_SAMPLES",
    "MODEL_FEATURES",
    "SIGNALS",
    "TABLE_FEATURES",
    "DetectError",
    "GpuTelemetry",
    "job_features",
    "present_signals",
    "sample_count",
]


class DetectError(ComputewatchError):
    """Telemetry that cannot be classified, or a model that cannot be loaded; one line."""


ACTIVE = 0.05  # utilization above which a GPU counts as busy (5%)
HIGH = 0.80  # utilization counted as saturated (80%)
MIN_ACF_SAMPLES = 16  # fewer samples: no periodicity features
MAX_ACF_LAG = 600  # samples
MIN_SAMPLES = 20
"""Fewer samples per GPU than this: no verdict but ``uncertain``. The rhythm features need 16
(:data:`MIN_ACF_SAMPLES`); the labelled jobs have 8-170 samples (2-3 minutes at 1-15 s)."""
MIN_DURATION_SECONDS = 20.0
"""Less telemetry than this (first to last sample): ``uncertain``, however dense the samples.
20 s holds the minimum of 20 samples at 1 Hz and several periods of a step rhythm of a few
seconds; sampled every 60 s, the minimum is the 20 samples (19 minutes)."""

DIP = 0.5  # a dip: utilization under half the job's own median

MODEL_FEATURES: tuple[str, ...] = (
    "util_mean",
    "util_std",
    "util_p10",
    "util_p50",
    "util_p90",
    "util_active_fraction",
    "util_high_fraction",
    "util_burstiness",
    "util_acf1",
    "util_acf_peak",
    "util_acf_peak_lag_seconds",
    "util_abs_diff_mean",
    "mem_plateau_fraction",
    "mem_cv",
    "mem_change_fraction",
)
"""The features of the default model (``detector.json``, 1.0.0, uncalibrated), in its order."""

CALIBRATED_FEATURES: tuple[str, ...] = (
    "util_mean",
    "util_std",
    "util_cv",
    "util_p10",
    "util_p50",
    "util_p90",
    "util_dip_depth",
    "util_active_fraction",
    "util_high_fraction",
    "util_burstiness",
    "util_acf1",
    "util_acf_peak",
    "util_dips_per_hour",
    "mem_plateau_fraction",
    "mem_cv",
    "mem_start_fraction",
    "mem_rise_fraction",
)
"""The features of the calibrated model (``detector-calibrated.json``, 2.0.0). Chosen to mean
the same across setups: shape relative to the job's own level (``util_cv``,
``util_dip_depth``: (p90 − p10)/p90, so DCGM's ``GRACT`` and NVML's ``utilization.gpu``
meet), rates in wall time rather than per sample (``util_dips_per_hour``: entries into a dip
under half the job's median, the evaluation and checkpoint cadence), and memory relative to
the job's own peak (plateau, start level, time to reach 95% of the peak as a fraction of the
job: training allocates early and holds). Interval-dependent features (the lag of the ACF peak
in seconds, the mean change between samples, the share of samples where memory moves) are
left out of it."""

TABLE_FEATURES: tuple[str, ...] = tuple(dict.fromkeys((*MODEL_FEATURES, *CALIBRATED_FEATURES)))
"""Every feature a shipped model reads: the columns of the shipped feature table."""

EVIDENCE_FEATURES: tuple[str, ...] = (
    "gpu_count",
    "duration_seconds",
    "interval_seconds",
    "mem_used_gib_max",
    "mem_fraction_max",
    "mem_util_mean",
    "power_mean_watts",
    "power_cv",
    "sm_clock_mean_mhz",
    "temperature_mean_celsius",
    "pcie_bytes_per_second_mean",
    "network_bytes_per_second_mean",
    "gpu_util_correlation",
)
"""Features reported with a verdict but not read by the model (no labelled public data has
them, or, like the GPU count and the duration, every labelled job had the same value)."""


SIGNALS: dict[str, str] = {
    "util": "gpu_utilization_ratio",
    "mem": "gpu_memory_used_bytes",
    "power": "gpu_power_watts",
    "sm": "gpu_sm_clock_hertz",
    "temperature": "gpu_temperature_celsius",
    "pcie": "gpu_pcie_receive_bytes_per_second",
    "network": "network_receive_bytes_per_second",
}
"""The series each family of features (by its name's first word) is computed from."""


@dataclasses.dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """One GPU's series for :func:`job_features`: times in seconds (increasing) and, per
    metric (names of :data:`computewatch.traces.METRICS`), one value per time, ``None`` where
    not known."""

    times: Sequence[float]
    metrics: Mapping[str, Sequence[float | None]]


def _np() -> Any:
    try:
        import numpy  # the governance extra's dependency (scikit-learn needs it): loaded on use
    except ImportError:
        raise DetectError(
            "training-run detection needs numpy: pip install 'computewatch[governance]'"
        ) from None
    return numpy


def _array(values: Sequence[float | None] | None) -> npt.NDArray[Any] | None:
    if values is None:
        return None
    np = _np()
    a = np.asarray(values, dtype=float)  # None in a list becomes NaN
    a = a[np.isfinite(a)]
    return a if a.size else None


def _acf(u: npt.NDArray[Any], max_lag: int) -> npt.NDArray[Any] | None:
    """Autocorrelation at lags 0..max_lag (FFT; the series' mean removed), None when flat."""
    np = _np()
    x = u - u.mean()
    var = float((x * x).sum())
    if var <= 1e-12:
        return None
    n = x.size
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, size)
    r = np.fft.irfft(f * np.conj(f), size)[: max_lag + 1]
    out: npt.NDArray[Any] = r / var
    return out


def _gpu_features(g: GpuTelemetry, interval: float) -> dict[str, float]:
    np = _np()
    nan = math.nan
    f: dict[str, float] = {}
    u = _array(g.metrics.get("gpu_utilization_ratio"))
    if u is not None:
        mean, std = float(u.mean()), float(u.std())
        f["util_mean"], f["util_std"] = mean, std
        f["util_p10"], f["util_p50"], f["util_p90"] = (
            float(x) for x in np.percentile(u, [10, 50, 90])
        )
        f["util_cv"] = std / mean if mean > 0 else nan
        p90 = f["util_p90"]
        f["util_dip_depth"] = (p90 - f["util_p10"]) / p90 if p90 > ACTIVE else nan
        span = (u.size - 1) * interval if math.isfinite(interval) else nan
        if f["util_p50"] > ACTIVE and span > 0:
            low = u < DIP * f["util_p50"]
            entries = int(low[0]) + int(np.count_nonzero(low[1:] & ~low[:-1]))
            f["util_dips_per_hour"] = entries * 3600.0 / span
        f["util_active_fraction"] = float((u > ACTIVE).mean())
        f["util_high_fraction"] = float((u > HIGH).mean())
        f["util_burstiness"] = (std - mean) / (std + mean) if std + mean > 0 else nan
        f["util_abs_diff_mean"] = float(np.abs(np.diff(u)).mean()) if u.size > 1 else nan
        if u.size >= MIN_ACF_SAMPLES:
            max_lag = min(u.size // 3, MAX_ACF_LAG)
            r = _acf(u, max_lag)
            if r is None:  # a flat series: no rhythm to find
                f["util_acf1"], f["util_acf_peak"], f["util_acf_peak_lag_seconds"] = 0.0, 0.0, nan
            else:
                f["util_acf1"] = float(r[1])
                lag = 2 + int(np.argmax(r[2:])) if r.size > 2 else 1
                f["util_acf_peak"] = float(r[lag])
                f["util_acf_peak_lag_seconds"] = lag * interval
    m = _array(g.metrics.get("gpu_memory_used_bytes"))
    if m is not None:
        top = float(m.max())
        f["mem_used_gib_max"] = top / 2**30
        mean = float(m.mean())
        f["mem_cv"] = float(m.std()) / mean if mean > 0 else 0.0
        f["mem_plateau_fraction"] = float((m >= 0.98 * top).mean()) if top > 0 else 1.0
        if top > 0:
            head = m[: max(1, m.size // 10)]
            f["mem_start_fraction"] = float(head.mean()) / top
            f["mem_rise_fraction"] = float(np.argmax(m >= 0.95 * top)) / m.size
        if m.size > 1:
            rel = np.abs(np.diff(m)) / max(top, 1.0)
            f["mem_change_fraction"] = float((rel > 0.01).mean())
        total = _array(g.metrics.get("gpu_memory_total_bytes"))
        if total is not None and float(total.max()) > 0:
            f["mem_fraction_max"] = top / float(total.max())
    for name, metric, scale in (
        ("mem_util_mean", "gpu_memory_utilization_ratio", 1.0),
        ("power_mean_watts", "gpu_power_watts", 1.0),
        ("sm_clock_mean_mhz", "gpu_sm_clock_hertz", 1e-6),
        ("temperature_mean_celsius", "gpu_temperature_celsius", 1.0),
    ):
        a = _array(g.metrics.get(metric))
        if a is not None:
            f[name] = float(a.mean()) * scale
            if name == "power_mean_watts" and f[name] > 0:
                f["power_cv"] = float(a.std()) / f[name]
    rx = _array(g.metrics.get("gpu_pcie_receive_bytes_per_second"))
    tx = _array(g.metrics.get("gpu_pcie_transmit_bytes_per_second"))
    if rx is not None or tx is not None:
        f["pcie_bytes_per_second_mean"] = sum(float(a.mean()) for a in (rx, tx) if a is not None)
    nrx = _array(g.metrics.get("network_receive_bytes_per_second"))
    ntx = _array(g.metrics.get("network_transmit_bytes_per_second"))
    if nrx is not None or ntx is not None:
        f["network_bytes_per_second_mean"] = sum(
            float(a.mean()) for a in (nrx, ntx) if a is not None
        )
    return f


def _interval(times: Sequence[float]) -> float:
    if len(times) < 2:
        return math.nan
    np = _np()
    return float(np.median(np.diff(np.asarray(times, dtype=float))))


def present_signals(gpus: Sequence[GpuTelemetry]) -> set[str]:
    """The metrics with at least one known value on some GPU of the job."""
    out: set[str] = set()
    for g in gpus:
        for name, values in g.metrics.items():
            if any(v is not None and math.isfinite(v) for v in values):
                out.add(name)
    return out


def sample_count(gpus: Sequence[GpuTelemetry]) -> int:
    """The samples of the best-covered GPU (timestamps with any known value)."""
    np = _np()
    best = 0
    for g in gpus:
        n = len(g.times)
        mask = np.zeros(n, dtype=bool)
        for values in g.metrics.values():
            a = np.asarray(values, dtype=float)[:n]
            mask[: a.size] |= np.isfinite(a)
        best = max(best, int(mask.sum()))
    return best


def job_features(gpus: Sequence[GpuTelemetry]) -> dict[str, float]:
    """Every feature of :data:`MODEL_FEATURES` and :data:`EVIDENCE_FEATURES` for one job (NaN
    where not known)."""
    np = _np()
    gpus = [g for g in gpus if len(g.times)]
    if not gpus:
        raise DetectError("no samples")
    intervals = [_interval(g.times) for g in gpus]
    interval = float(np.nanmedian(intervals)) if any(map(math.isfinite, intervals)) else math.nan
    with np.errstate(all="ignore"):  # values near the float limit: NaN or inf, dropped below
        per = [_gpu_features(g, interval) for g in gpus]
    out: dict[str, float] = {}
    for name in (*TABLE_FEATURES, *EVIDENCE_FEATURES):
        vals = [p[name] for p in per if name in p and math.isfinite(p[name])]
        out[name] = float(sum(vals) / len(vals)) if vals else math.nan
    start = min(g.times[0] for g in gpus)
    end = max(g.times[-1] for g in gpus)
    out["gpu_count"] = float(len(gpus))
    out["duration_seconds"] = float(end - start)
    out["interval_seconds"] = interval
    with np.errstate(all="ignore"):
        corr = _util_correlation(gpus)
    out["gpu_util_correlation"] = corr if math.isfinite(corr) else math.nan
    return out


def _util_correlation(gpus: Sequence[GpuTelemetry]) -> float:
    """Mean pairwise correlation of the GPUs' utilization over their common samples (GPUs of a
    data-parallel job rise and fall together); NaN for one GPU."""
    np = _np()
    series = []
    for g in gpus:
        u = g.metrics.get("gpu_utilization_ratio")
        if u is None:
            continue
        series.append(np.asarray(u, dtype=float))
    if len(series) < 2:
        return math.nan
    n = min(s.size for s in series)
    if n < 3:
        return math.nan
    mat = np.vstack([s[:n] for s in series])
    ok = np.all(np.isfinite(mat), axis=0)
    mat = mat[:, ok]
    if mat.shape[1] < 3 or np.any(mat.std(axis=1) < 1e-9):
        return math.nan
    c = np.corrcoef(mat)
    k = c.shape[0]
    return float((c.sum() - k) / (k * k - k))
