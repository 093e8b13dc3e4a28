"""The configuration file: ``$COMPUTEWATCH_CONFIG``, else ``$XDG_CONFIG_HOME/computewatch/
config.toml`` (``~/.config/computewatch/config.toml``). Everything in it is optional; command-line
flags win over it. Values are checked when loaded and a bad one is an error naming the key, the
value and the file.

```toml
[location]
region = "FR"                  # ISO country, sub-national (US-CA) or cloud region (aws:us-east-1)

[energy]
pue = 1.2                      # facility PUE (default: the provider's published figure)
server_watts = 0               # rest of the server (fans, disks, NICs, PSU losses), optional
memory_watts_per_gib = 0.38    # only when RAPL gives no DRAM figure
cpu_tdp_watts = 280            # when the CPU is not in the catalog

[carbon]
embodied = true                # add embodied carbon of the hardware, per device-hour
electricitymaps_token = "..."  # live grid intensity (no call is made without a token)
electricitymaps_url = "https://api.electricitymap.org/v3"
provider = "uk-carbon-intensity"  # hourly intensity; electricitymaps, watttime, file
provider_region = "CAISO_NORTH"  # the provider's own region code, when not the [location] one
intensity_file = "~/grid.csv"  # with provider = "file": time,g_per_kwh (CSV or Parquet)
watttime_username = "me"       # password: watttime_password_file, or WATTTIME_PASSWORD
sci_unit = "step"              # SCI per: run, step, 1M-tokens, 1k-inferences

[cost]
instance_type = "aws:p5.48xlarge"   # default: from DMI where the provider exposes it
discount = 0.6                 # spot / reserved: fraction off the on-demand price, 0-1
usd_per_gpu_hour = 2.10        # on-premises: GPU-hour rate with hardware amortisation
usd_per_hour = 0               # on-premises: the whole machine per hour instead
usd_per_kwh = 0.15             # electricity, when you pay it

[flops]
precision = "bf16"             # fp64 fp32 tf32 bf16 fp16 fp8

[catalog]                      # your own price rows, over the package's (same CSV columns)
cloud_instances = "~/prices.csv"

[privacy]                      # more names whose values are redacted (docs/security.md)
redact = ["wandb_key", "hf"]

[log_to]                       # experiment trackers every run logs into (docs/trackers.md)
trackers = ["mlflow", "tensorboard"]

[server]                       # upload runs to `computewatch server` (docs/upload.md)
url = "https://computewatch.example.org"
token_file = "~/.config/computewatch/token"   # or token = "..." (an ingest token)
project = "llm-pretrain"       # when a run has no `project` tag
stream_interval = 10           # seconds between live uploads of a running run
```
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from computewatch.catalog import PRECISIONS
from computewatch.catalog.reference import parse_instances
from computewatch.config.thresholds import check_overrides
from computewatch.errors import ComputewatchError

if TYPE_CHECKING:  # a type only: the TOML reader loads when a configuration file is read
    import tomllib

ENV_CONFIG = "COMPUTEWATCH_CONFIG"


class ConfigError(ComputewatchError, ValueError):
    """A configuration problem: the message names the file, the key and the value."""


class Config(msgspec.Struct, frozen=True):
    path: Path | None = None
    region: str | None = None
    pue: float | None = None
    server_watts: float = 0.0
    memory_watts_per_gib: float | None = None
    cpu_tdp_watts: float | None = None
    embodied: bool = False
    electricitymaps_token: str | None = None
    electricitymaps_url: str | None = None
    carbon_provider: str | None = None  # hourly intensity: docs/carbon.md
    carbon_provider_region: str | None = None
    intensity_file: Path | None = None
    watttime_username: str | None = None
    watttime_password_file: Path | None = None
    watttime_url: str | None = None
    uk_carbon_intensity_url: str | None = None
    sci_unit: str = "run"
    instance_type: str | None = None
    discount: float = 0.0
    usd_per_gpu_hour: float | None = None
    usd_per_hour: float | None = None
    usd_per_kwh: float | None = None
    precision: str | None = None
    catalog_cloud_instances: Path | None = None
    extra_instances: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """Rows of ``catalog_cloud_instances``, parsed and checked when the file was loaded."""
    diagnosis: Mapping[str, Any] = msgspec.field(default_factory=dict)
    """``[diagnosis]`` threshold overrides, checked by computewatch.config.thresholds."""
    redact_names: tuple[str, ...] = ()
    """``[privacy] redact``: more names whose values are secrets (computewatch.redact)."""
    log_to: tuple[str, ...] = ()
    """``[log_to] trackers``: the experiment trackers every run logs into (docs/trackers.md)."""
    governance_model: str | None = None
    governance_base_model: str | None = None
    governance_stage: str | None = None
    governance_parameters: float | None = None
    """``[governance]``: the default declaration of what runs train (``run --model`` ...)."""
    governance_ledger_key: Path | None = None
    governance_retention_years: float | None = None
    governance_head_interval: float | None = None
    """``[governance] head_interval``: seconds between the ledger's signed heads at most."""
    governance_detect_review_flop: float | None = None
    """``[governance] detect_review_flop``: a detected job whose hardware compute ceiling
    reaches it is flagged for review unless confidently not training (default 1e23 FLOP)."""
    governance_tiers: Mapping[str, Any] = msgspec.field(default_factory=dict)
    governance_count_simulated: bool = False
    """``[governance] count_simulated``: count runs on simulated or replayed devices in the
    regulatory totals and caps (demos and tests); by default they are kept and flagged only."""
    """``[governance] tiers``: overrides and additions, checked by computewatch.governance."""
    server_url: str | None = None
    """``[server] url``: where runs are uploaded (computewatch.upload)."""
    server_token: str | None = None
    """``[server] token``: never shown (not in a ``repr``, not in an error)."""
    server_token_file: Path | None = None
    server_project: str | None = None
    server_stream_interval: float | None = None
    server_prometheus_url: str | None = None
    """``[server] prometheus_url``: the dashboard's fleet page reads it (docs/dashboard.md)."""
    server_budget_notify: tuple[str, ...] = ()
    """``[server] budget_notify``: where budget alerts go (webhook:URL, slack:URL, ...)."""
    server_budget_interval: float | None = None
    server_sign: bool = True
    """``[server] sign``: sign each upload with the node key (docs/upload.md)."""
    profiling_capture_on_regression: bool | None = None
    """``[profiling] capture_on_regression``: None (default) = with ``run``'s alert flags."""
    profiling_capture_interval: float = 1800.0
    profiling_capture_seconds: float = 5.0
    profiling_regression_warmup: float | None = None
    profiling_regression_baseline: float | None = None
    profiling_regression_window: float | None = None
    profiling_regression_threshold: float | None = None

    def __repr__(self) -> str:  # every field but the server's token
        shown = (f"{k}={getattr(self, k)!r}" for k in self.__struct_fields__ if k != "server_token")
        return f"Config({', '.join(shown)})"


