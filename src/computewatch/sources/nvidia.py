"""NVIDIA GPUs through NVML: the only module that imports nvidia-ml-py (``pynvml``).

The NVML module is a parameter (``nvml=``): the real ``pynvml`` by default, or
:class:`computewatch.testing.fake_nvml.FakeNVML` in tests and demos. Everything NVML-specific,
its exceptions included, is reached through that module object, and NVML errors are translated
here (docs/architecture.md, "Sampling"):

- NOT_SUPPORTED (or FUNCTION_NOT_FOUND: an older driver) on a field disables that field on that
  device, with the reason in ``GpuDevice.capabilities``; it is not retried every tick. A field
  value of the per-tick ``nvmlDeviceGetFieldValues`` batch refused so leaves the batch.
- NO_PERMISSION likewise, with its own reason.
- GPU_IS_LOST drops the device (and its MIG instances) with one line in ``notes``; the other
  devices go on.
- Any other NVML error skips that field for this tick.

Units are SI base units: NVML's percentages become 0-1 ratios, mW watts, mJ joules, MHz hertz.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Collection
from typing import Any, ClassVar

import msgspec

from computewatch.catalog import find_by_nvml_name
from computewatch.catalog.clock_events import CLOCK_EVENT_REASONS, decode_clock_events
from computewatch.readings import Kind, Labels, Reading, labels
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.gpu_common import (
    Add,
    GpuDev,
    GpuDevice,
    VendorGpuSource,
    clock_time,
    counter_reading,
    gauge_reading,
    parse_visible_devices,
)

__all__ = [
    "CLOCK_EVENT_REASONS",
    "GpuDevice",
    "NvidiaSource",
    "decode_clock_events",
    "parse_visible_devices",
]

INSTALL_HINT = "nvidia-ml-py not installed: pip install 'computewatch[nvidia]'"


# pynvml constants this module relies on, with their values as fallbacks for older bindings.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_TIMEOUT = 10
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_ARGUMENT_VERSION_MISMATCH = 25
_UINT_MAX = 0xFFFFFFFF
_new = tuple.__new__  # a Reading built as gpu_common.gauge_reading builds it
_MAX_EVENTS_PER_TICK = 256

# GPM metric ids (nvml.h, nvmlGpmMetricId_t) and the ratio each becomes; NVML gives 0-100 %.
_GPM_METRICS: tuple[tuple[str, int, str], ...] = (
    # "Percentage of time any compute/graphics app was active on the GPU": DCGM's GR_ENGINE_ACTIVE
    ("NVML_GPM_METRIC_GRAPHICS_UTIL", 1, "gpu_graphics_engine_active_ratio"),
    ("NVML_GPM_METRIC_SM_UTIL", 2, "gpu_sm_active_ratio"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", 3, "gpu_sm_occupancy_ratio"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5, "gpu_tensor_active_ratio"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10, "gpu_dram_active_ratio"),
)

# Field values read in one nvmlDeviceGetFieldValues call per tick (nvml.h NVML_FI_DEV_*), with
# NVLink's throughput when the GPU has links: the constant's name, its value as a fallback, the
# reading, gauge or counter, and its capability.
_FIELDS: tuple[tuple[str, int, str, bool, str], ...] = (
    ("NVML_FI_DEV_MEMORY_TEMP", 82, "gpu_memory_temperature_celsius", False, "memory_temperature"),
    ("NVML_FI_DEV_PCIE_REPLAY_COUNTER", 94, "gpu_pcie_replays_total", True, "pcie_replays"),
    ("NVML_FI_DEV_REMAPPED_COR", 142, "gpu_remapped_rows_total:correctable", True, "row_remap"),
    ("NVML_FI_DEV_REMAPPED_UNC", 143, "gpu_remapped_rows_total:uncorrectable", True, "row_remap"),
    ("NVML_FI_DEV_REMAPPED_PENDING", 144, "gpu_row_remap_pending", False, "row_remap"),
    ("NVML_FI_DEV_REMAPPED_FAILURE", 145, "gpu_row_remap_failure", False, "row_remap"),
)
_FIELD_WHAT = {
    "memory_temperature": "memory (HBM) temperature",
    "pcie_replays": "PCIe replay counter",
    "row_remap": "row remapping (Ampere and later)",
}
# nvmlValueType_t -> the member of nvmlValue_t that holds it
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")

Reader = Callable[["_Dev", Add], None]


class _Field(msgspec.Struct, frozen=True):
    """One field value read each tick in the device's batch, and the reading it becomes."""

    fid: int | tuple[int, int]  # a field id, or (field id, scope id) as pynvml takes them
    name: str
    kind: Kind
    lbl: Labels
    scale: float  # NVML's unit to the reading's (NVLink: KiB to bytes)
    feature: str  # the capability it reports under


