"""A fake NVML: the part of ``pynvml`` (nvidia-ml-py) that computewatch calls, with no GPU.

:class:`FakeNVML` is a module-like object: pass it where the ``pynvml`` module would go
(``NvidiaSource(nvml=FakeNVML(...))``). It has the same function names and parameter names, the
same constants, return objects with the same attribute names, and its own ``NVMLError`` class
tree built the way pynvml builds its own (``NVMLError(code)`` returns the subclass for that code,
``NVMLError_NotSupported()`` carries ``.value == NVML_ERROR_NOT_SUPPORTED``). Code that only
reaches exceptions and constants through the module object it was given works against both.

Devices are :class:`FakeDevice` objects, which also serve as the opaque handles NVML returns.
Each reading can be scripted (a constant, a sequence consumed one value per call, or a function
of the fake's clock), any function can be made to fail with any NVML error code from its Nth
call on, and a device can carry processes, MIG instances, XID events and GPM metrics.
:func:`from_preset` builds a busy machine of a catalog model (``"8xH100-SXM"``).

Everything here is simulated: ``FakeNVML.simulated`` is True so outputs can say so.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from computewatch.catalog import Accelerator, load_accelerators
from computewatch.testing._script import (
    Failure,
    Integral,
    Script,
    Scripted,
    due,
    mix,
    schedule,
    str_seed,
    unit,
)
from computewatch.testing.job_state import STATE_ENV, JobState, follow
from computewatch.testing.presets import parse_preset

__all__ = [
    "FIELDS",
    "FakeDevice",
    "FakeNVML",
    "ManualClock",
    "NVMLError",
    "from_preset",
]

# -- constants: the values of nvidia-ml-py's pynvml module (checked by tests/testing) ---------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlMemory_v2 = 0x02000028
nvmlTemperature_v1 = 0x100000C

NVML_DEVICE_ARCH_KEPLER = 2
NVML_DEVICE_ARCH_MAXWELL = 3
NVML_DEVICE_ARCH_PASCAL = 4
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_TURING = 6
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_BLACKWELL = 10
NVML_DEVICE_ARCH_UNKNOWN = 0xFFFFFFFF

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlClocksEventReasonNone = 0x0
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSyncBoost = 0x10
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksThrottleReasonDisplayClockSetting = 0x100
nvmlClocksThrottleReasonNone = 0x0

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
nvmlEventTypeNone = 0x0

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_MEMORY_TEMP = 82  # °C, HBM boards
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94  # since the driver loaded
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, cumulative; scopeId = link, UINT_MAX = all
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_REMAPPED_COR = 142  # rows remapped for correctable errors (Ampere and later)
NVML_FI_DEV_REMAPPED_UNC = 143  # ... for uncorrectable errors
NVML_FI_DEV_REMAPPED_PENDING = 144  # 1 while a remapping waits for a GPU reset
NVML_FI_DEV_REMAPPED_FAILURE = 145  # 1 once a remapping failed

NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1

_UINT_MAX = 0xFFFFFFFF


# -- errors -----------------------------------------------------------------------------------
class NVMLError(Exception):
    """Base of every fake NVML error; ``NVMLError(code)`` returns the subclass for ``code``.

    Built like pynvml's: ``.value`` is the NVML return code, ``str()`` its NVML text.
    """

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    _errcode_to_string: ClassVar[dict[int, str]] = {}
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        target = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return NVMLError._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _error_class(name: str, code: int, text: str) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: object) -> NVMLError:
        return NVMLError.__new__(cls, code)

    def init(self: NVMLError, *args: object) -> None:
        Exception.__init__(self, code)

    cls = type(name, (NVMLError,), {"__new__": new, "__init__": init, "__module__": __name__})
    NVMLError._valClassMapping[code] = cls
    NVMLError._errcode_to_string[code] = text
    return cls


# Names and texts as pynvml generates them (string.capwords of the NVML_ERROR_ suffix).
NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", 1, "Uninitialized")
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", 2, "Invalid Argument")
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3, "Not Supported")
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", 4, "Insufficient Permissions")
NVMLError_AlreadyInitialized = _error_class(
    "NVMLError_AlreadyInitialized", 5, "Already Initialized"
)
NVMLError_NotFound = _error_class("NVMLError_NotFound", 6, "Not Found")
NVMLError_InsufficientSize = _error_class("NVMLError_InsufficientSize", 7, "Insufficient Size")
NVMLError_InsufficientPower = _error_class(
    "NVMLError_InsufficientPower", 8, "Insufficient External Power"
)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9, "Driver Not Loaded")
NVMLError_Timeout = _error_class("NVMLError_Timeout", 10, "Timeout")
NVMLError_IrqIssue = _error_class("NVMLError_IrqIssue", 11, "Interrupt Request Issue")
NVMLError_LibraryNotFound = _error_class(
    "NVMLError_LibraryNotFound", 12, "NVML Shared Library Not Found"
)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", 13, "Function Not Found")
NVMLError_CorruptedInforom = _error_class("NVMLError_CorruptedInforom", 14, "Corrupted infoROM")
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", 15, "GPU is lost")
NVMLError_ResetRequired = _error_class("NVMLError_ResetRequired", 16, "GPU requires restart")
NVMLError_OperatingSystem = _error_class(
    "NVMLError_OperatingSystem", 17, "The operating system has blocked the request."
)
NVMLError_LibRmVersionMismatch = _error_class(
    "NVMLError_LibRmVersionMismatch", 18, "RM has detected an NVML/RM version mismatch."
)
NVMLError_InUse = _error_class("NVMLError_InUse", 19, "In Use")
NVMLError_Memory = _error_class("NVMLError_Memory", 20, "Insufficient Memory")
NVMLError_NoData = _error_class("NVMLError_NoData", 21, "No Data")
NVMLError_VgpuEccNotSupported = _error_class(
    "NVMLError_VgpuEccNotSupported", 22, "vGPU ECC Not Supported"
)
NVMLError_InsufficientResources = _error_class(
    "NVMLError_InsufficientResources", 23, "Insufficient Resources"
)
NVMLError_FreqNotSupported = _error_class(
    "NVMLError_FreqNotSupported", 24, "Frequency Not Supported"
)
NVMLError_ArgumentVersionMismatch = _error_class(
    "NVMLError_ArgumentVersionMismatch", 25, "Argument Version Mismatch"
)
NVMLError_Deprecated = _error_class("NVMLError_Deprecated", 26, "Deprecated")
NVMLError_NotReady = _error_class("NVMLError_NotReady", 27, "Not Ready")
NVMLError_GpuNotFound = _error_class("NVMLError_GpuNotFound", 28, "GPU Not Found")
NVMLError_InvalidState = _error_class("NVMLError_InvalidState", 29, "Invalid State")
NVMLError_ResetTypeNotSupported = _error_class(
    "NVMLError_ResetTypeNotSupported", 30, "Reset Type Not Supported"
)
NVMLError_Unknown = _error_class("NVMLError_Unknown", 999, "Unknown Error")


# -- return objects (attribute names as in pynvml's structs) ----------------------------------
@dataclasses.dataclass(slots=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclasses.dataclass(slots=True)
class _MemoryV2:
    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclasses.dataclass(slots=True)
class _Utilization:
    gpu: int
    memory: int


@dataclasses.dataclass(slots=True)
class _ProcessInfo:
    pid: int
    usedGpuMemory: int | None  # None where NVML cannot tell (WDDM), as pynvml does
    gpuInstanceId: int = _UINT_MAX
    computeInstanceId: int = _UINT_MAX


@dataclasses.dataclass(slots=True)
class _ProcessUtilizationSample:
    pid: int
    timeStamp: int  # CPU time stamp in µs
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


@dataclasses.dataclass(slots=True)
class _PciInfo:
    busId: bytes  # a ctypes char array in pynvml: bytes, not str
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int


@dataclasses.dataclass(slots=True)
class _Value:
    dVal: float = 0.0
    uiVal: int = 0
    ulVal: int = 0
    ullVal: int = 0
    sllVal: int = 0
    siVal: int = 0
    usVal: int = 0


@dataclasses.dataclass(slots=True)
class _FieldValue:
    fieldId: int
    scopeId: int
    timestamp: int
    latencyUsec: int
    valueType: int
    nvmlReturn: int
    value: _Value


@dataclasses.dataclass(slots=True)
class _EventData:
    device: FakeDevice
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


@dataclasses.dataclass(slots=True)
class _GpmSupport:
    version: int
    isSupportedDevice: int


@dataclasses.dataclass(slots=True)
class _GpmSample:
    """What ``nvmlGpmSampleAlloc`` returns; filled by ``nvmlGpmSampleGet``."""

    device: FakeDevice | None = None
    time: float = 0.0
    values: dict[int, float] = dataclasses.field(default_factory=dict)
    freed: bool = False


@dataclasses.dataclass(slots=True)
class _GpmMetric:
    metricId: int = 0
    nvmlReturn: int = NVML_SUCCESS
    value: float = 0.0


class _MetricArray:
    """Stands in for pynvml's ``c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX``; slots made on use."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[_GpmMetric] = []

    def __getitem__(self, i: int) -> _GpmMetric:
        while len(self._items) <= i:
            self._items.append(_GpmMetric())
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)


