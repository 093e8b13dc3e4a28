"""``computewatch agent``: the node agent's command line (the library side is
computewatch.fleet.node, .agent, .server).

Flags win over the configuration file's ``[agent]`` section. Every problem found before the
agent starts (a malformed configuration, an unusable listen address, token or TLS file) is one
line on standard error and exit status 2; SIGTERM and SIGINT stop it cleanly (status 0).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from computewatch import cli_args
from computewatch.fleet.agent import Agent
from computewatch.fleet.agent_config import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    AgentConfig,
    AgentConfigError,
    load_agent_config,
)
from computewatch.fleet.attribution import Attributor
from computewatch.fleet.exposition import LatestSamples
from computewatch.fleet.model import MetricsSink
from computewatch.fleet.node import NodeOptions, open_node
from computewatch.fleet.server import DEFAULT_LISTEN, MetricsServer, ServerError, ServerSecurity
from computewatch.sources.gpus import BACKEND_CHOICES, GpuBackendError

__all__ = ["add_agent_parser", "cmd_agent"]

PROG = "computewatch"


class _Fail(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _interval(text: str) -> float:
    return cli_args.interval(text, MIN_INTERVAL, MAX_INTERVAL)


def _nonneg(text: str) -> float:
    v = cli_args.number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return v


def add_agent_parser(sub: Any) -> None:
    """Add ``agent`` to the CLI's subcommands (``sub``: argparse's subparsers action)."""
    a = sub.add_parser(
        "agent",
        help="node agent: sample the whole node and export Prometheus metrics per GPU and job",
        description="Sample the host, every GPU and every process of this node, attribute "
        "usage to jobs (Slurm, Kubernetes, computewatch runs, COMPUTEWATCH_TAGS), users and "
        "teams, and serve it on /metrics. Stops on SIGTERM or SIGINT.",
    )
    a.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address of /metrics and /healthz (default {DEFAULT_LISTEN}; a non-loopback "
        "address without --token-file is warned about)",
    )
    a.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file with [agent] and [teams] sections (default: "
        "$COMPUTEWATCH_CONFIG or ~/.config/computewatch/config.toml when it exists)",
    )
    a.add_argument(
        "--gpu-backend",
        type=cli_args.gpu_backend,
        metavar="BACKEND",
        help=f"{BACKEND_CHOICES} (default auto; fake devices are labelled simulated)",
    )
    a.add_argument(
        "--interval", type=_interval, metavar="S", help="seconds between samples (default 5)"
    )
    a.add_argument("--token-file", metavar="FILE", help="require this bearer token from scrapers")
    a.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    a.add_argument("--tls-key", metavar="FILE", help="... and this private key (PEM)")
    a.add_argument("--node", metavar="NAME", help="the node label (default: the host name)")
    a.add_argument(
        "--job-expiry",
        type=_nonneg,
        metavar="S",
        help="seconds an ended job's counters stay exported (default 300)",
    )
    a.add_argument(
        "--per-process",
        action="store_true",
        default=None,
        help="also export per-PID series of noticeable processes (high cardinality)",
    )
    a.add_argument(
        "--once",
        action="store_true",
        help="sample twice one interval apart, print the exposition and exit (no server)",
    )
    a.add_argument(
        "--fake-gpu-pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="with a fake:PRESET backend: show process PID on every simulated GPU (demos, "
        "tests; repeatable)",
    )
    from computewatch.alerts.cli import add_alert_arguments

    add_alert_arguments(a)


def _load_config(path: str | None) -> AgentConfig:
    from computewatch.config import ENV_CONFIG, default_config_path

    explicit = path or os.environ.get(ENV_CONFIG)
    p = path or str(default_config_path())
    if not explicit and not os.path.exists(p):
        return AgentConfig()
    try:
        return load_agent_config(p)
    except AgentConfigError as e:
        raise _Fail(str(e)) from None


def _alerts_sink(args: argparse.Namespace) -> MetricsSink | None:
    """The alert rules' sink for ``--alerts``, ``--notify`` and the budgets."""
    from computewatch.alerts import AlertsError, sink_from_args
    from computewatch.alerts.cli import alerts_enabled

    if not alerts_enabled(args):
        return None
    try:
        sink: MetricsSink = sink_from_args(
            args.alerts,
            notify=list(args.notify),
            budget_usd=args.budget_usd,
            budget_kwh=args.budget_kwh,
            out=sys.stderr,
        )
    except (OSError, AlertsError) as e:
        raise _Fail(f"--alerts: {e}") from None
    return sink


def cmd_agent(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT; 2 for a problem found before it starts."""
    try:
        return _run(args)
    except _Fail as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.code


def _run(args: argparse.Namespace) -> int:
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
        raise _Fail(str(e)) from None
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
    try:
        node, gpu_backend = open_node(options, attributor, backend, fake_pids=args.fake_gpu_pid)
    except GpuBackendError as e:
        raise _Fail(f"--gpu-backend: {e}") from None
    agent = Agent(node, sinks, interval)
    if args.once:
        import time

        try:
            agent.tick()
            time.sleep(interval)
            agent.tick()
            from computewatch.fleet.exposition import render

            sys.stdout.buffer.write(render(latest.get()[1])[0])
            sys.stdout.flush()
        finally:
            for s in sinks:
                s.close()
            node.close()
        return 0
    try:
        server = MetricsServer(listen, latest, security, stale_after=max(3 * interval, 60.0))
    except ServerError as e:
        node.close()
        raise _Fail(str(e)) from None
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