class Range(msgspec.Struct, frozen=True):
    """The values a numeric key allows: finite, from ``low`` to ``high``; ``low_open`` and
    ``high_open`` leave that end out. ``why`` says what the range means, when it is not plain."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def __str__(self) -> str:
        low = f"above {self.low:.15g}," if self.low_open else f"from {self.low:.15g}"
        high = f"to below {self.high:.15g}" if self.high_open else f"up to {self.high:.15g}"
        if not self.low_open and not self.high_open:
            high = f"to {self.high:.15g}"
        return f"a finite number {low} {high}" + (f", {self.why}" if self.why else "")

    def contains(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        above = v > self.low if self.low_open else v >= self.low
        below = v < self.high if self.high_open else v <= self.high
        return above and below


def check_number(key: str, value: object, allowed: Range) -> float:
    """``value`` as a float when it is a number in ``allowed``; else ValueError naming the key,
    the value and the range (TOML has ``inf`` and ``nan``, and ``1e400`` reads as ``inf``)."""
    bad = f"{key} = {value!r}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{bad} must be a number ({allowed})")
    try:
        v = float(value)
    except OverflowError:  # an integer too large for a float
        v = math.inf
    if allowed.contains(v):
        return v
    if not math.isfinite(v):
        why = "is not a finite number"
    elif allowed.low == 0 and v < 0:
        why = "must not be negative"
    elif allowed.low == 0 and allowed.low_open and v == 0:
        why = "must be positive"
    else:
        why = "is out of range"
    raise ValueError(f"{bad} {why} ({allowed})")


# The upper ends catch a typo or a unit slip (W for kW), not a real facility: the worst PUEs
# measured are about 3 (Uptime Institute survey, 2023), a CPU socket draws at most ~500 W.
_WATTS = Range(0, 1e6, why="watts")
_USD = Range(0, 1e6, why="dollars")
NUMBERS: dict[str, Range] = {
    "energy.pue": Range(1, 10, why="facility energy / IT energy"),
    "energy.server_watts": _WATTS,
    "energy.memory_watts_per_gib": Range(0, 100, why="watts per GiB"),
    "energy.cpu_tdp_watts": Range(0, 1e5, low_open=True, why="watts per socket"),
    "cost.discount": Range(0, 1, high_open=True, why="0.6 = 60% off"),
    "cost.usd_per_gpu_hour": _USD,
    "cost.usd_per_hour": _USD,
    "cost.usd_per_kwh": Range(0, 1e3, why="dollars"),
    "server.stream_interval": Range(1, 3600, why="seconds"),
    "server.budget_interval": Range(1, 86400, why="seconds"),
    "profiling.capture_interval": Range(1, 7 * 86400, why="seconds between captures"),
    "profiling.capture_seconds": Range(1, 600, why="seconds of py-spy sampling"),
    "profiling.regression_warmup": Range(0, 86400, why="seconds"),
    "profiling.regression_baseline": Range(1, 86400, why="seconds"),
    "profiling.regression_window": Range(1, 86400, why="seconds"),
    "profiling.regression_threshold": Range(0, 100, low_open=True, why="0.2 = 20% slower"),
    "governance.parameters": Range(0, 1e16, low_open=True, why="the model's parameter count"),
    "governance.retention_years": Range(0, 100, low_open=True, why="years"),
    "governance.head_interval": Range(0.1, 86400, why="seconds between signed heads at most"),
    "governance.detect_review_flop": Range(0, 1e40, low_open=True, why="FLOP"),
}
"""The range of every numeric key of the configuration, by ``section.key``."""

# section -> key -> (field, kind); kind: "str", "number" (range in NUMBERS), "bool", "path",
# "url", "precision", "secret" (a string never repeated in a message)
_SCHEMA: dict[str, dict[str, tuple[str, str]]] = {
    "location": {"region": ("region", "str")},
    "energy": {
        "pue": ("pue", "number"),
        "server_watts": ("server_watts", "number"),
        "memory_watts_per_gib": ("memory_watts_per_gib", "number"),
        "cpu_tdp_watts": ("cpu_tdp_watts", "number"),
    },
    "carbon": {
        "embodied": ("embodied", "bool"),
        "electricitymaps_token": ("electricitymaps_token", "str"),
        "electricitymaps_url": ("electricitymaps_url", "url"),
        "provider": ("carbon_provider", "carbon_provider"),
        "provider_region": ("carbon_provider_region", "str"),
        "intensity_file": ("intensity_file", "path"),
        "watttime_username": ("watttime_username", "str"),
        "watttime_password_file": ("watttime_password_file", "path"),
        "watttime_url": ("watttime_url", "url"),
        "uk_carbon_intensity_url": ("uk_carbon_intensity_url", "url"),
        "sci_unit": ("sci_unit", "sci_unit"),
    },
    "cost": {
        "instance_type": ("instance_type", "str"),
        "discount": ("discount", "number"),
        "usd_per_gpu_hour": ("usd_per_gpu_hour", "number"),
        "usd_per_hour": ("usd_per_hour", "number"),
        "usd_per_kwh": ("usd_per_kwh", "number"),
    },
    "flops": {"precision": ("precision", "precision")},
    "catalog": {
        "cloud_instances": ("catalog_cloud_instances", "path"),
    },
    "privacy": {"redact": ("redact_names", "names")},
    "log_to": {"trackers": ("log_to", "trackers")},
    "governance": {
        "model": ("governance_model", "str"),
        "base_model": ("governance_base_model", "str"),
        "stage": ("governance_stage", "str"),
        "parameters": ("governance_parameters", "number"),
        "ledger_key": ("governance_ledger_key", "path"),
        "retention_years": ("governance_retention_years", "number"),
        "head_interval": ("governance_head_interval", "number"),
        "detect_review_flop": ("governance_detect_review_flop", "number"),
        "tiers": ("governance_tiers", "table"),
        "count_simulated": ("governance_count_simulated", "bool"),
    },
    "profiling": {
        "capture_on_regression": ("profiling_capture_on_regression", "bool"),
        "capture_interval": ("profiling_capture_interval", "number"),
        "capture_seconds": ("profiling_capture_seconds", "number"),
        "regression_warmup": ("profiling_regression_warmup", "number"),
        "regression_baseline": ("profiling_regression_baseline", "number"),
        "regression_window": ("profiling_regression_window", "number"),
        "regression_threshold": ("profiling_regression_threshold", "number"),
    },
    "server": {
        "url": ("server_url", "url"),
        "token": ("server_token", "secret"),
        "token_file": ("server_token_file", "path"),
        "project": ("server_project", "str"),
        "stream_interval": ("server_stream_interval", "number"),
        "prometheus_url": ("server_prometheus_url", "url"),
        "budget_notify": ("server_budget_notify", "names"),
        "budget_interval": ("server_budget_interval", "number"),
        "sign": ("server_sign", "bool"),
    },
}


AGENT_SECTIONS = frozenset({"agent", "teams"})
"""Sections of the same file that belong to ``computewatch agent`` (fleet/agent_config.py)."""


def default_config_path() -> Path:
    env = os.environ.get(ENV_CONFIG)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "computewatch" / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and check the configuration. A missing default file is an empty configuration; a
    file named explicitly (argument or ``$COMPUTEWATCH_CONFIG``) must exist."""
    explicit = path is not None or bool(os.environ.get(ENV_CONFIG))
    p = Path(path).expanduser() if path is not None else default_config_path()
    if not p.exists() and not explicit:
        return Config()
    return parse_config(parse_toml(read_config_text(p), str(p)), p)