class _GpmMetricsGet:
    """The argument of ``nvmlGpmMetricsGet``: set version, numMetrics, sample1/2, metricIds."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _GpmSample | None = None
        self.sample2: _GpmSample | None = None
        self.metrics = _MetricArray()


c_nvmlGpmMetricsGet_t = _GpmMetricsGet  # pynvml's name for the struct


@dataclasses.dataclass(slots=True)
class _EventSet:
    devices: list[FakeDevice] = dataclasses.field(default_factory=list)
    freed: bool = False


# -- scripting --------------------------------------------------------------------------------
FIELDS: dict[str, str] = {
    "gpu_util_percent": "nvmlDeviceGetUtilizationRates().gpu",
    "mem_util_percent": "nvmlDeviceGetUtilizationRates().memory",
    "memory_used_bytes": "nvmlDeviceGetMemoryInfo().used (v2: without the reserved part)",
    "power_mw": "nvmlDeviceGetPowerUsage, milliwatts",
    "power_limit_mw": "nvmlDeviceGetEnforcedPowerLimit, milliwatts",
    "energy_mj": "nvmlDeviceGetTotalEnergyConsumption, millijoules (default: integral of power)",
    "temperature_c": "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
    "sm_clock_mhz": "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
    "mem_clock_mhz": "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
    "clock_events": "nvmlDeviceGetCurrentClocksEventReasons, bitmask",
    "pcie_tx_kbps": "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES), KB/s",
    "pcie_rx_kbps": "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES), KB/s",
    "ecc_corrected": "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
    "ecc_uncorrected": "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    "fan_percent": "nvmlDeviceGetFanSpeed",
    "nvlink_tx_kib": "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB, cumulative",
    "nvlink_rx_kib": "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, KiB, cumulative",
    "gpm_sm_active_percent": "GPM NVML_GPM_METRIC_SM_UTIL",
    "gpm_sm_occupancy_percent": "GPM NVML_GPM_METRIC_SM_OCCUPANCY",
    "gpm_tensor_active_percent": "GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "gpm_dram_active_percent": "GPM NVML_GPM_METRIC_DRAM_BW_UTIL",
    "memory_temperature_c": "field NVML_FI_DEV_MEMORY_TEMP (default: NOT_SUPPORTED)",
    "pcie_replays": "field NVML_FI_DEV_PCIE_REPLAY_COUNTER, and nvmlDeviceGetPcieReplayCounter",
    "remapped_rows_correctable": "field NVML_FI_DEV_REMAPPED_COR, and nvmlDeviceGetRemappedRows",
    "remapped_rows_uncorrectable": "field NVML_FI_DEV_REMAPPED_UNC, and nvmlDeviceGetRemappedRows",
    "remap_pending": "field NVML_FI_DEV_REMAPPED_PENDING (0 or 1), and nvmlDeviceGetRemappedRows",
    "remap_failure": "field NVML_FI_DEV_REMAPPED_FAILURE (0 or 1), and nvmlDeviceGetRemappedRows",
    "encoder_util_percent": "nvmlDeviceGetEncoderUtilization()[0]",
    "decoder_util_percent": "nvmlDeviceGetDecoderUtilization()[0]",
}
"""Scriptable readings and where they show. A value of None makes the call NOT_SUPPORTED."""

_GPM_FIELDS = {
    NVML_GPM_METRIC_SM_UTIL: "gpm_sm_active_percent",
    NVML_GPM_METRIC_SM_OCCUPANCY: "gpm_sm_occupancy_percent",
    NVML_GPM_METRIC_ANY_TENSOR_UTIL: "gpm_tensor_active_percent",
    NVML_GPM_METRIC_DRAM_BW_UTIL: "gpm_dram_active_percent",
    NVML_GPM_METRIC_GRAPHICS_UTIL: "gpu_util_percent",
}


@dataclasses.dataclass(slots=True)
class _Process:
    pid: int
    used_memory: int | None
    sm_util: int
    mem_util: int
    graphics: bool


class ManualClock:
    """A clock that moves only when told: ``clock.advance(2.5)``; pass it as ``clock=``."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        self.now += seconds
        return self.now


