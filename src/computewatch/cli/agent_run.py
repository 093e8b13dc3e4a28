"""``computewatch agent``: start the node agent from the parsed command line (the parser is in
:mod:`computewatch.cli.agent`; the CLI loads this module only when the command runs)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from computewatch.cli.alerts import alerts_sink
from computewatch.cli.exporters import export_sinks
from computewatch.config import ENV_CONFIG, default_config_path
from computewatch.errors import PROG, UsageError
from computewatch.fleet.agent import Agent
from computewatch.fleet.agent_config import (
    AgentConfig,
    AgentConfigError,
    load_agent_config,
)
from computewatch.fleet.attribution import Attributor
from computewatch.fleet.detection import (
    DetectionUnavailable,
    DetectOptions,
    HttpAccountChecker,
    TrainingDetector,
    require_numpy,
)
from computewatch.fleet.node import NodeOptions, open_node
from computewatch.metrics.exposition import LatestSamples, render
from computewatch.metrics.model import DEFAULT_LISTEN, MetricsSink
from computewatch.metrics.server import MetricsServer, ServerError, ServerSecurity
from computewatch.sources.gpus import GpuBackendError
from computewatch.upload.settings import server_settings

__all__ = ["run_agent"]


def _load_config(path: str | None) -> AgentConfig:
    explicit = path or os.environ.get(ENV_CONFIG)
    p = path or str(default_config_path())
    if not explicit and not os.path.exists(p):
        return AgentConfig()
    try:
        return load_agent_config(p)
    except AgentConfigError as e:
        raise UsageError(str(e)) from None


def _alerts_sink(args: argparse.Namespace) -> MetricsSink | None:
    """The alert rules' sink for ``--alerts``, ``--notify`` and the budgets."""
    from computewatch.alerts import AlertsError  # the rules engine: only with alert flags

    try:
        return alerts_sink(args, out=sys.stderr)
    except AlertsError as e:
        raise UsageError(f"--alerts: {e}") from None


def _say(text: str) -> None:
    try:
        print(f"{PROG} agent: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _detector(args: argparse.Namespace, cfg: AgentConfig, node: str) -> TrainingDetector | None:
    """Training detection when ``--detect`` or ``[agent] detect = true``; with the account
    check when the configuration names a server and a token (``[server] url``/``token_file``,
    or COMPUTEWATCH_SERVER/COMPUTEWATCH_TOKEN)."""
    if not (args.detect or cfg.detect):
        return None
    try:
        require_numpy()
    except DetectionUnavailable as e:
        raise UsageError(str(e)) from None
    settings = server_settings(cfg.base)  # SettingsError: a usage error, one line
    checker = None
    if settings is not None and settings.token:
        checker = HttpAccountChecker(settings.url, settings.token, timeout=cfg.detect_check_timeout)
    elif settings is not None:
        _say(
            f"training detection: no token for {settings.shown_url}; accounts are not checked "
            "(give [server] token_file: an admin token)"
        )
    options = DetectOptions(
        every=cfg.detect_every,
        min_seconds=cfg.detect_min_seconds,
        window=cfg.detect_window,
        accounts=dict(cfg.accounts),
        hours_factor=cfg.detect_hours_factor,
        check_timeout=cfg.detect_check_timeout,
    )
    where = f"; accounts checked at {settings.shown_url}" if checker and settings else ""
    _say(
        f"training detection on: every {options.every:g} s, jobs with {options.min_seconds:g} s "
        f"of data, {options.window:g} s window{where}"
    )
    return TrainingDetector(options, node, checker=checker, say=_say)


def run_agent(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT; a problem found before it starts raises
    :class:`UsageError` (status 2)."""
    cfg = _load_config(args.config)
    listen = args.listen or cfg.listen or DEFAULT_LISTEN
    interval = args.interval or cfg.interval or 5.0
    backend = args.gpu_backend or cfg.gpu_backend or "auto"
    try:
        security = ServerSecurity.from_files(
            args.token_file or cfg.token_file,
            args.tls_cert or cfg.tls_cert,
            args.tls_key or cfg.tls_key,
        )
    except ServerError as e:
        raise UsageError(str(e)) from None
    options = NodeOptions(
        node=args.node or cfg.node or NodeOptions().node,
        procfs_root=cfg.procfs_root,
        sysfs_root=cfg.sysfs_root,
        min_cpu_cores=cfg.min_cpu_cores,
        job_expiry_seconds=args.job_expiry
        if args.job_expiry is not None
        else cfg.job_expiry_seconds,
        per_process=bool(args.per_process) or cfg.per_process,
        export_cmdline=cfg.export_cmdline,
        redact_names=cfg.base.redact_names,
        filesystems=cfg.filesystems,
        cpu_tdp_watts=cfg.base.cpu_tdp_watts,
    )
    attributor = Attributor(
        options.procfs_root,
        cfg.teams,
        pod_logs_root=cfg.pod_logs_root,
        read_environ=cfg.read_environ,
    )
    sinks: list[MetricsSink] = []
    alert_sink = _alerts_sink(args)
    latest = LatestSamples()
    sinks.append(latest)
    if alert_sink is not None:
        sinks.append(alert_sink)  # hook: alert rules see every tick's samples
    sinks.extend(
        export_sinks(args, node=options.node, interval=interval, prefix=f"{PROG} agent")
    )  # --otlp, --emf
    try:
        node, gpu_backend = open_node(options, attributor, backend, fake_pids=args.fake_gpu_pid)
    except GpuBackendError as e:
        raise UsageError(f"--gpu-backend: {e}") from None
    try:
        detector = _detector(args, cfg, options.node)
    except BaseException:
        node.close()
        raise
    agent = Agent(node, sinks, interval, detector=detector)
    if args.once:
        try:
            agent.tick()
            time.sleep(interval)
            agent.tick()
            sys.stdout.buffer.write(render(latest.get()[1])[0])
            sys.stdout.flush()
        finally:
            for s in sinks:
                s.close()
            if detector is not None:
                detector.close()
            node.close()
        return 0
    try:
        server = MetricsServer(listen, latest, security, stale_after=max(3 * interval, 60.0))
    except ServerError as e:
        node.close()
        raise UsageError(str(e)) from None
    if not server.loopback_only and security.token is None:
        print(
            f"{PROG} agent: warning: listening on {listen} without a token: anyone who can "
            "reach this address can read the node's jobs and users (give --token-file)",
            file=sys.stderr,
        )
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    print(
        f"{PROG} agent: serving {server.url} every {interval:g} s "
        f"(GPUs: {len(gpu_backend.devices)}{', simulated' if gpu_backend.simulated else ''})",
        file=sys.stderr,
        flush=True,
    )
    try:
        agent.run(stop)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        server.close()
        node.close()
    print(f"{PROG} agent: stopped after {agent.ticks} ticks", file=sys.stderr, flush=True)
    return 0
