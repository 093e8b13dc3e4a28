"""Choosing the accelerator backend: ``auto``, ``nvidia``, ``amd``, ``tpu``, ``none``,
``fake:PRESET`` or ``replay:FILE`` (the ``--gpu-backend`` option, alias ``--accelerator-backend``,
of every command that reads devices).

``auto`` tries NVIDIA (NVML), then AMD (amdsmi), then Google TPUs (PCI discovery and libtpu's
metric service), and keeps the reason each one was skipped, so ``computewatch devices`` can say
why. A vendor whose device files are absent (:data:`DRIVER_FILES`) is skipped without loading
its library. Fake and replayed devices are marked simulated; ``fake:4xTPU-v5e`` runs a fake TPU VM.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Collection
from typing import Any, Protocol

import msgspec

from computewatch.errors import ComputewatchError
from computewatch.readings import Reading
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.nvidia import GpuDevice

BACKEND_CHOICES = "auto|nvidia|amd|tpu|none|fake:PRESET|replay:FILE"


class GpuBackendError(ComputewatchError, ValueError):
    """An unusable ``--gpu-backend`` value (unknown name, bad preset, unreadable trace)."""


class GpuSource(Protocol):
    """What the NVIDIA, AMD and replay sources share beyond the Source contract."""

    name: str
    notes: list[str]
    simulated: bool

    @property
    def devices(self) -> list[GpuDevice]: ...

    def used_uuids(self) -> set[str]: ...

    def read(self) -> list[Reading]: ...

    def close(self) -> None: ...


class GpuBackend(msgspec.Struct):
    """The GPU sources opened for one command, and why the others were skipped."""

    spec: str
    sources: list[GpuSource] = msgspec.field(default_factory=list)
    skipped: list[tuple[str, str]] = msgspec.field(default_factory=list)

    @property
    def devices(self) -> list[GpuDevice]:
        return [d for s in self.sources for d in s.devices]

    @property
    def simulated(self) -> bool:
        return any(s.simulated for s in self.sources)

    def used_uuids(self) -> set[str]:
        return {u for s in self.sources for u in s.used_uuids()}

    def close(self) -> None:
        for s in self.sources:
            try:
                s.close()
            except Exception:
                pass


def check_spec(spec: str) -> str:
    """Validate a ``--gpu-backend`` value without opening anything; returns it."""
    if spec in ("auto", "nvidia", "amd", "tpu", "none"):
        return spec
    kind, sep, arg = spec.partition(":")
    if sep and kind == "fake" and arg:
        if _is_tpu_preset(arg):
            _check_tpu_preset(arg)
        else:
            _fake_module(arg)  # raises for an unknown preset
        return spec
    if sep and kind == "replay" and arg:
        return spec
    raise GpuBackendError(f"unknown GPU backend {spec!r}; expected {BACKEND_CHOICES}")


def open_backend(
    spec: str,
    *,
    pids: Callable[[], Collection[int]] | None = None,
    all_gpus: bool = False,
    procfs_root: str = "/proc",
    fake_pids: Collection[int] = (),
    dev_root: str = "/dev",
) -> GpuBackend:
    """Open the GPU sources ``spec`` names. A real backend that is not available here is
    listed in ``skipped`` with its reason (never an error: monitoring goes on without GPUs);
    an invalid spec raises :class:`GpuBackendError`. ``fake_pids`` are placed on every fake
    device as its processes, so a demo run shows its simulated GPUs as used. ``auto`` skips a
    vendor whose device files are not under ``dev_root`` without loading its library
    (:data:`DRIVER_FILES`)."""
    spec = check_spec(spec)
    backend = GpuBackend(spec)
    if spec == "none":
        return backend
    kind, _, arg = spec.partition(":")

    def try_open(name: str, make: Callable[[], Any]) -> None:
        try:
            backend.sources.append(make())
        except SourceUnavailable as e:
            backend.skipped.append((name, str(e)))

    if kind == "fake" and _is_tpu_preset(arg):
        try_open(f"fake:{arg}", lambda: _tpu_source(arg, pids, all_gpus, procfs_root, fake_pids))
        return backend
    if kind == "fake":
        module = _fake_module(arg)
        for pid in fake_pids:
            for dev in module.devices:
                dev.add_process(pid)
        make = _amd_source if _is_amd_fake(module) else _nvidia_source
        try_open(f"fake:{arg}", lambda: make(module, pids, all_gpus, procfs_root))
        return backend
    if kind == "replay":
        # each backend's module loads only when chosen (a vendor SDK may be absent or slow)
        from computewatch.sources.replay import ReplaySource

        try:
            backend.sources.append(ReplaySource(arg))
        except (OSError, ValueError) as e:
            raise GpuBackendError(f"cannot replay {arg}: {e}") from None
        return backend
    vendors: tuple[tuple[str, Callable[[], GpuSource]], ...] = (
        ("nvidia", lambda: _nvidia_source(None, pids, all_gpus, procfs_root)),
        ("amd", lambda: _amd_source(None, pids, all_gpus, procfs_root)),
        ("tpu", lambda: _tpu_source(None, pids, all_gpus, procfs_root, ())),
    )
    for name, opener in vendors:
        if kind not in ("auto", name) or backend.sources:  # auto: the first vendor found
            continue
        why = no_driver_files(name, dev_root) if kind == "auto" else None
        if why is not None:
            backend.skipped.append((name, why))
        else:
            try_open(name, opener)
    return backend


DRIVER_FILES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidiactl", "dxg"),  # the NVIDIA driver's control file; WSL 2's GPU (/dev/dxg)
    "amd": ("kfd",),  # ROCm's kernel fusion driver, which amdsmi opens
    "tpu": ("accel*", "vfio/[0-9]*"),  # a TPU chip's file: v4 and before, v5e and later
}
"""The device files without which a vendor's library cannot reach a device. ``auto`` looks for
them before it loads the library (NVML, amdsmi, libtpu's gRPC stubs: about 20 ms of imports on
a machine with no accelerator); a named backend (``--gpu-backend nvidia``) always tries the
library, whose own error then says what is missing."""


def no_driver_files(vendor: str, dev_root: str = "/dev") -> str | None:
    """Why ``auto`` skips ``vendor`` without loading its library: none of its device files is
    under ``dev_root``; None when one is."""
    patterns = DRIVER_FILES[vendor]
    if any(glob.glob(os.path.join(glob.escape(dev_root), p)) for p in patterns):
        return None
    names = ", ".join(os.path.join(dev_root, p) for p in patterns)
    return (
        f"no {_VENDOR_NAMES[vendor]} device file ({names}): "
        "no driver here, or the devices were not given to this container"
    )


_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD (ROCm)", "tpu": "TPU"}


def _nvidia_source(
    module: Any, pids: Callable[[], Collection[int]] | None, all_gpus: bool, procfs_root: str
) -> GpuSource:
    # NVML bindings load only when an NVIDIA backend is tried
    from computewatch.sources.nvidia import NvidiaSource

    clock = getattr(module, "clock", None) if module is not None else None
    kw: dict[str, Any] = {"clock": clock} if callable(clock) else {}
    return NvidiaSource(module, pids=pids, all_gpus=all_gpus, procfs_root=procfs_root, **kw)


def _amd_source(
    module: Any, pids: Callable[[], Collection[int]] | None, all_gpus: bool, procfs_root: str
) -> GpuSource:
    try:  # amdsmi's module loads only when an AMD backend is tried
        from computewatch.sources.amd import AmdSource
    except ImportError as e:  # pragma: no cover - the module ships with the package
        raise SourceUnavailable(f"AMD support missing: {e}") from e
    src: GpuSource = AmdSource(module, pids=pids, all_gpus=all_gpus)
    return src


def _tpu_source(
    preset: str | None,
    pids: Callable[[], Collection[int]] | None,
    all_gpus: bool,
    procfs_root: str,
    fake_pids: Collection[int],
) -> GpuSource:
    # the TPU source (and gRPC behind it) loads only when a TPU backend is tried
    from computewatch.sources.tpu import TpuSource, open_fake

    if preset is not None:
        return open_fake(preset, pids=pids, fake_pids=fake_pids)
    return TpuSource(pids=pids, all_gpus=all_gpus, procfs_root=procfs_root)


def _is_tpu_preset(preset: str) -> bool:
    count, sep, rest = preset.partition("x")
    model = rest if sep and count.isdigit() else preset
    return model.lower().startswith("tpu-")


def _fake_module(preset: str) -> Any:
    """A fake vendor library for ``COUNTxMODEL``: NVML for NVIDIA models, amdsmi for AMD."""
    # the catalog and the fakes load only for fake: backends
    from computewatch.catalog import load_accelerators

    count, sep, rest = preset.partition("x")
    model = rest if sep and count.isdigit() else preset
    acc = load_accelerators().get(model)
    try:
        if acc is not None and acc.vendor.lower() == "amd":
            from computewatch.testing.fake_amdsmi import amd_from_preset  # fakes: on use

            return amd_from_preset(preset)
        from computewatch.testing.fake_nvml import from_preset  # fakes: on use

        return from_preset(preset)
    except ValueError as e:
        raise GpuBackendError(f"fake:{preset}: {e}") from None


def _check_tpu_preset(preset: str) -> None:
    # the catalog and the preset parser load only for fake: backends
    from computewatch.catalog import load_accelerators
    from computewatch.catalog.tpu import tpu_rows
    from computewatch.testing.presets import parse_preset

    rows = tpu_rows()
    try:
        parse_preset(preset, {k: a for k, a in load_accelerators().items() if k in rows}, "TPU ")
    except ValueError as e:
        raise GpuBackendError(f"fake:{preset}: {e}") from None


def _is_amd_fake(module: Any) -> bool:
    return type(module).__name__ == "FakeAmdSmi"
