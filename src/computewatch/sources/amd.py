"""AMD GPUs through AMD SMI: the only module that imports the ``amdsmi`` package.

The amdsmi module is a parameter (``amdsmi=``): the real package by default, or
:class:`computewatch.testing.fake_amdsmi.FakeAmdSmi` in tests and demos. Everything
amdsmi-specific, its exceptions and status codes included, is reached through that module
object, and its errors are translated here (docs/architecture.md, "Sampling"), as the NVIDIA
source does:

- NOT_SUPPORTED or NOT_YET_IMPLEMENTED on a field (or a function this binding lacks) disables
  that field on that device, with the reason in ``GpuDevice.capabilities``; it is not retried.
- NO_PERM likewise, with its own reason.
- A value amdsmi gives as ``"N/A"`` (its Python layer's word for a UINT_MAX sentinel) on three
  reads in a row disables the field likewise; a single N/A skips it for the tick.
- A lost GPU is noted once and dropped; the other devices go on. amdsmi has no GPU_IS_LOST: a
  field failing with NOT_FOUND, IO, FILE_ERROR, DRM_ERROR or DIRECTORY_NOT_FOUND triggers one
  ``amdsmi_get_gpu_asic_info`` call, and if that fails with one of them too the GPU is gone.
- Any other amdsmi error (RETRY, TIMEOUT, BUSY...) skips that field for this tick.

Units are SI base units: percentages become 0-1 ratios, MB (amdsmi's MB are MiB) bytes, µW
watts, counts of ``counter_resolution`` µJ joules, MHz hertz.

Field names differ between amdsmi versions; both forms are read where known. The energy count
is ``energy_accumulator`` from 6.2.1 on and ``power`` before; the clock is ``clk`` in 7.x and
``cur_clk`` in older bindings; power is ``current_socket_power`` (MI300 and later) or
``average_socket_power`` (MI200 and earlier), or 7.x's ``socket_power``; the process list holds
dicts in current bindings and handles (resolved with ``amdsmi_get_gpu_process_info``) in ROCm
6.0's.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import time
from collections.abc import Callable, Collection
from typing import Any, ClassVar

from computewatch.catalog import Accelerator, load_accelerators
from computewatch.errors import ComputewatchError
from computewatch.readings import counter, gauge
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.gpu_common import (
    Add,
    GpuDev,
    GpuDevice,
    VendorGpuSource,
    parse_visible_devices,
)

__all__ = [
    "INSTALL_HINT",
    "AmdSource",
    "find_by_market_name",
    "rocm_uuid_from_amdsmi_uuid",
]

INSTALL_HINT = "amdsmi not installed: pip install 'computewatch[amd]'"

# amdsmi_wrapper.AMDSMI_STATUS_* this module relies on, with amdsmi 7's values as fallbacks.
_STATUS_DEFAULTS: dict[str, int] = {
    "NOT_SUPPORTED": 2,
    "NOT_YET_IMPLEMENTED": 3,
    "DRM_ERROR": 6,
    "NO_PERM": 10,
    "IO": 12,
    "FILE_ERROR": 14,
    "DIRECTORY_NOT_FOUND": 20,
    "NOT_FOUND": 31,
}
_LOST_STATUSES = ("NOT_FOUND", "IO", "FILE_ERROR", "DRM_ERROR", "DIRECTORY_NOT_FOUND")
_NA_STRIKES = 3  # consecutive N/A reads that disable a field
_STUCK_STRIKES = 3  # reads of a still energy counter under load before polling power
_STUCK_SECONDS = 2.0  # ... spanning at least this long
_JUMP_STRIKES = 3  # implausible energy-counter reads in a row before resynchronising
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_WRAP32 = 1 << 32
# amdsmi_power_info keys that carry board power, in W on Linux bare metal (amdsmi.h).
# socket_power comes last: amdsmi 6.4 documents it for virtualization hosts only, in µW.
_POWER_KEYS = ("current_socket_power", "average_socket_power", "socket_power")
_MAX_BOARD_WATTS = 1000.0  # bounds an energy step when the power cap is unknown

Reader = Callable[["_Dev", Add], None]


class _NotAvailable(ComputewatchError):
    """amdsmi answered, but with ``"N/A"`` (or an unconverted UINT_MAX) for what we need."""


def _num(value: object, ceiling: float = _U32) -> float | None:
    """A reading as float; None for ``"N/A"``, a non-number, or a sentinel at ``ceiling``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value >= ceiling:
        return None
    return float(value)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value != "N/A" else None


