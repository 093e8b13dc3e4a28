"""The exported metric families: name, type and help text of every name the agent and
``computewatch run --prometheus`` produce (docs/metrics.md, "Prometheus export").

The names and labels of the contract are fixed here once, so the exposition (HELP and TYPE
lines), the documentation and the tests read one table. Counters carry ``_total`` in their
name, as exported. :func:`gpu_samples` maps one GPU's readings to its exported samples, for
both producers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from computewatch.catalog.clock_events import CLOCK_EVENT_REASONS, decode_clock_events
from computewatch.catalog.tpu import accelerator_kind
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels

__all__ = [
    "ENERGY_METHODS",
    "FAMILIES",
    "POWER_REASONS",
    "THERMAL_REASONS",
    "Family",
    "GpuCounters",
    "counter_delta",
    "device_labels",
    "family",
    "gpu_samples",
    "gpu_value_key",
    "reading_energy_method",
    "with_device",
]

MetricType = Literal["gauge", "counter", "info"]


@dataclass(frozen=True, slots=True)
class Family:
    """One exported family: its full sample name (``_total`` for counters), type and help."""

    name: str
    type: MetricType
    help: str


_GPU = "gpu, gpu_index, gpu_model, accelerator, node"
_JOB = "job, user, team, node"

FAMILIES: tuple[Family, ...] = (
    # -- per GPU ---------------------------------------------------------------------------------
    Family(
        "computewatch_gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period during which a kernel ran on the GPU (0-1).",
    ),
    Family("computewatch_gpu_memory_used_bytes", "gauge", "GPU memory in use, bytes."),
    Family("computewatch_gpu_memory_total_bytes", "gauge", "GPU memory size, bytes."),
    Family(
        "computewatch_gpu_memory_free_bytes",
        "gauge",
        "GPU memory free, bytes (NVML's free: total - used - reserved by the driver).",
    ),
    Family("computewatch_gpu_power_watts", "gauge", "GPU board power, watts."),
    Family("computewatch_gpu_temperature_celsius", "gauge", "GPU temperature, degrees Celsius."),
    Family(
        "computewatch_gpu_memory_temperature_celsius",
        "gauge",
        "GPU memory (HBM) temperature, degrees Celsius, where the board has the sensor.",
    ),
    Family(
        "computewatch_gpu_energy_joules_total",
        "counter",
        "GPU energy since the exporter started, joules; label method: counter (the driver's "
        "energy counter), polled (polled power integrated) or modeled (TPUs: power modelled "
        "from the duty cycle, docs/tpu.md).",
    ),
    Family(
        "computewatch_tpu_hbm_bandwidth_utilization_ratio",
        "gauge",
        "TPU chips only: HBM bandwidth in use over the chip's peak (0-1), from libtpu.",
    ),
    Family(
        "computewatch_gpu_throttled",
        "gauge",
        "1 while the GPU's clocks are held down for the reason in the label (thermal, power).",
    ),
    Family(
        "computewatch_gpu_allocated",
        "gauge",
        "1 while some job's processes hold memory on the GPU.",
    ),
    # -- per GPU, the DCGM exporter's fields (docs/observability.md maps each one) ------------
    Family(
        "computewatch_gpu_sm_active_ratio",
        "gauge",
        "Fraction of time at least one warp was resident on an SM, averaged over SMs (0-1); "
        "label method: gpm (Hopper and later) or nvml_process_samples (summed per-process "
        "SM samples).",
    ),
    Family(
        "computewatch_gpu_sm_occupancy_ratio",
        "gauge",
        "Resident warps over the SMs' maximum, averaged over time (0-1; GPM).",
    ),
    Family(
        "computewatch_gpu_tensor_active_ratio",
        "gauge",
        "Fraction of time a tensor-core pipe was active (0-1; GPM).",
    ),
    Family(
        "computewatch_gpu_graphics_engine_active_ratio",
        "gauge",
        "Fraction of time any compute or graphics work was active on the GPU (0-1; GPM "
        "GRAPHICS_UTIL, DCGM's GR_ENGINE_ACTIVE).",
    ),
    Family(
        "computewatch_gpu_dram_active_ratio",
        "gauge",
        "Fraction of time device memory was being read or written (0-1); label method: gpm "
        "(DRAM bandwidth utilization) or nvml_sampled (NVML's memory utilization rate).",
    ),
    Family("computewatch_gpu_sm_clock_hertz", "gauge", "SM clock, hertz."),
    Family("computewatch_gpu_memory_clock_hertz", "gauge", "Memory clock, hertz."),
    Family("computewatch_gpu_power_limit_watts", "gauge", "Enforced power limit, watts."),
    Family(
        "computewatch_gpu_throttle_seconds_total",
        "counter",
        "Seconds the clock-event reason in label reason was active (polled each tick), since "
        "the exporter started.",
    ),
    Family(
        "computewatch_gpu_xid_errors_total",
        "counter",
        "XID error events the driver reported since the exporter started.",
    ),
    Family(
        "computewatch_gpu_xid_last_code",
        "gauge",
        "Code of the last XID error the driver reported since the exporter started (0: none).",
    ),
    Family(
        "computewatch_gpu_pcie_replays_total",
        "counter",
        "PCIe packets the GPU's link retransmitted since the driver loaded.",
    ),
    Family(
        "computewatch_gpu_remapped_rows_total",
        "counter",
        "Memory rows remapped over the GPU's life, by label type: correctable, uncorrectable "
        "(the errors that caused them; Ampere and later).",
    ),
    Family(
        "computewatch_gpu_row_remap_pending",
        "gauge",
        "1 while a row remapping waits for a GPU reset, else 0.",
    ),
    Family(
        "computewatch_gpu_row_remap_failure",
        "gauge",
        "1 once a row remapping has failed (the GPU needs service), else 0.",
    ),
    Family(
        "computewatch_gpu_encoder_utilization_ratio",
        "gauge",
        "Fraction of NVML's sampling period the video encoder was busy (0-1).",
    ),
    Family(
        "computewatch_gpu_decoder_utilization_ratio",
        "gauge",
        "Fraction of NVML's sampling period the video decoder was busy (0-1).",
    ),
    Family(
        "computewatch_gpu_ecc_errors_total",
        "counter",
        "ECC memory errors since the driver loaded (volatile), by label type: corrected, "
        "uncorrected.",
    ),
    Family(
        "computewatch_gpu_pcie_transmit_bytes_per_second",
        "gauge",
        "PCIe bytes sent by the GPU per second (NVML's 20 ms window).",
    ),
    Family(
        "computewatch_gpu_pcie_receive_bytes_per_second",
        "gauge",
        "PCIe bytes received by the GPU per second (NVML's 20 ms window).",
    ),
    Family(
        "computewatch_gpu_nvlink_transmit_bytes_total",
        "counter",
        "NVLink bytes sent over all links since the driver loaded.",
    ),
    Family(
        "computewatch_gpu_nvlink_receive_bytes_total",
        "counter",
        "NVLink bytes received over all links since the driver loaded.",
    ),
    # -- per job ---------------------------------------------------------------------------------
    Family(
        "computewatch_job_info",
        "info",
        "A job seen on this node (value 1), with its kind, account, namespace, pod and project.",
    ),
    Family(
        "computewatch_job_cpu_seconds_total",
        "counter",
        "CPU seconds used by the job's processes since the exporter first saw them.",
    ),
    Family(
        "computewatch_job_memory_bytes", "gauge", "Resident memory of the job's processes, bytes."
    ),
    Family("computewatch_job_processes", "gauge", "Live processes of the job."),
    Family(
        "computewatch_job_gpu_seconds_total",
        "counter",
        "GPU-seconds held by the job: each GPU its processes hold counts one per second.",
    ),
    Family(
        "computewatch_job_gpu_busy_seconds_total",
        "counter",
        "Sum over held GPUs of the job's share of utilization times seconds.",
    ),
    Family(
        "computewatch_job_gpu_idle_seconds_total",
        "counter",
        "GPU-seconds held by the job while the GPU's utilization was below 0.05.",
    ),
    Family(
        "computewatch_job_gpu_memory_used_bytes",
        "gauge",
        "GPU memory held by the job's processes, bytes.",
    ),
    Family(
        "computewatch_job_energy_joules_total",
        "counter",
        "Energy charged to the job, joules: its share of each GPU's energy plus its CPU-time "
        "share of CPU energy (RAPL when readable, else modeled from TDP).",
    ),
    Family(
        "computewatch_job_gpu_sm_active_ratio",
        "gauge",
        "The job's processes' SM activity on one GPU (label gpu), from NVML's per-process SM "
        "samples (method nvml_process_samples), 0-1.",
    ),
    Family(
        "computewatch_job_gpu_xid_errors_total",
        "counter",
        "XID errors reported by GPUs while the job's processes held them.",
    ),
    Family("computewatch_job_steps_total", "counter", "Training steps the job reported."),
    Family(
        "computewatch_job_step_time_seconds_total",
        "counter",
        "Sum of the durations of the job's reported steps, seconds.",
    ),
    Family(
        "computewatch_job_flops_total",
        "counter",
        "Floating-point operations of the job (method: counted or estimated).",
    ),
    # -- per job, training detection (agent with detect = true; docs/detection.md) --------------
    Family(
        "computewatch_job_training_probability",
        "gauge",
        "The detector's probability that the job is training, from its GPU series (0-1).",
    ),
    Family(
        "computewatch_job_detected_training",
        "gauge",
        "1 when the detector labels the job training, else 0 (inference, other or uncertain).",
    ),
    Family(
        "computewatch_job_detection_uncertain",
        "gauge",
        "1 when the detector cannot tell (too short or sparse, between its calibrated bounds, "
        "or a constant load), else 0.",
    ),
    Family(
        "computewatch_job_review_flag",
        "gauge",
        "1 when the job's hardware compute ceiling could reach the review threshold "
        "([governance] detect_review_flop) and it is not confidently not training.",
    ),
    Family(
        "computewatch_job_undeclared_training",
        "gauge",
        "1 when the job is labelled training and declares no model (computewatch run --model).",
    ),
    Family(
        "computewatch_job_cap_breach",
        "gauge",
        "1 when the server's account check (label account) denies the undeclared training "
        "job's projected use, 0 when it allows it.",
    ),
    Family(
        "computewatch_agent_detection_duration_seconds",
        "gauge",
        "Seconds the agent's last training-detection round took (off the sampling thread).",
    ),
    # -- node ------------------------------------------------------------------------------------
    Family(
        "computewatch_host_cpu_utilization_ratio",
        "gauge",
        "Fraction of the node's CPU time spent busy over the last tick (0-1).",
    ),
    Family("computewatch_host_memory_used_bytes", "gauge", "MemTotal - MemAvailable, bytes."),
    Family("computewatch_host_memory_total_bytes", "gauge", "MemTotal, bytes."),
    Family("computewatch_host_swap_used_bytes", "gauge", "SwapTotal - SwapFree, bytes."),
    Family(
        "computewatch_filesystem_avail_bytes",
        "gauge",
        "Bytes available to unprivileged users on the filesystem at mountpoint.",
    ),
    Family("computewatch_filesystem_size_bytes", "gauge", "Size of the filesystem, bytes."),
    Family(
        "computewatch_cpu_energy_joules_total",
        "counter",
        "CPU package and DRAM energy from RAPL since the exporter started, joules.",
    ),
    # -- optional, per process (off by default) ---------------------------------------------------
    Family(
        "computewatch_process_cpu_seconds_total",
        "counter",
        "CPU seconds of one noticeable process (only with per-process export enabled).",
    ),
    Family(
        "computewatch_process_memory_bytes",
        "gauge",
        "Resident memory of one noticeable process (only with per-process export enabled).",
    ),
    Family(
        "computewatch_process_gpu_memory_used_bytes",
        "gauge",
        "GPU memory of one process on one GPU (only with per-process export enabled).",
    ),
    # -- the exporter itself ---------------------------------------------------------------------
    Family(
        "computewatch_agent_tick_duration_seconds",
        "gauge",
        "How long the exporter's last sampling tick took, seconds.",
    ),
    Family(
        "computewatch_agent_ticks_total",
        "counter",
        "Sampling ticks done since the exporter started.",
    ),
    Family(
        "computewatch_agent_source_up",
        "gauge",
        "1 when the source (label source) was read in the last tick, 0 when it is unavailable.",
    ),
)

_BY_NAME = {f.name: f for f in FAMILIES}


def device_labels(
    uuid: str, index: object, model: object, node: str, *, simulated: bool = False
) -> Labels:
    """The labels of one device's series, for both producers: ``gpu`` (its UUID, a TPU chip's
    ``TPU-<PCI address>``), ``gpu_index`` (the index, which DCGM's exporter calls ``gpu``:
    DCGM dashboards join on it), ``gpu_model``, ``accelerator`` (``gpu`` or ``tpu``, from the
    device), ``node``, and ``simulated="true"`` for a fake or replayed device."""
    pairs = {
        "gpu": uuid,
        "gpu_index": "" if index is None else str(index),
        "gpu_model": "" if model is None else str(model),
        "accelerator": accelerator_kind(uuid, model).lower(),
        "node": node,
    }
    if simulated:
        pairs["simulated"] = "true"
    return tuple(sorted(pairs.items()))


def with_device(lbl: Labels, device: Labels | None, uuid: str, **more: str) -> Labels:
    """A job's or a process's labels (``lbl``) for one device: its ``gpu`` and ``gpu_index``
    (from ``device``, its :func:`device_labels`; the UUID alone when unknown) and ``more``."""
    d = dict(device or ())
    pairs = dict(lbl)
    pairs["gpu"] = d.get("gpu", uuid)
    if d.get("gpu_index"):
        pairs["gpu_index"] = d["gpu_index"]
    pairs.update(more)
    return tuple(sorted(pairs.items()))


GPU_LABELS = _GPU
JOB_LABELS = _JOB


def family(name: str) -> Family:
    """The family of an exported sample name; unknown names are gauges with a generic help
    (a producer may add families beyond the contract)."""
    f = _BY_NAME.get(name)
    if f is not None:
        return f
    if name.endswith("_total"):
        return Family(name, "counter", f"{name} (computewatch).")
    return Family(name, "gauge", f"{name} (computewatch).")


# -- one GPU's samples -------------------------------------------------------------------------

# Clock-event reasons (NVML) that mean the clocks are held down, by kind.
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})

_GPU_GAUGES = (  # reading name, exported name
    ("gpu_utilization_ratio", "computewatch_gpu_utilization_ratio"),
    ("gpu_memory_used_bytes", "computewatch_gpu_memory_used_bytes"),
    ("gpu_memory_total_bytes", "computewatch_gpu_memory_total_bytes"),
    ("gpu_memory_free_bytes", "computewatch_gpu_memory_free_bytes"),
    ("gpu_power_watts", "computewatch_gpu_power_watts"),
    ("gpu_temperature_celsius", "computewatch_gpu_temperature_celsius"),
    ("gpu_memory_temperature_celsius", "computewatch_gpu_memory_temperature_celsius"),
    ("gpu_sm_clock_hertz", "computewatch_gpu_sm_clock_hertz"),
    ("gpu_memory_clock_hertz", "computewatch_gpu_memory_clock_hertz"),
    ("gpu_power_limit_watts", "computewatch_gpu_power_limit_watts"),
    ("gpu_xid_errors_total", "computewatch_gpu_xid_errors_total"),
    ("gpu_xid_last_code", "computewatch_gpu_xid_last_code"),
    ("gpu_pcie_replays_total", "computewatch_gpu_pcie_replays_total"),
    ("gpu_row_remap_pending", "computewatch_gpu_row_remap_pending"),
    ("gpu_row_remap_failure", "computewatch_gpu_row_remap_failure"),
    ("gpu_encoder_utilization_ratio", "computewatch_gpu_encoder_utilization_ratio"),
    ("gpu_decoder_utilization_ratio", "computewatch_gpu_decoder_utilization_ratio"),
    ("gpu_pcie_transmit_bytes_per_second", "computewatch_gpu_pcie_transmit_bytes_per_second"),
    ("gpu_pcie_receive_bytes_per_second", "computewatch_gpu_pcie_receive_bytes_per_second"),
    ("gpu_nvlink_transmit_bytes_total", "computewatch_gpu_nvlink_transmit_bytes_total"),
    ("gpu_nvlink_receive_bytes_total", "computewatch_gpu_nvlink_receive_bytes_total"),
    ("tpu_hbm_bandwidth_utilization_ratio", "computewatch_tpu_hbm_bandwidth_utilization_ratio"),
)
# GPM's ratios (Hopper and later), exported with method="gpm".
_GPM_GAUGES = (
    ("gpu_graphics_engine_active_ratio", "computewatch_gpu_graphics_engine_active_ratio"),
    ("gpu_sm_active_ratio", "computewatch_gpu_sm_active_ratio"),
    ("gpu_sm_occupancy_ratio", "computewatch_gpu_sm_occupancy_ratio"),
    ("gpu_tensor_active_ratio", "computewatch_gpu_tensor_active_ratio"),
    ("gpu_dram_active_ratio", "computewatch_gpu_dram_active_ratio"),
)
_ECC_TYPES = ("corrected", "uncorrected")
_REMAP_TYPES = ("correctable", "uncorrectable")
_ALL_REASONS = tuple(name for _, name in CLOCK_EVENT_REASONS)


ENERGY_METHODS = ("counter", "polled", "modeled")
"""How a GPU's energy was obtained (label ``method``): the driver's energy counter, polled power
integrated over time, or power modelled from a catalog (TPUs)."""


def reading_energy_method(name: str, labels: Mapping[str, str]) -> str | None:
    """The ``method`` of a ``gpu_energy_joules_total`` reading, else None."""
    if name != "gpu_energy_joules_total":
        return None
    method = labels.get("method")
    return method if method in ENERGY_METHODS else None


def gpu_value_key(name: str, labels: Mapping[str, str]) -> str:
    """The key of one GPU reading in the per-GPU ``values`` that :func:`gpu_samples` takes:
    the reading's name, with the ECC error type appended (``gpu_ecc_errors_total:corrected``)
    so that the two ECC counters of a GPU do not overwrite each other (nor its two remapped-row
    counters)."""
    if name in ("gpu_ecc_errors_total", "gpu_remapped_rows_total"):
        return f"{name}:{labels.get('type', '')}"
    return name


class GpuCounters:
    """Counters the exporter derives from polled gauges, kept between ticks: seconds each
    clock-event reason was active, per GPU (the mask is polled; a reason active at a tick is
    counted for the interval before it, the way DCGM's violation counters sample)."""

    def __init__(self) -> None:
        self._throttle: dict[Labels, dict[str, float]] = {}

    def throttle(self, lbl: Labels, mask: float, dt: float) -> dict[str, float]:
        """Add ``dt`` seconds to every reason set in ``mask``; the GPU's totals by reason."""
        acc = self._throttle.get(lbl)
        if acc is None:
            acc = self._throttle[lbl] = dict.fromkeys(_ALL_REASONS, 0.0)
        for reason in decode_clock_events(mask):
            acc[reason] = acc.get(reason, 0.0) + max(dt, 0.0)
        return acc


def gpu_samples(
    out: list[MetricSample],
    lbl: Labels,
    values: Mapping[str, float],
    *,
    allocated: bool,
    process_sm: float | None = None,
    dt: float = 0.0,
    counters: GpuCounters | None = None,
    energy_method: str | None = None,
) -> None:
    """Append one GPU's samples of a tick to ``out``: the gauges and counters it was read for
    (``values``: :func:`gpu_value_key` to value), a throttled flag per reason (from the
    clock-event mask) and whether some job holds it. The energy counter carries ``method``
    (``energy_method``: counter, polled or modeled) when the source said how it was obtained.

    SM activity and DRAM activity say how they were measured (label ``method``): GPM where the
    GPU has it; else the sum of NVML's per-process SM samples (``process_sm``, when known) and
    NVML's memory utilization rate. With ``counters``, the seconds of each clock-event reason
    accrue over ``dt``."""
    for src, name in _GPU_GAUGES:
        v = values.get(src)
        if v is not None:
            out.append(MetricSample(name, lbl, v))
    energy = values.get("gpu_energy_joules_total")
    if energy is not None:
        elbl = lbl if energy_method is None else _with(lbl, method=energy_method)
        out.append(MetricSample("computewatch_gpu_energy_joules_total", elbl, energy))
    gpm = False
    for src, name in _GPM_GAUGES:
        v = values.get(src)
        if v is not None:
            gpm = True
            out.append(MetricSample(name, _with(lbl, method="gpm"), v))
    if not gpm:
        if process_sm is not None:
            out.append(
                MetricSample(
                    "computewatch_gpu_sm_active_ratio",
                    _with(lbl, method="nvml_process_samples"),
                    min(max(process_sm, 0.0), 1.0),
                )
            )
        mem_util = values.get("gpu_memory_utilization_ratio")
        if mem_util is not None:
            out.append(
                MetricSample(
                    "computewatch_gpu_dram_active_ratio",
                    _with(lbl, method="nvml_sampled"),
                    mem_util,
                )
            )
    for kind in _ECC_TYPES:
        v = values.get(f"gpu_ecc_errors_total:{kind}")
        if v is not None:
            out.append(MetricSample("computewatch_gpu_ecc_errors_total", _with(lbl, type=kind), v))
    for kind in _REMAP_TYPES:
        v = values.get(f"gpu_remapped_rows_total:{kind}")
        if v is not None:
            out.append(
                MetricSample("computewatch_gpu_remapped_rows_total", _with(lbl, type=kind), v)
            )
    mask = values.get("gpu_clock_event_reasons")
    if mask is not None:
        reasons = set(decode_clock_events(mask))
        for reason, kinds in (("thermal", THERMAL_REASONS), ("power", POWER_REASONS)):
            tl = _with(lbl, reason=reason)
            out.append(MetricSample("computewatch_gpu_throttled", tl, float(bool(reasons & kinds))))
        if counters is not None:
            for reason, seconds in counters.throttle(lbl, mask, dt).items():
                out.append(
                    MetricSample(
                        "computewatch_gpu_throttle_seconds_total",
                        _with(lbl, reason=reason),
                        seconds,
                    )
                )
    out.append(MetricSample("computewatch_gpu_allocated", lbl, 1.0 if allocated else 0.0))


def _with(lbl: Labels, **more: str) -> Labels:
    return tuple(sorted((*lbl, *more.items())))


def counter_delta(last: dict[str, float], key: str, value: float | None) -> float:
    """How far the counter ``key`` rose since the previous call (kept in ``last``): 0 the first
    time, when it went back, or when it was not read (``None``)."""
    if value is None:
        return 0.0
    prev = last.get(key)
    last[key] = value
    return 0.0 if prev is None else max(value - prev, 0.0)
