"""``--otlp URL``: the exported samples pushed over OTLP/HTTP with the OpenTelemetry SDK.

Names follow OpenTelemetry's semantic conventions for hardware (``hw.gpu.utilization``,
``hw.power``, ``hw.energy``, ``hw.errors`` ...) and system metrics where one exists, and ours
otherwise (:func:`otel_metric`; docs/observability.md has both side by side). Each tick's
samples are handed over by a reference swap (:meth:`OtlpSink.on_metrics` never blocks the
sampler); a worker thread of the sink maps the latest snapshot onto observable instruments,
collects them with an in-memory reader and exports them with ``OTLPMetricExporter``. A slow or
unreachable endpoint delays only that thread: snapshots that arrive meanwhile replace the one
waiting (counted in :attr:`OtlpSink.dropped`), and the first failure and the recovery are said
once each (the SDK's own log lines are kept quiet). The SDK itself is loaded on that thread, so
the job starts while it loads, and :meth:`OtlpSink.close` waits for the last export at most
``close_timeout`` seconds, so the job's end is never held longer. Counters are exported
cumulative, as the agent keeps them.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TextIO

from computewatch._version import __version__
from computewatch.errors import UsageError
from computewatch.metrics.families import family
from computewatch.metrics.model import MetricSample

if TYPE_CHECKING:  # the SDK is imported by a sink's thread (the optional [otel] dependency)
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter

__all__ = [
    "OTEL_METRICS",
    "OtelMetric",
    "OtlpSink",
    "is_tpu",
    "metrics_url",
    "otel_attributes",
    "otel_metric",
    "otlp_sink",
]

Instrument = Literal["gauge", "counter", "updowncounter"]


@dataclass(frozen=True, slots=True)
class OtelMetric:
    """How one exported family is named in OpenTelemetry: ``name``, ``unit`` (UCUM), the
    instrument, attributes it adds (``hw.type``, ``error.type`` ...), the label whose value
    becomes an attribute of another name (``label_as``), and whether the name is an OpenTelemetry
    semantic convention (``semconv``) or ours."""

    prometheus: str
    name: str
    unit: str
    instrument: Instrument
    add: tuple[tuple[str, str], ...] = ()
    semconv: bool = False
    label_as: tuple[tuple[str, str], ...] = ()
    value_map: tuple[tuple[str, str, str], ...] = ()
    """(label, its value, attribute value) rewrites, for ECC's ``type`` -> ``error.type``."""


def _sc(
    prom: str,
    name: str,
    unit: str,
    instrument: Instrument,
    *add: tuple[str, str],
    label_as: tuple[tuple[str, str], ...] = (),
    value_map: tuple[tuple[str, str, str], ...] = (),
) -> OtelMetric:
    return OtelMetric(prom, name, unit, instrument, add, True, label_as, value_map)


_GPU = ("hw.type", "gpu")
OTEL_METRICS: tuple[OtelMetric, ...] = (
    # OpenTelemetry semantic conventions, hardware (hw.*) and system (system.*) metrics.
    _sc("computewatch_gpu_utilization_ratio", "hw.gpu.utilization", "1", "gauge", _GPU,
        ("hw.gpu.task", "general")),
    _sc("computewatch_gpu_memory_used_bytes", "hw.gpu.memory.usage", "By", "updowncounter", _GPU),
    _sc("computewatch_gpu_memory_total_bytes", "hw.gpu.memory.limit", "By", "updowncounter",
        _GPU),
    _sc("computewatch_gpu_power_watts", "hw.power", "W", "gauge", _GPU),
    _sc("computewatch_gpu_energy_joules_total", "hw.energy", "J", "counter", _GPU),
    _sc("computewatch_gpu_temperature_celsius", "hw.temperature", "Cel", "gauge", _GPU),
    _sc("computewatch_gpu_xid_errors_total", "hw.errors", "{error}", "counter", _GPU,
        ("error.type", "xid")),
    _sc("computewatch_gpu_ecc_errors_total", "hw.errors", "{error}", "counter", _GPU,
        value_map=(("type", "corrected", "ecc_corrected"),
                   ("type", "uncorrected", "ecc_uncorrected"))),
    _sc("computewatch_gpu_nvlink_transmit_bytes_total", "hw.gpu.io", "By", "counter", _GPU,
        ("network.io.direction", "transmit"), ("computewatch.link", "nvlink")),
    _sc("computewatch_gpu_nvlink_receive_bytes_total", "hw.gpu.io", "By", "counter", _GPU,
        ("network.io.direction", "receive"), ("computewatch.link", "nvlink")),
    _sc("computewatch_cpu_energy_joules_total", "hw.energy", "J", "counter", ("hw.type", "cpu")),
    _sc("computewatch_host_memory_used_bytes", "system.memory.usage", "By", "updowncounter",
        ("system.memory.state", "used")),
    _sc("computewatch_host_memory_total_bytes", "system.memory.limit", "By", "updowncounter"),
    _sc("computewatch_host_cpu_utilization_ratio", "system.cpu.utilization", "1", "gauge"),
    _sc("computewatch_filesystem_avail_bytes", "system.filesystem.usage", "By", "updowncounter",
        ("system.filesystem.state", "free"),
        label_as=(("mountpoint", "system.filesystem.mountpoint"),)),
    _sc("computewatch_filesystem_size_bytes", "system.filesystem.limit", "By", "updowncounter",
        label_as=(("mountpoint", "system.filesystem.mountpoint"),)),
)  # fmt: skip
_BY_PROM = {m.prometheus: m for m in OTEL_METRICS}