_INSTINCT = re.compile(r"MI\d+[A-Z]*")


def find_by_market_name(name: str) -> Accelerator | None:
    """The AMD catalog row whose model is a word of amdsmi's ``market_name`` (``"AMD Instinct
    MI300X OAM"`` is MI300X), or None. A name that also names another Instinct model
    (``"Instinct MI250X/MI250"``, one PCI id for both) matches nothing: we do not guess."""
    amd = {a.model.upper(): a for a in load_accelerators().values() if a.vendor.upper() == "AMD"}
    words = set(re.findall(r"[A-Z0-9][A-Z0-9-]*", name.upper()))
    hits = {amd[w].model: amd[w] for w in words if w in amd}
    instinct = {w for w in words if _INSTINCT.fullmatch(w)}
    if len(hits) != 1:
        return None
    acc = next(iter(hits.values()))
    return acc if instinct <= {acc.model.upper()} else None


def rocm_uuid_from_amdsmi_uuid(uuid: str) -> str | None:
    """The ``GPU-<16 hex>`` UUID ROCm runtimes use (ROCR_VISIBLE_DEVICES, rocminfo) for an
    amdsmi UUID, or None when ``uuid`` is not in amdsmi's layout.

    amdsmi builds its UUID from the 64-bit ASIC serial (KFD's unique_id, which ROCr prints),
    the PCI device id and a partition index (``amdsmi_uuid_gen``, amd_smi_uuid.cc):
    ``SSiiDDDD-0000-1000-80SS-SSSSSSSSSSSS`` with the serial's top byte first, its next byte
    after ``80`` and its low 48 bits last.
    """
    m = re.fullmatch(
        r"([0-9a-f]{2})[0-9a-f]{6}-0000-1000-80([0-9a-f]{2})-([0-9a-f]{12})", uuid.strip().lower()
    )
    if m is None:
        return None
    serial = int(m.group(1) + m.group(2) + m.group(3), 16)
    return f"GPU-{serial:016X}" if serial else None


class _Dev(GpuDev):
    """amdsmi's per-device state kept between ticks (ROCm identity, N/A strikes, counter)."""

    __slots__ = (
        "e_jumps",
        "e_last",
        "e_moved",
        "e_stuck",
        "e_t",
        "e_total",
        "na",
        "power_key",
        "rocm_index",
        "rocm_uuid",
    )

    def __init__(
        self, info: GpuDevice, handle: Any, rocm_index: int | None, rocm_uuid: str | None
    ) -> None:
        super().__init__(info, handle)
        self.rocm_index = rocm_index  # the GPU's ordinal in ROCm (HIP/ROCr), when amdsmi says
        self.rocm_uuid = rocm_uuid  # GPU-<16 hex>, as ROCR_VISIBLE_DEVICES takes it
        # field -> (N/A reads in a row, the tick of the last one or of a later transient error)
        self.na: dict[str, tuple[int, int]] = {}
        self.e_total = 0.0  # joules counted since the first read
        self.e_last: int | None = None  # the last accepted raw count
        self.e_t = 0.0  # when the last raw count was accepted
        self.e_moved = 0.0  # when the count last advanced
        self.e_stuck = 0
        self.e_jumps = 0
        self.power_key = ""


