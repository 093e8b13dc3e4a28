"""A fake AMD SMI: the part of the ``amdsmi`` Python package that computewatch calls, no GPU.

:class:`FakeAmdSmi` is a module-like object: pass it where the ``amdsmi`` module would go
(``AmdSource(amdsmi=FakeAmdSmi(...))``). It has the same function names and parameters, the
same enums (``AmdSmiInitFlags``, ``AmdSmiClkType``, ``AmdSmiTemperatureType``,
``AmdSmiTemperatureMetric``), the status codes under ``amdsmi_wrapper.AMDSMI_STATUS_*``, and
its own exception classes built like amdsmi's (``AmdSmiLibraryException(code)`` with
``get_error_code()`` and ``get_error_info()``; RETRY and TIMEOUT raise the
``AmdSmiRetryException`` and ``AmdSmiTimeoutException`` subclasses). Results are the dicts the
``amdsmi`` 7.x Python layer returns, with ``"N/A"`` where the library has no value (it turns
UINT_MAX sentinels into that string). ``legacy=True`` gives older bindings' shapes instead,
each from before the release that changed it: the energy count under ``"power"`` (before
6.2.1), the clock under ``"cur_clk"``, no ``socket_power``, no
``amdsmi_get_gpu_enumeration_info``, and a process list of handles read through
``amdsmi_get_gpu_process_info`` (ROCm 6.0).

Devices are :class:`FakeAmdDevice` objects, which also serve as the processor handles. Each
reading can be scripted (a constant, a sequence consumed one value per call, or a function of
the fake's clock), any function can be made to fail with any status code from its Nth call on,
a device can be lost (every later call fails) and can carry processes. :func:`amd_from_preset`
builds a busy machine of a catalog model (``"8xMI300X"``).

Everything here is simulated: ``FakeAmdSmi.simulated`` is True so outputs can say so.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from computewatch.catalog import Accelerator, load_accelerators
from computewatch.testing._script import (
    Failure,
    Integral,
    Script,
    Scripted,
    Value,
    due,
    mix,
    schedule,
    str_seed,
    unit,
)
from computewatch.testing.presets import parse_preset

__all__ = [
    "AMD_FIELDS",
    "AmdSmiException",
    "AmdSmiLibraryException",
    "FakeAmdDevice",
    "FakeAmdSmi",
    "amd_from_preset",
    "amd_uuid",
]

# -- status codes: amdsmi_wrapper.AMDSMI_STATUS_* of amdsmi 7.0 -------------------------------
AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_FAIL_LOAD_MODULE = 4
AMDSMI_STATUS_FAIL_LOAD_SYMBOL = 5
AMDSMI_STATUS_DRM_ERROR = 6
AMDSMI_STATUS_API_FAILED = 7
AMDSMI_STATUS_TIMEOUT = 8
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_INTERRUPT = 11
AMDSMI_STATUS_IO = 12
AMDSMI_STATUS_ADDRESS_FAULT = 13
AMDSMI_STATUS_FILE_ERROR = 14
AMDSMI_STATUS_OUT_OF_RESOURCES = 15
AMDSMI_STATUS_INTERNAL_EXCEPTION = 16
AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS = 17
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_REFCOUNT_OVERFLOW = 19
AMDSMI_STATUS_DIRECTORY_NOT_FOUND = 20
AMDSMI_STATUS_BUSY = 30
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_NO_SLOT = 33
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_MORE_DATA = 39
AMDSMI_STATUS_NO_DATA = 40
AMDSMI_STATUS_INSUFFICIENT_SIZE = 41
AMDSMI_STATUS_UNEXPECTED_SIZE = 42
AMDSMI_STATUS_UNEXPECTED_DATA = 43
AMDSMI_STATUS_NON_AMD_CPU = 44
AMDSMI_STATUS_NO_ENERGY_DRV = 45
AMDSMI_STATUS_NO_MSR_DRV = 46
AMDSMI_STATUS_NO_HSMP_DRV = 47
AMDSMI_STATUS_NO_HSMP_SUP = 48
AMDSMI_STATUS_NO_HSMP_MSG_SUP = 49
AMDSMI_STATUS_HSMP_TIMEOUT = 50
AMDSMI_STATUS_NO_DRV = 51
AMDSMI_STATUS_FILE_NOT_FOUND = 52
AMDSMI_STATUS_ARG_PTR_NULL = 53
AMDSMI_STATUS_AMDGPU_RESTART_ERR = 54
AMDSMI_STATUS_SETTING_UNAVAILABLE = 55
AMDSMI_STATUS_CORRUPTED_EEPROM = 56
AMDSMI_STATUS_MAP_ERROR = 0xFFFFFFFE
AMDSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF

# The texts amdsmi_exception.AmdSmiLibraryException.set_err_info gives (the common ones).
_ERROR_INFO: dict[int, str] = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED: (
        "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet implemented"
    ),
    AMDSMI_STATUS_FAIL_LOAD_MODULE: "AMDSMI_STATUS_FAIL_LOAD_MODULE - Fail to load lib",
    AMDSMI_STATUS_DRM_ERROR: "AMDSMI_STATUS_DRM_ERROR - Error when called libdrm",
    AMDSMI_STATUS_API_FAILED: "AMDSMI_STATUS_API_FAILED - API call failed",
    AMDSMI_STATUS_TIMEOUT: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    AMDSMI_STATUS_RETRY: "AMDSMI_STATUS_RETRY - Retry operation",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_IO: "AMDSMI_STATUS_IO - I/O Error",
    AMDSMI_STATUS_FILE_ERROR: "AMDSMI_STATUS_FILE_ERROR - Error opening file",
    AMDSMI_STATUS_OUT_OF_RESOURCES: "AMDSMI_STATUS_OUT_OF_RESOURCES - Not enough memory",
    AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AMDSMI_STATUS_BUSY: "AMDSMI_STATUS_BUSY - Device busy",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    AMDSMI_STATUS_NO_DATA: "AMDSMI_STATUS_NO_DATA - No data was found for given input",
    AMDSMI_STATUS_FILE_NOT_FOUND: "AMDSMI_STATUS_FILE_NOT_FOUND - File or directory not found",
    AMDSMI_STATUS_UNKNOWN_ERROR: "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred",
}
_UNKNOWN_INFO = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"


class _Wrapper:
    """Stands in for ``amdsmi.amdsmi_wrapper``, where amdsmi keeps its status constants."""

    def __init__(self) -> None:
        for name, value in globals().items():
            if name.startswith("AMDSMI_STATUS_"):
                setattr(self, name, value)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


_WRAPPER = _Wrapper()


# -- exceptions, built like amdsmi_exception.py ------------------------------------------------
class AmdSmiException(Exception):
    """Base of every fake amdsmi exception (amdsmi's ``AmdSmiException``)."""


class AmdSmiLibraryException(AmdSmiException):
    """A non-success status from the library: ``get_error_code()`` is the AMDSMI_STATUS_*."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _ERROR_INFO.get(err_code, _UNKNOWN_INFO)

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    """A Python-side argument of the wrong type (amdsmi checks handles and enums)."""

    def __init__(self, receivedValue: object, expectedType: object, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or (
            f"Invalid parameter:\nActual type: {type(receivedValue)}\nExpected type: {expectedType}"
        )

    def __str__(self) -> str:
        return self.err_msg


def _raise(code: int) -> None:
    """As amdsmi_interface._check_res: RETRY and TIMEOUT have their own subclasses."""
    if code == AMDSMI_STATUS_RETRY:
        raise AmdSmiRetryException()
    if code == AMDSMI_STATUS_TIMEOUT:
        raise AmdSmiTimeoutException()
    raise AmdSmiLibraryException(code)


# -- enums (values of amdsmi 7.0's amdsmi_wrapper) ---------------------------------------------
class AmdSmiInitFlags(enum.IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0  # an alias of SYS, as in amdsmi
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1  # an alias of HOTSPOT
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class AmdSmiMemoryType(enum.IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


# Names for annotations inside FakeAmdSmi, whose class attributes shadow the enums' names.
_InitFlags = AmdSmiInitFlags
_ClkType = AmdSmiClkType
_TempType = AmdSmiTemperatureType
_TempMetric = AmdSmiTemperatureMetric


# -- scripting --------------------------------------------------------------------------------
AMD_FIELDS: dict[str, str] = {
    "gfx_activity": "amdsmi_get_gpu_activity()['gfx_activity'], %",
    "umc_activity": "amdsmi_get_gpu_activity()['umc_activity'], %",
    "mm_activity": "amdsmi_get_gpu_activity()['mm_activity'], %",
    "vram_used_bytes": "amdsmi_get_gpu_vram_usage()['vram_used'] (reported in MB: // 2**20)",
    "power_w": "amdsmi_get_power_info(): the device's power_field (and socket_power), W",
    "power_cap_uw": "amdsmi_get_power_cap_info()['power_cap'], µW",
    "energy_accumulator": (
        "amdsmi_get_energy_count()['energy_accumulator'], counts of counter_resolution µJ "
        "(default: the integral of power_w)"
    ),
    "hotspot_c": "amdsmi_get_temp_metric(HOTSPOT, CURRENT), °C",
    "edge_c": "amdsmi_get_temp_metric(EDGE, CURRENT), °C",
    "vram_c": "amdsmi_get_temp_metric(VRAM, CURRENT), °C",
    "gfx_clock_mhz": "amdsmi_get_clock_info(GFX)['clk'], MHz",
    "mem_clock_mhz": "amdsmi_get_clock_info(MEM)['clk'], MHz",
}
"""Scriptable readings and where they show. None makes a value in a dict ``"N/A"`` (as amdsmi
does for UINT_MAX) and makes a call that returns a bare number raise NOT_SUPPORTED."""

_NA = "N/A"
_TEMPERATURE_FIELDS = {
    AmdSmiTemperatureType.EDGE: "edge_c",
    AmdSmiTemperatureType.HOTSPOT: "hotspot_c",
    AmdSmiTemperatureType.VRAM: "vram_c",
}


@dataclasses.dataclass(slots=True)
class _Process:
    pid: int
    vram: int
    gtt: int
    cpu: int
    name: str
    gfx_ns: int


_DEFAULTS: dict[str, Value] = {
    "gfx_activity": 0,
    "umc_activity": 0,
    "mm_activity": 0,
    "vram_used_bytes": 0,
    "power_w": 140,
    "hotspot_c": 40,
    "edge_c": None,  # MI300-series boards have no edge sensor: NOT_SUPPORTED
    "vram_c": 38,
    "gfx_clock_mhz": 132,
    "mem_clock_mhz": 900,
}


def amd_uuid(serial: int, device_id: int, index: int = 0xFF) -> str:
    """The UUID amdsmi makes for a GPU (``amdsmi_uuid_gen`` in amd_smi_uuid.cc): the device id,
    a function/partition index and the 64-bit ASIC serial (the KFD unique_id) laid out as
    ``SSiiDDDD-0000-1000-80SS-SSSSSSSSSSSS``."""
    s = serial & 0xFFFFFFFFFFFFFFFF
    return (
        f"{(s >> 56) & 0xFF:02x}{index & 0xFF:02x}{device_id & 0xFFFF:04x}-0000-1000-"
        f"80{(s >> 48) & 0xFF:02x}-{(s >> 32) & 0xFFFF:04x}{s & 0xFFFFFFFF:08x}"
    )


class FakeAmdDevice:
    """One simulated AMD GPU (a GCD: an MI250X package is two); also its processor handle.

    ``power_field`` is the ``amdsmi_get_power_info`` key that carries power on this board
    (``"current_socket_power"`` on MI300 and later, ``"average_socket_power"`` on MI200 and
    earlier, per amdsmi.h); the other reads ``"N/A"``. ``unsupported`` holds amdsmi function
    names that raise NOT_SUPPORTED on this device. ``calls`` counts calls per function name.
    """

    def __init__(
        self,
        market_name: str = "AMD Instinct MI300X",
        uuid: str | None = None,
        *,
        serial: int | None = None,
        device_id: int = 0x74A1,
        vram_total: int = 192 * 2**30,
        power_cap_w: float = 750.0,
        power_field: str = "current_socket_power",
        counter_resolution: float = 15.259,
        energy_start_uj: float = 0.0,
        gfx_version: str = "gfx942",
        compute_units: int = 304,
        hip_id: int | None = None,
        unsupported: Iterable[str] = (),
    ) -> None:
        if power_field not in ("current_socket_power", "average_socket_power"):
            raise ValueError("power_field is current_socket_power or average_socket_power")
        self.market_name = market_name
        self.uuid = uuid or ""  # "" until attached when not given: then from the serial
        self._auto_uuid = uuid is None
        self.serial = serial
        self.device_id = device_id
        self.vram_total = vram_total
        self.power_field = power_field
        self.counter_resolution = counter_resolution
        self.gfx_version = gfx_version
        self.compute_units = compute_units
        self.index = -1  # set by FakeAmdSmi
        self.hip_id = hip_id  # ROCm's ordinal; None: the same as amdsmi's order
        self.unsupported: set[str] = set(unsupported)
        self.calls: dict[str, int] = {}
        self.total_calls = 0
        self.lost = False
        self.processes: dict[int, _Process] = {}
        self._failures: list[Failure] = []
        self._scripts: dict[str, Scripted] = {k: Scripted(v) for k, v in _DEFAULTS.items()}
        self._scripts["power_cap_uw"] = Scripted(int(power_cap_w * 1e6))
        self._energy_scripted = False
        self._energy = Integral(float(energy_start_uj), 1e6)  # W·s to µJ
        self._clock: Callable[[], float] = time.monotonic
        self._owner: FakeAmdSmi | None = None

    def __repr__(self) -> str:
        return f"<FakeAmdDevice {self.index} {self.market_name} {self.uuid}>"

    @property
    def rocr_uuid(self) -> str:
        """The UUID ROCm runtimes use (``ROCR_VISIBLE_DEVICES``, rocminfo): ``GPU-`` and the
        serial in 16 hex digits."""
        return f"GPU-{(self.serial or 0):016x}"

    # -- scripting API ------------------------------------------------------------------------
    def script(self, field: str, values: Script) -> FakeAmdDevice:
        """Script one reading (see :data:`AMD_FIELDS`): a constant, a sequence consumed one
        value per call (the last one repeats), or a function of the fake's clock."""
        if field not in AMD_FIELDS:
            raise ValueError(f"unknown field {field!r}; scriptable fields: {', '.join(AMD_FIELDS)}")
        self._scripts[field] = Scripted(values)
        if field == "energy_accumulator":
            self._energy_scripted = True
        return self

    def fail(
        self,
        function: str,
        code: int,
        *,
        after: int | None = None,
        at_call: int | None = None,
        count: int | None = None,
    ) -> FakeAmdDevice:
        """Make ``function`` (an amdsmi name, or ``"*"`` for any call on this device) raise
        ``AmdSmiLibraryException(code)``: from call number ``at_call`` on (1-based), or once
        ``after`` calls have succeeded (default: from the next call). ``count`` limits how
        many calls fail (a transient error)."""
        done = self.total_calls if function == "*" else self.calls.get(function, 0)
        self._failures.append(
            schedule(function, code, done, after=after, at_call=at_call, count=count)
        )
        return self

    def lose(self) -> FakeAmdDevice:
        """The GPU falls off the bus: every later call on it raises NOT_FOUND.

        amdsmi documents no status for a vanished GPU; NOT_FOUND ("Device Not found") is what
        its sysfs and KFD lookups give when the device's entries are gone.
        """
        self.lost = True
        return self

    def add_process(
        self,
        pid: int,
        vram_bytes: int = 1 << 30,
        *,
        gtt_bytes: int = 0,
        cpu_bytes: int = 0,
        name: str = "python3",
        gfx_ns: int = 0,
    ) -> FakeAmdDevice:
        """A process with memory on this device (amdsmi lists the PIDs KFD knows: host PIDs)."""
        self.processes[pid] = _Process(pid, vram_bytes, gtt_bytes, cpu_bytes, name, gfx_ns)
        return self

    def remove_process(self, pid: int) -> FakeAmdDevice:
        self.processes.pop(pid, None)
        return self

    @property
    def energy_uj(self) -> float:
        """Energy since the driver loaded: its start plus the trapezoid integral of ``power_w``
        over the fake's clock, evaluated at each read (exact for constant or linear power)."""
        now = self._clock()
        return self._energy.at(now, float(self._scripts["power_w"].peek(now) or 0))

    # -- internals ----------------------------------------------------------------------------
    def _attach(self, owner: FakeAmdSmi, index: int) -> None:
        self._owner = owner
        self._clock = owner.clock
        self.index = index
        if self.serial is None:
            self.serial = 0x5A5A_0000_0000_0000 + 0x1111 * (index + 1)
        if self._auto_uuid:
            self.uuid = amd_uuid(self.serial, self.device_id)
        self._energy.restart()
        _ = self.energy_uj  # start integrating at attach time

    def _enter(self, function: str) -> None:
        n = self.calls[function] = self.calls.get(function, 0) + 1
        self.total_calls += 1
        if self.lost:
            _raise(AMDSMI_STATUS_NOT_FOUND)
        if self._failures:
            code = due(self._failures, function, n, self.total_calls)
            if code is not None:
                _raise(code)
        if function in self.unsupported:
            _raise(AMDSMI_STATUS_NOT_SUPPORTED)

    def _value(self, field: str) -> float | int | str:
        """A scripted value for a dict result: ``"N/A"`` where scripted None."""
        value = self._scripts[field].take(self._clock())
        return _NA if value is None else value

    def _scalar(self, field: str) -> float | int:
        """A scripted value for a bare-number result: NOT_SUPPORTED where scripted None."""
        value = self._scripts[field].take(self._clock())
        if value is None:
            _raise(AMDSMI_STATUS_NOT_SUPPORTED)
            raise AssertionError  # unreachable; for type checkers
        return value


class _Hidden:
    """A class attribute that hides a function of the fake, as if the binding lacked it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        raise AttributeError(self.name)


# -- the module-like fake ---------------------------------------------------------------------
class FakeAmdSmi:
    """The fake ``amdsmi`` module. ``clock`` drives energy and time-scripted values.

    ``missing`` names amdsmi functions this binding lacks (``hasattr`` is False for them),
    like an older ``amdsmi``; ``legacy`` selects the older result shapes (module docstring).
    """

    simulated = True

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiClkType = AmdSmiClkType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiMemoryType = AmdSmiMemoryType
    amdsmi_wrapper = _WRAPPER

    _LEGACY_MISSING: ClassVar[frozenset[str]] = frozenset({"amdsmi_get_gpu_enumeration_info"})
    _MODERN_MISSING: ClassVar[frozenset[str]] = frozenset({"amdsmi_get_gpu_process_info"})

    def __init__(
        self,
        devices: Sequence[FakeAmdDevice] = (),
        clock: Callable[[], float] = time.monotonic,
        *,
        legacy: bool = False,
        missing: Iterable[str] = (),
        cpu_nodes: int = 1,
    ) -> None:
        self.clock = clock
        self.devices: list[FakeAmdDevice] = list(devices)
        self.legacy = legacy
        self.cpu_nodes = cpu_nodes  # KFD nodes before the GPUs (enumeration info's hsa_id)
        self.init_count = 0
        self.shutdown_count = 0
        self.init_flags: list[int] = []
        self.calls: dict[str, int] = {}
        self._failures: list[Failure] = []
        hidden = set(missing) | (self._LEGACY_MISSING if legacy else self._MODERN_MISSING)
        self.hide(*hidden)
        for i, d in enumerate(self.devices):
            if d._owner is not None and d._owner is not self:
                raise ValueError(f"{d!r} already belongs to another FakeAmdSmi")
            d._attach(self, i)

    def hide(self, *functions: str) -> FakeAmdSmi:
        """Remove amdsmi functions from this fake, as in a binding that predates them."""
        for name in functions:
            if not name.startswith("amdsmi_") or not hasattr(type(self), name):
                raise ValueError(f"{name!r} is not a function of the fake")
        if functions:
            ns: dict[str, Any] = {name: _Hidden() for name in functions}
            self.__class__ = type(type(self).__name__, (type(self),), ns)
        return self

    def device(self, index: int) -> FakeAmdDevice:
        return self.devices[index]

    def fail(
        self,
        function: str,
        code: int,
        *,
        after: int | None = None,
        at_call: int | None = None,
        count: int | None = None,
    ) -> FakeAmdSmi:
        """Like :meth:`FakeAmdDevice.fail`, for calls that take no handle (``amdsmi_init``,
        ``amdsmi_get_processor_handles``, ``amdsmi_shut_down``)."""
        done = self.calls.get(function, 0)
        # check_start=False: at_call=0 (or after=-1) fails from the first call.
        f = schedule(
            function, code, done, after=after, at_call=at_call, count=count, check_start=False
        )
        self._failures.append(f)
        return self

    # -- internals ----------------------------------------------------------------------------
    def _global(self, function: str, needs_init: bool = True) -> None:
        n = self.calls[function] = self.calls.get(function, 0) + 1
        if self._failures:
            code = due(self._failures, function, n)
            if code is not None:
                _raise(code)
        if needs_init and self.init_count <= 0:
            _raise(AMDSMI_STATUS_NOT_INIT)

    def _dev(self, handle: object, function: str) -> FakeAmdDevice:
        if not isinstance(handle, FakeAmdDevice) or handle._owner is not self:
            raise AmdSmiParameterException(handle, "amdsmi_processor_handle")
        self.calls[function] = self.calls.get(function, 0) + 1
        if self.init_count <= 0:
            _raise(AMDSMI_STATUS_NOT_INIT)
        handle._enter(function)
        return handle

    @staticmethod
    def _check_enum(value: object, kind: type[enum.IntEnum]) -> None:
        if not isinstance(value, kind):
            raise AmdSmiParameterException(value, kind)

    # -- library ------------------------------------------------------------------------------
    def amdsmi_init(self, flag: _InitFlags = _InitFlags.INIT_AMD_GPUS) -> None:
        self._check_enum(flag, _InitFlags)
        self._global("amdsmi_init", needs_init=False)
        self.init_count += 1
        self.init_flags.append(int(flag))

    def amdsmi_shut_down(self) -> None:
        self._global("amdsmi_shut_down")
        self.init_count -= 1
        self.shutdown_count += 1

    def amdsmi_get_processor_handles(self) -> list[FakeAmdDevice]:
        self._global("amdsmi_get_processor_handles")
        return list(self.devices)

    # -- identity -----------------------------------------------------------------------------
    def amdsmi_get_gpu_device_uuid(self, processor_handle: FakeAmdDevice) -> str:
        return self._dev(processor_handle, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_gpu_asic_info(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_gpu_asic_info")
        return {
            "market_name": d.market_name or _NA,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": hex(d.device_id),
            "rev_id": "0x00",
            "asic_serial": f"0x{(d.serial or 0):016X}",
            "oam_id": d.index,
            "num_compute_units": d.compute_units,
            "target_graphics_version": d.gfx_version,
            "subsystem_id": "0x0c34",
        }

    def amdsmi_get_gpu_enumeration_info(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        """amdsmi 7: the DRM nodes, the KFD node (``hsa_id``; CPU nodes come first), the
        ROCm/HIP ordinal (``hip_id``) and the UUID ROCm runtimes use (``hip_uuid``)."""
        d = self._dev(processor_handle, "amdsmi_get_gpu_enumeration_info")
        hip_id = d.index if d.hip_id is None else d.hip_id
        return {
            "drm_render": 128 + d.index,
            "drm_card": 1 + d.index,
            "hsa_id": self.cpu_nodes + hip_id,
            "hip_id": hip_id,
            "hip_uuid": d.rocr_uuid,
        }

    # -- readings -----------------------------------------------------------------------------
    def amdsmi_get_gpu_activity(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_gpu_activity")
        return {
            "gfx_activity": d._value("gfx_activity"),
            "umc_activity": d._value("umc_activity"),
            "mm_activity": d._value("mm_activity"),
        }

    def amdsmi_get_gpu_vram_usage(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_gpu_vram_usage")
        used = d._value("vram_used_bytes")
        return {
            "vram_total": d.vram_total // 2**20,
            "vram_used": used if isinstance(used, str) else int(used) // 2**20,
        }

    def amdsmi_get_power_info(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_power_info")
        power = d._value("power_w")
        watts = power if isinstance(power, str) else round(power)
        cap = d._scripts["power_cap_uw"].peek(d._clock())
        out: dict[str, Any] = {}
        if not self.legacy:
            out["socket_power"] = watts
        out["current_socket_power"] = watts if d.power_field == "current_socket_power" else _NA
        out["average_socket_power"] = watts if d.power_field == "average_socket_power" else _NA
        out["gfx_voltage"] = 800
        out["soc_voltage"] = 750
        out["mem_voltage"] = 1100
        out["power_limit"] = _NA if cap is None else int(cap) // 1_000_000  # W (amdsmi 7.0)
        return out

    def amdsmi_get_power_cap_info(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_power_cap_info")
        cap = int(d._scalar("power_cap_uw"))
        return {
            "power_cap": cap,
            "default_power_cap": cap,
            "dpm_cap": 0,
            "min_power_cap": 0,
            "max_power_cap": cap,
        }

    def amdsmi_get_energy_count(self, processor_handle: FakeAmdDevice) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_energy_count")
        if d._energy_scripted:
            count = int(d._scalar("energy_accumulator"))
        else:
            count = int(d.energy_uj / d.counter_resolution)
        key = "power" if self.legacy else "energy_accumulator"  # renamed in amdsmi 6.2.1
        return {
            key: count,
            "counter_resolution": d.counter_resolution,
            "timestamp": int(d._clock() * 1e9),
        }

    def amdsmi_get_temp_metric(
        self,
        processor_handle: FakeAmdDevice,
        sensor_type: _TempType,
        metric: _TempMetric,
    ) -> int:
        d = self._dev(processor_handle, "amdsmi_get_temp_metric")
        self._check_enum(sensor_type, AmdSmiTemperatureType)
        self._check_enum(metric, AmdSmiTemperatureMetric)
        field = _TEMPERATURE_FIELDS.get(AmdSmiTemperatureType(sensor_type))
        if field is None or metric != AmdSmiTemperatureMetric.CURRENT:
            _raise(AMDSMI_STATUS_NOT_SUPPORTED)
            raise AssertionError  # unreachable
        return int(d._scalar(field))

    def amdsmi_get_clock_info(
        self, processor_handle: FakeAmdDevice, clock_type: _ClkType
    ) -> dict[str, Any]:
        d = self._dev(processor_handle, "amdsmi_get_clock_info")
        self._check_enum(clock_type, AmdSmiClkType)
        if clock_type == AmdSmiClkType.GFX:
            clk = d._value("gfx_clock_mhz")
        elif clock_type == AmdSmiClkType.MEM:
            clk = d._value("mem_clock_mhz")
        else:
            _raise(AMDSMI_STATUS_NOT_SUPPORTED)
            raise AssertionError  # unreachable
        value = clk if isinstance(clk, str) else int(clk)
        if self.legacy:
            return {"cur_clk": value, "min_clk": 100, "max_clk": 2100}
        return {
            "clk": value,
            "min_clk": 100,
            "max_clk": 2100,
            "clk_locked": False,
            "clk_deep_sleep": 0,
        }

    # -- processes ----------------------------------------------------------------------------
    def amdsmi_get_gpu_process_list(self, processor_handle: FakeAmdDevice) -> list[Any]:
        """amdsmi 6.1 and later: one dict per process. ``legacy``: process handles (PIDs)."""
        d = self._dev(processor_handle, "amdsmi_get_gpu_process_list")
        if self.legacy:
            return [p.pid for p in d.processes.values()]
        out = []
        for p in d.processes.values():
            info = self._process_dict(p)
            info["cu_occupancy"] = _NA
            out.append(info)
        return out

    def amdsmi_get_gpu_process_info(self, processor_handle: FakeAmdDevice, process: int) -> Any:
        """``legacy`` only (removed from later bindings): the details of one listed process."""
        d = self._dev(processor_handle, "amdsmi_get_gpu_process_info")
        p = d.processes.get(int(process))
        if p is None:
            _raise(AMDSMI_STATUS_NOT_FOUND)
            raise AssertionError  # unreachable
        return self._process_dict(p)

    @staticmethod
    def _process_dict(p: _Process) -> dict[str, Any]:
        return {
            "name": p.name or _NA,
            "pid": p.pid,
            "mem": p.vram + p.gtt + p.cpu,
            "engine_usage": {"gfx": p.gfx_ns, "enc": 0},
            "memory_usage": {"gtt_mem": p.gtt, "cpu_mem": p.cpu, "vram_mem": p.vram},
        }


# -- presets ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class _Board:
    market_name: str
    device_id: int  # PCI device id
    gfx_version: str
    compute_units: int  # per device (GCD)
    gfx_clock_mhz: int  # peak engine clock
    mem_clock_mhz: int
    gcds: int  # devices amdsmi lists per package
    power_field: str
    edge_sensor: bool


# PCI ids and figures from AMD's product pages and the amdgpu device tables.
_BOARDS: dict[str, _Board] = {
    "MI250X": _Board("AMD Instinct MI250X", 0x740C, "gfx90a", 110, 1700, 1600, 2,
                     "average_socket_power", True),
    "MI300X": _Board("AMD Instinct MI300X", 0x74A1, "gfx942", 304, 2100, 1300, 1,
                     "current_socket_power", False),
}  # fmt: skip


def amd_from_preset(
    preset: str,
    seed: int = 0,
    *,
    clock: Callable[[], float] = time.monotonic,
    legacy: bool = False,
) -> FakeAmdSmi:
    """A fake machine of ``COUNTxMODEL`` busy AMD accelerators (``"8xMI300X"``; a bare model
    means one). COUNT counts packages: an MI250X is two GCDs, so two devices, each with half
    the package's memory; the package's power shows on its first GCD and the second reads 0 W
    (as AMD's driver reports it).

    Each device works around its own utilization level (seeded), with VRAM in use below the
    total, power between idle (18 % of the board power) and the cap following utilization, an
    energy counter integrating that power over ``clock``, temperatures and clocks. Memory and
    power come from the catalog; serials and UUIDs are deterministic from ``seed``.
    """
    catalog = {k: a for k, a in load_accelerators().items() if a.vendor == "AMD" and k in _BOARDS}
    count, acc = parse_preset(preset, catalog, "AMD ")
    board = _BOARDS[acc.model]
    devices: list[FakeAmdDevice] = []
    for package in range(count):
        for gcd in range(board.gcds):
            devices.append(_preset_device(acc, board, package, gcd, seed))
    return FakeAmdSmi(devices, clock, legacy=legacy)


def _preset_device(
    acc: Accelerator, board: _Board, package: int, gcd: int, seed: int
) -> FakeAmdDevice:
    key = mix(seed, package, gcd, str_seed(acc.model))
    pkg_key = mix(seed, package, str_seed(acc.model))
    tdp_w = acc.tdp_watts or 500.0
    idle_w = 0.18 * tdp_w
    level = 0.70 + 0.25 * (unit(key, 1) + 1) / 2  # 70-95 % busy
    mem_frac = 0.55 + 0.35 * (unit(key, 2) + 1) / 2
    total = acc.memory_bytes // board.gcds
    period = 0.1  # seconds per noise step
    reports_power = gcd == 0  # an MI250X reports its package's power on the first GCD

    def util(t: float) -> float:
        return min(max(level + 0.08 * unit(key, 3, int(t / period)), 0.0), 1.0)

    def power(t: float) -> float:
        if not reports_power:
            return 0.0
        return round(idle_w + (0.92 * tdp_w - idle_w) * util(t))

    serial = mix(key, 0x414D44) & 0x7FFF_FFFF_FFFF_FFFF
    d = FakeAmdDevice(
        board.market_name,
        serial=serial,
        device_id=board.device_id,
        vram_total=total,
        power_cap_w=tdp_w,
        power_field=board.power_field,
        energy_start_uj=4e12 + 1e12 * (unit(pkg_key, 4) + 1) if reports_power else 2e9,
        gfx_version=board.gfx_version,
        compute_units=board.compute_units,
    )
    d.script("gfx_activity", lambda t: round(100 * util(t)))
    d.script("umc_activity", lambda t: round(45 * util(t)))
    d.script("mm_activity", 0)
    d.script("vram_used_bytes", lambda t: int(total * mem_frac * (0.98 + 0.02 * util(t))))
    d.script("power_w", power)
    d.script("hotspot_c", lambda t: round(40 + 45 * util(t)))
    d.script("edge_c", (lambda t: round(35 + 35 * util(t))) if board.edge_sensor else None)
    d.script("vram_c", lambda t: round(35 + 30 * util(t)))
    d.script("gfx_clock_mhz", lambda t: round(board.gfx_clock_mhz * (0.9 + 0.1 * (1 - util(t)))))
    d.script("mem_clock_mhz", board.mem_clock_mhz)
    return d