# Unit suffixes of our Prometheus names and their UCUM units (longest first).
_UNITS = (
    ("_bytes_per_second", "By/s"),
    ("_seconds", "s"),
    ("_bytes", "By"),
    ("_joules", "J"),
    ("_watts", "W"),
    ("_celsius", "Cel"),
    ("_hertz", "Hz"),
    ("_ratio", "1"),
)
# Counts without a unit suffix: UCUM annotations, as the conventions write counts ({error}).
_COUNTS = (
    ("_errors", "{error}"),
    ("_steps", "{step}"),
    ("_processes", "{process}"),
    ("_ticks", "{tick}"),
    ("_flops", "{flop}"),
)
# Labels that are OpenTelemetry attributes under another name. ``node`` is the resource's
# ``host.name`` and is not repeated on each point; every other label is ours and goes out as
# ``computewatch.<label>`` (``gpu_index``, ``simulated``, ``method``, ``job``, ``user`` ...).
_ATTRIBUTES = {"gpu": "hw.id", "gpu_model": "hw.model"}
_RESOURCE_LABELS = frozenset({"node"})
_TPU_PREFIX = "TPU-"


def is_tpu(labels: Iterable[tuple[str, str]]) -> bool:
    """Whether a sample's device is a TPU chip (its ``gpu`` id or model starts with ``TPU-``,
    as the TPU source and the catalog name them)."""
    return any(k in ("gpu", "gpu_model") and v.startswith(_TPU_PREFIX) for k, v in labels)


def _as_tpu(m: OtelMetric) -> OtelMetric:
    """A GPU family's metric for a TPU chip: ``computewatch.tpu.*``. OpenTelemetry's hardware
    conventions have no TPU (nor accelerator) ``hw.type`` and their ``hw.gpu.*`` metrics are
    GPUs', so a TPU is not sent as ``hw.type=gpu`` (docs/observability.md)."""
    if m.name.startswith("hw."):
        name = "computewatch.tpu." + m.name.removeprefix("hw.").removeprefix("gpu.")
    elif m.name.startswith("computewatch.gpu."):
        name = "computewatch.tpu." + m.name.removeprefix("computewatch.gpu.")
    else:
        return m
    add = tuple((k, v) for k, v in m.add if not k.startswith("hw."))
    return OtelMetric(m.prometheus, name, m.unit, m.instrument, add, False, m.label_as, m.value_map)


