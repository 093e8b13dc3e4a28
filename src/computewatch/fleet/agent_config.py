"""The agent's sections of the configuration file: ``[agent]`` and ``[teams]``.

They live in the same TOML file as the rest of the configuration (computewatch.config, which
leaves these two sections to this module). A bad value is rejected when the agent starts, with
the file, the line and the reason (``config.toml:12: agent.interval = -1 must be positive``).

```toml
[agent]
listen = "127.0.0.1:9464"      # HOST:PORT; a non-loopback address wants a token
interval = 5                   # seconds between samples
gpu_backend = "auto"           # auto|nvidia|amd|none|fake:PRESET|replay:FILE
token_file = "/etc/computewatch/token"   # bearer token required from scrapers
tls_cert = "/etc/computewatch/tls.crt"   # TLS, with tls_key
tls_key = "/etc/computewatch/tls.key"
node = "gpu-node-17"           # the node label (default: the host name)
min_cpu_cores = 0.05           # a process above this (or on a GPU) makes its user's job visible
job_expiry_seconds = 300       # an ended job's counters stay exported this long
per_process = false            # per-PID series (cardinality!)
export_cmdline = false         # with per_process: a cmdline label (privacy!)
read_environ = true            # read /proc/PID/environ for SLURM_*, COMPUTEWATCH_* variables
filesystems = ["/"]            # mountpoints for computewatch_filesystem_*_bytes
procfs_root = "/proc"          # in a container: the host's /proc mounted elsewhere
sysfs_root = "/sys"
pod_logs_root = "/var/log/pods"  # pod UID -> namespace and name, from directory names
detect = false                 # training-run detection (needs numpy: the governance extra)
detect_every = 300             # seconds between classification rounds
detect_min_seconds = 600       # seconds of data a job needs before it is classified
detect_window = 3600           # seconds of series kept per job (at most 3600 samples per GPU)
detect_hours_factor = 1.0      # projected hours = elapsed x this (without a Slurm time limit)
detect_check_timeout = 5       # seconds an account check on the server may take
accounts = { nlp = "acme" }    # team or user -> account, for jobs without a Slurm account

[teams]
default = ""                   # team of jobs no rule matches ("" = unknown)
users = { alice = "nlp", bob = "vision" }
accounts = { proj_llm = "nlp" }      # Slurm accounts
namespaces = { serving = "platform" }  # Kubernetes namespaces
```
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from computewatch.config import (
    Config,
    ConfigError,
    Range,
    TomlError,
    check_number,
    parse_config,
    parse_toml,
    read_config_text,
)
from computewatch.errors import ComputewatchError
from computewatch.fleet.attribution import TeamMap
from computewatch.metrics.server import ServerError, parse_listen
from computewatch.sources.gpus import GpuBackendError, check_spec

__all__ = ["AgentConfig", "AgentConfigError", "load_agent_config", "parse_agent_config"]

SECTIONS = ("agent", "teams")
MIN_INTERVAL = 0.05
MAX_INTERVAL = 3600.0


class AgentConfigError(ComputewatchError, ValueError):
    """A configuration problem, located: ``FILE:LINE: reason``."""


@dataclasses.dataclass(frozen=True, slots=True)
class AgentConfig:
    """The ``[agent]`` and ``[teams]`` settings (None: not set, the default or a flag applies)."""

    path: Path | None = None
    listen: str | None = None
    interval: float | None = None
    gpu_backend: str | None = None
    token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    node: str | None = None
    min_cpu_cores: float = 0.05
    job_expiry_seconds: float = 300.0
    per_process: bool = False
    export_cmdline: bool = False
    read_environ: bool = True
    filesystems: tuple[str, ...] = ("/",)
    procfs_root: str = "/proc"
    sysfs_root: str = "/sys"
    pod_logs_root: str = "/var/log/pods"
    detect: bool = False
    detect_every: float = 300.0
    detect_min_seconds: float = 600.0
    detect_window: float = 3600.0
    detect_hours_factor: float = 1.0
    detect_check_timeout: float = 5.0
    accounts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Team or user -> account (training detection's account checks; a team name first)."""
    teams: TeamMap = dataclasses.field(default_factory=TeamMap)
    base: Config = dataclasses.field(default_factory=Config)
    """The rest of the file ([energy], [location], ...), checked by computewatch.config."""


