"""Google TPUs: chips found on the PCI bus, runtime metrics from libtpu's metric service.

This is the only module that talks to libtpu's ``RuntimeMetricService`` (gRPC, port 8431 on
localhost, the service ``tpu-info`` reads), through the ``tpu_info`` package's generated stubs
and ``grpc`` (the ``tpu`` extra), imported when a TPU source is opened.

Discovery reads ``<sysfs>/bus/pci/devices/*/{vendor,device,iommu_group}`` as tpu-info's
``device.py`` does: vendor 0x1ae0 is Google, the device id names the generation
(``data/tpu.csv``). A chip is opened by one process at a time through ``/dev/accelN`` (v4 and
before) or ``/dev/vfio/<iommu group>`` (v5e and later); the PIDs holding it are found from
``/proc/<pid>/fd`` links, as tpu-info's ``get_chip_owners`` does, for the monitored tree only.

Readings, per chip (label ``gpu``: ``TPU-<PCI address>``), in the GPU sources' names so that
every view that shows GPUs shows TPUs:

- ``gpu_utilization_ratio``: TensorCore duty cycle (``tpu.runtime.tensorcore.dutycycle.percent``
  / 100): the share of time the TensorCores ran a program, like NVML's utilization it says that
  work ran, not how much of the chip it filled.
- ``gpu_memory_used_bytes`` / ``gpu_memory_total_bytes``: HBM (``tpu.runtime.hbm.memory.usage.
  bytes`` / ``.total.bytes``; libtpu reports them per device, summed per chip).
- ``tpu_hbm_bandwidth_utilization_ratio``: ``tpu.runtime.hbm.utilization.percent`` / 100, where
  the libtpu in use offers it (newer libtpu releases only; ListSupportedMetrics says).
- ``gpu_energy_joules_total{method="modeled"}``: no TPU gives the VM a power or energy counter,
  so power is modelled from ``data/tpu.csv`` (idle + (busy - idle) x duty cycle) and
  integrated; the accounting gives it the table's range and calls it modelled.
- ``gpu_process_memory_used_bytes{pid}``: the chip's HBM, for the tree's process holding it
  (the device file is opened exclusively, so one process has the whole chip).

What a generation lacks: every generation lacks power, energy, temperature and clocks (libtpu
exposes none to the VM); v2 and v3 have no runtime metric service (tpu-info supports v4 and
later), so only discovery works there; HBM bandwidth needs a libtpu that lists it. The metric
service runs inside the job's own process once it initialises the TPU: until then (and after)
the chips are listed with no readings, and a note says so.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from computewatch.catalog import load_accelerators
from computewatch.catalog.tpu import TPU_VENDOR_ID, TpuChipRow, tpu_by_pci_id, tpu_rows
from computewatch.readings import Labels, Reading, counter, gauge, labels
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.gpu_common import GpuDevice, clock_time

__all__ = [
    "DEFAULT_ADDRESS",
    "DUTY_CYCLE",
    "HBM_BANDWIDTH",
    "HBM_TOTAL",
    "HBM_USAGE",
    "INSTALL_HINT",
    "TpuChipInfo",
    "TpuSource",
    "discover_chips",
    "scan_owners",
]

DEFAULT_ADDRESS = "localhost:8431"  # libtpu's runtime metric service (tpu-info's default)
INSTALL_HINT = "tpu-info not installed: pip install 'computewatch[tpu]'"
DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_USAGE = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
HBM_BANDWIDTH = "tpu.runtime.hbm.utilization.percent"
_OLD_GENERATIONS = {"0x0027": "TPU v2/v3"}  # one PCI id for both (tpu-info device.py)
_DOWN_STRIKES = 3  # failed ticks in a row before the service is said to be down


class TpuChipInfo:
    """A chip found on the PCI bus: its address, generation and device file."""

    __slots__ = ("dev_path", "index", "pci_address", "row")

    def __init__(self, index: int, pci_address: str, row: TpuChipRow, dev_path: str) -> None:
        self.index = index
        self.pci_address = pci_address
        self.row = row
        self.dev_path = dev_path

    def __repr__(self) -> str:
        return f"TpuChipInfo({self.index}, {self.pci_address!r}, {self.row.model}, {self.dev_path})"


def discover_chips(sysfs_root: str = "/sys") -> tuple[list[TpuChipInfo], list[str]]:
    """The TPU chips under ``sysfs_root`` in tpu-info's order (by device file), and notes on
    Google devices that could not be used (an older generation, an unknown id)."""
    base = Path(sysfs_root) / "bus" / "pci" / "devices"
    found: list[tuple[str, TpuChipRow, str]] = []
    notes: list[str] = []
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return [], []
    for addr in entries:
        d = base / addr
        try:
            if (d / "vendor").read_text().strip().lower() != TPU_VENDOR_ID:
                continue
            device_id = (d / "device").read_text().strip().lower()
        except OSError:
            continue
        if addr.rsplit(".", 1)[-1] != "0":  # one PCI function per chip is enough (cores)
            continue
        row = tpu_by_pci_id(device_id)
        if row is None:
            old = _OLD_GENERATIONS.get(device_id)
            notes.append(
                f"Google device {addr} ({old or 'PCI id ' + device_id}) is not a TPU generation "
                "computewatch reads (v4, v5e, v5p, v6e): "
                + ("libtpu has no runtime metric service there" if old else "unknown id")
            )
            continue
        try:
            group = os.path.basename(os.readlink(d / "iommu_group"))
        except OSError:
            group = ""
        found.append((addr, row, group))
    chips = []
    for i, (addr, row, group) in enumerate(sorted(found, key=lambda f: _natural(f[2], f[0]))):
        old_style = row.model in ("TPU-v4",)
        dev = f"/dev/accel{i}" if old_style or not group else f"/dev/vfio/{group}"
        chips.append(TpuChipInfo(i, addr, row, dev))
    return chips, notes


def _natural(group: str, addr: str) -> tuple[int, str]:
    return (int(group) if group.isdigit() else 1 << 30, addr)


def scan_owners(pids: Collection[int], procfs_root: str = "/proc") -> dict[str, int]:
    """Device file -> PID for the TPU device files (``/dev/accelN``, ``/dev/vfio/N``) that any
    of ``pids`` holds open (tpu-info's ``get_chip_owners``, for these PIDs only)."""
    out: dict[str, int] = {}
    for pid in pids:
        fd_dir = os.path.join(procfs_root, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith(("/dev/accel", "/dev/vfio/")) and target[-1:].isdigit():
                out.setdefault(target, pid)
    return out


class _Chip:
    """Per-chip state kept between ticks."""

    __slots__ = ("energy_j", "info", "last_t", "last_w", "lbl", "lbl_energy", "proc_lbl")

    def __init__(self, info: GpuDevice) -> None:
        self.info = info
        self.lbl: Labels = labels(gpu=info.uuid)
        self.lbl_energy = labels(gpu=info.uuid, method="modeled")
        self.energy_j = 0.0
        self.last_t: float | None = None
        self.last_w = 0.0
        self.proc_lbl: dict[int, Labels] = {}


class TpuSource:
    """Runtime metrics of the TPU chips of this VM (see the module's docstring).

    ``address`` is libtpu's metric service; ``chips`` the chips (default: discovered under
    ``sysfs_root``); ``owners`` maps device files to PIDs (default: :func:`scan_owners` over
    the tree ``pids`` returns). ``simulated`` marks a fake VM. SourceUnavailable when no TPU
    chip is found or tpu-info/grpc are missing.
    """

    name = "tpu"

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        chips: list[TpuChipInfo] | None = None,
        *,
        sysfs_root: str = "/sys",
        pids: Callable[[], Collection[int]] | None = None,
        all_gpus: bool = False,
        procfs_root: str = "/proc",
        owners: Callable[[], Mapping[str, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        simulated: bool = False,
        timeout: float = 1.0,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.notes: list[str] = []
        self.simulated = simulated
        self.pid_namespace_mismatch = False
        self._noted: set[str] = set()
        self._pids = pids
        self._procfs = procfs_root
        self._owners = owners
        self._clock = clock
        self._timeout = timeout
        self._on_close = on_close
        self._closed = False
        self._used: set[str] = set()
        self._down = 0
        self._said_down = False
        if chips is None:
            chips, why = discover_chips(sysfs_root)
            self.notes.extend(why)
        if not chips:
            detail = f"; {why[0]}" if chips == [] and (why := self.notes) else ""
            raise SourceUnavailable(
                f"no Google TPU found (no PCI device of vendor {TPU_VENDOR_ID} under "
                f"{sysfs_root}/bus/pci/devices){detail}"
            )
        # gRPC's C core logs reconnects to stderr at INFO; the monitor speaks through notes
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        try:  # the gRPC stack loads only when a TPU is there (tens of ms at import)
            import grpc  # type: ignore[import-untyped]

            # tpu-info ships the generated stubs of libtpu's proto, without type information
            pb = importlib.import_module("tpu_info.proto.tpu_metric_service_pb2")
            pb_grpc = importlib.import_module("tpu_info.proto.tpu_metric_service_pb2_grpc")
        except ImportError as e:
            raise SourceUnavailable(f"{INSTALL_HINT} ({e})") from e
        self._grpc: Any = grpc
        self._pb: Any = pb
        # Reconnect within a second once libtpu serves again (gRPC backs off up to 120 s).
        options = [("grpc.min_reconnect_backoff_ms", 500), ("grpc.max_reconnect_backoff_ms", 1000)]
        creds = grpc.local_channel_credentials()
        self._channel: Any = grpc.secure_channel(address, creds, options=options)
        self._stub: Any = pb_grpc.RuntimeMetricServiceStub(self._channel)
        self.address = address
        if not all_gpus:
            chips = self._visible(chips, os.environ.get("TPU_VISIBLE_CHIPS"))
        self._chip_infos = chips
        self._per_chip = max(c.row.devices_per_chip for c in chips)
        accs = load_accelerators()
        self._chips: list[_Chip] = []
        for c in chips:
            acc = accs.get(c.row.model)
            name = f"Google {c.row.model.replace('-', ' ')}"
            info = GpuDevice(
                index=c.index,
                uuid=f"TPU-{c.pci_address}",
                name=name,
                model=c.row.model,
                memory_total_bytes=acc.memory_bytes if acc else None,
                power_limit_watts=None,
                simulated=simulated,
            )
            cap = info.capabilities
            cap["accelerator"] = "tpu"
            cap["energy_counter"] = False
            cap["energy_counter_why"] = (
                "no TPU gives the VM a power or energy reading: energy is modelled from "
                f"data/tpu.csv ({c.row.idle_watts:g}-{c.row.busy_watts:g} W by duty cycle, "
                f"+/-{c.row.power_relative_uncertainty:.0%}; {c.row.source})"
            )
            for f in ("temperature", "clocks", "power"):
                cap[f] = False
                cap[f"{f}_why"] = "libtpu's runtime metric service does not expose it"
            cap["per_process"] = pids is not None
            cap["per_process_why"] = (
                "the PID holding the chip's device file "
                f"({c.dev_path}; one process at a time) gets the chip's HBM"
                if pids is not None
                else "no process tree to attribute"
            )
            self._chips.append(_Chip(info))
        self._supported: set[str] | None = None
        self._wanted = [DUTY_CYCLE, HBM_USAGE, HBM_TOTAL, HBM_BANDWIDTH]
        self._tree: frozenset[int] = frozenset()

    def _visible(self, chips: list[TpuChipInfo], spec: str | None) -> list[TpuChipInfo]:
        """The chips ``TPU_VISIBLE_CHIPS`` (libtpu's comma-separated chip indices) leaves the
        job; unset means all. An entry that is no index of a chip here is noted and ignored."""
        if spec is None:
            return chips
        wanted: list[int] = []
        for entry in spec.split(","):
            e = entry.strip()
            if e.isdigit() and int(e) < len(chips) and int(e) not in wanted:
                wanted.append(int(e))
            elif e:
                self._note(f"TPU_VISIBLE_CHIPS={spec!r}: {e!r} is no chip here; ignored", "vis")
        if not wanted:
            raise SourceUnavailable(f"no TPU chip matches TPU_VISIBLE_CHIPS={spec!r}")
        return [c for c in chips if c.index in wanted]

    # -- the GpuSource contract ---------------------------------------------------------------
    @property
    def devices(self) -> list[GpuDevice]:
        return [c.info for c in self._chips]

    def used_uuids(self) -> set[str]:
        return set(self._used)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._channel.close()
        except Exception:
            pass
        if self._on_close is not None:
            self._on_close()

    def _note(self, message: str, key: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(message)

    # -- the service --------------------------------------------------------------------------
    def _get(self, name: str) -> dict[int, Any]:
        """Device id -> gauge of ``name``."""
        resp = self._stub.GetRuntimeMetric(
            self._pb.MetricRequest(metric_name=name), timeout=self._timeout
        )
        return {m.attribute.value.int_attr: m.gauge for m in resp.metric.metrics}

    def _learn_supported(self) -> None:
        """Which metrics this libtpu offers (ListSupportedMetrics); a libtpu without that call
        is asked for the three tpu-info needs."""
        grpc = self._grpc
        try:
            resp = self._stub.ListSupportedMetrics(
                self._pb.ListSupportedMetricsRequest(), timeout=self._timeout
            )
            names = {m.metric_name for m in resp.supported_metric}
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            names = {DUTY_CYCLE, HBM_USAGE, HBM_TOTAL}
        self._supported = names
        for c in self._chips:
            cap = c.info.capabilities
            cap["hbm_bandwidth"] = HBM_BANDWIDTH in names
            cap["hbm_bandwidth_why"] = (
                HBM_BANDWIDTH if HBM_BANDWIDTH in names else "this libtpu does not offer it"
            )
            for m in (DUTY_CYCLE, HBM_USAGE):
                if m not in names:
                    cap[m] = False
                    cap[f"{m}_why"] = "this libtpu does not offer it"

    def read(self) -> list[Reading]:
        """One tick: each metric asked once for all chips; the tree's holders attributed."""
        if self._closed:
            raise ValueError("read() on a closed TpuSource")
        grpc = self._grpc
        out: list[Reading] = []
        add = out.append
        now = self._clock()
        values: dict[str, dict[int, Any]] = {}
        try:
            if self._supported is None:
                self._learn_supported()
            supported = self._supported or set()
            for name in self._wanted:
                if name not in supported:
                    continue
                try:
                    values[name] = self._get(name)
                except grpc.RpcError as e:
                    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        raise
                    self._note(
                        f"TPU metric {name} failed ({e.code().name}: {e.details()}); skipped "
                        "where it fails",
                        f"fail:{name}",
                    )
        except grpc.RpcError as e:
            self._down += 1
            if self._down >= _DOWN_STRIKES and not self._said_down:
                self._said_down = True
                self._note(
                    f"libtpu's metric service at {self.address} is not answering "
                    f"({e.code().name}) since {clock_time()}: it runs inside the TPU program "
                    "once it initialises the TPU, so no TPU readings until it does",
                    f"down:{self._said_down}",
                )
            self._attribute(add, {})
            self._integrate(now, None)
            return out
        if self._said_down:
            self._note(f"libtpu's metric service answered again at {clock_time()}", "back")
        self._down = 0
        per = self._per_chip
        duty = values.get(DUTY_CYCLE, {})
        used = values.get(HBM_USAGE, {})
        total = values.get(HBM_TOTAL, {})
        bw = values.get(HBM_BANDWIDTH, {})
        hbm_by_chip: dict[int, float] = {}
        duty_by_chip: dict[int, float] = {}
        for c in self._chips:
            i = c.info.index
            lbl = c.lbl
            d = duty.get(i)
            if d is not None:
                duty_by_chip[i] = d.as_double / 100.0
                add(gauge("gpu_utilization_ratio", duty_by_chip[i], lbl))
            cores = range(i * per, (i + 1) * per)
            u = [used[k].as_int for k in cores if k in used]
            if u:
                hbm_by_chip[i] = float(sum(u))
                add(gauge("gpu_memory_used_bytes", hbm_by_chip[i], lbl))
            t = [total[k].as_int for k in cores if k in total]
            if t:
                add(gauge("gpu_memory_total_bytes", float(sum(t)), lbl))
            b = [bw[k].as_double for k in cores if k in bw]
            if b:
                add(gauge("tpu_hbm_bandwidth_utilization_ratio", sum(b) / len(b) / 100.0, lbl))
        self._integrate(now, duty_by_chip, add)
        self._attribute(add, hbm_by_chip)
        return out

    def _integrate(
        self,
        now: float,
        duty: dict[int, float] | None,
        add: Callable[[Reading], None] | None = None,
    ) -> None:
        """Modelled energy: trapezoids of modelled power over the ticks with a duty cycle."""
        for c, info in zip(self._chips, self._chip_infos, strict=True):
            d = None if duty is None else duty.get(c.info.index)
            if d is None:
                c.last_t = None  # no reading: the gap is not counted
                continue
            w = info.row.watts(d)
            if c.last_t is not None:
                c.energy_j += (c.last_w + w) / 2.0 * (now - c.last_t)
            c.last_t, c.last_w = now, w
            if add is not None:
                add(counter("gpu_energy_joules_total", c.energy_j, c.lbl_energy))

    def _attribute(self, add: Callable[[Reading], None], hbm: dict[int, float]) -> None:
        if self._pids is None:
            return
        try:
            self._tree = frozenset(self._pids())
        except Exception as e:
            self._note(f"could not list the monitored PIDs: {e}", "pids")
            return
        try:
            holders = (
                dict(self._owners()) if self._owners else scan_owners(self._tree, self._procfs)
            )
        except Exception as e:
            self._note(f"could not find which processes hold the TPU chips: {e}", "owners")
            return
        for c, info in zip(self._chips, self._chip_infos, strict=True):
            pid = holders.get(info.dev_path)
            if pid is None or pid not in self._tree:
                continue
            self._used.add(c.info.uuid)
            mem = hbm.get(c.info.index)
            if mem is not None:
                lbl = c.proc_lbl.get(pid)
                if lbl is None:
                    lbl = c.proc_lbl[pid] = labels(gpu=c.info.uuid, pid=pid)
                add(gauge("gpu_process_memory_used_bytes", mem, lbl))


def open_fake(
    preset: str,
    *,
    pids: Callable[[], Collection[int]] | None,
    fake_pids: Collection[int] = (),
) -> TpuSource:
    """A TPU source on a fake TPU VM (``fake:4xTPU-v5e``): the fake metric service runs in
    this process for as long as the source is open."""
    # the fake (and its gRPC server) loads only for a fake TPU backend
    from computewatch.testing.fake_tpu import tpu_from_preset

    fake = tpu_from_preset(preset)
    for pid in fake_pids:
        for chip in fake.chips:
            chip.add_process(pid)
    rows = tpu_rows()
    chips = [TpuChipInfo(c.index, c.pci_address, rows[c.model], c.dev_path) for c in fake.chips]
    try:
        return TpuSource(
            fake.address,
            chips,
            pids=pids,
            owners=fake.owners,
            simulated=True,
            on_close=fake.close,
        )
    except BaseException:
        fake.close()
        raise
