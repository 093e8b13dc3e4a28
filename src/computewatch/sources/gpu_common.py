"""What the vendor GPU sources share: the device record, the read loop, notes, capability
disabling, per-process attribution with its PID-namespace check, and energy from polled power.

:class:`VendorGpuSource` is the base of :class:`computewatch.sources.nvidia.NvidiaSource` and
:class:`computewatch.sources.amd.AmdSource`. A vendor module brings what differs: opening its
library and probing devices (``_setup``), the per-field readers, the classification of its
library's errors (``_code``, ``_on_error``) and its units. Nothing here imports a vendor library:
the library is the module object the source was given.
"""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Callable, Collection
from typing import Any, ClassVar, Generic, Self, TypeVar

import msgspec

from computewatch.readings import Kind, Labels, Reading, labels

__all__ = ["GpuDevice", "VendorGpuSource", "parse_visible_devices"]

Add = Callable[[Reading], None]
_new = tuple.__new__
_GAUGE, _COUNTER = Kind.GAUGE, Kind.COUNTER


# The tick's readings (some 40 per GPU) are built as NamedTuple's own __new__ builds them,
# with tuple.__new__: half the cost of readings.gauge(), which adds a call to Reading().
def gauge_reading(name: str, value: float, lbl: Labels) -> Reading:
    """``readings.gauge(name, value, lbl)``, cheaper."""
    return _new(Reading, (name, lbl, float(value), _GAUGE))


def counter_reading(name: str, value: float, lbl: Labels) -> Reading:
    """``readings.counter(name, value, lbl)``, cheaper."""
    return _new(Reading, (name, lbl, float(value), _COUNTER))


def clock_time() -> str:
    """The wall-clock time of day for notes ("lost at 12:34:56")."""
    return time.strftime("%H:%M:%S")


def parse_visible_devices(value: str | None) -> list[str] | None:
    """A ``*_VISIBLE_DEVICES`` value (CUDA's, ROCR's, HIP's) as a list of entries; None when
    unset (every GPU is visible).

    An empty string gives ``[]``: no GPU. Entries are stripped; matching them to devices, and
    stopping at the first invalid one as CUDA and ROCm do, happens in each vendor's source.
    """
    if value is None:
        return None
    if not value.strip():
        return []
    return [e.strip() for e in value.split(",")]


class GpuDevice(msgspec.Struct, frozen=True):
    """One monitored GPU (an AMD GCD) or NVIDIA MIG instance.

    ``capabilities`` says, per feature, whether it is read (``True``/``False``) and why
    (``"<feature>_why"``): ``energy_counter``, ``per_process``, on NVIDIA ``gpm``, ``nvlink``
    and ``xid_events``, and any field found unsupported while running (it is updated in place
    then).
    """

    index: int  # the library's index of the physical GPU (a MIG instance: of its parent)
    uuid: str
    name: str
    model: str | None  # catalog key (computewatch.catalog), None when the name is not in it
    memory_total_bytes: int | None
    power_limit_watts: float | None
    mig_parent_uuid: str | None = None
    mig_index: int | None = None
    simulated: bool = False
    capabilities: dict[str, str | bool] = msgspec.field(default_factory=dict)

    # Equality and hash leave out ``capabilities``, which changes while the device is read.
    def __eq__(self, other: object) -> bool:
        if type(other) is not GpuDevice:
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple[Any, ...]:
        return msgspec.structs.astuple(self)[:-1]  # capabilities is the last field


