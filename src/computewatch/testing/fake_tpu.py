"""A fake TPU VM: libtpu's runtime metric service as a real local gRPC server, with scripted
values and errors, plus the PCI and device files TPU discovery reads (all figures simulated).

The server implements ``tpu_info``'s ``RuntimeMetricService`` (``GetRuntimeMetric``,
``ListSupportedMetrics``) from the package's own generated stubs, on 127.0.0.1 and a free port,
with the same local credentials libtpu uses, so :class:`computewatch.sources.tpu.TpuSource`
talks to it exactly as to libtpu on port 8431::

    fake = tpu_from_preset("4xTPU-v5e")          # serving now
    fake.chips[0].duty_cycle_pct = 93.0          # scripted values, changed at any time
    fake.fail("tpu.runtime.hbm.memory.usage.bytes", grpc.StatusCode.UNAVAILABLE, count=2)
    src = TpuSource(fake.address, chips=fake.chip_infos(), owners=fake.owners)
    ...
    fake.close()

``fake.write_sysfs(root)`` writes ``bus/pci/devices/<addr>/{vendor,device,subsystem_device,
iommu_group}`` as a TPU VM has them, for discovery tests. ``stop()``/``start()`` take the service
away and back (libtpu serves it only while a TPU program runs).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Iterable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

from computewatch.catalog import load_accelerators
from computewatch.catalog.tpu import TPU_VENDOR_ID, tpu_rows
from computewatch.testing._script import mix, str_seed, unit
from computewatch.testing.presets import parse_preset

__all__ = [
    "DUTY_CYCLE",
    "HBM_BANDWIDTH",
    "HBM_TOTAL",
    "HBM_USAGE",
    "FakeTpuChip",
    "FakeTpuRuntime",
    "tpu_from_preset",
]

DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_USAGE = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
HBM_BANDWIDTH = "tpu.runtime.hbm.utilization.percent"
# tpu-info ships the generated stubs of libtpu's proto, without type information
pb: Any = importlib.import_module("tpu_info.proto.tpu_metric_service_pb2")
pb_grpc: Any = importlib.import_module("tpu_info.proto.tpu_metric_service_pb2_grpc")
_ALL = (DUTY_CYCLE, HBM_USAGE, HBM_TOTAL, HBM_BANDWIDTH)


@dataclasses.dataclass(slots=True)
class FakeTpuChip:
    """One simulated chip: its scripted runtime metrics and the processes holding it."""

    index: int
    model: str  # catalog key, "TPU-v5e"
    pci_address: str  # "0000:00:05.0"
    pci_device_id: str  # "0x0063"
    iommu_group: int
    hbm_total_bytes: int
    hbm_used_bytes: int = 0
    duty_cycle_pct: float = 0.0
    hbm_bandwidth_pct: float = 0.0
    owners: set[int] = dataclasses.field(default_factory=set)

    @property
    def dev_path(self) -> str:
        """The device file a process opens: /dev/vfio/N from v5e on, /dev/accelN before."""
        if self.model in ("TPU-v2", "TPU-v3", "TPU-v4"):
            return f"/dev/accel{self.index}"
        return f"/dev/vfio/{self.iommu_group}"

    def add_process(self, pid: int, *_: Any, **__: Any) -> FakeTpuChip:
        """A process holding this chip (a TPU chip is opened by one process at a time)."""
        self.owners = {pid}
        return self


class _Servicer(pb_grpc.RuntimeMetricServiceServicer):  # type: ignore[misc]
    def __init__(self, fake: FakeTpuRuntime) -> None:
        self.fake = fake

    def GetRuntimeMetric(self, request: Any, context: Any) -> Any:
        name = request.metric_name
        fake = self.fake
        with fake._lock:
            fake.calls.append(name)
            scripted = fake._errors.get(name)
            if scripted is not None:
                code, left = scripted
                if left is not None:
                    if left <= 1:
                        del fake._errors[name]
                    else:
                        fake._errors[name] = (code, left - 1)
                context.abort(code, f"scripted {code.name} for {name}")
            if name not in fake.supported:
                context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
            metrics = [self._metric(name, c, i) for c in fake.chips for i in range(fake.per_chip)]
        if name == DUTY_CYCLE:  # measured per chip (tpu-info: metrics.py)
            metrics = metrics[:: fake.per_chip]
        return pb.MetricResponse(metric=pb.TPUMetric(name=name, metrics=metrics))

    def _metric(self, name: str, chip: FakeTpuChip, core: int) -> Any:
        per = self.fake.per_chip
        device = chip.index * (1 if name == DUTY_CYCLE else per) + (
            0 if name == DUTY_CYCLE else core
        )
        attr = pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=device))
        if name == DUTY_CYCLE:
            gauge = pb.Gauge(as_double=chip.duty_cycle_pct)
        elif name == HBM_BANDWIDTH:
            gauge = pb.Gauge(as_double=chip.hbm_bandwidth_pct)
        elif name == HBM_USAGE:
            gauge = pb.Gauge(as_int=chip.hbm_used_bytes // per)
        else:
            gauge = pb.Gauge(as_int=chip.hbm_total_bytes // per)
        return pb.Metric(attribute=attr, gauge=gauge)

    def ListSupportedMetrics(self, request: Any, context: Any) -> Any:
        with self.fake._lock:
            self.fake.calls.append("ListSupportedMetrics")
            names = sorted(self.fake.supported)
        return pb.ListSupportedMetricsResponse(
            supported_metric=[pb.SupportedMetric(metric_name=n) for n in names]
        )


class FakeTpuRuntime:
    """libtpu's metric service for ``chips``, served at :attr:`address` until :meth:`close`.
    ``supported`` limits the metrics it offers (an older libtpu lacks HBM bandwidth)."""

    simulated = True

    def __init__(
        self,
        chips: Iterable[FakeTpuChip],
        *,
        supported: Iterable[str] = _ALL,
        per_chip: int = 1,
        start: bool = True,
    ) -> None:
        self.chips = list(chips)
        self.supported = set(supported)
        self.per_chip = per_chip
        self.calls: list[str] = []
        self._errors: dict[str, tuple[grpc.StatusCode, int | None]] = {}
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._port = 0
        if start:
            self.start()

    @property
    def devices(self) -> list[FakeTpuChip]:
        """The chips (as ``devices``, the name the GPU fakes use, for ``fake_pids``)."""
        return self.chips

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._port}"

    def start(self) -> None:
        """Serve (again, on the same port when it was served before)."""
        if self._server is not None:
            return
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(_Servicer(self), server)
        port = server.add_secure_port(
            f"127.0.0.1:{self._port}",
            grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP),
        )
        server.start()
        self._server, self._port = server, port

    def stop(self) -> None:
        """Stop serving (as when the TPU program exits); :meth:`start` serves again."""
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    close = stop

    def fail(self, metric: str, code: grpc.StatusCode, count: int | None = 1) -> None:
        """Answer ``metric`` with ``code`` the next ``count`` times (None: until cleared)."""
        with self._lock:
            self._errors[metric] = (code, count)

    def clear_failures(self) -> None:
        with self._lock:
            self._errors.clear()

    def owners(self) -> dict[str, int]:
        """Device file -> PID holding it, as tpu-info's ``get_chip_owners`` reads /proc."""
        return {c.dev_path: pid for c in self.chips for pid in sorted(c.owners)[:1]}

    def write_sysfs(self, root: str | os.PathLike[str]) -> Path:
        """Write the PCI files of the chips under ``root`` (``root/bus/pci/devices/...``), as a
        TPU VM's /sys has them; returns ``root``."""
        base = Path(root)
        devices = base / "bus" / "pci" / "devices"
        groups = base / "kernel" / "iommu_groups"
        for c in self.chips:
            d = devices / c.pci_address
            d.mkdir(parents=True, exist_ok=True)
            (d / "vendor").write_text(f"{TPU_VENDOR_ID}\n")
            (d / "device").write_text(f"{c.pci_device_id}\n")
            (d / "subsystem_device").write_text("0x0000\n")
            g = groups / str(c.iommu_group)
            g.mkdir(parents=True, exist_ok=True)
            link = d / "iommu_group"
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(g, d))
        return base