# key -> kind
_AGENT_KEYS: dict[str, str] = {
    "listen": "listen",
    "interval": "number",
    "gpu_backend": "gpu_backend",
    "token_file": "path",
    "tls_cert": "path",
    "tls_key": "path",
    "node": "str",
    "min_cpu_cores": "number",
    "job_expiry_seconds": "number",
    "per_process": "bool",
    "export_cmdline": "bool",
    "read_environ": "bool",
    "filesystems": "str_list",
    "procfs_root": "str",
    "sysfs_root": "str",
    "pod_logs_root": "str",
    "detect": "bool",
    "detect_every": "number",
    "detect_min_seconds": "number",
    "detect_window": "number",
    "detect_hours_factor": "number",
    "detect_check_timeout": "number",
    "accounts": "str_table",
}
NUMBERS: dict[str, Range] = {
    "interval": Range(MIN_INTERVAL, MAX_INTERVAL, why="seconds between samples"),
    "min_cpu_cores": Range(0, 1e5, why="cores"),
    "job_expiry_seconds": Range(0, 365 * 86400, why="seconds"),
    "detect_every": Range(1, 86400, why="seconds between classification rounds"),
    "detect_min_seconds": Range(1, 7 * 86400, why="seconds of data"),
    "detect_window": Range(10, 7 * 86400, why="seconds of series kept per job"),
    "detect_hours_factor": Range(0.01, 1000, why="a factor on the elapsed time"),
    "detect_check_timeout": Range(0.1, 120, why="seconds"),
}
"""The range of every numeric key of ``[agent]``."""
_TEAM_TABLES = ("users", "accounts", "namespaces")


def _line_of(text: str, section: str, key: str | None) -> int:
    """The 1-based line where ``key`` is set in ``[section]`` (or the section's header, or a
    dotted ``section.key``/inline table); 0 when it cannot be found."""
    header = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\"' -]+?)\s*\]\s*(#.*)?$")
    current = ""
    header_line = 0
    first_key_line = 0
    head = section.split(".", maxsplit=1)[0]
    key_re = re.compile(r"^\s*" + re.escape(key) + r"\s*=") if key else None
    dotted = re.compile(r"^\s*" + re.escape(f"{section}.{key}") + r"\s*=") if key else None
    for n, line in enumerate(text.splitlines(), 1):
        m = header.match(line)
        if m:
            current = m.group(1).replace(" ", "")
            if current == section and not header_line:
                header_line = n
            continue
        if key_re and current == section and key_re.match(line):
            return n
        if dotted and current == "" and dotted.match(line):
            return n
        if (
            key
            and current == head
            and not first_key_line
            and re.match(r"^\s*" + re.escape(section.split(".", 1)[-1]) + r"\s*=", line)
        ):
            first_key_line = n  # an inline table: [teams] users = { ... }
    return header_line or first_key_line


class _Checker:
    def __init__(self, where: str, text: str, path: Path | None) -> None:
        self.where = where
        self.text = text
        self.path = path

    def fail(self, section: str, key: str | None, reason: str) -> AgentConfigError:
        line = _line_of(self.text, section, key)
        loc = f"{self.where}:{line}" if line else self.where
        return AgentConfigError(f"{loc}: {reason}")

    def value(self, key: str, value: Any, kind: str) -> Any:
        shown = f"agent.{key} = {value!r}"
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.fail("agent", key, f"{shown} must be true or false")
            return value
        if kind == "str_table":
            if not isinstance(value, dict) or not all(
                isinstance(v, str) and v.strip() for v in value.values()
            ):
                raise self.fail(
                    "agent", key, f'{shown} must be a table of name = "account" (non-empty)'
                )
            return {str(k): v.strip() for k, v in value.items()}
        if kind == "str_list":
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise self.fail("agent", key, f"{shown} must be a list of non-empty strings")
            return tuple(value)
        if kind == "number":
            try:
                return check_number(f"agent.{key}", value, NUMBERS[key])
            except ValueError as e:
                raise self.fail("agent", key, str(e)) from None
        if not isinstance(value, str) or not value.strip():
            raise self.fail("agent", key, f"{shown} must be a non-empty string")
        v_str = value.strip()
        if kind == "listen":
            try:
                parse_listen(v_str)
            except ServerError as e:
                raise self.fail("agent", key, f"{shown}: {e}") from None
        elif kind == "gpu_backend":
            try:
                check_spec(v_str)
            except GpuBackendError as e:
                raise self.fail("agent", key, f"{shown}: {e}") from None
        elif kind == "path":
            p = Path(v_str).expanduser()
            if not p.is_absolute() and self.path is not None:
                p = self.path.parent / p
            return str(p)
        return v_str