class _Dev(GpuDev):
    """NVML's per-device state kept between ticks (MIG tree, counter bases, GPM samples, XIDs)."""

    __slots__ = (
        "children",
        "e_base",
        "e_last",
        "field_ids",
        "fields",
        "gpm_cur",
        "gpm_get",
        "gpm_have_prev",
        "gpm_names",
        "gpm_prev",
        "gpu_instance_id",
        "graphics_ok",
        "lbl_corrected",
        "lbl_uncorrected",
        "mig_parent",
        "parent",
        "proc_ts",
        "xid",
        "xid_codes",
        "xid_last",
    )

    def __init__(self, info: GpuDevice, handle: Any, parent: _Dev | None) -> None:
        super().__init__(info, handle)
        self.parent = parent
        self.children: list[_Dev] = []
        self.mig_parent = False  # MIG mode enabled on this physical GPU
        self.gpu_instance_id: int | None = None  # of a MIG instance
        extra = self._parent_label()
        self.lbl_corrected = labels(gpu=info.uuid, type="corrected", **extra)
        self.lbl_uncorrected = labels(gpu=info.uuid, type="uncorrected", **extra)
        self.e_base: float | None = None
        self.e_last = 0.0
        self.gpm_get: Any = None
        self.gpm_prev: Any = None
        self.gpm_cur: Any = None
        self.gpm_have_prev = False
        self.gpm_names: tuple[str, ...] = ()
        self.graphics_ok = True
        self.proc_ts = 0
        self.xid: float | None = None  # XID count; None when events are not registered
        self.xid_codes: set[int] = set()
        self.xid_last = 0.0  # the last XID's code (DCGM's XID_ERRORS); 0 before any
        # the field values read each tick in one nvmlDeviceGetFieldValues call, and their ids
        self.fields: list[_Field] = []
        self.field_ids: list[int | tuple[int, int]] = []