def tpu_from_preset(preset: str, seed: int = 0, *, start: bool = True) -> FakeTpuRuntime:
    """A busy fake TPU VM of ``COUNTxMODEL`` chips (``"4xTPU-v5e"``, ``"8xTPU-v5p"``): each
    works around its own duty cycle (70-95 %, seeded), HBM 55-90 % used; HBM sizes come from
    the catalog."""
    rows = tpu_rows()
    catalog = {k: a for k, a in load_accelerators().items() if k in rows}
    count, acc = parse_preset(preset, catalog, "TPU ")
    row = rows[acc.model]
    chips = []
    for i in range(count):
        key = mix(seed, i, str_seed(acc.model))
        duty = 70.0 + 25.0 * (unit(key, 1) + 1) / 2
        used = int(acc.memory_bytes * (0.55 + 0.35 * (unit(key, 2) + 1) / 2))
        chips.append(
            FakeTpuChip(
                index=i,
                model=acc.model,
                pci_address=f"0000:00:{4 + i:02x}.0",
                pci_device_id=row.pci_device_id,
                iommu_group=i,
                hbm_total_bytes=acc.memory_bytes,
                hbm_used_bytes=used,
                duty_cycle_pct=round(duty, 2),
                hbm_bandwidth_pct=round(duty * 0.6, 2),
            )
        )
    return FakeTpuRuntime(chips, per_chip=row.devices_per_chip, start=start)