def otel_metric(prometheus_name: str, *, tpu: bool = False) -> OtelMetric:
    """The OpenTelemetry name, unit and instrument of an exported sample name: the semantic
    convention where one exists, else ``computewatch.<group>.<rest>`` with the unit suffix and
    ``_total`` moved into the unit and the instrument
    (``computewatch_gpu_sm_active_ratio`` -> ``computewatch.gpu.sm_active``, unit ``1``; a
    count's unit is its annotation: ``computewatch_job_gpu_xid_errors_total`` -> ``{error}``).
    ``tpu``: the sample is a TPU chip's (``computewatch.tpu.*``, :func:`is_tpu`)."""
    known = _BY_PROM.get(prometheus_name)
    if known is not None:
        return _as_tpu(known) if tpu else known
    fam = family(prometheus_name)
    base = prometheus_name.removeprefix("computewatch_")
    instrument: Instrument = "counter" if fam.type == "counter" else "gauge"
    base = base.removesuffix("_total")
    unit = ""
    for suffix, ucum in _UNITS:
        if base.endswith(suffix):
            base = base.removesuffix(suffix)
            unit = ucum
            break
    if not unit:
        unit = next((u for suffix, u in _COUNTS if base.endswith(suffix)), "1")
    group, _, rest = base.partition("_")
    name = f"computewatch.{group}.{rest}" if rest else f"computewatch.{group}"
    m = OtelMetric(prometheus_name, name, unit, instrument)
    return _as_tpu(m) if tpu else m


def otel_attributes(sample: MetricSample, metric: OtelMetric) -> dict[str, str]:
    """The attributes of one sample's data point: labels renamed (``gpu`` -> ``hw.id``,
    ``gpu_model`` -> ``hw.model``, the metric's own renames, any other ``x`` ->
    ``computewatch.x``; ``node`` left to the resource's ``host.name``) plus the metric's fixed
    attributes."""
    out: dict[str, str] = {}
    renames = dict(metric.label_as)
    values = {(k, v): a for k, v, a in metric.value_map}
    for k, v in sample.labels:
        mapped = values.get((k, v))
        if mapped is not None:
            out["error.type"] = mapped
            continue
        if k in _RESOURCE_LABELS:
            continue
        out[renames.get(k) or _ATTRIBUTES.get(k) or f"computewatch.{k}"] = v
    out.update(metric.add)
    return out


def metrics_url(url: str) -> str:
    """The OTLP/HTTP metrics endpoint of ``url``: as given when it ends in ``/v1/metrics``,
    else the base URL with ``/v1/metrics`` appended (OTEL_EXPORTER_OTLP_ENDPOINT's rule).
    Raises :class:`UsageError` for anything but an http(s) URL with a host."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:  # "Invalid IPv6 URL"
        raise UsageError(f"--otlp: {e}: {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--otlp: not an http(s) URL: {url!r} (e.g. http://127.0.0.1:4318)")
    try:
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as e:
        raise UsageError(f"--otlp: {e}: {url!r}") from None
    if parts.path.rstrip("/").endswith("/v1/metrics"):
        return url
    return url.rstrip("/") + "/v1/metrics"


class _Snapshot:
    """One tick's samples grouped by OpenTelemetry instrument (built on the worker thread)."""

    __slots__ = ("points",)

    def __init__(self, samples: Iterable[MetricSample]) -> None:
        self.points: dict[tuple[str, Instrument, str], list[tuple[float, dict[str, str]]]] = {}
        for s in samples:
            m = otel_metric(s.name, tpu=is_tpu(s.labels))
            key = (m.name, m.instrument, m.unit)
            self.points.setdefault(key, []).append((s.value, otel_attributes(s, m)))