_DEFAULTS: dict[str, float | int | None] = {
    "gpu_util_percent": 0,
    "mem_util_percent": 0,
    "memory_used_bytes": 0,
    "power_mw": 60_000,
    "energy_mj": None,  # None here means: integrate power (see FakeDevice.energy_mj)
    "temperature_c": 35,
    "sm_clock_mhz": 1410,
    "mem_clock_mhz": 1593,
    "clock_events": nvmlClocksEventReasonGpuIdle,
    "pcie_tx_kbps": 0,
    "pcie_rx_kbps": 0,
    "ecc_corrected": 0,
    "ecc_uncorrected": 0,
    "fan_percent": None,  # datacenter boards are passively cooled: NOT_SUPPORTED
    "nvlink_tx_kib": 0,
    "nvlink_rx_kib": 0,
    "gpm_sm_active_percent": 0.0,
    "gpm_sm_occupancy_percent": 0.0,
    "gpm_tensor_active_percent": 0.0,
    "gpm_dram_active_percent": 0.0,
    "memory_temperature_c": None,  # only boards with an HBM sensor: presets script it
    "pcie_replays": 0,
    "remapped_rows_correctable": 0,
    "remapped_rows_uncorrectable": 0,
    "remap_pending": 0,
    "remap_failure": 0,
    "encoder_util_percent": 0,
    "decoder_util_percent": 0,
}
# Field values (nvmlDeviceGetFieldValues) read from a scripted reading, as unsigned ints.
_FIELD_READINGS = {
    NVML_FI_DEV_MEMORY_TEMP: "memory_temperature_c",
    NVML_FI_DEV_PCIE_REPLAY_COUNTER: "pcie_replays",
    NVML_FI_DEV_REMAPPED_COR: "remapped_rows_correctable",
    NVML_FI_DEV_REMAPPED_UNC: "remapped_rows_uncorrectable",
    NVML_FI_DEV_REMAPPED_PENDING: "remap_pending",
    NVML_FI_DEV_REMAPPED_FAILURE: "remap_failure",
}

# What a MIG device handle does not support (per-instance figures NVML does not give).
_MIG_UNSUPPORTED = frozenset(
    {
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetPcieThroughput",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceRegisterEvents",
        "nvmlDeviceGetMigMode",
        "nvmlGpmSampleGet",
    }
)