TOO_DEEP = "nests too deeply (arrays or inline tables inside one another past the parser's limit)"
"""The reason given for a configuration text nested deeper than tomllib can parse."""


class TomlError(ConfigError):
    """A configuration text that is not valid TOML: ``WHERE: not valid TOML: ERROR``, with the
    error's ``line`` (1-based, None when not given) and its ``reason`` without the position."""

    def __init__(self, where: str, error: tomllib.TOMLDecodeError | str) -> None:
        super().__init__(f"{where}: not valid TOML: {error}")
        # tomllib ends its messages with "(at line L, column C)".
        m = re.search(r"\(at line (\d+), column \d+\)", str(error))
        self.line: int | None = int(m.group(1)) if m else None
        self.reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(error))


def read_config_text(path: Path) -> str:
    """The text of a configuration file; ConfigError when it is missing or unreadable."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from None


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """A configuration text as TOML tables (:class:`TomlError` when it does not parse): the one
    TOML reader of the configuration, for :func:`load_config` and the agent's configuration."""
    import tomllib  # only with a file to read: most runs have none (start-up of `run`)

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TomlError(where, e) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise TomlError(where, TOO_DEEP) from None


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    where = str(path) if path else "configuration"
    fields: dict[str, Any] = {"path": path}
    for section, body in data.items():
        if section in AGENT_SECTIONS:
            continue  # checked by computewatch.fleet.agent_config when the agent starts
        if section == "diagnosis":
            fields["diagnosis"] = _diagnosis(where, body)
            continue
        keys = _SCHEMA.get(section)
        if keys is None:
            raise ConfigError(
                f"{where}: unknown section [{section}]; known: {', '.join(sorted(_SCHEMA))}"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        for key, value in body.items():
            spec = keys.get(key)
            if spec is None:
                raise ConfigError(
                    f"{where}: unknown key {section}.{key}; known: {', '.join(sorted(keys))}"
                )
            field, kind = spec
            fields[field] = _check(where, f"{section}.{key}", value, kind, path)
    prices = fields.get("catalog_cloud_instances")
    if prices is not None:
        fields["extra_instances"] = _load_prices(where, prices)
    return Config(**fields)


def _diagnosis(where: str, body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: [diagnosis] must be a table")
    try:
        return check_overrides(body)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


def _load_prices(where: str, path: Path) -> Mapping[str, Any]:
    try:
        return parse_instances(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: catalog.cloud_instances: cannot read {path}: {e}") from None
    except ValueError as e:
        raise ConfigError(f"{where}: catalog.cloud_instances: {e}") from None


# Copies of computewatch.carbon's names (a higher layer); tests/carbon checks them.
_CHOICES: dict[str, tuple[str, ...]] = {
    "carbon_provider": ("electricitymaps", "watttime", "uk-carbon-intensity", "file"),
    "sci_unit": ("run", "step", "1m-tokens", "1k-inferences"),
}

TRACKERS = ("mlflow", "wandb", "tensorboard", "neptune")
"""The experiment trackers ``[log_to] trackers`` (and ``--log-to``) accept."""


def _check(where: str, key: str, value: Any, kind: str, path: Path | None) -> Any:
    bad = f"{where}: {key} = {value!r}"
    if kind == "trackers":
        if not isinstance(value, list) or not all(
            isinstance(v, str) and v.strip().lower() in TRACKERS for v in value
        ):
            raise ConfigError(f"{bad} must be a list of tracker names: {', '.join(TRACKERS)}")
        return tuple(dict.fromkeys(v.strip().lower() for v in value))
    if kind == "names":
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"{bad} must be a list of non-empty strings")
        return tuple(v.strip() for v in value)
    if kind == "table":  # its entries are checked by the feature that reads them
        if not isinstance(value, dict):
            raise ConfigError(f"{bad} must be a table")
        return value
    if kind == "secret":
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: {key} must be a non-empty string (value not shown)")
        return value.strip()
    if kind in _CHOICES:
        choices = _CHOICES[kind]
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ConfigError(f"{bad} must be one of {', '.join(choices)}")
        return value.strip().lower()
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{bad} must be true or false")
        return value
    if kind in ("str", "path", "url", "precision"):
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{bad} must be a non-empty string")
        # checked here, not when the first run fails to account
        if kind == "url" and urllib.parse.urlsplit(value.strip()).scheme not in ("http", "https"):
            raise ConfigError(f"{bad} must be an http or https URL")
        if kind == "precision" and value.strip() not in PRECISIONS:
            raise ConfigError(f"{bad} must be one of {', '.join(PRECISIONS)}")
        if kind == "path":
            p = Path(value).expanduser()
            if not p.is_absolute() and path is not None:
                p = path.parent / p
            return p
        return value.strip()
    try:
        return check_number(key, value, NUMBERS[key])
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
