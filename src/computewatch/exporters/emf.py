"""``--emf FILE``: the exported samples as CloudWatch Embedded Metric Format (EMF) lines.

One JSON document per label set and tick, one line each, in the format CloudWatch documents
("Specification: Embedded metric format", AWS CloudWatch User Guide): an ``_aws`` member with
``Timestamp`` (ms) and one ``CloudWatchMetrics`` directive (namespace, one dimension set: the
sample's labels, metrics with units), the dimensions and values as top-level members. The
CloudWatch agent (or Lambda, ECS with FireLens) tails the file or standard output and makes
metrics of them. Limits of the format are kept: at most 100 metrics per document and 30
dimensions per set; dimension values are non-empty ASCII of at most 1024 characters (other
bytes escaped as ``\\xNN``, ``\\uNNNN``); empty labels, and labels named like the metadata
(``_aws``) or a metric of the document, are left out.

Counters become their increase since the previous tick (a CloudWatch metric is aggregated by
statistic, so ``Sum`` over a period gives the period's total); the first tick of a counter is
only remembered. Info families (``*_info``) are not metrics and are not written.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Sequence
from typing import IO, TypedDict

from computewatch.metrics.families import family
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels

__all__ = ["MAX_DIMENSIONS", "MAX_METRICS", "EmfDocument", "EmfSink", "emf_documents", "emf_unit"]

MAX_METRICS = 100  # metrics per directive (EMF specification)
MAX_DIMENSIONS = 30  # keys per dimension set
_MAX_VALUE = 1024
_MAX_NAME = 250  # dimension names

# Our unit suffixes and CloudWatch's unit names (the MetricDatum Unit enumeration).
_UNITS = (
    ("_bytes_per_second", "Bytes/Second"),
    ("_seconds", "Seconds"),
    ("_bytes", "Bytes"),
    ("_ratio", "None"),
)
# Physical units CloudWatch has no name for: the metric's name says it (not a Count).
_UNNAMED = ("_joules", "_watts", "_hertz", "_celsius")
# Gauges that are counts of things.
_COUNT_GAUGES = ("_processes",)


class EmfMetric(TypedDict):
    Name: str
    Unit: str


class EmfDirective(TypedDict):
    Namespace: str
    Dimensions: list[list[str]]
    Metrics: list[EmfMetric]


class EmfMetadata(TypedDict):
    Timestamp: int
    CloudWatchMetrics: list[EmfDirective]


EmfDocument = dict[str, object]
"""One EMF document: ``_aws`` (:class:`EmfMetadata`) plus dimension and metric members."""


def emf_unit(name: str, *, counter: bool | None = None) -> str:
    """CloudWatch's unit for one of our names: ``Bytes``, ``Seconds``, ``Bytes/Second``;
    ``Count`` for a counter without a unit suffix (errors, steps: cumulative, or its increase
    written under the name without ``_total``, then say ``counter=True``) and for counts of
    things; ``None`` where CloudWatch has no such unit (joules, watts, hertz, degrees; the name
    says it) and for ratios."""
    counter = name.endswith("_total") if counter is None else counter
    base = name.removesuffix("_total")
    for suffix, unit in _UNITS:
        if base.endswith(suffix):
            return unit
    if base.endswith(_UNNAMED):
        return "None"
    return "Count" if counter or base.endswith(_COUNT_GAUGES) else "None"


def _ascii(value: str) -> str:
    return value.encode("ascii", "backslashreplace").decode("ascii")[:_MAX_VALUE]


def emf_documents(
    samples: Sequence[MetricSample],
    now: float,
    *,
    namespace: str = "computewatch",
    last: dict[tuple[str, Labels], float] | None = None,
) -> list[EmfDocument]:
    """The EMF documents of one tick. ``last`` keeps counters between calls (their increase is
    written); without it, counters are written as they are (cumulative)."""
    groups: dict[Labels, dict[str, float]] = {}
    units: dict[str, str] = {}
    for s in samples:
        fam = family(s.name)
        if fam.type == "info" or not math.isfinite(s.value):
            continue
        value = s.value
        name = s.name
        if fam.type == "counter" and last is not None:
            key = (s.name, s.labels)
            prev = last.get(key)
            last[key] = s.value
            if prev is None:
                continue
            value = max(s.value - prev, 0.0)
            name = s.name.removesuffix("_total")
        groups.setdefault(s.labels, {})[name] = value
        if name not in units:
            units[name] = emf_unit(name, counter=fam.type == "counter")
    ts = int(now * 1000)
    out: list[EmfDocument] = []
    for labels, metrics in groups.items():
        # a label may not take the place of the metadata or of a metric (both are members)
        dims = {
            _ascii(k)[:_MAX_NAME]: _ascii(v)
            for k, v in labels
            if v.strip() and k.strip() and not k.startswith(":") and k != "_aws"
            and k not in metrics
        }  # fmt: skip
        if len(dims) > MAX_DIMENSIONS:
            dims = dict(sorted(dims.items())[:MAX_DIMENSIONS])
        names = sorted(metrics)
        for i in range(0, len(names), MAX_METRICS):
            chunk = names[i : i + MAX_METRICS]
            directive: EmfDirective = {
                "Namespace": namespace,
                "Dimensions": [sorted(dims)],
                "Metrics": [{"Name": n, "Unit": units[n]} for n in chunk],
            }
            meta: EmfMetadata = {"Timestamp": ts, "CloudWatchMetrics": [directive]}
            doc: EmfDocument = {"_aws": meta}
            doc.update(dims)
            for n in chunk:
                doc[n] = metrics[n]
            out.append(doc)
    return out


class EmfSink:
    """A :class:`~computewatch.metrics.model.MetricsSink` appending each tick's EMF documents,
    one per line, to ``path`` (``-``: standard output). A write that fails is said once and the
    sink stops writing; the sampler goes on."""

    def __init__(
        self, path: str, *, namespace: str = "computewatch", log: IO[str] | None = None
    ) -> None:
        self.path = path
        self.namespace = namespace
        self._log = log if log is not None else sys.stderr
        self._last: dict[tuple[str, Labels], float] = {}
        self._lock = threading.Lock()
        self._out: IO[str] | None
        if path == "-":
            self._out = sys.stdout
            self._own = False
        else:
            # line-buffered append: the CloudWatch agent tails the file
            self._out = open(path, "a", buffering=1, encoding="ascii")  # noqa: SIM115
            self._own = True
        self.written = 0

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        docs = emf_documents(samples, now, namespace=self.namespace, last=self._last)
        with self._lock:
            out = self._out
            if out is None:
                return
            try:
                out.write("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs))
                out.flush()
                self.written += len(docs)
            except (OSError, ValueError) as e:
                self._out = None
                try:
                    print(
                        f"computewatch: EMF output to {self.path} failed, no more is written: {e}",
                        file=self._log,
                        flush=True,
                    )
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        with self._lock:
            out, self._out = self._out, None
        if out is not None and self._own:
            try:
                out.close()
            except OSError:
                pass