class FakeDevice:
    """One simulated GPU (or MIG instance); also the handle the fake's functions take.

    ``unsupported`` holds pynvml function names that raise NOT_SUPPORTED on this device,
    ``missing`` names that raise FUNCTION_NOT_FOUND (an older driver; the pseudo-name
    ``"nvmlDeviceGetMemoryInfo_v2"`` stands for the v2 memory query). ``calls`` counts calls per
    function name.
    """

    def __init__(
        self,
        name: str = "NVIDIA A100-SXM4-80GB",
        uuid: str | None = None,
        *,
        memory_total: int = 80 * 2**30,
        memory_reserved: int | None = None,
        power_limit_mw: int = 400_000,
        architecture: int = NVML_DEVICE_ARCH_AMPERE,
        pci_bus_id: str | None = None,
        energy_start_mj: int = 0,
        nvlink_links: int = 0,
        gpm: bool = False,
        mig_capable: bool = False,
        unsupported: Iterable[str] = (),
        missing: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.uuid = uuid or ""  # "" until attached: then GPU-<index>-... (see _attach)
        self._auto_uuid = uuid is None
        self.memory_total = memory_total
        self.memory_reserved = memory_total // 160 if memory_reserved is None else memory_reserved
        self.architecture = architecture
        self.pci_bus_id = pci_bus_id or ""
        self._auto_bus = pci_bus_id is None
        self.nvlink_links = nvlink_links
        self.gpm = gpm
        self.mig_capable = mig_capable
        self.mig_enabled = False
        self.mig_instances: list[FakeDevice] = []
        self.parent: FakeDevice | None = None
        self.gpu_instance_id = _UINT_MAX
        self.compute_instance_id = _UINT_MAX
        self.index = -1  # set by FakeNVML
        self.unsupported: set[str] = set(unsupported)
        self.missing: set[str] = set(missing)
        self.calls: dict[str, int] = {}
        self.total_calls = 0
        self.lost = False
        self.processes: dict[int, _Process] = {}
        self.pending_xids: list[int] = []
        self._failures: list[Failure] = []
        self._scripts: dict[str, Scripted] = {k: Scripted(v) for k, v in _DEFAULTS.items()}
        self._scripts["power_limit_mw"] = Scripted(power_limit_mw)
        self._energy_scripted = False
        self._energy = Integral(float(energy_start_mj))  # mW·s = mJ
        self._clock: Callable[[], float] = time.monotonic
        self._owner: FakeNVML | None = None
        self.process_memory: Callable[[float], int | None] | None = None
        """When set, the memory every process on the device holds, as a function of the fake's
        clock (None from it: each process's own ``used_memory``); a job's state file sets it
        (:mod:`computewatch.testing.job_state`)."""

    def __repr__(self) -> str:
        return f"<FakeDevice {self.index} {self.name} {self.uuid}>"

    # -- scripting API ------------------------------------------------------------------------
    def script(self, field: str, values: Script) -> FakeDevice:
        """Script one reading (see :data:`FIELDS`): a constant, a sequence consumed one value
        per call (the last one repeats), or a function of the fake's clock. None (or a None in
        the sequence) makes that call raise NOT_SUPPORTED."""
        if field not in FIELDS:
            raise ValueError(f"unknown field {field!r}; scriptable fields: {', '.join(FIELDS)}")
        self._scripts[field] = Scripted(values)
        if field == "energy_mj":
            self._energy_scripted = True
        return self

    def fail(
        self,
        function: str,
        error_code: int,
        *,
        after: int | None = None,
        at_call: int | None = None,
        count: int | None = None,
    ) -> FakeDevice:
        """Make ``function`` (a pynvml name, or ``"*"`` for any call on this device) raise
        ``NVMLError(error_code)``: from call number ``at_call`` on (1-based), or once ``after``
        calls have succeeded (default: from the next call). ``count`` limits how many calls
        fail (a transient error). GPU_IS_LOST also makes every later call on the device fail."""
        done = self.total_calls if function == "*" else self.calls.get(function, 0)
        f = schedule(function, error_code, done, after=after, at_call=at_call, count=count)
        self._failures.append(f)
        return self

    def lose(self) -> FakeDevice:
        """The GPU falls off the bus: every later call on it raises GPU_IS_LOST."""
        self.lost = True
        for child in self.mig_instances:
            child.lost = True
        return self

    def add_process(
        self,
        pid: int,
        used_memory: int | None = 1 << 30,
        *,
        sm_util: int = 50,
        mem_util: int = 20,
        graphics: bool = False,
    ) -> FakeDevice:
        """A process using this device (NVML lists host PIDs), with its SM utilization %."""
        self.processes[pid] = _Process(pid, used_memory, sm_util, mem_util, graphics)
        return self

    def remove_process(self, pid: int) -> FakeDevice:
        self.processes.pop(pid, None)
        return self

    def xid(self, code: int) -> FakeDevice:
        """Queue an XID critical error event (``code`` as NVML's eventData), for event sets."""
        self.pending_xids.append(code)
        return self

    def add_mig_instance(
        self,
        memory_total: int,
        *,
        profile: str = "1g.10gb",
        uuid: str | None = None,
    ) -> FakeDevice:
        """Enable MIG mode (if not yet) and add one MIG device; returns its handle."""
        if self.parent is not None:
            raise ValueError("a MIG instance cannot hold MIG instances")
        self.mig_capable = True
        self.mig_enabled = True
        n = len(self.mig_instances)
        child = FakeDevice(
            f"{self.name} MIG {profile}",
            uuid,
            memory_total=memory_total,
            memory_reserved=0,
            power_limit_mw=0,
            architecture=self.architecture,
            pci_bus_id=self.pci_bus_id,
            unsupported=_MIG_UNSUPPORTED,
        )
        child.parent = self
        if uuid is None and self.uuid:
            child.uuid = _mig_uuid(self.uuid, n)
        child.gpu_instance_id = n + 1
        child.compute_instance_id = 0
        child.index = self.index
        child._clock = self._clock
        child._owner = self._owner
        self.mig_instances.append(child)
        return child

    @property
    def energy_mj(self) -> float:
        """The energy counter now: its start plus the trapezoid integral of power over the
        fake's clock, evaluated at each read (exact for constant or linear power)."""
        now = self._clock()
        return self._energy.at(now, float(self._scripts["power_mw"].peek(now) or 0))

    # -- internals ----------------------------------------------------------------------------
    def _attach(self, owner: FakeNVML, index: int) -> None:
        self._owner = owner
        self._clock = owner.clock
        self.index = index
        if self._auto_uuid:
            self.uuid = f"GPU-{index:08x}-0000-4000-8000-00000000f4ce"
        if self._auto_bus:
            self.pci_bus_id = f"00000000:{0x10 + index:02X}:00.0"
        self._energy.restart()
        _ = self.energy_mj  # start integrating at attach time
        for n, child in enumerate(self.mig_instances):
            child._owner = owner
            child._clock = owner.clock
            child.index = index
            child.pci_bus_id = self.pci_bus_id
            if child._auto_uuid:
                child.uuid = _mig_uuid(self.uuid, n)

    def _enter(self, function: str) -> None:
        n = self.calls[function] = self.calls.get(function, 0) + 1
        self.total_calls += 1
        if self.lost:
            raise NVMLError_GpuIsLost()
        if self._failures:
            code = due(self._failures, function, n, self.total_calls)
            if code is not None:
                if code == NVML_ERROR_GPU_IS_LOST:
                    self.lose()
                raise NVMLError(code)
        if function in self.missing:
            raise NVMLError_FunctionNotFound()
        if function in self.unsupported:
            raise NVMLError_NotSupported()

    def _take(self, field: str) -> float | int:
        value = self._scripts[field].take(self._clock())
        if value is None:
            raise NVMLError_NotSupported()
        return value

    def _all_processes(self) -> list[_Process]:
        procs = list(self.processes.values())
        for child in self.mig_instances:
            procs.extend(child.processes.values())
        return procs


def _mig_uuid(parent_uuid: str, n: int) -> str:
    h = mix(str_seed(parent_uuid), n, 0x4D4947)
    return "MIG-" + _uuid_from(h)


# -- the module-like fake ---------------------------------------------------------------------
class FakeNVML:
    """The fake ``pynvml`` module. ``clock`` drives energy, GPM and time-scripted values."""

    simulated = True

    # Constants and error classes, reached as attributes like pynvml's module globals.
    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_AlreadyInitialized = NVMLError_AlreadyInitialized
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_InsufficientSize = NVMLError_InsufficientSize
    NVMLError_InsufficientPower = NVMLError_InsufficientPower
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_IrqIssue = NVMLError_IrqIssue
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_CorruptedInforom = NVMLError_CorruptedInforom
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_ResetRequired = NVMLError_ResetRequired
    NVMLError_OperatingSystem = NVMLError_OperatingSystem
    NVMLError_LibRmVersionMismatch = NVMLError_LibRmVersionMismatch
    NVMLError_InUse = NVMLError_InUse
    NVMLError_Memory = NVMLError_Memory
    NVMLError_NoData = NVMLError_NoData
    NVMLError_VgpuEccNotSupported = NVMLError_VgpuEccNotSupported
    NVMLError_InsufficientResources = NVMLError_InsufficientResources
    NVMLError_FreqNotSupported = NVMLError_FreqNotSupported
    NVMLError_ArgumentVersionMismatch = NVMLError_ArgumentVersionMismatch
    NVMLError_Deprecated = NVMLError_Deprecated
    NVMLError_NotReady = NVMLError_NotReady
    NVMLError_GpuNotFound = NVMLError_GpuNotFound
    NVMLError_InvalidState = NVMLError_InvalidState
    NVMLError_ResetTypeNotSupported = NVMLError_ResetTypeNotSupported
    NVMLError_Unknown = NVMLError_Unknown
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet

    def __init__(
        self,
        devices: Sequence[FakeDevice] = (),
        clock: Callable[[], float] = time.monotonic,
        *,
        driver_version: str = "550.54.15",
    ) -> None:
        self.clock = clock
        self.devices: list[FakeDevice] = list(devices)
        self.driver_version = driver_version
        self.init_count = 0
        self.shutdown_count = 0
        self.calls: dict[str, int] = {}
        self.missing: set[str] = set()
        self._failures: list[Failure] = []
        self._event_sets: list[_EventSet] = []
        for i, d in enumerate(self.devices):
            if d._owner is not None and d._owner is not self:
                raise ValueError(f"{d!r} already belongs to another FakeNVML")
            d._attach(self, i)

    def __getattr__(self, name: str) -> Any:
        # Every constant of this module (NVML_*, nvml*Reason*, nvmlEventType*...) as pynvml has.
        if name.startswith(("NVML_", "nvml")) and name in _MODULE_CONSTANTS:
            return _MODULE_CONSTANTS[name]
        raise AttributeError(name)

    def device(self, index: int) -> FakeDevice:
        return self.devices[index]

    def fail(
        self,
        function: str,
        error_code: int,
        *,
        after: int | None = None,
        at_call: int | None = None,
        count: int | None = None,
    ) -> FakeNVML:
        """Like :meth:`FakeDevice.fail`, for calls that take no device handle (``nvmlInit``,
        ``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``, ``nvmlEventSetWait``...)."""
        done = self.calls.get(function, 0)
        # check_start=False: at_call=0 (or after=-1) fails from the first call.
        f = schedule(
            function, error_code, done, after=after, at_call=at_call, count=count, check_start=False
        )
        self._failures.append(f)
        return self

    # -- internals ----------------------------------------------------------------------------
    def _global(self, function: str, needs_init: bool = True) -> None:
        n = self.calls[function] = self.calls.get(function, 0) + 1
        if self._failures:
            code = due(self._failures, function, n)
            if code is not None:
                raise NVMLError(code)
        if function in self.missing:
            raise NVMLError_FunctionNotFound()
        if needs_init and self.init_count <= 0:
            raise NVMLError_Uninitialized()

    def _dev(self, handle: object, function: str) -> FakeDevice:
        self.calls[function] = self.calls.get(function, 0) + 1
        if self.init_count <= 0:
            raise NVMLError_Uninitialized()
        if not isinstance(handle, FakeDevice) or handle._owner is not self:
            raise NVMLError_InvalidArgument()
        handle._enter(function)
        return handle

    # -- library ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._global("nvmlInit", needs_init=False)
        self.init_count += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._global("nvmlInitWithFlags", needs_init=False)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._global("nvmlShutdown")
        self.init_count -= 1
        self.shutdown_count += 1

    def nvmlErrorString(self, result: int) -> str:
        return NVMLError._errcode_to_string.get(result, "Unknown Error")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._global("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._global("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._global("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise NVMLError_InvalidArgument()
        d = self.devices[index]
        d._enter("nvmlDeviceGetHandleByIndex")
        return d

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeDevice:
        self._global("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for d in self.devices:
            for cand in (d, *d.mig_instances):
                if cand.uuid == text:
                    cand._enter("nvmlDeviceGetHandleByUUID")
                    return cand
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str | bytes) -> FakeDevice:
        self._global("nvmlDeviceGetHandleByPciBusId")
        text = pciBusId.decode() if isinstance(pciBusId, bytes) else pciBusId
        for d in self.devices:
            if d.pci_bus_id.lower() == text.lower():
                d._enter("nvmlDeviceGetHandleByPciBusId")
                return d
        raise NVMLError_NotFound()

    # -- identity -----------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: FakeDevice) -> str:
        return self._dev(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        return self._dev(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetIndex(self, handle: FakeDevice) -> int:
        d = self._dev(handle, "nvmlDeviceGetIndex")
        if d.parent is not None:
            raise NVMLError_InvalidArgument()
        return d.index

    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> _PciInfo:
        d = self._dev(handle, "nvmlDeviceGetPciInfo")
        m = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)\.\d", d.pci_bus_id)
        domain, bus, dev = (int(x, 16) for x in m.groups()) if m else (0, 0, 0)
        bus_id = d.pci_bus_id.encode()
        return _PciInfo(bus_id, bus_id, domain, bus, dev, 0x233010DE, 0x16C110DE)

    def nvmlDeviceGetArchitecture(self, device: FakeDevice) -> int:
        return self._dev(device, "nvmlDeviceGetArchitecture").architecture

    # -- readings -----------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> _Utilization:
        d = self._dev(handle, "nvmlDeviceGetUtilizationRates")
        if d.mig_enabled:
            raise NVMLError_NotSupported()  # NVML gives no whole-GPU utilization in MIG mode
        return _Utilization(int(d._take("gpu_util_percent")), int(d._take("mem_util_percent")))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice, version: int | None = None) -> Any:
        d = self._dev(handle, "nvmlDeviceGetMemoryInfo")
        used = int(d._take("memory_used_bytes"))
        reserved = d.memory_reserved
        free = max(d.memory_total - used - reserved, 0)
        if version:
            if "nvmlDeviceGetMemoryInfo_v2" in d.missing:
                raise NVMLError_FunctionNotFound()
            if version != nvmlMemory_v2:
                raise NVMLError_ArgumentVersionMismatch()
            return _MemoryV2(version, d.memory_total, reserved, free, used)
        return _Memory(d.memory_total, free, used + reserved)

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        return int(self._dev(handle, "nvmlDeviceGetPowerUsage")._take("power_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeDevice) -> int:
        return int(self._dev(handle, "nvmlDeviceGetEnforcedPowerLimit")._take("power_limit_mw"))

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeDevice) -> int:
        return int(self._dev(handle, "nvmlDeviceGetPowerManagementLimit")._take("power_limit_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeDevice) -> int:
        d = self._dev(handle, "nvmlDeviceGetTotalEnergyConsumption")
        if d._energy_scripted:
            return int(d._take("energy_mj"))
        return int(d.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: FakeDevice, sensor: int) -> int:
        d = self._dev(handle, "nvmlDeviceGetTemperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return int(d._take("temperature_c"))

    def nvmlDeviceGetTemperatureV(
        self, handle: FakeDevice, sensor: int, version: int = nvmlTemperature_v1
    ) -> int:
        d = self._dev(handle, "nvmlDeviceGetTemperatureV")
        if sensor != NVML_TEMPERATURE_GPU or version != nvmlTemperature_v1:
            raise NVMLError_InvalidArgument()
        return int(d._take("temperature_c"))

    def nvmlDeviceGetClockInfo(self, handle: FakeDevice, type: int) -> int:
        d = self._dev(handle, "nvmlDeviceGetClockInfo")
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return int(d._take("sm_clock_mhz"))
        if type == NVML_CLOCK_MEM:
            return int(d._take("mem_clock_mhz"))
        raise NVMLError_NotSupported()

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeDevice) -> int:
        d = self._dev(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return int(d._take("clock_events"))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeDevice) -> int:
        d = self._dev(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return int(d._take("clock_events"))

    def nvmlDeviceGetPcieThroughput(self, device: FakeDevice, counter: int) -> int:
        d = self._dev(device, "nvmlDeviceGetPcieThroughput")
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return int(d._take("pcie_tx_kbps"))
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return int(d._take("pcie_rx_kbps"))
        raise NVMLError_InvalidArgument()

    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeDevice, errorType: int, counterType: int
    ) -> int:
        d = self._dev(handle, "nvmlDeviceGetTotalEccErrors")
        if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return int(d._take("ecc_corrected"))
        if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return int(d._take("ecc_uncorrected"))
        raise NVMLError_InvalidArgument()

    def nvmlDeviceGetFanSpeed(self, handle: FakeDevice) -> int:
        return int(self._dev(handle, "nvmlDeviceGetFanSpeed")._take("fan_percent"))

    def nvmlDeviceGetFieldValues(
        self, handle: FakeDevice, fieldIds: Sequence[int | tuple[int, int]]
    ) -> list[_FieldValue]:
        d = self._dev(handle, "nvmlDeviceGetFieldValues")
        now_us = int(d._clock() * 1e6)
        out: list[_FieldValue] = []
        for item in fieldIds:
            fid, scope = item if isinstance(item, tuple) else (item, 0)
            fv = _FieldValue(fid, scope, now_us, 0, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0, _Value())
            if fid == NVML_FI_DEV_NVLINK_LINK_COUNT:
                fv.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
                fv.value.uiVal = d.nvlink_links
            elif fid in (
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            ):
                if d.nvlink_links <= 0 or (scope != _UINT_MAX and scope >= d.nvlink_links):
                    fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                else:
                    field = (
                        "nvlink_tx_kib"
                        if fid == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                        else "nvlink_rx_kib"
                    )
                    value = d._scripts[field].take(d._clock())
                    if value is None:
                        fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                    else:
                        total = int(value)
                        fv.value.ullVal = total if scope == _UINT_MAX else total // d.nvlink_links
            elif fid in _FIELD_READINGS:
                value = d._scripts[_FIELD_READINGS[fid]].take(d._clock())
                if value is None:
                    fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                else:
                    fv.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
                    fv.value.uiVal = int(value)
            else:
                fv.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            out.append(fv)
        return out

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeDevice) -> int:
        return int(self._dev(handle, "nvmlDeviceGetPcieReplayCounter")._take("pcie_replays"))

    def nvmlDeviceGetRemappedRows(self, device: FakeDevice) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, pending, failure occurred), as pynvml."""
        d = self._dev(device, "nvmlDeviceGetRemappedRows")
        return (
            int(d._take("remapped_rows_correctable")),
            int(d._take("remapped_rows_uncorrectable")),
            int(d._take("remap_pending")),
            int(d._take("remap_failure")),
        )

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeDevice) -> list[int]:
        """[utilization %, sampling period µs], as pynvml."""
        d = self._dev(handle, "nvmlDeviceGetEncoderUtilization")
        return [int(d._take("encoder_util_percent")), 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeDevice) -> list[int]:
        """[utilization %, sampling period µs], as pynvml."""
        d = self._dev(handle, "nvmlDeviceGetDecoderUtilization")
        return [int(d._take("decoder_util_percent")), 167_000]

    # -- processes ----------------------------------------------------------------------------
    def _processes(self, handle: FakeDevice, function: str, graphics: bool) -> list[_ProcessInfo]:
        d = self._dev(handle, function)
        procs = d._all_processes() if d.mig_enabled else list(d.processes.values())
        out = []
        for p in procs:
            if p.graphics != graphics:
                continue
            gi, ci = _UINT_MAX, _UINT_MAX
            owner = next((c for c in d.mig_instances if p.pid in c.processes), None)
            if owner is not None:
                gi, ci = owner.gpu_instance_id, owner.compute_instance_id
            elif d.parent is not None:
                gi, ci = d.gpu_instance_id, d.compute_instance_id
            used = p.used_memory
            if d.process_memory is not None:
                scripted = d.process_memory(d._clock())
                used = used if scripted is None else scripted
            out.append(_ProcessInfo(p.pid, used, gi, ci))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[_ProcessInfo]:
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses", False)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeDevice) -> list[_ProcessInfo]:
        return self._processes(handle, "nvmlDeviceGetGraphicsRunningProcesses", True)

    def nvmlDeviceGetProcessUtilization(
        self, handle: FakeDevice, timeStamp: int
    ) -> list[_ProcessUtilizationSample]:
        """One sample per process at the fake's clock (µs), if newer than ``timeStamp``; none
        raises NOT_FOUND, as NVML does when no sample is newer than the time stamp."""
        d = self._dev(handle, "nvmlDeviceGetProcessUtilization")
        if d.mig_enabled:
            raise NVMLError_NotSupported()
        now_us = int(d._clock() * 1e6)
        if now_us <= timeStamp or not d.processes:
            raise NVMLError_NotFound()
        return [
            _ProcessUtilizationSample(p.pid, now_us, p.sm_util, p.mem_util, 0, 0)
            for p in d.processes.values()
        ]

    # -- events -------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:
        self._global("nvmlEventSetCreate")
        s = _EventSet()
        self._event_sets.append(s)
        return s

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeDevice) -> int:
        d = self._dev(handle, "nvmlDeviceGetSupportedEventTypes")
        if "nvmlDeviceRegisterEvents" in d.unsupported:
            return 0
        return nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError

    def nvmlDeviceRegisterEvents(
        self, handle: FakeDevice, eventTypes: int, eventSet: _EventSet
    ) -> None:
        d = self._dev(handle, "nvmlDeviceRegisterEvents")
        if eventSet.freed:
            raise NVMLError_InvalidArgument()
        if eventTypes & ~(nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError):
            raise NVMLError_NotSupported()
        eventSet.devices.append(d)

    def nvmlEventSetWait(self, eventSet: _EventSet, timeoutms: int) -> _EventData:
        """The next queued XID of a registered device; TIMEOUT when none (no real waiting)."""
        self._global("nvmlEventSetWait")
        if eventSet.freed:
            raise NVMLError_InvalidArgument()
        for d in eventSet.devices:
            if d.pending_xids and not d.lost:  # a lost GPU's queued events are dropped
                code = d.pending_xids.pop(0)
                return _EventData(d, nvmlEventTypeXidCriticalError, code, _UINT_MAX, _UINT_MAX)
        raise NVMLError_Timeout()

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:
        self._global("nvmlEventSetFree")
        eventSet.freed = True

    # -- MIG ----------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, device: FakeDevice) -> list[int]:
        d = self._dev(device, "nvmlDeviceGetMigMode")
        if not d.mig_capable:
            raise NVMLError_NotSupported()
        mode = NVML_DEVICE_MIG_ENABLE if d.mig_enabled else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeDevice) -> int:
        d = self._dev(device, "nvmlDeviceGetMaxMigDeviceCount")
        if not d.mig_capable:
            raise NVMLError_NotSupported()
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeDevice, index: int) -> FakeDevice:
        d = self._dev(device, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not d.mig_enabled:
            raise NVMLError_InvalidArgument()
        if not 0 <= index < len(d.mig_instances):
            raise NVMLError_NotFound()
        child = d.mig_instances[index]
        child._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        return child

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: FakeDevice) -> FakeDevice:
        d = self._dev(migDevice, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if d.parent is None:
            raise NVMLError_InvalidArgument()
        return d.parent

    def nvmlDeviceIsMigDeviceHandle(self, device: FakeDevice) -> int:
        return int(self._dev(device, "nvmlDeviceIsMigDeviceHandle").parent is not None)

    def nvmlDeviceGetGpuInstanceId(self, device: FakeDevice) -> int:
        d = self._dev(device, "nvmlDeviceGetGpuInstanceId")
        if d.parent is None:
            raise NVMLError_InvalidArgument()
        return d.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: FakeDevice) -> int:
        d = self._dev(device, "nvmlDeviceGetComputeInstanceId")
        if d.parent is None:
            raise NVMLError_InvalidArgument()
        return d.compute_instance_id

    # -- GPM (Hopper and later) ---------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, device: FakeDevice) -> _GpmSupport:
        d = self._dev(device, "nvmlGpmQueryDeviceSupport")
        return _GpmSupport(NVML_GPM_SUPPORT_VERSION, int(d.gpm and d.parent is None))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._global("nvmlGpmSampleAlloc")
        return _GpmSample()

    def nvmlGpmSampleFree(self, gpmSample: _GpmSample) -> None:
        self._global("nvmlGpmSampleFree")
        gpmSample.freed = True

    def nvmlGpmSampleGet(self, device: FakeDevice, gpmSample: _GpmSample) -> _GpmSample:
        d = self._dev(device, "nvmlGpmSampleGet")
        if not d.gpm or d.parent is not None:
            raise NVMLError_NotSupported()
        if gpmSample.freed:
            raise NVMLError_InvalidArgument()
        gpmSample.device = d
        gpmSample.time = d._clock()
        for metric, field in _GPM_FIELDS.items():
            value = d._scripts[field].take(gpmSample.time)
            gpmSample.values[metric] = float(value) if value is not None else float("nan")
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: _GpmMetricsGet) -> _GpmMetricsGet:
        """Each metric over the interval between the two samples: in the fake, the activity
        captured by ``sample2`` (what a constant load over the interval would give)."""
        self._global("nvmlGpmMetricsGet")
        s1, s2 = metricsGet.sample1, metricsGet.sample2
        if metricsGet.version != NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError_ArgumentVersionMismatch()
        if s1 is None or s2 is None or s1.device is None or s2.device is not s1.device:
            raise NVMLError_InvalidArgument()
        if s2.time <= s1.time:
            raise NVMLError_InvalidArgument()
        for i in range(metricsGet.numMetrics):
            m = metricsGet.metrics[i]
            value = s2.values.get(m.metricId)
            if value is None or math.isnan(value):  # unknown metric, or scripted None
                m.nvmlReturn, m.value = NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                m.nvmlReturn, m.value = NVML_SUCCESS, value
        return metricsGet


_MODULE_CONSTANTS: dict[str, int] = {
    k: v
    for k, v in dict(globals()).items()
    if k.startswith(("NVML_", "nvml")) and isinstance(v, int) and not isinstance(v, bool)
}


# -- presets ----------------------------------------------------------------------------------
_ARCH = {
    "Volta": NVML_DEVICE_ARCH_VOLTA,
    "Turing": NVML_DEVICE_ARCH_TURING,
    "Ampere": NVML_DEVICE_ARCH_AMPERE,
    "Ada": NVML_DEVICE_ARCH_ADA,
    "Hopper": NVML_DEVICE_ARCH_HOPPER,
    "Blackwell": NVML_DEVICE_ARCH_BLACKWELL,
}
# NVLink links per GPU of the SXM boards (NVIDIA architecture whitepapers); PCIe cards: none.
_NVLINK_LINKS = {"V100-SXM2": 6, "A100-40GB": 12, "A100-80GB": 12, "H100-SXM": 18,
                 "H200-SXM": 18, "B200": 18}  # fmt: skip
_MIG_CAPABLE = {"A100-40GB", "A100-80GB", "A100-80GB-PCIe", "H100-SXM", "H100-PCIe", "H100-NVL",
                "H200-SXM", "B200"}  # fmt: skip
# Max SM and memory clocks in MHz of the NVML-reported kind, for plausible figures.
_CLOCKS = {"Volta": (1530, 877), "Turing": (1590, 5001), "Ampere": (1410, 1593),
           "Ada": (2040, 9001), "Hopper": (1980, 2619), "Blackwell": (1965, 3996)}  # fmt: skip
# Typical HGX PCI bus numbers of the 8 GPUs.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def _uuid_from(h: int) -> str:
    hx = f"{h:016x}{mix(h, 1):016x}"
    return f"{hx[:8]}-{hx[8:12]}-{hx[12:16]}-{hx[16:20]}-{hx[20:32]}"


def from_preset(
    preset: str,
    seed: int = 0,
    *,
    clock: Callable[[], float] = time.monotonic,
    state_file: str | os.PathLike[str] | None = None,
) -> FakeNVML:
    """A fake machine of ``COUNTxMODEL`` busy GPUs (``"8xH100-SXM"``; a bare model means one).

    Each device works around its own utilization level (seeded), with memory in use below the
    total, power between idle (~10 % of TDP) and the power limit following utilization, an energy
    counter integrating that power over ``clock``, temperature, clocks, PCIe and NVLink traffic,
    clock-event reasons, zero ECC errors and, on Hopper and later, GPM metrics. Names, memory and
    power limits come from the catalog; UUIDs and PCI bus ids are deterministic from ``seed``.

    ``state_file`` (default: the ``COMPUTEWATCH_FAKE_GPU_STATE`` environment variable, so that
    ``--gpu-backend fake:PRESET`` follows it too) names a JSON file the job running on the
    devices writes: the readings it holds replace the preset's, so a job scripts its own device
    (idle while it sleeps, throttled clocks ...; :mod:`computewatch.testing.job_state`).
    """
    catalog = {k: a for k, a in load_accelerators().items() if a.nvml_names}
    count, acc = parse_preset(preset, catalog)
    devices = [_preset_device(acc, i, seed, count) for i in range(count)]
    path = state_file if state_file is not None else os.environ.get(STATE_ENV)
    if path:
        state = JobState(path)
        for d in devices:
            follow(d, state)
    return FakeNVML(devices, clock)


def _preset_device(acc: Accelerator, i: int, seed: int, count: int) -> FakeDevice:
    arch = acc.architecture
    key = mix(seed, i, str_seed(acc.model))
    bus = _HGX_BUSES[i] if count <= len(_HGX_BUSES) else 0x10 + i
    tdp_w = acc.tdp_watts or 300.0
    limit_mw = int(tdp_w * 1000)
    idle_mw = 0.1 * limit_mw
    level = 0.70 + 0.25 * (unit(key, 1) + 1) / 2  # 70-95 % busy
    mem_frac = 0.55 + 0.35 * (unit(key, 2) + 1) / 2
    total = acc.memory_bytes
    sm_max, mem_clock = _CLOCKS.get(arch, (1500, 1500))
    links = _NVLINK_LINKS.get(acc.model, 0)
    period = 0.1  # seconds per noise step

    def util(t: float) -> float:
        return min(max(level + 0.08 * unit(key, 3, int(t / period)), 0.0), 1.0)

    def power(t: float) -> float:
        return idle_mw + (0.92 * limit_mw - idle_mw) * util(t)

    def events(t: float) -> int:
        u = util(t)
        if u < 0.05:
            return nvmlClocksEventReasonGpuIdle
        return nvmlClocksEventReasonSwPowerCap if power(t) > 0.85 * limit_mw else 0

    d = FakeDevice(
        acc.nvml_names[0],
        "GPU-" + _uuid_from(key),
        memory_total=total,
        power_limit_mw=limit_mw,
        architecture=_ARCH.get(arch, NVML_DEVICE_ARCH_UNKNOWN),
        pci_bus_id=f"00000000:{bus:02X}:00.0",
        energy_start_mj=int(1e9 + 1e8 * (unit(key, 4) + 1)),
        nvlink_links=links,
        gpm=arch in ("Hopper", "Blackwell"),
        mig_capable=acc.model in _MIG_CAPABLE,
        # NVML's energy counter exists from Volta on (nvmlDeviceGetTotalEnergyConsumption).
        unsupported=() if arch in _ARCH else ("nvmlDeviceGetTotalEnergyConsumption",),
    )
    d.script("gpu_util_percent", lambda t: round(100 * util(t)))
    d.script("mem_util_percent", lambda t: round(45 * util(t)))
    d.script("memory_used_bytes", lambda t: int(total * mem_frac * (0.98 + 0.02 * util(t))))
    d.script("power_mw", lambda t: round(power(t)))
    d.script("temperature_c", lambda t: round(35 + 40 * util(t)))
    d.script("sm_clock_mhz", lambda t: round(sm_max * (0.9 + 0.1 * (1 - util(t)))))
    d.script("mem_clock_mhz", mem_clock)
    d.script("clock_events", events)
    d.script("pcie_tx_kbps", lambda t: round(2e6 * util(t) * (1 + 0.3 * unit(key, 5, int(t)))))
    d.script("pcie_rx_kbps", lambda t: round(4e6 * util(t) * (1 + 0.3 * unit(key, 6, int(t)))))
    d.script("nvlink_tx_kib", lambda t: int(t * 5e7 * level) if links else 0)
    d.script("nvlink_rx_kib", lambda t: int(t * 5e7 * level) if links else 0)
    d.script("gpm_sm_active_percent", lambda t: 85 * util(t))
    d.script("gpm_sm_occupancy_percent", lambda t: 45 * util(t))
    d.script("gpm_tensor_active_percent", lambda t: 60 * util(t))
    d.script("gpm_dram_active_percent", lambda t: 50 * util(t))
    d.script("memory_temperature_c", lambda t: round(32 + 45 * util(t)))  # HBM runs warmer
    return d
