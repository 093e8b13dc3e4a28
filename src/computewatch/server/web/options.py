"""The dashboard's options from the server's configuration (``[server]`` section): where the
fleet page reads Prometheus, the budgets' alert targets and how often budgets are checked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fastapi import Request

from computewatch.alerts.notify import Target, parse_target
from computewatch.config import Config, load_config
from computewatch.errors import ComputewatchError

__all__ = ["DashboardOptions", "options_from_config", "options_of", "parse_targets"]


@dataclass(frozen=True)
class DashboardOptions:
    """What the dashboard needs from the server's command line."""

    prometheus_url: str | None = None
    """Where ``/fleet`` reads the fleet report (None: no fleet page)."""
    budget_notify: Sequence[str] = ()
    """Alert targets for budgets (``webhook:URL``, ``slack:URL``, ``alertmanager:URL``)."""
    budget_interval: float = 60.0
    """Seconds between two budget evaluations."""
    events_path: str = "/api/v1/events"
    targets: tuple[Target, ...] = field(default=(), init=False)


def options_of(request: Request) -> DashboardOptions:
    """The options the app was installed with (the defaults when it was not)."""
    opts = getattr(request.app.state, "dashboard", None)
    return opts if isinstance(opts, DashboardOptions) else DashboardOptions()


def parse_targets(specs: Sequence[str]) -> tuple[Target, ...]:
    """``[server] budget_notify`` values as targets; :class:`ComputewatchError` for a bad one."""
    out: list[Target] = []
    for spec in specs:
        try:
            t = parse_target(spec)
        except ValueError as e:
            raise ComputewatchError(f"[server] budget_notify: {e}") from None
        if t not in out:
            out.append(t)
    return tuple(out)


def options_from_config(cfg: Config | None = None) -> DashboardOptions:
    """The dashboard's options from the configuration's ``[server]`` section (``prometheus_url``,
    ``budget_notify``, ``budget_interval``)."""
    c = cfg if cfg is not None else load_config()
    return DashboardOptions(
        prometheus_url=c.server_prometheus_url,
        budget_notify=tuple(c.server_budget_notify),
        budget_interval=c.server_budget_interval or 60.0,
    )