def _text(value: object) -> str:
    """NVML strings: str from nvidia-ml-py >= 11.515, bytes from older bindings."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvidiaSource(VendorGpuSource[_Dev]):
    """Per-GPU (and per-MIG-instance) utilization, memory, power, energy, clocks, traffic,
    errors and, on Hopper and later, GPM activity; per-process memory and SM use for the
    monitored tree's PIDs.

    ``gpu_utilization_ratio`` is the fraction of the sample period during which at least one
    kernel was running, and ``gpu_memory_utilization_ratio`` the fraction during which device
    memory was read or written (NVML ``nvmlUtilization_t``): neither says how much of the GPU
    was busy. A GPU running one tiny kernel back to back reads 1.0. The GPM ratios
    (``gpu_sm_active_ratio`` and siblings) measure how much of it was busy.

    ``pids`` returns the PIDs of the monitored tree; without it no per-process readings are
    made. When NVML lists processes on a device but none of them exists in this PID namespace
    while the tree has processes (a container without the host PID namespace: NVML reports host
    PIDs), :attr:`pid_namespace_mismatch` is set, one note says so, per-process readings stop
    and :meth:`used_uuids` falls back to every monitored device with any process on it.
    """

    name = "nvidia"
    _LIBRARY = "NVML"
    _PID_OWNER = "NVML"

    def __init__(
        self,
        nvml: Any | None = None,
        visible_devices: str | None = None,
        pids: Callable[[], Collection[int]] | None = None,
        all_gpus: bool = False,
        *,
        procfs_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``visible_devices`` follows CUDA_VISIBLE_DEVICES (indices, ``GPU-`` UUIDs or their
        prefixes, ``MIG-`` UUIDs; an empty string means no GPU; an invalid entry ends the
        list); None reads the environment variable. ``all_gpus=True`` ignores it (a node
        agent). ``clock`` times the polled-power energy integral."""
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")  # nvidia-ml-py; untyped
            except ImportError as exc:
                raise SourceUnavailable(INSTALL_HINT) from exc
        super().__init__(nvml, nvml.NVMLError, pids, procfs_root, clock)
        self._by_uuid: dict[str, _Dev] = {}
        self._event_set: Any = None
        self._c = {
            name: getattr(nvml, const, default)
            for name, const, default in (
                ("not_supported", "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                ("no_permission", "NVML_ERROR_NO_PERMISSION", _NO_PERMISSION),
                ("not_found", "NVML_ERROR_NOT_FOUND", _NOT_FOUND),
                ("timeout", "NVML_ERROR_TIMEOUT", _TIMEOUT),
                ("function_not_found", "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
                ("gpu_is_lost", "NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST),
                (
                    "version_mismatch",
                    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                    _ARGUMENT_VERSION_MISMATCH,
                ),
            )
        }
        # The constants readers pass each tick, looked up once (nvml.h's values where a binding
        # lacks one): a module attribute in pynvml, a __getattr__ call in the fake.
        self._temperature_gpu = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        self._clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        self._clock_mem = getattr(nvml, "NVML_CLOCK_MEM", 2)
        self._pcie_tx = getattr(nvml, "NVML_PCIE_UTIL_TX_BYTES", 0)
        self._pcie_rx = getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1)
        self._ecc_volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
        self._ecc_corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        self._ecc_uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        self._memory_v2 = getattr(nvml, "nvmlMemory_v2", None)
        try:
            nvml.nvmlInit()
        except self._err as e:
            raise SourceUnavailable(f"NVML could not start: {e}") from e
        except OSError as e:
            raise SourceUnavailable(f"NVML could not start: {e}") from e
        self._open(visible_devices, all_gpus)

    def _shutdown(self) -> None:
        """Free GPM samples and the event set, then ``nvmlShutdown``."""
        nvml = self._mod
        for d in self._all:
            for sample in (d.gpm_prev, d.gpm_cur):
                if sample is not None:
                    try:
                        nvml.nvmlGpmSampleFree(sample)
                    except Exception:
                        pass
            d.gpm_prev = d.gpm_cur = None
        if self._event_set is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except Exception:
                pass
            self._event_set = None
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass

    # -- setup --------------------------------------------------------------------------------
    def _setup(self, visible_devices: str | None, all_gpus: bool) -> None:
        nvml = self._mod
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except self._err as e:
            raise SourceUnavailable(f"NVML could not count GPUs: {e}") from e
        if count == 0:
            raise SourceUnavailable("NVML found no NVIDIA GPU")
        physical: list[_Dev] = []
        for i in range(count):
            dev = self._probe_physical(i)
            if dev is not None:
                physical.append(dev)
        if not physical:
            raise SourceUnavailable("NVML lists GPUs but none could be opened (see notes)")
        if all_gpus:
            chosen = physical
        else:
            env = os.environ.get("CUDA_VISIBLE_DEVICES")
            spec = visible_devices if visible_devices is not None else env
            chosen = self._select(physical, parse_visible_devices(spec), spec)
        for dev in chosen:
            self._all.append(dev)
            self._all.extend(dev.children)
        self._setup_events()
        for d in self._all:
            self._setup_readers(d)
        self._devs = list(self._all)
        self._by_uuid = {d.info.uuid: d for d in self._all}

    def _probe_physical(self, index: int) -> _Dev | None:
        nvml = self._mod
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(h))
            name = _text(nvml.nvmlDeviceGetName(h))
        except self._err as e:
            self._note(f"GPU {index} could not be opened and is not monitored: {e}", f"open{index}")
            return None
        mem, _ = self._call("nvmlDeviceGetMemoryInfo", h)
        limit, _ = self._call("nvmlDeviceGetEnforcedPowerLimit", h)
        acc = find_by_nvml_name(name)
        info = GpuDevice(
            index=index,
            uuid=uuid,
            name=name,
            model=acc.model if acc else None,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            power_limit_watts=limit / 1000.0 if limit is not None else None,
            simulated=self.simulated,
        )
        dev = _Dev(info, h, None)
        mode, _ = self._call("nvmlDeviceGetMigMode", h)
        enable = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        if mode is not None and mode[0] == enable:
            dev.mig_parent = True
            info.capabilities["mig"] = True
            info.capabilities["mig_why"] = (
                "MIG enabled: this GPU's power, energy and temperature cover all its instances"
            )
            self._probe_mig(dev)
        return dev

    def _probe_mig(self, parent: _Dev) -> None:
        nvml = self._mod
        slots, e = self._call("nvmlDeviceGetMaxMigDeviceCount", parent.handle)
        if slots is None:
            self._note(f"GPU {parent.info.uuid}: MIG instances could not be listed ({e})", "")
            return
        for j in range(int(slots)):
            h, e = self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent.handle, j)
            if h is None:
                continue  # NOT_FOUND: an empty slot
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(h))
                name = _text(nvml.nvmlDeviceGetName(h))
            except self._err:
                continue
            mem, _ = self._call("nvmlDeviceGetMemoryInfo", h)
            gi, _ = self._call("nvmlDeviceGetGpuInstanceId", h)
            info = GpuDevice(
                index=parent.info.index,
                uuid=uuid,
                name=name,
                model=parent.info.model,
                memory_total_bytes=int(mem.total) if mem is not None else None,
                power_limit_watts=None,
                mig_parent_uuid=parent.info.uuid,
                mig_index=j,
                simulated=self.simulated,
            )
            child = _Dev(info, h, parent)
            child.gpu_instance_id = int(gi) if gi is not None else None
            parent.children.append(child)

    def _select(
        self, physical: list[_Dev], entries: list[str] | None, spec: str | None
    ) -> list[_Dev]:
        """The devices CUDA_VISIBLE_DEVICES makes visible, in NVML order.

        A whole GPU brings its MIG instances; a MIG instance brings its parent (for the
        whole-GPU figures) but not its siblings.
        """
        if entries is None:
            return physical
        if not entries:
            raise SourceUnavailable(
                "CUDA_VISIBLE_DEVICES is set to an empty string: no GPU is visible to the job"
            )
        by_index = {d.info.index: d for d in physical}
        chosen: dict[int, set[int] | None] = {}  # physical index -> MIG slots (None: all)
        used_index = False
        stopped: str | None = None
        for entry in entries:
            target = self._match(entry, physical, by_index)
            if target is None:
                stopped = entry
                break
            phys, child = target
            used_index |= entry.isdigit()
            key = phys.info.index
            if child is None:
                chosen[key] = None
            elif key not in chosen:
                chosen[key] = {child.info.mig_index or 0}
            else:
                slots = chosen[key]
                if slots is not None:
                    slots.add(child.info.mig_index or 0)
        if stopped is not None:
            self._note(
                f"CUDA_VISIBLE_DEVICES={spec!r}: entry {stopped!r} matches no GPU, so (as in "
                "CUDA) it and the entries after it are ignored",
                "cvd-invalid",
            )
        if not chosen:
            raise SourceUnavailable(f"no GPU matches CUDA_VISIBLE_DEVICES={spec!r}")
        mixed = len({d.info.name for d in physical}) > 1
        if used_index and mixed and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            self._note(
                "CUDA_VISIBLE_DEVICES uses indices on a machine with different GPU models: "
                "CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML in "
                "PCI order, so the GPUs monitored may not be the job's",
                "cvd-order",
            )
        out = []
        for d in physical:
            if d.info.index not in chosen:
                continue
            only = chosen[d.info.index]
            if only is not None:
                d.children = [c for c in d.children if c.info.mig_index in only]
                d.info.capabilities["shared"] = True
                d.info.capabilities["shared_why"] = (
                    "only some MIG instances of this GPU are visible; its whole-GPU figures "
                    "include the others"
                )
            out.append(d)
        return out

    @staticmethod
    def _match(
        entry: str, physical: list[_Dev], by_index: dict[int, _Dev]
    ) -> tuple[_Dev, _Dev | None] | None:
        if entry.isdigit():
            d = by_index.get(int(entry))
            return (d, None) if d is not None else None
        if entry.startswith("MIG-GPU-"):
            # The pre-R470 form MIG-GPU-<uuid>/<gpu instance>/<compute instance>.
            parts = entry[4:].split("/")
            if len(parts) != 3:
                return None
            for d in physical:
                if d.info.uuid == parts[0]:
                    for c in d.children:
                        if str(c.gpu_instance_id) == parts[1]:
                            return d, c
            return None
        if entry.startswith("MIG-"):
            hits = [(d, c) for d in physical for c in d.children if c.info.uuid.startswith(entry)]
            return hits[0] if len(hits) == 1 else None
        if entry.startswith("GPU-"):
            found = [d for d in physical if d.info.uuid.startswith(entry)]
            return (found[0], None) if len(found) == 1 else None
        return None

    def _setup_events(self) -> None:
        """One event set for XID critical errors of every physical GPU, polled each tick."""
        nvml = self._mod
        xid_type = getattr(nvml, "nvmlEventTypeXidCriticalError", 0x8)
        physical = [d for d in self._all if d.parent is None]
        event_set, e = self._call("nvmlEventSetCreate")
        if event_set is None:
            why = f"event sets unavailable ({e})" if e else "nvmlEventSetCreate missing"
            for d in physical:
                d.info.capabilities["xid_events"] = False
                d.info.capabilities["xid_events_why"] = why
            return
        registered = 0
        for d in physical:
            _, e = self._call("nvmlDeviceRegisterEvents", d.handle, xid_type, event_set)
            if e is None:
                d.xid = 0.0
                registered += 1
                d.info.capabilities["xid_events"] = True
                d.info.capabilities["xid_events_why"] = "XID critical-error events registered"
            else:
                d.info.capabilities["xid_events"] = False
                d.info.capabilities["xid_events_why"] = f"cannot register XID events: {e}"
        for d in self._all:
            if d.parent is not None:
                d.info.capabilities["xid_events"] = False
                d.info.capabilities["xid_events_why"] = "XID events are counted on the parent GPU"
        if registered:
            self._event_set = event_set
        else:
            self._call("nvmlEventSetFree", event_set)

    def _setup_readers(self, d: _Dev) -> None:
        """The fields to read for this device, in tick order (power before polled energy)."""
        nvml = self._mod
        cap = d.info.capabilities
        r: list[tuple[str, Reader]] = [
            ("utilization", self._r_utilization),
            (
                ("memory", self._r_memory_v2)
                if hasattr(nvml, "nvmlMemory_v2")
                else ("memory", self._r_memory_v1)
            ),
            ("power", self._r_power),
            ("power_limit", self._r_power_limit),
        ]
        # Energy: NVML's counter (Volta and later, mJ since the driver loaded) if it answers.
        # Probed once here; the first read() rebases it to 0. A transient error keeps the
        # counter (read() translates it); only "unsupported" or "not allowed" means polling.
        c = self._c
        unusable = (c["not_supported"], c["function_not_found"], c["no_permission"])
        raw, e = (None, None)
        if d.parent is None:
            raw, e = self._call("nvmlDeviceGetTotalEnergyConsumption", d.handle)
        if d.parent is not None:
            cap["energy_counter"] = False
            cap["energy_counter_why"] = "a MIG instance: energy is measured on its parent GPU"
        elif raw is not None or (e is not None and self._code(e) not in unusable):
            cap["energy_counter"] = True
            cap["energy_counter_why"] = "nvmlDeviceGetTotalEnergyConsumption (Volta and later)"
            r.append(("energy_counter", self._r_energy_counter))
        else:
            cap["energy_counter"] = False
            cap["energy_counter_why"] = (
                f"no energy counter ({e or 'nvmlDeviceGetTotalEnergyConsumption missing'}):"
                " energy is the integral of polled power"
            )
            r.append(("energy_polled", self._r_energy_polled))
        r += [
            ("temperature", self._r_temperature),
            ("sm_clock", self._r_sm_clock),
            ("memory_clock", self._r_memory_clock),
            ("clock_events", self._r_clock_events),
            ("pcie", self._r_pcie),
        ]
        if d.parent is None:  # whole-GPU figures: a MIG instance's are its parent's
            if self._setup_fields(d, nvlink=self._setup_nvlink(d)):
                r.append(("fields", self._r_fields))
            r += [("encoder", self._r_encoder), ("decoder", self._r_decoder)]
        else:
            for feature in ("nvlink", "gpm"):
                cap[feature] = False
                cap[f"{feature}_why"] = "a MIG instance: read on its parent GPU"
        r += [("ecc", self._r_ecc), ("fan", self._r_fan)]
        if d.parent is None and self._setup_gpm(d):
            r.append(("gpm", self._r_gpm))
        if d.mig_parent:
            cap["per_process"] = False
            cap["per_process_why"] = "MIG mode: processes are read on each MIG instance"
        elif self._pids is None:
            cap["per_process"] = False
            cap["per_process_why"] = "no process tree to attribute"
        else:
            cap["per_process"] = True
            cap["per_process_why"] = (
                "nvmlDeviceGetComputeRunningProcesses/GraphicsRunningProcesses and "
                "nvmlDeviceGetProcessUtilization"
            )
            r.append(("processes", self._r_processes))
            r.append(("process_utilization", self._r_process_utilization))
        if d.xid is not None:
            r.append(("xid", self._r_xid))
        d.readers = r

    def _setup_nvlink(self, d: _Dev) -> bool:
        nvml = self._mod
        cap = d.info.capabilities
        fid = getattr(nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if fid is None or not hasattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"):
            cap["nvlink"] = False
            cap["nvlink_why"] = "this nvidia-ml-py has no NVLink throughput fields"
            return False
        values, e = self._call("nvmlDeviceGetFieldValues", d.handle, [fid])
        if values is None:
            cap["nvlink"] = False
            cap["nvlink_why"] = f"NVLink link count unavailable ({e})"
            return False
        v = values[0]
        links = int(v.value.uiVal) if v.nvmlReturn == 0 else 0
        cap["nvlink"] = links > 0
        cap["nvlink_why"] = (
            f"{links} NVLink links" if links > 0 else "no NVLink links (NVML link count is 0)"
        )
        return links > 0

    def _setup_fields(self, d: _Dev, nvlink: bool) -> bool:
        """The field values this GPU answers (memory temperature, PCIe replays, remapped
        rows), probed once: a field NVML refuses here is left out, with the reason in the
        capabilities. They are read in one call per tick, with NVLink's throughput (summed
        over the links) when ``nvlink``."""
        nvml = self._mod
        cap = d.info.capabilities
        ids = [getattr(nvml, const, default) for const, default, *_ in _FIELDS]
        values, e = self._call("nvmlDeviceGetFieldValues", d.handle, ids)
        answered: dict[str, bool] = {}
        extra = {"parent": d.info.mig_parent_uuid} if d.info.mig_parent_uuid else {}
        for i, (_, _, name, is_counter, feature) in enumerate(_FIELDS):
            ok = values is not None and i < len(values) and values[i].nvmlReturn == 0
            answered[feature] = answered.get(feature, False) or ok
            if ok:
                metric, _, kind = name.partition(":")
                lbl = labels(gpu=d.info.uuid, type=kind, **extra) if kind else d.lbl
                k = Kind.COUNTER if is_counter else Kind.GAUGE
                d.fields.append(_Field(ids[i], metric, k, lbl, 1.0, feature))
        for feature, ok in answered.items():
            cap[feature] = ok
            if ok:
                cap[f"{feature}_why"] = f"{_FIELD_WHAT[feature]}: nvmlDeviceGetFieldValues"
            elif values is None:
                cap[f"{feature}_why"] = f"field values unavailable ({e})"
            else:
                cap[f"{feature}_why"] = f"NVML gives no {_FIELD_WHAT[feature]} on this GPU"
        if nvlink:
            # Cumulative KiB since the driver loaded; scope UINT_MAX sums every link (nvml.h).
            for const, name in (
                ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "gpu_nvlink_transmit_bytes_total"),
                ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", "gpu_nvlink_receive_bytes_total"),
            ):
                fid = (getattr(nvml, const), _UINT_MAX)
                d.fields.append(_Field(fid, name, Kind.COUNTER, d.lbl, 1024.0, "nvlink"))
        d.field_ids = [f.fid for f in d.fields]
        return bool(d.fields)

    def _setup_gpm(self, d: _Dev) -> bool:
        """GPM (Hopper and later): two samples per device, swapped each tick."""
        nvml = self._mod
        cap = d.info.capabilities
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            cap["gpm"] = False
            cap["gpm_why"] = "this nvidia-ml-py has no GPM functions"
            return False
        support, e = self._call("nvmlGpmQueryDeviceSupport", d.handle)
        if support is None or not support.isSupportedDevice:
            cap["gpm"] = False
            cap["gpm_why"] = (
                f"GPM not available ({e})" if e else "GPM not supported (before Hopper)"
            )
            return False
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        names = []
        for i, (const, default, name) in enumerate(_GPM_METRICS):
            get.metrics[i].metricId = getattr(nvml, const, default)
            names.append(name)
        get.numMetrics = len(_GPM_METRICS)
        prev, e1 = self._call("nvmlGpmSampleAlloc")
        cur, e2 = self._call("nvmlGpmSampleAlloc")
        if prev is None or cur is None:
            for s in (prev, cur):
                if s is not None:
                    self._call("nvmlGpmSampleFree", s)
            cap["gpm"] = False
            cap["gpm_why"] = f"GPM samples could not be allocated ({e1 or e2})"
            return False
        d.gpm_get, d.gpm_prev, d.gpm_cur = get, prev, cur
        d.gpm_names = tuple(names)
        cap["gpm"] = True
        cap["gpm_why"] = "nvmlGpmSampleGet/nvmlGpmMetricsGet between consecutive ticks"
        return True

    # -- error translation --------------------------------------------------------------------
    def _code(self, e: Exception) -> int | None:
        value = getattr(e, "value", None)
        return value if isinstance(value, int) else None

    def _on_error(self, d: _Dev, field: str, e: Exception, add: Add) -> bool:
        """Translate an NVML error on one field; True when the device was lost."""
        c = self._c
        code = self._code(e)
        if code == c["gpu_is_lost"]:
            self._lose(d)
            return True
        fallback = self._FALLBACKS.get(field)
        if fallback is not None and code in (
            c["function_not_found"],
            c["not_supported"],
            c["version_mismatch"],
        ):
            new_field, method = fallback
            return self._fall_back(d, field, new_field, getattr(self, method), add)
        if field == "energy_counter" and code in (c["not_supported"], c["function_not_found"]):
            # Carry on from the counter's last value (mJ).
            joules = (d.e_last - (d.e_base or 0.0)) / 1000.0
            self._to_polled(d, joules, f"energy counter stopped answering ({e})", add)
            return False
        if code in (c["not_supported"], c["function_not_found"]):
            why = f"not supported by this GPU or driver (NVML: {e})"
        elif code == c["no_permission"]:
            why = f"permission denied (NVML: {e}); it may need root or a driver setting"
        else:  # any other error (TIMEOUT, UNKNOWN...): skip this field for this tick
            return False
        if field == "fields":  # the whole batch refused: each capability in it says why
            self._drop_fields(d, dict.fromkeys(d.fields, why))
        else:
            self._disable(d, field, why)
        return False

    # Field -> (field that replaces it, method) when the first form is missing or unsupported.
    _FALLBACKS: ClassVar[dict[str, tuple[str, str]]] = {
        "memory": ("memory_v1", "_r_memory_v1"),
        "temperature": ("temperature_v", "_r_temperature_v"),
        "clock_events": ("clock_events_throttle", "_r_clock_events_throttle"),
    }
    # The capability a fallback reader reports under.
    _FEATURES: ClassVar[dict[str, str]] = {new: old for old, (new, _) in _FALLBACKS.items()}

    def _lose(self, d: _Dev) -> None:
        """GPU_IS_LOST: the GPU and its MIG instances are gone."""
        for x in (d, *d.children):
            if not x.lost:
                self._mark_lost(x, "GPU_IS_LOST")
        if d.parent is None and d.xid is not None:
            d.xid = None

    # -- per-field readers (hot path: one NVML call or two, one or two readings) --------------
    def _r_utilization(self, d: _Dev, add: Add) -> None:
        u = self._mod.nvmlDeviceGetUtilizationRates(d.handle)
        add(gauge_reading("gpu_utilization_ratio", u.gpu / 100.0, d.lbl))
        add(gauge_reading("gpu_memory_utilization_ratio", u.memory / 100.0, d.lbl))

    def _r_memory_v2(self, d: _Dev, add: Add) -> None:
        # v2 separates the driver-reserved memory from "used" (nvmlMemory_v2_t).
        m = self._mod.nvmlDeviceGetMemoryInfo(d.handle, self._memory_v2)
        add(gauge_reading("gpu_memory_used_bytes", m.used, d.lbl))
        add(gauge_reading("gpu_memory_free_bytes", m.free, d.lbl))
        add(gauge_reading("gpu_memory_total_bytes", m.total, d.lbl))

    def _r_memory_v1(self, d: _Dev, add: Add) -> None:
        m = self._mod.nvmlDeviceGetMemoryInfo(d.handle)
        add(gauge_reading("gpu_memory_used_bytes", m.used, d.lbl))
        add(gauge_reading("gpu_memory_free_bytes", m.free, d.lbl))
        add(gauge_reading("gpu_memory_total_bytes", m.total, d.lbl))

    def _r_power(self, d: _Dev, add: Add) -> None:
        watts = self._mod.nvmlDeviceGetPowerUsage(d.handle) / 1000.0  # mW
        d.power_w = watts
        d.power_t = self._clock()
        add(gauge_reading("gpu_power_watts", watts, d.lbl))

    def _r_power_limit(self, d: _Dev, add: Add) -> None:
        watts = self._mod.nvmlDeviceGetEnforcedPowerLimit(d.handle) / 1000.0  # mW
        add(gauge_reading("gpu_power_limit_watts", watts, d.lbl))

    def _r_energy_counter(self, d: _Dev, add: Add) -> None:
        raw = float(self._mod.nvmlDeviceGetTotalEnergyConsumption(d.handle))  # mJ
        if d.e_base is None:
            d.e_base = raw
        elif raw < d.e_last:  # the driver reloaded and the counter restarted: keep counting
            d.e_base = raw - (d.e_last - d.e_base)
        d.e_last = raw
        add(counter_reading("gpu_energy_joules_total", (raw - d.e_base) / 1000.0, d.lbl_counter))

    def _r_temperature(self, d: _Dev, add: Add) -> None:
        fn = getattr(self._mod, "nvmlDeviceGetTemperature", None)
        if fn is None:  # removed from later bindings (deprecated for nvmlDeviceGetTemperatureV)
            raise self._mod.NVMLError(self._c["function_not_found"])
        celsius = fn(d.handle, self._temperature_gpu)
        add(gauge_reading("gpu_temperature_celsius", celsius, d.lbl))

    def _r_temperature_v(self, d: _Dev, add: Add) -> None:
        celsius = self._mod.nvmlDeviceGetTemperatureV(d.handle, self._temperature_gpu)
        add(gauge_reading("gpu_temperature_celsius", celsius, d.lbl))

    def _r_sm_clock(self, d: _Dev, add: Add) -> None:
        mhz = self._mod.nvmlDeviceGetClockInfo(d.handle, self._clock_sm)
        add(gauge_reading("gpu_sm_clock_hertz", mhz * 1e6, d.lbl))

    def _r_memory_clock(self, d: _Dev, add: Add) -> None:
        mhz = self._mod.nvmlDeviceGetClockInfo(d.handle, self._clock_mem)
        add(gauge_reading("gpu_memory_clock_hertz", mhz * 1e6, d.lbl))

    def _r_clock_events(self, d: _Dev, add: Add) -> None:
        fn = getattr(self._mod, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # bindings before the 535 rename
            raise self._mod.NVMLError(self._c["function_not_found"])
        add(gauge_reading("gpu_clock_event_reasons", fn(d.handle), d.lbl))

    def _r_clock_events_throttle(self, d: _Dev, add: Add) -> None:
        mask = self._mod.nvmlDeviceGetCurrentClocksThrottleReasons(d.handle)
        add(gauge_reading("gpu_clock_event_reasons", mask, d.lbl))

    def _r_pcie(self, d: _Dev, add: Add) -> None:
        # NVML counts bytes over a 20 ms window and reports "KB/s"; like nvidia-smi and nvitop
        # we read its KB as 1024 bytes.
        nvml = self._mod
        tx = nvml.nvmlDeviceGetPcieThroughput(d.handle, self._pcie_tx)
        rx = nvml.nvmlDeviceGetPcieThroughput(d.handle, self._pcie_rx)
        add(gauge_reading("gpu_pcie_transmit_bytes_per_second", tx * 1024.0, d.lbl))
        add(gauge_reading("gpu_pcie_receive_bytes_per_second", rx * 1024.0, d.lbl))

    def _r_ecc(self, d: _Dev, add: Add) -> None:
        # Volatile counts: errors since the driver loaded.
        get = self._mod.nvmlDeviceGetTotalEccErrors
        kind = self._ecc_volatile
        corrected = get(d.handle, self._ecc_corrected, kind)
        uncorrected = get(d.handle, self._ecc_uncorrected, kind)
        add(counter_reading("gpu_ecc_errors_total", corrected, d.lbl_corrected))
        add(counter_reading("gpu_ecc_errors_total", uncorrected, d.lbl_uncorrected))

    def _r_fields(self, d: _Dev, add: Add) -> None:
        values = self._mod.nvmlDeviceGetFieldValues(d.handle, d.field_ids)
        refused: list[tuple[_Field, int]] = []
        for f, v in zip(d.fields, values, strict=False):
            code = v.nvmlReturn
            if code:
                refused.append((f, code))
                continue
            t = v.valueType
            x = float(getattr(v.value, _VALUE_MEMBERS[t] if 0 <= t < 7 else "ullVal"))
            add(_new(Reading, (f.name, f.lbl, x * f.scale, f.kind)))
        if refused:
            self._refused_fields(d, refused)

    def _refused_fields(self, d: _Dev, refused: list[tuple[_Field, int]]) -> None:
        """Fields of the batch that NVML refused this tick. NOT_SUPPORTED, FUNCTION_NOT_FOUND
        and NO_PERMISSION leave the batch for good; GPU_IS_LOST loses the device; any other
        code skips the field for this tick."""
        c = self._c
        gone: dict[_Field, str] = {}
        for f, code in refused:
            if code == c["gpu_is_lost"]:
                raise self._mod.NVMLError(code)
            if code in (c["not_supported"], c["function_not_found"]):
                gone[f] = f"not supported by this GPU or driver (NVML: {self._nvml_text(code)})"
            elif code == c["no_permission"]:
                gone[f] = (
                    f"permission denied (NVML: {self._nvml_text(code)}); it may need root or a "
                    "driver setting"
                )
        if gone:
            self._drop_fields(d, gone)

    def _drop_fields(self, d: _Dev, gone: dict[_Field, str]) -> None:
        """Leave the fields ``gone`` (with why) out of the device's batch from now on. A
        capability none of whose fields remains is false with the reason; one that keeps some
        says which left and why."""
        cap = d.info.capabilities
        left = [f for f in d.fields if f not in gone]
        kept = {f.feature for f in left}
        for f, why in gone.items():
            if f.feature in kept:
                cap[f"{f.feature}_why"] = f"{cap.get(f'{f.feature}_why', '')}; {f.name} {why}"
            else:
                cap[f.feature] = False
                cap[f"{f.feature}_why"] = why
        d.fields = left
        d.field_ids = [f.fid for f in left]
        if not left:
            d.readers = [(name, fn) for name, fn in d.readers if name != "fields"]

    def _nvml_text(self, code: int) -> str:
        """NVML's text for a status code (a field value's ``nvmlReturn``)."""
        try:
            return str(self._mod.NVMLError(code))
        except Exception:
            return f"NVML error {code}"

    def _r_encoder(self, d: _Dev, add: Add) -> None:
        util, _period_us = self._mod.nvmlDeviceGetEncoderUtilization(d.handle)
        add(gauge_reading("gpu_encoder_utilization_ratio", util / 100.0, d.lbl))

    def _r_decoder(self, d: _Dev, add: Add) -> None:
        util, _period_us = self._mod.nvmlDeviceGetDecoderUtilization(d.handle)
        add(gauge_reading("gpu_decoder_utilization_ratio", util / 100.0, d.lbl))

    def _r_fan(self, d: _Dev, add: Add) -> None:
        add(
            gauge_reading("gpu_fan_ratio", self._mod.nvmlDeviceGetFanSpeed(d.handle) / 100.0, d.lbl)
        )

    def _r_gpm(self, d: _Dev, add: Add) -> None:
        nvml = self._mod
        nvml.nvmlGpmSampleGet(d.handle, d.gpm_cur)
        if d.gpm_have_prev:
            get = d.gpm_get
            get.sample1 = d.gpm_prev
            get.sample2 = d.gpm_cur
            nvml.nvmlGpmMetricsGet(get)
            metrics = get.metrics
            for i, name in enumerate(d.gpm_names):
                m = metrics[i]
                if m.nvmlReturn == 0:
                    add(gauge_reading(name, m.value / 100.0, d.lbl))
        d.gpm_prev, d.gpm_cur = d.gpm_cur, d.gpm_prev
        d.gpm_have_prev = True

    def _r_xid(self, d: _Dev, add: Add) -> None:
        if d.xid is not None:
            add(counter_reading("gpu_xid_errors_total", d.xid, d.lbl))
            add(gauge_reading("gpu_xid_last_code", d.xid_last, d.lbl))

    def _before_devices(self) -> None:
        if self._event_set is not None:
            self._read_events()

    def _read_events(self) -> None:
        """Drain pending XID events (timeout 0: never waits) before the devices are read."""
        nvml = self._mod
        err = self._err
        timeout = self._c["timeout"]
        for _ in range(_MAX_EVENTS_PER_TICK):
            try:
                ev = nvml.nvmlEventSetWait(self._event_set, 0)
            except err as e:
                if self._code(e) != timeout:
                    self._note(f"NVML event wait failed: {e}", "event-wait")
                return
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(ev.device))
            except err:
                continue
            d = self._by_uuid.get(uuid)
            if d is None or d.xid is None:
                continue
            d.xid += 1
            code = int(ev.eventData)
            d.xid_last = float(code)
            if code not in d.xid_codes:
                d.xid_codes.add(code)
                self._note(f"GPU {uuid} reported XID {code} at {clock_time()}", "")

    # -- processes ----------------------------------------------------------------------------
    def _list_processes(self, d: _Dev) -> dict[int, int | None]:
        """Compute and graphics processes; a PID in both keeps the larger memory figure."""
        nvml = self._mod
        listed: dict[int, int | None] = {}
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(d.handle):
            listed[int(p.pid)] = p.usedGpuMemory
        if d.graphics_ok:
            try:
                for p in nvml.nvmlDeviceGetGraphicsRunningProcesses(d.handle):
                    pid = int(p.pid)
                    mem = p.usedGpuMemory
                    old = listed.get(pid)
                    listed[pid] = mem if old is None else (old if mem is None else max(old, mem))
            except self._err as e:
                if self._code(e) in (self._c["not_supported"], self._c["function_not_found"]):
                    d.graphics_ok = False
                else:
                    raise
        return listed

    def _r_process_utilization(self, d: _Dev, add: Add) -> None:
        """Mean SM utilization per tree process over the samples newer than the last seen."""
        if not d.mine:
            return
        try:
            samples = self._mod.nvmlDeviceGetProcessUtilization(d.handle, d.proc_ts)
        except self._err as e:
            if self._code(e) == self._c["not_found"]:
                return  # no sample newer than proc_ts
            raise
        mine = set(d.mine)
        sums: dict[int, list[float]] = {}
        other: dict[int, list[float]] = {}
        newest = d.proc_ts
        for s in samples:
            ts = int(s.timeStamp)
            newest = max(newest, ts)
            pid = int(s.pid)
            if pid not in mine:
                o = other.setdefault(pid, [0.0, 0.0])
                o[0] += s.smUtil
                o[1] += 1.0
            else:
                acc = sums.get(pid)
                if acc is None:
                    sums[pid] = [float(s.smUtil), 1.0]
                else:
                    acc[0] += s.smUtil
                    acc[1] += 1.0
        d.proc_ts = newest
        for pid, (total, n) in sums.items():
            add(
                gauge_reading(
                    "gpu_process_sm_utilization_ratio", total / n / 100.0, d.proc_label(pid)
                )
            )
        if sums:
            foreign = sum(total / n for total, n in other.values()) / 100.0
            add(gauge_reading("gpu_other_processes_sm_utilization_ratio", foreign, d.lbl))