class GpuDev:
    """Per-device state the shared machinery keeps between ticks (handle, label tuples, polled
    energy, per-process labels); each vendor's ``_Dev`` adds its own."""

    __slots__ = (
        "handle",
        "info",
        "lbl",
        "lbl_counter",
        "lbl_polled",
        "lost",
        "mine",
        "ns_strikes",
        "poll_e",
        "poll_p",
        "poll_t",
        "power_t",
        "power_w",
        "proc_labels",
        "readers",
    )

    def __init__(self, info: GpuDevice, handle: Any) -> None:
        self.info = info
        self.handle = handle
        extra = self._parent_label()
        self.lbl: Labels = labels(gpu=info.uuid, **extra)
        self.lbl_counter = labels(gpu=info.uuid, method="counter", **extra)
        self.lbl_polled = labels(gpu=info.uuid, method="polled", **extra)
        # (field, reader) in tick order; a reader reads one field of this device each tick.
        self.readers: list[tuple[str, Callable[[Self, Add], None]]] = []
        self.lost = False
        self.poll_e = 0.0  # joules integrated from polled power
        self.poll_t: float | None = None  # when the last power read was integrated
        self.poll_p = 0.0  # ... and its watts
        self.power_w: float | None = None  # this tick's power read, None until read
        self.power_t = 0.0
        self.proc_labels: dict[int, Labels] = {}
        self.mine: list[int] = []  # the tree's PIDs the library listed on this device
        self.ns_strikes = 0  # ticks in a row whose listed PIDs none exists here

    def _parent_label(self) -> dict[str, str]:
        parent = self.info.mig_parent_uuid
        return {"parent": parent} if parent else {}

    def proc_label(self, pid: int) -> Labels:
        lbl = self.proc_labels.get(pid)
        if lbl is None:
            if len(self.proc_labels) > 4096:
                self.proc_labels.clear()
            extra = self._parent_label()
            lbl = self.proc_labels[pid] = labels(gpu=self.info.uuid, pid=pid, **extra)
        return lbl


DevT = TypeVar("DevT", bound=GpuDev)