class AmdSource(VendorGpuSource[_Dev]):
    """Per-GPU utilization, memory, power, energy, temperature and clocks of AMD GPUs; memory
    of the monitored tree's processes on each.

    ``gpu_utilization_ratio`` is amdsmi's ``gfx_activity`` (the graphics/compute engine's busy
    percentage over the firmware's sampling window) and ``gpu_memory_utilization_ratio`` its
    ``umc_activity`` (the memory controller's); like NVML's they say that work ran, not how
    much of the GPU it filled. ``gpu_sm_clock_hertz`` is the GFX engine clock.

    Each GCD is a device: an MI250X is two, and AMD's driver reports the package's power and
    energy on one of them (the other reads 0 W), so its ``shared`` capability says so.

    ``pids`` returns the PIDs of the monitored tree; without it no per-process readings are
    made. amdsmi lists the PIDs KFD knows, which are host PIDs: in a container without the
    host PID namespace, :attr:`pid_namespace_mismatch` is set and handled as the NVIDIA source
    does.
    """

    name = "amd"
    _LIBRARY = "amdsmi"
    _PID_OWNER = "KFD"
    _FEATURES: ClassVar[dict[str, str]] = {"temperature_edge": "temperature"}

    def __init__(
        self,
        amdsmi: Any | None = None,
        visible_devices: str | None = None,
        pids: Callable[[], Collection[int]] | None = None,
        all_gpus: bool = False,
        *,
        procfs_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``visible_devices`` follows ROCR_VISIBLE_DEVICES (ROCm ordinals or ``GPU-`` UUIDs
        and their prefixes; an empty string means no GPU; an invalid or repeated entry ends
        the list); None reads ROCR_VISIBLE_DEVICES and then HIP_VISIBLE_DEVICES (or
        CUDA_VISIBLE_DEVICES), which selects among the GPUs ROCR left, as ROCm does.
        ``all_gpus=True`` ignores them (a node agent). ``clock`` times the polled-power
        energy integral and the energy counter's plausibility checks."""
        if amdsmi is None:
            amdsmi = _import_amdsmi()
        err: type[Exception] = amdsmi.AmdSmiLibraryException
        base_err: type[Exception] = getattr(amdsmi, "AmdSmiException", err)
        super().__init__(amdsmi, err, pids, procfs_root, clock, base_err=base_err)
        self._tick = 0  # read() calls so far
        wrapper = getattr(amdsmi, "amdsmi_wrapper", None)
        self._c = {
            name: int(getattr(wrapper, f"AMDSMI_STATUS_{name}", default))
            for name, default in _STATUS_DEFAULTS.items()
        }
        self._unsupported = (self._c["NOT_SUPPORTED"], self._c["NOT_YET_IMPLEMENTED"])
        self._lost_codes = frozenset(self._c[s] for s in _LOST_STATUSES)
        temp_type = getattr(amdsmi, "AmdSmiTemperatureType", None)
        temp_metric = getattr(amdsmi, "AmdSmiTemperatureMetric", None)
        clk = getattr(amdsmi, "AmdSmiClkType", None)
        self._hotspot = getattr(temp_type, "HOTSPOT", None)
        self._edge = getattr(temp_type, "EDGE", None)
        self._current = getattr(temp_metric, "CURRENT", None)
        self._gfx = getattr(clk, "GFX", None)
        self._mem = getattr(clk, "MEM", None)
        flags = getattr(amdsmi, "AmdSmiInitFlags", None)
        try:
            if flags is not None:
                amdsmi.amdsmi_init(flags.INIT_AMD_GPUS)
            else:
                amdsmi.amdsmi_init()
        except (self._base_err, OSError) as e:
            raise SourceUnavailable(f"amdsmi could not start: {self._reason(e)}") from e
        self._open(visible_devices, all_gpus)

    def _shutdown(self) -> None:
        """``amdsmi_shut_down``."""
        try:
            self._mod.amdsmi_shut_down()
        except Exception:
            pass

    # -- setup --------------------------------------------------------------------------------
    def _setup(self, visible_devices: str | None, all_gpus: bool) -> None:
        try:
            handles = list(self._mod.amdsmi_get_processor_handles())
        except self._base_err as e:
            raise SourceUnavailable(f"amdsmi could not list GPUs: {self._reason(e)}") from e
        if not handles:
            raise SourceUnavailable("amdsmi found no AMD GPU")
        found: list[_Dev] = []
        for i, h in enumerate(handles):
            dev = self._probe(i, h)
            if dev is not None:
                found.append(dev)
        if not found:
            raise SourceUnavailable("amdsmi lists GPUs but none could be opened (see notes)")
        chosen = found if all_gpus else self._select(found, visible_devices)
        for d in chosen:
            self._setup_readers(d)
        self._all = chosen
        self._devs = list(chosen)

    def _probe(self, index: int, handle: Any) -> _Dev | None:
        try:
            uuid = _text(self._mod.amdsmi_get_gpu_device_uuid(handle))
        except self._base_err as e:
            self._note(
                f"GPU {index} could not be opened and is not monitored: {self._reason(e)}",
                f"open{index}",
            )
            return None
        if uuid is None:
            self._note(f"GPU {index} has no UUID and is not monitored", f"open{index}")
            return None
        asic, _ = self._call("amdsmi_get_gpu_asic_info", handle)
        asic = asic if isinstance(asic, dict) else {}
        name = _text(asic.get("market_name")) or "AMD GPU (amdsmi gives no market name)"
        # ROCm's ordinal and UUID: amdsmi 7 says (hip_id, hip_uuid); before, the ASIC serial
        # (the KFD unique_id ROCr prints as GPU-<hex>) and amdsmi's enumeration order stand in.
        enum, _ = self._call("amdsmi_get_gpu_enumeration_info", handle)
        enum = enum if isinstance(enum, dict) else {}
        hip_id = _num(enum.get("hip_id"))
        rocm_uuid = _text(enum.get("hip_uuid"))
        if rocm_uuid is None or not rocm_uuid.upper().startswith("GPU-"):
            rocm_uuid = None
            serial = _text(asic.get("asic_serial"))
            if serial is not None:
                with contextlib.suppress(ValueError):
                    value = int(serial, 16)
                    rocm_uuid = f"GPU-{value:016X}" if value else None
            if rocm_uuid is None:
                rocm_uuid = rocm_uuid_from_amdsmi_uuid(uuid)
        vram, _ = self._call("amdsmi_get_gpu_vram_usage", handle)
        total_mb = _num(vram.get("vram_total")) if isinstance(vram, dict) else None
        cap, _ = self._call("amdsmi_get_power_cap_info", handle)
        cap_uw = _num(cap.get("power_cap"), _U64) if isinstance(cap, dict) else None
        acc = find_by_market_name(name)
        info = GpuDevice(
            index=index,
            uuid=uuid,
            name=name,
            model=acc.model if acc else None,
            memory_total_bytes=int(total_mb) * 2**20 if total_mb else None,
            power_limit_watts=cap_uw / 1e6 if cap_uw else None,
            simulated=self.simulated,
        )
        if acc is not None and acc.model == "MI250X":
            info.capabilities["shared"] = True
            info.capabilities["shared_why"] = (
                "an MI250X GCD: the package's two GCDs are two devices, and AMD's driver "
                "reports the whole package's power and energy on one of them (the other reads "
                "0 W)"
            )
        return _Dev(info, handle, int(hip_id) if hip_id is not None else None, rocm_uuid)

    def _select(self, found: list[_Dev], visible_devices: str | None) -> list[_Dev]:
        """The devices ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES, make visible, reported
        in amdsmi's order (ROCr's rules, amd_filter_device.cpp: an entry that is no ordinal,
        no unique ``GPU-`` UUID prefix, or a repeat ends the list)."""
        env = os.environ
        layers: list[tuple[str, str]] = []
        if visible_devices is not None:
            layers.append(("visible_devices", visible_devices))
        else:
            rocr = env.get("ROCR_VISIBLE_DEVICES")
            if rocr is not None:
                layers.append(("ROCR_VISIBLE_DEVICES", rocr))
            for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
                value = env.get(var)
                if value is not None:
                    layers.append((var, value))
                    break
        if not layers:
            return found
        known = all(d.rocm_index is not None for d in found)
        current = sorted(found, key=lambda d: d.rocm_index or 0) if known else list(found)
        used_index = False
        for var, spec in layers:
            entries = parse_visible_devices(spec) or []
            if not entries:
                raise SourceUnavailable(
                    f"{var} is set to an empty string: no GPU is visible to the job"
                )
            chosen: list[_Dev] = []
            stopped: str | None = None
            for entry in entries:
                dev = self._match(entry, current)
                if dev is None or dev in chosen:
                    stopped = entry
                    break
                used_index |= entry.isdigit()
                chosen.append(dev)
            if stopped is not None:
                self._note(
                    f"{var}={spec!r}: entry {stopped!r} matches no GPU or repeats one, so (as "
                    "in ROCm) it and the entries after it are ignored",
                    f"visible-invalid:{var}",
                )
            if not chosen:
                raise SourceUnavailable(f"no GPU matches {var}={spec!r}")
            current = chosen
        if used_index and not known:
            self._note(
                "GPUs are selected by ordinal, but this amdsmi cannot say how ROCm numbers "
                "them (no amdsmi_get_gpu_enumeration_info): amdsmi's order is assumed, so the "
                "GPUs monitored may not be the job's",
                "visible-order",
            )
        keep = {id(d) for d in current}
        return [d for d in found if id(d) in keep]

    @staticmethod
    def _match(entry: str, current: list[_Dev]) -> _Dev | None:
        if entry.isdigit():
            i = int(entry)
            return current[i] if i < len(current) else None
        token = entry.upper()
        if token.startswith("GPU-") and 5 <= len(token) <= 20:
            hits = [d for d in current if d.rocm_uuid and d.rocm_uuid.upper().startswith(token)]
            return hits[0] if len(hits) == 1 else None
        return None

    def _setup_readers(self, d: _Dev) -> None:
        """The fields to read for this device, in tick order (power before energy)."""
        cap = d.info.capabilities
        r: list[tuple[str, Reader]] = []

        def want(field: str, fn_name: str, reader: Reader, *needs: object) -> None:
            if not hasattr(self._mod, fn_name) or any(x is None for x in needs):
                cap[field] = False
                cap[f"{field}_why"] = f"this amdsmi has no {fn_name}() (or its enums)"
            else:
                r.append((field, reader))

        want("activity", "amdsmi_get_gpu_activity", self._r_activity)
        want("memory", "amdsmi_get_gpu_vram_usage", self._r_memory)
        want("power", "amdsmi_get_power_info", self._r_power)
        want("power_limit", "amdsmi_get_power_cap_info", self._r_power_limit)
        # Energy: the accumulator, if it answers (probed once; the first read() rebases it to
        # 0). A transient error keeps it; "unsupported", "not allowed" or missing means polling.
        unusable = (*self._unsupported, self._c["NO_PERM"])
        raw, e = self._call("amdsmi_get_energy_count", d.handle)
        if isinstance(raw, dict) or (e is not None and self._code(e) not in unusable):
            cap["energy_counter"] = True
            cap["energy_counter_why"] = (
                "amdsmi_get_energy_count: accumulator x counter_resolution µJ since the driver "
                "loaded"
            )
            r.append(("energy_counter", self._r_energy_counter))
        else:
            why = self._reason(e) if e is not None else "amdsmi_get_energy_count missing"
            cap["energy_counter"] = False
            cap["energy_counter_why"] = (
                f"no energy counter ({why}): energy is the integral of polled power"
            )
            r.append(("energy_polled", self._r_energy_polled))
        want("temperature", "amdsmi_get_temp_metric", self._r_temperature, self._hotspot,
             self._current)  # fmt: skip
        want("sm_clock", "amdsmi_get_clock_info", self._r_sm_clock, self._gfx)
        want("memory_clock", "amdsmi_get_clock_info", self._r_memory_clock, self._mem)
        if self._pids is None:
            cap["per_process"] = False
            cap["per_process_why"] = "no process tree to attribute"
        elif not hasattr(self._mod, "amdsmi_get_gpu_process_list"):
            cap["per_process"] = False
            cap["per_process_why"] = "this amdsmi has no amdsmi_get_gpu_process_list()"
        else:
            cap["per_process"] = True
            cap["per_process_why"] = (
                "amdsmi_get_gpu_process_list: VRAM of each process KFD lists on the GPU"
            )
            r.append(("processes", self._r_processes))
        d.readers = r

    # -- error translation --------------------------------------------------------------------
    def _code(self, e: Exception) -> int | None:
        get = getattr(e, "get_error_code", None)
        code = get() if callable(get) else getattr(e, "err_code", None)
        return code if isinstance(code, int) else None

    def _reason(self, e: BaseException) -> str:
        """amdsmi's one-line text ("AMDSMI_STATUS_NO_PERM - Permission Denied"), not its
        multi-line ``str()``."""
        get = getattr(e, "get_error_info", None)
        if callable(get):
            with contextlib.suppress(Exception):
                return str(get())
        return " ".join(str(e).split()) or type(e).__name__

    def _before_devices(self) -> None:
        self._tick += 1

    def _on_other_error(self, d: _Dev, field: str, e: Exception, add: Add) -> None:
        if isinstance(e, _NotAvailable):
            self._on_not_available(d, field, str(e), add)
        else:
            self._broken(d, field, e)

    def _na_row(self, d: _Dev, field: str) -> int:
        """The N/A reads in a row of ``field`` before this tick. The row holds while every
        tick since its last N/A brought a transient error (``_on_error`` restamps it); a good
        read ends it. Every field is read once a tick, so a tick missing from the row is one
        whose read was good."""
        n, tick = d.na.get(field, (0, 0))
        return n if tick == self._tick - 1 else 0

    def _on_not_available(self, d: _Dev, field: str, what: str, add: Add) -> None:
        n = self._na_row(d, field) + 1
        if n < _NA_STRIKES:
            d.na[field] = (n, self._tick)
            return
        d.na.pop(field, None)
        why = f"amdsmi reports {what} as N/A ({n} reads in a row)"
        if field == "energy_counter":
            self._to_polled(d, d.e_total, why, add)
        else:
            self._disable(d, field, f"{why}: not available")

    def _on_error(self, d: _Dev, field: str, e: Exception, add: Add) -> bool:
        """Translate an amdsmi error on one field; True when the device was lost."""
        code = self._code(e)
        why = self._reason(e)
        row = self._na_row(d, field)
        if row:  # a transient error does not end a row of N/A reads
            d.na[field] = (row, self._tick)
        if code in self._lost_codes and self._gone(d):
            self._lose(d)
            return True
        if field == "temperature" and code in self._unsupported and self._edge is not None:
            # MI300-series boards have no edge sensor; older ones may lack the hotspot one.
            return self._fall_back(d, field, "temperature_edge", self._r_temperature_edge, add)
        if field == "energy_counter" and code in (*self._unsupported, self._c["NO_PERM"]):
            self._to_polled(d, d.e_total, f"energy counter stopped answering ({why})", add)
            return False
        if code in self._unsupported:
            self._disable(d, field, f"not supported by this GPU or driver (amdsmi: {why})")
        elif code == self._c["NO_PERM"]:
            self._disable(
                d,
                field,
                f"permission denied (amdsmi: {why}); it may need root or the render group",
            )
        # Any other status (RETRY, TIMEOUT, BUSY...): skip this field for this tick.
        return False

    def _gone(self, d: _Dev) -> bool:
        """Whether the GPU itself is gone, not just one of its files: ask for its ASIC info."""
        try:
            self._mod.amdsmi_get_gpu_asic_info(d.handle)
        except self._err as e:
            return self._code(e) in self._lost_codes
        except Exception:
            return False
        return False

    def _lose(self, d: _Dev) -> None:
        self._mark_lost(d, "amdsmi stopped finding the GPU")

    # -- per-field readers (hot path: one amdsmi call, one or two readings) -------------------
    def _r_activity(self, d: _Dev, add: Add) -> None:
        a = self._mod.amdsmi_get_gpu_activity(d.handle)
        gfx = _num(a.get("gfx_activity"), 101.0)  # amdsmi: > 100 means no value
        umc = _num(a.get("umc_activity"), 101.0)
        if gfx is None and umc is None:
            raise _NotAvailable("gfx_activity and umc_activity")
        cap = d.info.capabilities
        if gfx is not None:
            add(gauge("gpu_utilization_ratio", gfx / 100.0, d.lbl))
        if umc is not None:
            add(gauge("gpu_memory_utilization_ratio", umc / 100.0, d.lbl))
        # Say so when one of the two comes and goes as N/A (only when that changes).
        if (gfx is None) != (cap.get("utilization") is False):
            self._partial(d, "utilization", gfx is not None, "gfx_activity")
        if (umc is None) != (cap.get("memory_utilization") is False):
            self._partial(d, "memory_utilization", umc is not None, "umc_activity")

    @staticmethod
    def _partial(d: _Dev, feature: str, ok: bool, key: str) -> None:
        cap = d.info.capabilities
        cap[feature] = ok
        cap[f"{feature}_why"] = (
            f"amdsmi_get_gpu_activity()['{key}']"
            if ok
            else f"amdsmi_get_gpu_activity() gives {key} as N/A on this GPU"
        )

    def _r_memory(self, d: _Dev, add: Add) -> None:
        v = self._mod.amdsmi_get_gpu_vram_usage(d.handle)
        used = _num(v.get("vram_used"))
        total = _num(v.get("vram_total"))
        if used is None and total is None:
            raise _NotAvailable("vram_used and vram_total")
        if used is not None:  # MB: MiB in amdsmi (bytes // 2**20)
            add(gauge("gpu_memory_used_bytes", used * 1048576.0, d.lbl))
        if total is not None:
            add(gauge("gpu_memory_total_bytes", total * 1048576.0, d.lbl))

    def _r_power(self, d: _Dev, add: Add) -> None:
        p = self._mod.amdsmi_get_power_info(d.handle)
        watts: float | None = None
        key = ""
        for key in _POWER_KEYS:
            watts = _num(p.get(key), _U16)
            if watts is not None:
                break
        if watts is None:
            raise _NotAvailable("socket power")
        if key != d.power_key:
            d.power_key = key
            d.info.capabilities["power"] = True
            d.info.capabilities["power_why"] = f"amdsmi_get_power_info()['{key}'], W"
        d.power_w = watts
        d.power_t = self._clock()
        add(gauge("gpu_power_watts", watts, d.lbl))

    def _r_power_limit(self, d: _Dev, add: Add) -> None:
        # µW on Linux bare metal (amdsmi.h, amdsmi_power_cap_info_t); 0 means unknown.
        uw = _num(self._mod.amdsmi_get_power_cap_info(d.handle).get("power_cap"), _U64)
        if not uw:
            raise _NotAvailable("power_cap")
        add(gauge("gpu_power_limit_watts", uw / 1e6, d.lbl))

    def _r_energy_counter(self, d: _Dev, add: Add) -> None:
        e = self._mod.amdsmi_get_energy_count(d.handle)
        raw = e.get("energy_accumulator")
        if raw is None:
            raw = e.get("power")  # its name before amdsmi 6.2.1
        res = _num(e.get("counter_resolution"))
        if isinstance(raw, float) and raw.is_integer():
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < _U64 or not res:
            raise _NotAvailable("the energy accumulator")
        raw_count = raw  # kept as an int: a float would round counts beyond 2**53
        now = self._clock()
        last = d.e_last
        if last is None:
            d.e_last, d.e_t, d.e_moved = raw_count, now, now
            add(counter("gpu_energy_joules_total", d.e_total, d.lbl_counter))
            return
        step = self._energy_step(d, raw_count, last, res, now - d.e_t)
        if step is None:
            d.e_jumps += 1
            if d.e_jumps >= _JUMP_STRIKES:  # it stays off: count on from where it is now
                d.e_jumps = 0
                d.e_last, d.e_t = raw_count, now
                self._note(
                    f"GPU {d.info.uuid}: the energy counter jumped to {raw_count} and stayed; "
                    "counting resumes from there, the energy in between is not counted",
                    f"energy-resync:{d.info.uuid}",
                )
            add(counter("gpu_energy_joules_total", d.e_total, d.lbl_counter))
            return
        d.e_jumps = 0
        d.e_total += step * res * 1e-6
        d.e_last, d.e_t = raw_count, now
        # A counter that stands still while the board draws power is broken (amdsmi#38); a
        # few reads over a couple of seconds, so a driver's cached metrics do not trip it.
        if step == 0 and d.power_w is not None and d.power_w >= 1.0:
            d.e_stuck += 1
            if d.e_stuck >= _STUCK_STRIKES and now - d.e_moved >= _STUCK_SECONDS:
                why = f"energy counter stood still over {d.e_stuck} reads at {d.power_w:g} W"
                self._to_polled(d, d.e_total, why, add)
                return
        else:
            d.e_stuck = 0
            d.e_moved = now
        add(counter("gpu_energy_joules_total", d.e_total, d.lbl_counter))

    def _energy_step(self, d: _Dev, count: int, last: int, res: float, dt: float) -> int | None:
        """The counts to add between two reads, or None for a jump no power explains.

        amdsmi types the accumulator as uint64 and documents no narrower width; it has been
        seen to step back on an MI250X (amdsmi#115). A step back that a 32-bit counter's wrap
        explains at up to twice the board's power cap counts as that wrap; one from which the
        counter could have restarted from 0 since the last read (driver reload, GPU reset)
        counts from 0; other steps back, and steps forward beyond that power, are ignored.
        """
        bound = 2.0 * (d.info.power_limit_watts or _MAX_BOARD_WATTS) * max(dt, 1.0) / (res * 1e-6)
        step = count - last
        if 0 <= step <= bound:
            return step
        if step < 0:
            if last < _WRAP32 and count + _WRAP32 - last <= bound:
                return count + _WRAP32 - last
            if count <= bound:
                return count
        self._note(
            f"GPU {d.info.uuid}: the energy counter stepped from {last} to {count} "
            "counts, more than any power draw explains (amdsmi#115); such reads are ignored",
            f"energy-jump:{d.info.uuid}",
        )
        return None

    def _r_temperature(self, d: _Dev, add: Add) -> None:
        celsius = self._mod.amdsmi_get_temp_metric(d.handle, self._hotspot, self._current)
        value = _num(celsius, _U16)
        if value is None:
            raise _NotAvailable("the hotspot temperature")
        add(gauge("gpu_temperature_celsius", value, d.lbl))

    def _r_temperature_edge(self, d: _Dev, add: Add) -> None:
        celsius = self._mod.amdsmi_get_temp_metric(d.handle, self._edge, self._current)
        value = _num(celsius, _U16)
        if value is None:
            raise _NotAvailable("the edge temperature")
        add(gauge("gpu_temperature_celsius", value, d.lbl))

    def _clock_mhz(self, d: _Dev, kind: Any, what: str) -> float:
        c = self._mod.amdsmi_get_clock_info(d.handle, kind)
        mhz = c.get("clk")
        if mhz is None:
            mhz = c.get("cur_clk")  # older bindings
        value = _num(mhz, _U16)
        if value is None:
            raise _NotAvailable(what)
        return value

    def _r_sm_clock(self, d: _Dev, add: Add) -> None:
        mhz = self._clock_mhz(d, self._gfx, "the GFX clock")
        add(gauge("gpu_sm_clock_hertz", mhz * 1e6, d.lbl))

    def _r_memory_clock(self, d: _Dev, add: Add) -> None:
        mhz = self._clock_mhz(d, self._mem, "the memory clock")
        add(gauge("gpu_memory_clock_hertz", mhz * 1e6, d.lbl))

    # -- processes ----------------------------------------------------------------------------
    def _list_processes(self, d: _Dev) -> dict[int, int | None]:
        """VRAM of each process KFD lists (its ``mem`` total where VRAM is not given)."""
        listed: dict[int, int | None] = {}
        for p in self._mod.amdsmi_get_gpu_process_list(d.handle):
            info = p if isinstance(p, dict) else self._process_info(d, p)
            if info is None:
                continue
            pid = _num(info.get("pid"))
            if pid is None:
                continue
            usage = info.get("memory_usage")
            vram = _num(usage.get("vram_mem"), _U64) if isinstance(usage, dict) else None
            if vram is None:
                vram = _num(info.get("mem"), _U64)
            listed[int(pid)] = int(vram) if vram is not None else None
        return listed

    def _process_info(self, d: _Dev, handle: Any) -> dict[str, Any] | None:
        """ROCm 6.0's process list holds handles; their details come one call each."""
        fn = getattr(self._mod, "amdsmi_get_gpu_process_info", None)
        if fn is None:
            return {"pid": handle}
        try:
            info = fn(d.handle, handle)
        except self._err as e:
            if self._code(e) in self._lost_codes:
                return None  # the process ended between the two calls
            raise
        return info if isinstance(info, dict) else None


def _import_amdsmi() -> Any:
    """``import amdsmi``, said plainly when it fails.

    Without libamd_smi.so the package prints where it looked and raises KeyError (amdsmi 7);
    its stdout is captured so the reason lands in the SourceUnavailable message instead.
    """
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return importlib.import_module("amdsmi")
    except ModuleNotFoundError as e:
        if e.name == "amdsmi":
            raise SourceUnavailable(INSTALL_HINT) from e
        raise SourceUnavailable(f"amdsmi could not be imported: {e}") from e
    except Exception as e:
        said = " ".join(printed.getvalue().split()) or f"{type(e).__name__}: {e}"
        raise SourceUnavailable(
            f"amdsmi is installed but could not load libamd_smi.so ({said}); install ROCm's "
            "amd-smi-lib or set ROCM_PATH"
        ) from e
