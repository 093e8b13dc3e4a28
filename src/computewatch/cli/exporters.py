"""``--otlp URL`` and ``--emf FILE`` on ``agent`` and ``run``: their flags, and the sinks they
make (computewatch.exporters; docs/observability.md). The flags' module imports nothing of the
library, so ``--help`` stays fast; the sinks' modules load only when a flag is given."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from computewatch.errors import UsageError

if TYPE_CHECKING:
    from computewatch.metrics.model import MetricsSink

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "MAX_CLOSE_TIMEOUT",
    "add_export_arguments",
    "export_sinks",
    "exports_enabled",
]

DEFAULT_CLOSE_TIMEOUT = 1.0
"""Seconds the end of ``run`` (or a stopping agent) waits for the last OTLP export."""
MAX_CLOSE_TIMEOUT = 60.0


def _close_timeout(args: argparse.Namespace) -> float:
    value = getattr(args, "otlp_timeout", None)
    if value is None:
        return DEFAULT_CLOSE_TIMEOUT
    if not args.otlp:
        raise UsageError("--otlp-timeout needs --otlp")
    if not (0 < value <= MAX_CLOSE_TIMEOUT):  # also NaN
        raise UsageError(
            f"--otlp-timeout must be more than 0 and at most {MAX_CLOSE_TIMEOUT:g} seconds, "
            f"not {value:g}"
        )
    return float(value)


def add_export_arguments(p: Any) -> None:
    """Add ``--otlp`` and ``--emf`` to the parser ``p``."""
    g = p.add_argument_group("export (OpenTelemetry, CloudWatch; docs/observability.md)")
    g.add_argument(
        "--otlp",
        metavar="URL",
        help="also push the metrics over OTLP/HTTP to URL every tick (an OpenTelemetry "
        "Collector, Datadog, Elastic, Grafana Cloud ...: http://127.0.0.1:4318; headers from "
        "OTEL_EXPORTER_OTLP_HEADERS)",
    )
    g.add_argument(
        "--otlp-timeout",
        type=float,
        metavar="SECONDS",
        help="at the end (of the run, of the agent), wait at most this long for the last OTLP "
        f"export (default {DEFAULT_CLOSE_TIMEOUT:g}; more than 0, at most {MAX_CLOSE_TIMEOUT:g})",
    )
    g.add_argument(
        "--emf",
        metavar="FILE",
        help="also append the metrics to FILE ('-': standard output) in CloudWatch's Embedded "
        "Metric Format, for the CloudWatch agent",
    )


def exports_enabled(args: argparse.Namespace) -> bool:
    """Whether an export flag was given (``--otlp-timeout`` alone too: :func:`export_sinks`
    then says it needs ``--otlp``)."""
    return bool(
        getattr(args, "otlp", None)
        or getattr(args, "emf", None)
        or getattr(args, "otlp_timeout", None) is not None
    )


def export_sinks(
    args: argparse.Namespace, *, node: str | None, interval: float, prefix: str
) -> list[MetricsSink]:
    """The sinks of ``--otlp`` and ``--emf`` (none without them). Raises
    :class:`~computewatch.errors.UsageError` for a bad URL or an EMF file that cannot be
    opened; ``prefix`` starts the sinks' messages (``computewatch agent``)."""
    sinks: list[MetricsSink] = []
    close_timeout = _close_timeout(args)
    try:
        if args.otlp:
            # the OpenTelemetry SDK: only with --otlp
            from computewatch.exporters.otlp import otlp_sink

            try:
                sinks.append(
                    otlp_sink(
                        args.otlp,
                        node=node,
                        interval=interval,
                        log=sys.stderr,
                        prefix=prefix,
                        close_timeout=close_timeout,
                    )
                )
            except ImportError as e:
                raise UsageError(
                    f"--otlp needs the OpenTelemetry SDK ({e.name}): "
                    "pip install 'computewatch[otel]'"
                ) from None
        if args.emf:
            # only with --emf: the exporter and the metric contract (start-up of `run`, `agent`)
            from computewatch.exporters.emf import EmfSink

            try:
                sinks.append(EmfSink(args.emf, log=sys.stderr))
            except OSError as e:
                raise UsageError(f"--emf: cannot open {args.emf}: {e.strerror or e}") from None
    except BaseException:
        for s in sinks:
            s.close()
        raise
    return sinks