class VendorGpuSource(abc.ABC, Generic[DevT]):
    """The public surface and the per-tick machinery of a vendor GPU source.

    ``read()`` reads every field of every device once. A reader that raises the library's
    error goes to the vendor's ``_on_error`` (disable the field, skip it this tick, or lose the
    device); anything else to ``_on_other_error``, which by default disables the field with
    one note: one odd field must not take the source (and the other GPUs) down.

    Per-process readings cover the PIDs ``pids`` returns, with the PID-namespace check that
    :class:`~computewatch.sources.nvidia.NvidiaSource` describes.
    """

    name: str
    _LIBRARY: ClassVar[str]  # the library's name in notes ("NVML")
    _PID_OWNER: ClassVar[str]  # what hands the library the PIDs it lists ("NVML", "KFD")
    # A fallback reader's field -> the capability it reports under.
    _FEATURES: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        module: Any,
        err: type[Exception],
        pids: Callable[[], Collection[int]] | None,
        procfs_root: str,
        clock: Callable[[], float],
        *,
        base_err: type[Exception] | None = None,
    ) -> None:
        """``err`` is the library's error for a call that failed; ``base_err`` (default: the
        same) the base of every exception the library raises, argument checks included."""
        self._mod = module
        self._err = err
        self._base_err = base_err or err
        self._clock = clock
        self._procfs = procfs_root
        self._pids = pids
        self.simulated = bool(getattr(module, "simulated", False))
        self.notes: list[str] = []
        self.pid_namespace_mismatch = False
        self._noted: set[str] = set()
        self._used: set[str] = set()
        self._devs: list[DevT] = []  # the devices still read
        self._all: list[DevT] = []  # every device set up, lost ones included
        self._tree: frozenset[int] = frozenset()
        self._closed = False

    def _open(self, visible_devices: str | None, all_gpus: bool) -> None:
        """Set the devices up once the library has started; shut it down if that fails."""
        try:
            self._setup(visible_devices, all_gpus)
        except BaseException:
            self.close()
            raise

    # -- public -------------------------------------------------------------------------------
    @property
    def devices(self) -> list[GpuDevice]:
        """Every device set up at start, lost ones included (their capabilities say so)."""
        return [d.info for d in self._all]

    def used_uuids(self) -> set[str]:
        """UUIDs of the devices on which any PID of the tree was seen so far."""
        return set(self._used)

    def read(self) -> list[Reading]:
        """Every GPU reading of one tick; each device is read once."""
        if self._closed:
            raise ValueError(f"read() on a closed {type(self).__name__}")
        out: list[Reading] = []
        add = out.append
        if self._pids is not None:
            try:
                self._tree = frozenset(self._pids())
            except Exception as e:  # the tree callable must not stop GPU readings
                self._note(f"could not list the monitored PIDs: {e}", "pids")
                self._tree = frozenset()
        self._before_devices()
        err = self._err
        lost_any = False
        for d in self._devs:
            d.power_w = None
            for field, fn in d.readers:
                try:
                    fn(d, add)
                except err as e:
                    if self._on_error(d, field, e, add):
                        lost_any = True
                        break
                except Exception as e:  # not the library's error: a binding or driver oddity
                    self._on_other_error(d, field, e, add)
        if lost_any:
            self._devs = [d for d in self._devs if not d.lost]
        return out

    def close(self) -> None:
        """Free what the source holds in the library and shut it down; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._shutdown()

    # -- what each vendor brings --------------------------------------------------------------
    @abc.abstractmethod
    def _setup(self, visible_devices: str | None, all_gpus: bool) -> None:
        """Probe the devices, keep the visible ones in ``_all`` and ``_devs``, set readers."""

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Free the library's resources and shut it down, ignoring its errors."""

    @abc.abstractmethod
    def _code(self, e: Exception) -> int | None:
        """The library's status code carried by ``e``."""

    @abc.abstractmethod
    def _on_error(self, d: DevT, field: str, e: Exception, add: Add) -> bool:
        """Translate a library error on one field; True when the device was lost."""

    @abc.abstractmethod
    def _list_processes(self, d: DevT) -> dict[int, int | None]:
        """PID -> device memory in bytes (None when unknown) of every process the library
        lists on the device."""

    def _before_devices(self) -> None:
        """Work of one tick before the devices are read (NVIDIA drains XID events here)."""

    def _on_other_error(self, d: DevT, field: str, e: Exception, add: Add) -> None:
        """A reader failed with something other than the library's error."""
        self._broken(d, field, e)

    def _reason(self, e: BaseException) -> str:
        """An exception as a one-line text for capabilities and notes."""
        return str(e)

    # -- library calls, notes and capabilities ------------------------------------------------
    def _call(self, fn_name: str, *args: Any) -> tuple[Any, Exception | None]:
        """Call the library's ``fn_name``: (result, None), (None, the error) when it raised one
        of the library's exceptions, (None, None) when this binding lacks the function."""
        fn = getattr(self._mod, fn_name, None)
        if fn is None:
            return None, None
        try:
            return fn(*args), None
        except self._base_err as e:
            return None, e

    def _note(self, message: str, key: str) -> None:
        """Add a note; one with a key is added once."""
        if key and key in self._noted:
            return
        if key:
            self._noted.add(key)
        self.notes.append(message)

    def _disable(self, d: DevT, field: str, why: str) -> None:
        """Stop reading ``field`` on this device; its capability says why."""
        d.readers = [(f, fn) for f, fn in d.readers if f != field]
        feature = self._FEATURES.get(field, field)
        d.info.capabilities[feature] = False
        d.info.capabilities[f"{feature}_why"] = why

    def _broken(self, d: DevT, field: str, e: Exception) -> None:
        """A field that fails with something other than the library's error is disabled, said
        once: one odd field must not take the source (and the other GPUs) down."""
        why = f"failed with {type(e).__name__}: {self._reason(e)}"
        self._disable(d, field, why)
        self._note(f"GPU {d.info.uuid}: {field} disabled, it {why}", f"broken:{field}")

    def _fall_back(
        self, d: DevT, field: str, new_field: str, reader: Callable[[DevT, Add], None], add: Add
    ) -> bool:
        """Read ``field`` from now on with ``reader`` as ``new_field`` (another function for
        the same figure), starting this tick; True when the device was lost."""
        d.readers = [(new_field, reader) if f == field else (f, g) for f, g in d.readers]
        try:
            reader(d, add)
        except self._err as e:
            return self._on_error(d, new_field, e, add)
        except Exception as e:
            self._on_other_error(d, new_field, e, add)
        return False

    def _mark_lost(self, d: DevT, cause: str) -> None:
        """The device is gone: no more readers, a capability and one note say since when."""
        at = clock_time()
        d.lost = True
        d.readers = []
        d.info.capabilities["lost"] = True
        d.info.capabilities["lost_why"] = f"{cause} at {at}"
        self._note(
            f"GPU {d.info.uuid} was lost at {at}; its data stops there", f"lost:{d.info.uuid}"
        )

    # -- energy from polled power -------------------------------------------------------------
    def _to_polled(self, d: DevT, joules: float, why: str, add: Add) -> None:
        """Switch from the energy counter to polled power, carrying on from ``joules``, the
        counter's total so far."""
        d.poll_e = joules
        d.poll_t = None
        d.readers = [
            ("energy_polled", self._r_energy_polled) if f == "energy_counter" else (f, g)
            for f, g in d.readers
        ]
        d.info.capabilities["energy_counter"] = False
        d.info.capabilities["energy_counter_why"] = f"{why}: energy is the integral of polled power"
        self._r_energy_polled(d, add)  # power was read earlier in this tick

    def _r_energy_polled(self, d: DevT, add: Add) -> None:
        """Trapezoid integral of the power read this tick over the monotonic time of reads."""
        p = d.power_w
        if p is None:
            if "power" not in {f for f, _ in d.readers}:
                self._disable(d, "energy_polled", "neither an energy counter nor power readings")
            return
        t = d.power_t
        if d.poll_t is not None:
            d.poll_e += (d.poll_p + p) / 2.0 * (t - d.poll_t)
        d.poll_t, d.poll_p = t, p
        add(counter_reading("gpu_energy_joules_total", d.poll_e, d.lbl_polled))

    # -- processes ----------------------------------------------------------------------------
    def _r_processes(self, d: DevT, add: Add) -> None:
        """Device memory of the tree's processes; which devices the tree uses."""
        listed = self._list_processes(d)
        tree = self._tree
        mine = [pid for pid in listed if pid in tree]
        d.mine = mine
        if self._pids is not None and not self.pid_namespace_mismatch:
            # Other processes on the device: the share of the GPU the run is charged.
            others = [m for pid, m in listed.items() if pid not in tree]
            add(gauge_reading("gpu_other_processes", len(others), d.lbl))
            add(
                gauge_reading(
                    "gpu_other_processes_memory_used_bytes", sum(m or 0 for m in others), d.lbl
                )
            )
        if mine:
            self._used.add(d.info.uuid)
            d.ns_strikes = 0
            for pid in mine:
                mem = listed[pid]
                if mem is not None:
                    add(gauge_reading("gpu_process_memory_used_bytes", mem, d.proc_label(pid)))
        elif listed and tree:
            self._check_namespace(d, listed)
        if self.pid_namespace_mismatch and listed:
            self._used.add(d.info.uuid)

    def _check_namespace(self, d: DevT, listed: dict[int, int | None]) -> None:
        """The library lists host PIDs: if none of them exists here, we are in another PID
        namespace. Two ticks in a row are required, so a process that just exited does not
        trigger it."""
        root = self._procfs
        if any(os.path.exists(os.path.join(root, str(pid))) for pid in listed):
            d.ns_strikes = 0
            return
        d.ns_strikes += 1
        if d.ns_strikes >= 2 and not self.pid_namespace_mismatch:
            self.pid_namespace_mismatch = True
            self._note(
                f"{self._LIBRARY} lists processes on the GPUs whose PIDs do not exist in this PID "
                f"namespace (a container without --pid=host: {self._PID_OWNER} reports host "
                "PIDs), so GPU use cannot be attributed to the job's processes; whole-device "
                "figures are used for every visible GPU with processes on it",
                "pid-namespace",
            )