class OtlpSink:
    """A :class:`~computewatch.metrics.model.MetricsSink` pushing each tick over OTLP/HTTP.

    ``exporter`` is any OpenTelemetry ``MetricExporter`` (default: ``OTLPMetricExporter`` to
    ``url``; headers and compression also come from the ``OTEL_EXPORTER_OTLP_*`` environment
    variables, so an API key need not be on the command line)."""

    def __init__(
        self,
        url: str,
        *,
        node: str | None = None,
        timeout: float = 10.0,
        compression: Literal["gzip", "none"] | None = None,
        headers: Mapping[str, str] | None = None,
        exporter: MetricExporter | None = None,
        log: TextIO | None = None,
        prefix: str = "computewatch",
        close_timeout: float = 1.0,
    ) -> None:
        # The OpenTelemetry SDK is imported only when OTLP export is asked for, and then on
        # the sink's own thread (over a second on a busy machine): the job starts meanwhile.
        # Here only whether it is installed (the caller says which extra to install).
        for module in ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http"):
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"No module named {module!r}", name=module)
        self.url = metrics_url(url)
        self.timeout = timeout
        self.close_timeout = close_timeout
        self._log = log if log is not None else sys.stderr
        self._prefix = prefix
        _quiet_sdk()
        self._compression = compression
        self._headers = dict(headers or {})
        self._exporter: MetricExporter | None = exporter
        self._host = node or socket.gethostname()  # the resource's; points do not repeat it
        self._reader: InMemoryMetricReader | None = None
        self._provider: MeterProvider | None = None
        self._meter: Meter | None = None
        self._ready = threading.Event()
        self._setup_error = ""
        self._instruments: set[tuple[str, Instrument, str]] = set()
        self._current: _Snapshot | None = None
        self._lock = threading.Lock()
        self._pending: tuple[float, Sequence[MetricSample]] | None = None
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self.exported = 0
        self.failed = 0
        self.dropped = 0
        self.last_export_seconds = 0.0
        self._failing = False
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="computewatch-otlp", daemon=True)
        self._thread.start()

    # -- MetricsSink ----------------------------------------------------------------------------
    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        """Hand the tick over (a reference swap under a lock: never waits on the network)."""
        with self._wake:
            if self._pending is not None:
                self.dropped += 1
            self._pending = (now, samples)
            self._wake.notify()

    def close(self, timeout: float | None = None) -> None:
        """Export what is pending, waiting at most ``timeout`` seconds (default
        :attr:`close_timeout`) once the SDK is loaded, then stop. An export still running then
        (an endpoint that hangs, or refuses while the SDK retries) is said in one line, unless
        a failure was said already, and left to the worker, a daemon thread, which says
        nothing more: the end of the run is never held longer than the deadline."""
        wait = self.close_timeout if timeout is None else timeout
        with self._wake:
            self._closing = True
            self._wake.notify()
        # The SDK loads while the job runs; a job shorter than that waits for it here, as it
        # would have at its start. Then the last export has ``wait`` seconds.
        self._ready.wait(_SETUP_WAIT)
        self._thread.join(max(wait, 0.0))
        if self._thread.is_alive() and not self._failing and not self._setup_error:
            self._say(
                f"OTLP export to {self.url}: the last export did not finish within {wait:g} s "
                "(--otlp-timeout); left unfinished"
            )
        self._closed = True
        if not self._ready.is_set():  # the SDK still loading: nothing was sent
            return
        try:  # stops the SDK's retries (their back-off waits on this event) and its sockets
            if self._exporter is not None:
                self._exporter.shutdown(timeout_millis=max(wait, 0.1) * 1000)
        except Exception:
            pass
        if not self._thread.is_alive() and self._provider is not None:
            try:  # (while the worker runs, its reader may be in use)
                self._provider.shutdown(timeout_millis=max(wait, 0.1) * 1000)
            except Exception:
                pass

    # -- the worker -----------------------------------------------------------------------------
    def _setup(self) -> None:
        """Load the SDK and make the exporter, the reader and the meter (on the worker)."""
        try:  # the OpenTelemetry SDK (the optional `otel` extra), loaded on this thread
            from opentelemetry.exporter.otlp.proto.http import Compression
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.resources import Resource

            if self._exporter is None:
                comp = None if self._compression is None else Compression(self._compression)
                self._exporter = OTLPMetricExporter(
                    endpoint=self.url, timeout=self.timeout, compression=comp, headers=self._headers
                )
            attrs = {
                "service.name": "computewatch",
                "service.version": __version__,
                "telemetry.sdk.name": "opentelemetry",
                "host.name": self._host,
            }
            self._reader = InMemoryMetricReader()
            self._provider = MeterProvider(
                resource=Resource.create(attrs), metric_readers=[self._reader]
            )
            self._meter = self._provider.get_meter("computewatch", __version__)
        except Exception as e:  # said once; the sink then drops every tick
            self._setup_error = f"{type(e).__name__}: {e}"
            self._say(f"OTLP export to {self.url} is off: the SDK could not start ({e})")
        finally:
            self._ready.set()

    def _work(self) -> None:
        self._setup()
        while True:
            with self._wake:
                while self._pending is None and not self._closing:
                    self._wake.wait()
                job, self._pending = self._pending, None
                closing = self._closing
            if job is not None:
                self.push(job[1])
            if closing:
                return

    def push(self, samples: Sequence[MetricSample]) -> bool:
        """Map, collect and export ``samples`` now, on the calling thread (the worker's, or a
        benchmark's); True when the endpoint took them."""
        # the OpenTelemetry SDK (the optional `otel` extra): only once OTLP export is asked for
        self._ready.wait()
        if self._setup_error or self._reader is None or self._exporter is None:
            self.failed += 1
            return False
        # the OpenTelemetry SDK (the optional `otel` extra): loaded by _setup already
        from opentelemetry.sdk.metrics.export import MetricExportResult

        t0 = time.perf_counter()
        self._current = snap = _Snapshot(samples)
        for key in snap.points:
            if key not in self._instruments:
                self._instruments.add(key)
                self._create(key)
        ok = False
        err = ""
        try:
            data = self._reader.get_metrics_data()
            if data is None:
                ok = True
            else:
                result = self._exporter.export(data, timeout_millis=self.timeout * 1000)
                ok = result == MetricExportResult.SUCCESS
                err = "the endpoint refused or did not answer"
        except Exception as e:  # the network, the SDK: said once below, never raised
            err = f"{type(e).__name__}: {e}"
        self.last_export_seconds = time.perf_counter() - t0
        if ok:
            self.exported += 1
            if self._failing:
                self._failing = False
                self._say(f"OTLP export to {self.url} works again")
        else:
            self.failed += 1
            if not self._failing:
                self._failing = True
                self._say(
                    f"OTLP export to {self.url} failed ({err}); retrying every tick, the "
                    "monitored work is not affected"
                )
        return ok

    def _create(self, key: tuple[str, Instrument, str]) -> None:
        name, instrument, unit = key
        callback = self._callback(key)
        assert self._meter is not None  # made by _setup, before any push
        if instrument == "counter":
            self._meter.create_observable_counter(name, [callback], unit=unit)
        elif instrument == "updowncounter":
            self._meter.create_observable_up_down_counter(name, [callback], unit=unit)
        else:
            self._meter.create_observable_gauge(name, [callback], unit=unit)

    def _callback(
        self, key: tuple[str, Instrument, str]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        # the OpenTelemetry API (the optional `otel` extra): only once OTLP export is asked for
        from opentelemetry.metrics import Observation

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            snap = self._current
            if snap is None:
                return []
            return [Observation(v, a) for v, a in snap.points.get(key, ())]

        return observe

    def _say(self, text: str) -> None:
        if self._closed:  # after close: the process may be exiting
            return
        try:
            print(f"{self._prefix}: {text}", file=self._log, flush=True)
        except (OSError, ValueError):
            pass


_SETUP_WAIT = 60.0
"""Seconds :meth:`OtlpSink.close` waits for the SDK to load (it takes one or two)."""


def _quiet_sdk() -> None:
    """Keep the SDK's own log lines off standard error: its exporters log every failed export
    and every retry (two lines or more per tick while an endpoint is down), and we say the
    failure and the recovery once each (:meth:`OtlpSink.push`). The level is set on the
    exporters' common parent, so loggers of any module under it (their names move between SDK
    versions) inherit it; the SDK's metrics core still reports its errors."""
    logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL + 1)
    logging.getLogger("opentelemetry.sdk.metrics").setLevel(logging.ERROR)


def otlp_sink(
    url: str,
    *,
    node: str | None = None,
    interval: float = 5.0,
    log: TextIO | None = None,
    prefix: str = "computewatch",
    close_timeout: float = 1.0,
) -> OtlpSink:
    """An :class:`OtlpSink` to ``url`` whose export gives up after at most ``interval`` seconds
    (between 1 and 10), so a slow endpoint costs one tick's export, not a queue, and whose
    :meth:`~OtlpSink.close` waits at most ``close_timeout`` seconds. Raises
    :class:`UsageError` for a URL that is not http(s)."""
    metrics_url(url)  # checked before the SDK loads
    return OtlpSink(
        url,
        node=node,
        timeout=min(max(interval, 1.0), 10.0),
        log=log,
        prefix=prefix,
        close_timeout=close_timeout,
    )
