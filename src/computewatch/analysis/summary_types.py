"""The run summary's shape: one TypedDict per section, as the producers emit them.

At run time a summary stays a plain dict (it is stored as JSON and printed by ``show --json``);
these types let mypy check every reader against what ``build_summary``, the accounting and the
diagnosis write. The fields are documented in docs/summary.md. Keys marked ``NotRequired`` are
absent in some summaries (a section computed only when its inputs exist, or added at the end of
a run); ``X | None`` keys are always there and null when unknown.

Without ``from __future__ import annotations``: every run loads this module, and a TypedDict
compiles each string annotation into a ForwardRef (330 fields, half the module's import time);
the few names defined later or imported for type checking only are quoted.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast, final

from computewatch.carbon.sci import SciScore
from computewatch.goodput.model import RunTimeJson
from computewatch.records import Figure

if TYPE_CHECKING:  # the record's type only: the environment module loads git and metadata
    from computewatch.sources.environment import Environment

__all__ = [
    "AccountedSection",
    "Accounting",
    "AccountingFailure",
    "AtStakeJson",
    "CarbonIntensity",
    "CarbonSection",
    "CostPerUnit",
    "CostSection",
    "CpuEnergyFigure",
    "CpuModelInputs",
    "CpuStats",
    "DiagnosedRun",
    "DiagnosisReport",
    "DiagnosisSection",
    "DiskStats",
    "Distribution",
    "EnergyComponents",
    "EnergySection",
    "EvidenceJson",
    "FindingJson",
    "FlopThreshold",
    "FlopsDevice",
    "FlopsSection",
    "Forecast",
    "GpuDevice",
    "GpuStats",
    "HostInfo",
    "Hyperparameters",
    "JointSavingJson",
    "LiveAccounting",
    "MemoryStats",
    "NetworkStats",
    "PhaseStats",
    "PhaseTime",
    "Pue",
    "RankRow",
    "RankStats",
    "RequestFigures",
    "RequestStats",
    "RunSummary",
    "SampleStats",
    "SavingJson",
    "Severity",
    "StepStats",
    "StepTimes",
    "TimeRangeJson",
    "UnaccountedTime",
    "energy_components",
    "stored_diagnosis",
    "stored_summary",
]


# -- what the run knew about its machine ----------------------------------------------------


class GpuDevice(TypedDict, total=False):
    """One monitored device in ``host.gpus`` (``sources.gpu_common.GpuDevice`` as a dict)."""

    index: int
    uuid: str
    name: str
    model: str | None
    memory_total_bytes: int | None
    power_limit_watts: float | None
    mig_parent_uuid: str | None
    mig_index: int | None
    simulated: bool
    capabilities: dict[str, str | bool]


class CpuEnergySource(TypedDict):
    source: str | None  # "rapl", or None when no counter is readable
    why: str | None


class HostInfo(TypedDict, total=False):
    """The run's host facts (``sources.host.host_facts`` plus what the monitor added); a
    ``track()`` run or an older one may lack some."""

    hostname: str
    cpu_model: str | None
    logical_cpus: int | None
    allowed_cpus: int | None
    allowed_cores: float
    memory_bytes: int | None
    os: str
    python: str
    cgroup_path: str | None
    cgroup_cpu_limit_cores: float | None
    cgroup_memory_max_bytes: int | None
    cpu_energy: CpuEnergySource
    gpu_backend: str
    gpu_all: bool
    gpu_skipped: dict[str, str]
    gpus: list[GpuDevice]
    gpus_used: list[str]


# -- measured sections ----------------------------------------------------------------------


class CpuStats(TypedDict):
    seconds_total: float | None
    utilization_mean: float | None
    utilization_max: float | None
    allowed_cores: float
    method: NotRequired[str | None]
    """Which counter gave ``seconds_total``: "cgroup" (the run's own cgroup v2, which counts
    double-forked daemons too) or "process tree"; absent from summaries stored before it."""


class MemoryStats(TypedDict):
    peak_rss_bytes: int | None
    peak_host_used_bytes: int | None
    host_total_bytes: int | None


class DiskStats(TypedDict):
    read_bytes: int | None
    write_bytes: int | None
    host_read_bytes: int | None
    host_write_bytes: int | None


class NetworkStats(TypedDict):
    recv_bytes: int | None
    sent_bytes: int | None
    scope: str  # "host": procfs has no per-process network counters


class GpuStats(TypedDict):
    """One GPU the run used (every monitored one with ``--all-gpus``)."""

    uuid: str
    index: int | None
    name: str | None
    model: str | None
    simulated: bool
    mig_parent_uuid: str | None
    scope: str  # "used by the run" or "device"
    utilization_mean: NotRequired[float | None]
    power_mean_watts: NotRequired[float | None]
    sm_active_mean: NotRequired[float | None]  # GPM ratios: Hopper and newer
    tensor_active_mean: NotRequired[float | None]
    sm_occupancy_mean: NotRequired[float | None]
    dram_active_mean: NotRequired[float | None]
    hbm_bandwidth_mean: NotRequired[float | None]  # TPU chips: HBM bandwidth over its peak
    memory_peak_bytes: NotRequired[int | None]
    memory_total_bytes: NotRequired[int | None]
    process_memory_peak_bytes: NotRequired[int | None]
    energy_joules: float | None
    energy_method: str | None  # "counter" or "polled"
    throttle_seconds: dict[str, float]
    share: float
    share_rule: str


class StepTimes(TypedDict):
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


class StepStats(TypedDict):
    """``count`` alone when no step was reported."""

    count: int
    processes: NotRequired[int]
    step_time_seconds: NotRequired[StepTimes]
    steps_per_second: NotRequired[float | None]
    samples_total: NotRequired[float]
    samples_per_second: NotRequired[float | None]
    tokens_total: NotRequired[float]
    tokens_per_second: NotRequired[float | None]


class Distribution(TypedDict):
    """mean, p50 and p90 of a set of seconds (null when the set is empty)."""

    mean: float | None
    p50: float | None
    p90: float | None


class PhaseTime(TypedDict):
    seconds: float | None
    self_seconds: float | None
    share: float | None
    steps: int
    per_step_seconds: Distribution
    accel_seconds: float | None
    within: str | None


class UnaccountedTime(TypedDict):
    seconds: float | None
    share: float | None


class PhaseStats(TypedDict):
    steps: int
    step_seconds: float | None
    by_name: dict[str, PhaseTime]
    unaccounted: UnaccountedTime
    outside_steps_seconds: float | None


class RankRow(TypedDict):
    rank: int
    pids: list[int]
    steps: int
    step_time_seconds: Distribution
    step_seconds: float | None
    compute_seconds: float | None
    compute_seconds_per_step: float | None
    comm_seconds: float | None
    comm_share: float | None


class RankStats(TypedDict):
    count: int
    world_size: int | None
    ranks: list[RankRow]
    slowest_rank: int | None
    load_imbalance: float | None
    comm_share: float | None
    comm_phases: list[str]


class RequestFigures(TypedDict):
    """Served requests of one kind (or of all kinds)."""

    count: int
    errors: int
    latency_seconds: StepTimes
    span_seconds: float | None
    requests_per_second: float | None
    concurrency_mean: float | None
    tokens_in_total: float | None
    tokens_out_total: float | None
    tokens_per_second: float | None


class RequestStats(RequestFigures):
    """The ``requests`` section: by name when several kinds were served; with energy and cost
    per request once accounted."""

    by_name: NotRequired[dict[str, RequestFigures]]
    energy_per_request: NotRequired[Figure | None]
    energy_per_1m_tokens: NotRequired[Figure | None]
    cost_per_request: NotRequired[Figure | None]
    cost_per_1m_tokens: NotRequired[Figure | None]


class SampleStats(TypedDict):
    count: int
    interval_seconds: float
    series: int
    data_until: str | None


# -- accounting -----------------------------------------------------------------------------


class CpuModelInputs(TypedDict):
    """The numbers of the CPU power model, for anyone checking the figure."""

    tdp_watts: float
    idle_fraction: float
    duration_seconds: float
    share: float
    cpu_seconds: float
    logical_cpus: float
    mean_watts: float


class CpuEnergyFigure(Figure):
    """CPU energy: measured by RAPL, or modeled (then with the model's ``inputs``)."""

    inputs: NotRequired[CpuModelInputs]


class EnergyComponents(TypedDict):
    gpu: NotRequired[Figure]
    cpu: CpuEnergyFigure
    memory: Figure
    server: NotRequired[Figure]


class Pue(TypedDict):
    value: float
    low: float
    high: float
    source: str


class DeviceHours(TypedDict):
    """Accelerator time charged to the run: devices x hours x the run's share of each."""

    gpu_hours: float
    tpu_hours: float


class EnergySection(TypedDict):
    components: EnergyComponents
    device: Figure  # the components' sum, kWh
    facility: Figure  # device x PUE, kWh
    pue: Pue
    attribution: list[str]
    device_hours: NotRequired[DeviceHours]  # with accelerators


class CarbonIntensity(TypedDict):
    g_per_kwh: float
    region: str
    name: str
    how: str
    method: str
    source: str
    year: int | None


class HourlyCarbonRow(TypedDict):
    hour: str  # ISO 8601 UTC start of the clock hour
    kwh: float  # facility energy in that hour
    g_per_kwh: float  # mean intensity applied
    g: float


class HourlyCarbon(TypedDict):
    """How the operational carbon was summed over time (docs/carbon.md)."""

    provider: str
    region: str
    resolution_seconds: int | None
    kind: str  # "history" | "forecast"
    covered_ratio: float  # share of the run's energy that hourly data covered
    profile: str  # how the energy was spread over time
    hours: list[HourlyCarbonRow]


class CarbonSection(TypedDict):
    operational: Figure
    intensity: CarbonIntensity
    embodied: NotRequired[Figure]
    total: Figure
    hourly: NotRequired[HourlyCarbon]  # with a [carbon] provider that answered
    sci: NotRequired[SciScore]  # ISO/IEC 21031 Software Carbon Intensity


class CostPerUnit(TypedDict, total=False):
    usd_per_step: float
    usd_per_1k_samples: float
    usd_per_1m_tokens: float


class CostSection(TypedDict):
    compute: Figure | None
    electricity: Figure | None
    total: Figure
    per_unit: CostPerUnit


class FlopThreshold(TypedDict):
    flop: float
    name: str
    crossed: bool
    fraction: float
    approached: bool


class FlopsDevice(TypedDict):
    uuid: str | None
    model: str
    precision: str
    peak_flop_per_second: float
    active_seconds: float
    simulated: bool


class FlopsSection(Figure):
    """The ``flops`` section. The hardware-time estimate (``method: estimated``) has
    ``devices`` and, when a device was in the catalog, ``pf_days`` and ``thresholds``; the
    program's own count (``method: counted``) has the counted keys below, MFU, and the
    estimate alongside in ``hardware_estimate``."""

    devices: NotRequired[list[FlopsDevice]]
    pf_days: NotRequired[float]
    thresholds: NotRequired[list[FlopThreshold]]
    steps_with_flops: NotRequired[int]
    step_time_seconds: NotRequired[float | None]
    flops_per_second: NotRequired[Figure]
    peak_flops: NotRequired[float | None]
    precision: NotRequired[str | None]
    mfu: NotRequired[Figure]
    hfu: NotRequired[Figure]
    hardware_estimate: "NotRequired[FlopsSection]"


class Forecast(TypedDict):
    total_steps: int
    steps_done: int
    complete: bool
    note: NotRequired[str]
    wall_seconds_at_completion: NotRequired[Figure]
    energy_kwh: NotRequired[Figure]
    carbon_gco2e: NotRequired[Figure]
    cost_usd: NotRequired[Figure]
    flops: NotRequired[Figure]


@final  # so that `"energy" in sections` tells the two apart
class Accounting(TypedDict):
    """What ``accounting.engine.account`` adds to a summary."""

    energy: EnergySection
    carbon: CarbonSection
    cost: CostSection
    flops: FlopsSection
    requests: NotRequired[RequestStats]  # the summary's requests, with per-request figures
    forecast: NotRequired[Forecast]  # with a step target


class LiveAccounting(TypedDict):
    """What ``accounting.engine.live_accounting`` adds to a running run's summary in a live
    upload: its FLOPs so far and, with a step target, their forecast at completion."""

    flops: FlopsSection
    forecast: NotRequired[Forecast]


AccountedSection = EnergySection | CarbonSection | CostSection | FlopsSection | Forecast
"""Any one of the summary's accounting sections (the report shows each as a table)."""


@final
class AccountingFailure(TypedDict):
    """What ``accounted`` adds instead when the accounting failed: the summary's notes, and why."""

    notes: list[str]


# -- diagnosis ------------------------------------------------------------------------------
# The JSON form of diagnosis/findings.py's records (their ``as_dict``), as stored in a summary
# and printed by ``computewatch diagnose --json``; the views read only this form.

Severity = Literal["high", "medium", "low"]
"""How much of the run a finding puts at stake (diagnosis/findings.py ``severity_for``)."""


class TimeRangeJson(TypedDict):
    """A stretch of the run the evidence comes from, in seconds from its start."""

    start_seconds: float
    end_seconds: float


class EvidenceJson(TypedDict):
    """What a rule saw: sentences quoting the numbers, the numbers (SI units) by name, and the
    stretches of the run they come from."""

    lines: list[str]
    numbers: dict[str, float | int | str | None]
    time_ranges: list[TimeRangeJson]


class AtStakeJson(TypedDict):
    """Wall-clock seconds of the allocation the finding costs, and those seconds at the run's
    price (null without a price, or when nothing measurable is at stake)."""

    seconds: float | None
    usd: float | None


class SavingJson(TypedDict):
    """What applying a finding's suggestion (``fix``) is expected to save the run: wall-clock
    seconds of the whole allocation, their share of the run, a range (``low_seconds`` to
    ``high_seconds``), that time at the run's price and energy (null without a price or an energy
    figure), and what the model assumes. ``part`` names the time the fix shortens (findings on
    the same part are combined by their largest, never summed) and ``part_seconds`` what the run
    spent on it."""

    seconds: float
    fraction: float | None
    low_seconds: float
    high_seconds: float
    usd: float | None
    kwh: float | None
    fix: str
    assumes: str
    part: str
    part_seconds: float | None


class JointSavingJson(TypedDict):
    """The findings' savings combined as if every fix were applied (``diagnose`` prints it):
    per part the largest saving, at most what the run spent on the part, and parts composed
    multiplicatively (each fix shortens what the others left), so it never exceeds the run."""

    seconds: float
    fraction: float | None
    low_seconds: float
    high_seconds: float
    usd: float | None
    kwh: float | None
    findings: list[str]


class FindingJson(TypedDict):
    """One bottleneck; ``id`` names the rule (``data_starvation``, ``step_regression`` ...).
    ``saving`` is what its fix is expected to win; ``at_stake`` the symptom's own time (how
    long the run showed it: an upper bound on any saving, not a saving)."""

    id: str
    title: str
    severity: Severity
    saving: SavingJson
    at_stake: AtStakeJson
    evidence: EvidenceJson
    suggestion: str


class DiagnosisSection(TypedDict):
    """The summary's ``diagnosis``: findings ranked, most at stake first; the rules applied,
    those that did not apply (and why) and those that failed. When the diagnosis itself
    failed, ``findings`` is empty and ``error`` says why (the other lists are then absent)."""

    schema_version: int
    findings: list[FindingJson]
    saving: NotRequired[JointSavingJson]  # every fix applied together (absent when stored older)
    goodput: NotRequired[RunTimeJson]  # the run's time as goodput sees it (stored at its end)
    checked: NotRequired[list[str]]
    not_applicable: NotRequired[dict[str, str]]
    failed: NotRequired[dict[str, str]]
    error: NotRequired[str]
    note: NotRequired[str]  # from ``diagnose`` only: why it shows the diagnosis stored at the end


class DiagnosedRun(TypedDict):
    """Which run ``computewatch diagnose`` looked at."""

    id: str
    name: str | None
    status: str
    duration_seconds: float | None


class DiagnosisReport(DiagnosisSection):
    """What ``computewatch diagnose`` prints (``--json``): the run, its diagnosis (with a
    ``note`` when it is the one stored at the run's end) and the thresholds applied."""

    run: DiagnosedRun
    thresholds: dict[str, float]


def stored_diagnosis(raw: object) -> DiagnosisSection | None:
    """A ``diagnosis`` section read back from the store (JSON) as the typed record, or None
    when ``raw`` is not a mapping. Not validated further: the views read a stored section
    defensively (a finding that is not a mapping is skipped, a missing list is empty)."""
    return cast(DiagnosisSection, raw) if isinstance(raw, dict) else None


# -- the summary ----------------------------------------------------------------------------

Hyperparameters = dict[str, Any]
"""The run's hyperparameters as the program recorded them (``run.config(...)`` of a tracked run,
the framework integrations; secrets redacted): a free mapping of the user's own names to any
JSON values, nested mappings included. computewatch reads no key of it: it shows and compares."""


class RunSummary(TypedDict):
    """A run's summary: what ``build_summary`` computes from the store, plus the accounting
    and the diagnosis added when the run ends (absent while it runs, or when they failed)."""

    schema_version: int
    id: str
    name: str | None
    tags: dict[str, str]
    command: list[str]
    cwd: str | None
    exit_code: int | None
    status: str
    started_at: str | None
    ended_at: str | None
    duration_seconds: float | None
    host: HostInfo
    cpu: CpuStats
    memory: MemoryStats
    disk: DiskStats
    network: NetworkStats
    gpus: list[GpuStats]
    steps: StepStats
    phases: PhaseStats | None
    ranks: RankStats | None
    requests: RequestStats | None
    samples: SampleStats
    notes: list[str]
    energy: NotRequired[EnergySection]
    carbon: NotRequired[CarbonSection]
    cost: NotRequired[CostSection]
    flops: NotRequired[FlopsSection]
    forecast: NotRequired[Forecast]
    diagnosis: NotRequired[DiagnosisSection]  # diagnosis/engine.py ``Diagnosis.as_dict``
    # the reproducibility record (analysis/repro.py adds them when reading a stored run)
    environment: "NotRequired[Environment]"
    config: NotRequired[Hyperparameters]


def energy_components(energy: EnergySection) -> list[tuple[str, Figure]]:
    """The energy components that were computed, by name, in the order the engine adds them."""
    c = energy["components"]
    named = [("gpu", c.get("gpu")), ("cpu", c["cpu"]), ("memory", c["memory"])]
    named.append(("server", c.get("server")))
    return [(name, fig) for name, fig in named if fig is not None]


def stored_summary(raw: Mapping[str, Any]) -> RunSummary:
    """A summary read back from the store (JSON) as the typed record. Not validated: one stored
    by an older version may lack a section added since, which readers treat as absent."""
    return cast(RunSummary, raw)