def parse_agent_config(text: str, path: Path | None = None) -> AgentConfig:
    """Check and read the agent's sections of a configuration text (and the rest of it)."""
    where = str(path) if path else "configuration"
    try:
        data = parse_toml(text, where)
    except TomlError as e:
        loc = f"{where}:{e.line}" if e.line else where
        raise AgentConfigError(f"{loc}: not valid TOML: {e.reason}") from None
    chk = _Checker(where, text, path)
    fields: dict[str, Any] = {"path": path}
    agent = data.get("agent", {})
    if not isinstance(agent, dict):
        raise chk.fail("agent", None, "[agent] must be a table")
    for key, value in agent.items():
        kind = _AGENT_KEYS.get(key)
        if kind is None:
            raise chk.fail(
                "agent", key, f"unknown key agent.{key}; known: {', '.join(sorted(_AGENT_KEYS))}"
            )
        fields[key] = chk.value(key, value, kind)
    if bool(fields.get("tls_cert")) != bool(fields.get("tls_key")):
        raise chk.fail(
            "agent",
            "tls_cert" if "tls_cert" in fields else "tls_key",
            "TLS needs both agent.tls_cert and agent.tls_key",
        )
    if fields.get("detect_min_seconds", 600.0) > fields.get("detect_window", 3600.0):
        raise chk.fail(
            "agent",
            "detect_min_seconds",
            f"agent.detect_min_seconds = {fields.get('detect_min_seconds', 600.0):g} must not "
            f"exceed agent.detect_window = {fields.get('detect_window', 3600.0):g} (the data "
            "a job needs must fit in the window kept)",
        )
    fields["teams"] = _teams(chk, data.get("teams", {}))
    rest = {k: v for k, v in data.items() if k not in SECTIONS}
    try:
        fields["base"] = parse_config(rest, path)
    except ConfigError as e:
        m = re.search(r"\b([a-z_]+)\.([a-z_]+)\b", str(e).removeprefix(where))
        s = re.search(r"\[([a-z_]+)\]", str(e))
        line = (
            _line_of(text, m.group(1), m.group(2))
            if m
            else (_line_of(text, s.group(1), None) if s else 0)
        )
        msg = str(e).removeprefix(f"{where}: ")
        raise AgentConfigError(f"{where}:{line}: {msg}" if line else f"{where}: {msg}") from None
    return AgentConfig(**fields)


def _teams(chk: _Checker, body: Any) -> TeamMap:
    if not isinstance(body, dict):
        raise chk.fail("teams", None, "[teams] must be a table")
    maps: dict[str, dict[str, str]] = {t: {} for t in _TEAM_TABLES}
    default = ""
    for key, value in body.items():
        if key == "default":
            if not isinstance(value, str):
                raise chk.fail("teams", key, f"teams.default = {value!r} must be a string")
            default = value
            continue
        if key not in _TEAM_TABLES:
            known = ", ".join(("default", *_TEAM_TABLES))
            raise chk.fail("teams", key, f"unknown key teams.{key}; known: {known}")
        if not isinstance(value, dict):
            raise chk.fail(
                "teams", key, f'teams.{key} must be a table of name = "team" (got {value!r})'
            )
        for name, team in value.items():
            if not isinstance(team, str) or not team.strip():
                raise chk.fail(
                    f"teams.{key}",
                    name,
                    f"teams.{key}.{name} = {team!r} must be a team name (a non-empty string)",
                )
            maps[key][str(name)] = team.strip()
    return TeamMap(maps["users"], maps["accounts"], maps["namespaces"], default)


def load_agent_config(path: str | Path) -> AgentConfig:
    """Read and check a configuration file for the agent; a missing file is an error."""
    p = Path(path).expanduser()
    try:
        text = read_config_text(p)
    except ConfigError as e:
        raise AgentConfigError(str(e)) from None
    return parse_agent_config(text, p)


def merged(cfg: AgentConfig, **flags: Any) -> Mapping[str, Any]:
    """The configuration's values overridden by the flags that were given (not None)."""
    out = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out.update({k: v for k, v in flags.items() if v is not None})
    return out
