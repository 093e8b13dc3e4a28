"""The sources a monitored run reads, built the same way for ``computewatch run`` and
``track()``: the process tree, the host, RAPL energy and the GPU backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from computewatch.catalog.tpu import devices_word
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.sources.gpus import GpuBackend, open_backend
from computewatch.sources.host import HostSource, allowed_cores, host_facts
from computewatch.sources.process_tree import ProcessTreeSource
from computewatch.sources.rapl import RaplSource


class Monitor(msgspec.Struct):
    """What to read for one run, and the facts recorded with it."""

    sources: list[Source]
    facts: dict[str, Any]
    notes: list[str]
    tree: ProcessTreeSource | None
    gpus: GpuBackend

    @property
    def allowed_cores(self) -> float:
        return float(self.facts["allowed_cores"])

    def gpu_names(self) -> dict[str, tuple[int | str, str, bool]]:
        return {d.uuid: (d.index, d.name, d.simulated) for d in self.gpus.devices}

    def final_facts(self) -> dict[str, Any]:
        """The run's facts at the end: GPU capabilities can change during a run, and which
        GPUs the run used is known only then."""
        facts = dict(self.facts)
        facts["gpus"] = [  # a copy of the capabilities: the sampler may still update them
            {**msgspec.structs.asdict(d), "capabilities": dict(d.capabilities)}
            for d in self.gpus.devices
        ]
        facts["gpus_used"] = sorted(self.gpus.used_uuids())
        return facts


def build_monitor(
    root_pid: int,
    *,
    procfs_root: str = "/proc",
    gpu_backend: str = "auto",
    all_gpus: bool = False,
    exclude_pids: frozenset[int] = frozenset(),
    count_existing_usage: bool = False,
    root_cpu_baseline: float | None = None,
    fake_gpu_pids: tuple[int, ...] = (),
    extra_sources: Sequence[Source] = (),
) -> Monitor:
    """Open every source that works here; each one that does not is skipped with its reason
    in ``notes``; ``extra_sources`` (the run's cgroup) come first. Raises
    :class:`computewatch.sources.gpus.GpuBackendError` for an invalid ``gpu_backend``."""
    notes: list[str] = []
    sources: list[Source] = list(extra_sources)
    facts: dict[str, Any] = dict(host_facts(procfs_root=procfs_root, pid=root_pid))
    facts["allowed_cores"] = allowed_cores(facts)
    tree: ProcessTreeSource | None = None
    try:
        tree = ProcessTreeSource(
            root_pid,
            procfs_root,
            exclude_pids=exclude_pids,
            count_existing_usage=count_existing_usage,
            root_cpu_baseline=root_cpu_baseline,
        )
        sources.append(tree)
    except SourceUnavailable as e:
        notes.append(f"process source unavailable: {e}")
    _try(sources, notes, "host", lambda: HostSource(procfs_root=procfs_root, pid=root_pid))
    # CPU energy: measured through RAPL where readable; otherwise the reason is kept with the
    # run's facts (the accounting models CPU energy then), not repeated as a note on every run.
    try:
        sources.append(RaplSource())
        facts["cpu_energy"] = {"source": "rapl", "why": None}
    except SourceUnavailable as e:
        facts["cpu_energy"] = {"source": None, "why": str(e)}
    pids = tree.pids_view if tree is not None else None
    backend = open_backend(
        gpu_backend, pids=pids, all_gpus=all_gpus, procfs_root=procfs_root,
        fake_pids=fake_gpu_pids,
    )  # fmt: skip
    sources.extend(backend.sources)
    facts["gpu_backend"] = gpu_backend
    facts["gpu_all"] = all_gpus
    if backend.simulated:
        word = devices_word([d.model or d.uuid for d in backend.devices])
        notes.append(f"{word} figures are simulated (fake or replayed devices), not measured")
    if gpu_backend != "auto" or not backend.sources:
        facts["gpu_skipped"] = {name: why for name, why in backend.skipped}
    for name, why in backend.skipped:
        if gpu_backend != "auto":  # asked for by name: its absence matters
            notes.append(f"GPU backend {name} unavailable: {why}")
    monitor = Monitor(sources, facts, notes, tree, backend)
    monitor.facts.update(
        {k: v for k, v in monitor.final_facts().items() if k in ("gpus", "gpus_used")}
    )
    return monitor


def _try(sources: list[Source], notes: list[str], what: str, make: Callable[[], Source]) -> None:
    try:
        sources.append(make())
    except SourceUnavailable as e:
        notes.append(f"{what} source unavailable: {e}")
