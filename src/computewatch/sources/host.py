"""Host readings from procfs, sysfs and cgroup v2: CPU time, memory, disks, network, load.

Each file is opened once and re-read with ``pread`` at offset 0 every tick: procfs and cgroupfs
build a seq_file's text afresh on a read at offset 0 (fs/seq_file.c, ``seq_read_iter``), so one
descriptor serves every tick and the sampler's hot path makes no ``open``/``close`` calls.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from computewatch.readings import Labels, Reading, counter, gauge, labels
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.procfs import CLK_TCK, open_ro, pread_all, read_file

__all__ = ["HostSource", "allowed_cores", "default_cgroup_root", "host_facts"]

# proc(5), /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice, in
# USER_HZ ticks. guest and guest_nice are already included in user and nice
# (kernel/sched/cputime.c, account_guest_time), so they are left out to avoid double counting.
_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# Documentation/block/stat.rst: "sectors" are standard UNIX 512-byte sectors, whatever the
# device's own block size.
_SECTOR_BYTES = 512

_MEMINFO_KEYS = (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree")

# Interfaces come and go (container veths); past this many cached label tuples, start over.
_MAX_CACHED_INTERFACES = 4096

_N = TypeVar("_N", int, float)


def _meminfo(data: bytes, keys: tuple[bytes, ...] = _MEMINFO_KEYS) -> dict[bytes, int]:
    """The ``keys`` fields of /proc/meminfo that are present, in bytes.

    Its "kB" means KiB: fs/proc/meminfo.c prints pages shifted by ``PAGE_SHIFT - 10``. Each key
    is found with ``bytes.find`` rather than by splitting every line: a few fields out of ~55.
    """
    text = b"\n" + data
    found: dict[bytes, int] = {}
    for key in keys:
        start = text.find(b"\n" + key + b":")
        if start < 0:
            continue
        end = text.find(b"\n", start + 1)
        fields = text[start + len(key) + 2 : end if end > 0 else len(text)].split()
        found[key] = int(fields[0]) * 1024 if len(fields) > 1 else int(fields[0])
    return found


def _cgroup_v2_path(procfs_root: str, pid: int) -> str | None:
    """The process's cgroup v2 path (the ``0::/path`` line of /proc/PID/cgroup), or None.

    None when the file is missing or lists only v1 hierarchies (cgroups(7)).
    """
    data = read_file(os.path.join(procfs_root, str(pid), "cgroup"))
    if data is None:
        return None
    for line in os.fsdecode(data).splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers and path.startswith("/"):
            return path
    return None


def _cgroup_dirs(cgroup_root: str, path: str) -> list[str]:
    """The cgroup's directory first, then each ancestor up to and including ``cgroup_root``.

    The root is included because in a cgroup-namespaced container ``cgroup_root`` is the
    container's own cgroup, whose memory.max and cpu.max carry the container's limits; the host's
    real root cgroup has neither file (cgroup-v2.rst), so there it adds nothing.
    """
    parts = [p for p in path.split("/") if p]
    return [os.path.join(cgroup_root, *parts[:i]) for i in range(len(parts), -1, -1)]


def _parse_memory_max(data: bytes) -> int | None:
    """memory.max: a byte count, or "max" for no limit (Documentation/admin-guide/cgroup-v2.rst)."""
    text = data.strip()
    return None if text == b"max" else int(text)


def _parse_cpu_max(data: bytes) -> float | None:
    """cpu.max: "$MAX $PERIOD" in µs, $MAX "max" for no limit (cgroup-v2.rst), as cores."""
    fields = data.split()
    return None if fields[0] == b"max" else int(fields[0]) / int(fields[1])


def _parse_cpu_stat_usage(data: bytes) -> int | None:
    """``usage_usec`` of cpu.stat, which every cgroup v2 directory has (cgroup-v2.rst)."""
    for line in data.split(b"\n"):
        if line.startswith(b"usage_usec "):
            return int(line[11:])
    return None


def _min_limit(a: _N | None, b: _N | None) -> _N | None:
    """The stricter of two limits, None meaning unlimited."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _cgroup_limits(dirs: Iterable[str]) -> tuple[int | None, float | None]:
    """The effective (memory bytes, CPU cores) limits over ``dirs``; None where unlimited.

    A cgroup's limits apply to its whole subtree, so the effective one is the minimum along the
    path (cgroup-v2.rst, "Top-down Constraint"). A missing file sets no limit.
    """
    memory: int | None = None
    cpu: float | None = None
    for d in dirs:
        data = read_file(os.path.join(d, "memory.max"))
        if data is not None:
            memory = _min_limit(memory, _parse_memory_max(data))
        data = read_file(os.path.join(d, "cpu.max"))
        if data is not None:
            cpu = _min_limit(cpu, _parse_cpu_max(data))
    return memory, cpu


def _whole_disks(sysfs_root: str) -> list[str]:
    """Names of whole disks: entries of /sys/block, less loop and ram devices.

    Partitions are not in /sys/block (sysfs-block ABI doc). A "/" in a kernel disk name
    (cciss/c0d0) is written "!" in sysfs and "/" in /proc/diskstats.
    """
    block = os.path.join(sysfs_root, "block")
    try:
        names = os.listdir(block)
    except OSError:
        return []
    return sorted(
        n.replace("!", "/")
        for n in names
        if not n.startswith(("loop", "ram")) and os.path.isdir(os.path.join(block, n))
    )


class HostSource:
    """CPU time per core and mode, memory, whole-disk I/O, network bytes, load, own cgroup.

    ``host_memory_used_bytes`` is MemTotal - MemAvailable: memory the kernel could not hand to a
    new workload without swapping (MemAvailable counts reclaimable cache as available), the same
    definition as ``free``'s "used" since procps-ng 3.3.10 — not MemTotal - MemFree, which counts
    page cache as used. ``pid`` is the process whose cgroup v2 limits and usage are reported
    (default: this one).
    """

    name = "host"

    def __init__(
        self,
        procfs_root: str = "/proc",
        sysfs_root: str = "/sys",
        cgroup_root: str | None = None,
        pid: int | None = None,
    ) -> None:
        """``cgroup_root`` defaults to :func:`default_cgroup_root`."""
        cgroup_root = cgroup_root or default_cgroup_root()
        self._fds: list[int] = []
        self._closed = False
        try:
            self._setup(procfs_root, sysfs_root, cgroup_root, os.getpid() if pid is None else pid)
        except BaseException:
            self.close()
            raise

    def _track(self, path: str) -> int | None:
        fd = open_ro(path)
        if fd is not None:
            self._fds.append(fd)
        return fd

    def _require(self, procfs_root: str, name: str) -> int:
        path = os.path.join(procfs_root, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceUnavailable(
                f"cannot read {path} ({exc.strerror}): host CPU and memory readings need it;"
                f" is {procfs_root} a mounted procfs?"
            ) from exc
        self._fds.append(fd)
        return fd

    def _setup(self, procfs_root: str, sysfs_root: str, cgroup_root: str, pid: int) -> None:
        self._hz = CLK_TCK  # /proc/stat times are in USER_HZ units (proc(5))
        self._stat_fd = self._require(procfs_root, "stat")
        self._meminfo_fd = self._require(procfs_root, "meminfo")
        self._loadavg_fd = self._track(os.path.join(procfs_root, "loadavg"))
        self._netdev_fd = self._track(os.path.join(procfs_root, "net", "dev"))

        self._cpu_labels: dict[bytes, tuple[Labels, ...]] = {}
        self._if_labels: dict[bytes, Labels] = {}
        self._disk_labels: dict[bytes, Labels] = {
            os.fsencode(n): labels(device=n) for n in _whole_disks(sysfs_root)
        }
        self._diskstats_fd = (
            self._track(os.path.join(procfs_root, "diskstats")) if self._disk_labels else None
        )

        # The process's cgroup v2 path; None without cgroup v2 or when its directory is missing.
        self.cgroup_path: str | None = _cgroup_v2_path(procfs_root, pid)
        self._cg_current_fd: int | None = None
        self._cg_memory_max_fd: int | None = None
        self._cg_cpu_max_fd: int | None = None
        self._cg_cpu_stat_fd: int | None = None
        self._cg_memory_limit: int | None = None  # of the ancestors, read once
        self._cg_cpu_limit: float | None = None
        if self.cgroup_path is None:
            return
        dirs = _cgroup_dirs(cgroup_root, self.cgroup_path)
        leaf = dirs[0]
        if not os.path.isdir(leaf):
            self.cgroup_path = None
            return
        self._cg_current_fd = self._track(os.path.join(leaf, "memory.current"))
        self._cg_memory_max_fd = self._track(os.path.join(leaf, "memory.max"))
        self._cg_cpu_max_fd = self._track(os.path.join(leaf, "cpu.max"))
        self._cg_cpu_stat_fd = self._track(os.path.join(leaf, "cpu.stat"))
        self._cg_memory_limit, self._cg_cpu_limit = _cgroup_limits(dirs[1:])

    def read(self) -> list[Reading]:
        """Every host reading of one tick; counters are cumulative since boot."""
        if self._closed:
            raise ValueError("read() on a closed HostSource")
        out: list[Reading] = []
        add = out.append
        self._read_cpu(add)
        self._read_memory(add)
        if self._diskstats_fd is not None:
            self._read_disks(add)
        if self._netdev_fd is not None:
            self._read_network(add)
        if self._loadavg_fd is not None:
            load = pread_all(self._loadavg_fd).split(None, 3)
            add(gauge("host_load1", float(load[0])))
            add(gauge("host_load5", float(load[1])))
            add(gauge("host_load15", float(load[2])))
        if self.cgroup_path is not None:
            self._read_cgroup(add)
        return out

    def _cpu_mode_labels(self, cpu: bytes) -> tuple[Labels, ...]:
        n = cpu[3:].decode()
        lbls = tuple(labels(cpu=n, mode=m) for m in _CPU_MODES)
        self._cpu_labels[cpu] = lbls
        return lbls

    def _read_cpu(self, add: Callable[[Reading], None]) -> None:
        hz = self._hz
        cache = self._cpu_labels
        # proc(5): the aggregate "cpu" line comes first, then one "cpuN" line per online CPU.
        for line in pread_all(self._stat_fd).split(b"\n")[1:]:
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            lbls = cache.get(fields[0]) or self._cpu_mode_labels(fields[0])
            for lbl, ticks in zip(lbls, fields[1:9], strict=False):
                add(counter("host_cpu_seconds_total", int(ticks) / hz, lbl))

    def _read_memory(self, add: Callable[[Reading], None]) -> None:
        mem = _meminfo(pread_all(self._meminfo_fd))
        total = mem.get(b"MemTotal")
        available = mem.get(b"MemAvailable")  # since Linux 3.14 (proc(5))
        if total is not None:
            add(gauge("host_memory_total_bytes", total))
            if available is not None:
                add(gauge("host_memory_available_bytes", available))
                add(gauge("host_memory_used_bytes", total - available))
        swap_total = mem.get(b"SwapTotal")
        swap_free = mem.get(b"SwapFree")
        if swap_total is not None and swap_free is not None:
            add(gauge("host_swap_total_bytes", swap_total))
            add(gauge("host_swap_used_bytes", swap_total - swap_free))

    def _read_disks(self, add: Callable[[Reading], None]) -> None:
        assert self._diskstats_fd is not None
        cache = self._disk_labels
        # Documentation/admin-guide/iostats.rst: after major, minor, name come reads completed,
        # reads merged, sectors read, ms reading, writes completed, writes merged, sectors written.
        for line in pread_all(self._diskstats_fd, records=True).split(b"\n"):
            f = line.split(None, 10)
            if len(f) < 10:
                continue
            lbl = cache.get(f[2])
            if lbl is None:
                continue
            add(counter("host_disk_reads_total", int(f[3]), lbl))
            add(counter("host_disk_read_bytes_total", int(f[5]) * _SECTOR_BYTES, lbl))
            add(counter("host_disk_writes_total", int(f[7]), lbl))
            add(counter("host_disk_written_bytes_total", int(f[9]) * _SECTOR_BYTES, lbl))

    def _read_network(self, add: Callable[[Reading], None]) -> None:
        assert self._netdev_fd is not None
        cache = self._if_labels
        # net/core/net-procfs.c: two header lines, then "name: 8 receive and 8 transmit fields",
        # bytes first in each. Interface names cannot contain ":" (dev_valid_name).
        for line in pread_all(self._netdev_fd, records=True).split(b"\n")[2:]:
            name, sep, rest = line.partition(b":")
            if not sep:
                continue
            name = name.strip()
            lbl = cache.get(name)
            if lbl is None:
                if len(cache) >= _MAX_CACHED_INTERFACES:
                    cache.clear()
                lbl = cache[name] = labels(interface=os.fsdecode(name))
            f = rest.split(None, 9)
            add(counter("host_network_receive_bytes_total", int(f[0]), lbl))
            add(counter("host_network_transmit_bytes_total", int(f[8]), lbl))

    def _read_cgroup(self, add: Callable[[Reading], None]) -> None:
        if self._cg_current_fd is not None:
            add(gauge("cgroup_memory_current_bytes", int(pread_all(self._cg_current_fd))))
        memory = self._cg_memory_limit
        if self._cg_memory_max_fd is not None:
            memory = _min_limit(memory, _parse_memory_max(pread_all(self._cg_memory_max_fd)))
        if memory is not None:
            add(gauge("cgroup_memory_max_bytes", memory))
        cpu = self._cg_cpu_limit
        if self._cg_cpu_max_fd is not None:
            cpu = _min_limit(cpu, _parse_cpu_max(pread_all(self._cg_cpu_max_fd)))
        if cpu is not None:
            add(gauge("cgroup_cpu_limit_cores", cpu))
        if self._cg_cpu_stat_fd is not None:
            usage = _parse_cpu_stat_usage(pread_all(self._cg_cpu_stat_fd))
            if usage is not None:
                add(counter("cgroup_cpu_seconds_total", usage / 1e6))

    def close(self) -> None:
        """Close the cached descriptors; safe to call twice."""
        self._closed = True
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _cpu_model(procfs_root: str) -> str:
    """The CPU's name from /proc/cpuinfo, whose keys differ by architecture.

    x86 has "model name"; arm64 has no name, only "CPU implementer"/"CPU part" codes (and on some
    kernels "Hardware"); POWER has "cpu".
    """
    data = read_file(os.path.join(procfs_root, "cpuinfo"))
    if data is None:
        return "unknown"
    fields: dict[str, str] = {}
    for line in os.fsdecode(data).splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key not in fields:
            fields[key] = value.strip()
    for key in ("model name", "Hardware", "cpu"):
        if fields.get(key):
            return fields[key]
    if "CPU part" in fields:
        implementer = fields.get("CPU implementer")
        prefix = f"CPU implementer {implementer} " if implementer else ""
        return f"{prefix}part {fields['CPU part']}"
    return "unknown"


def default_cgroup_root(sysfs_fs_cgroup: str = "/sys/fs/cgroup") -> str:
    """Where the cgroup v2 hierarchy is mounted: ``/sys/fs/cgroup`` on a unified system (it
    has ``cgroup.controllers``), ``/sys/fs/cgroup/unified`` on a hybrid v1/v2 one (systemd's
    layout on older distributions)."""
    if os.path.exists(os.path.join(sysfs_fs_cgroup, "cgroup.controllers")):
        return sysfs_fs_cgroup
    unified = os.path.join(sysfs_fs_cgroup, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.controllers")):
        return unified
    return sysfs_fs_cgroup


def host_facts(
    procfs_root: str = "/proc", cgroup_root: str | None = None, pid: int | None = None
) -> dict[str, object]:
    """Static facts about the host and the job's cgroup, recorded once per run.

    Keys: hostname, cpu_model, logical_cpus, allowed_cpus, memory_bytes, os, python,
    cgroup_path, cgroup_cpu_limit_cores, cgroup_memory_max_bytes. A value the host cannot give is
    None (cpu_model: "unknown").
    """
    cgroup_root = cgroup_root or default_cgroup_root()
    try:
        allowed: int | None = len(os.sched_getaffinity(pid or 0))
    except (AttributeError, OSError):  # not Linux, or no such process
        allowed = None
    meminfo = read_file(os.path.join(procfs_root, "meminfo"))
    memory = _meminfo(meminfo, (b"MemTotal",)).get(b"MemTotal") if meminfo else None
    path = _cgroup_v2_path(procfs_root, os.getpid() if pid is None else pid)
    memory_max: int | None = None
    cpu_limit: float | None = None
    if path is not None:
        dirs = _cgroup_dirs(cgroup_root, path)
        if os.path.isdir(dirs[0]):
            memory_max, cpu_limit = _cgroup_limits(dirs)
        else:
            path = None
    uname = os.uname()
    return {
        "hostname": uname.nodename,  # socket.gethostname(): uname(2)'s nodename on Linux
        "cpu_model": _cpu_model(procfs_root),
        "logical_cpus": os.cpu_count(),
        "allowed_cpus": allowed,
        "memory_bytes": memory,
        "os": f"{uname.sysname} {uname.release} {uname.machine}",
        "python": sys.version.split()[0],  # platform.python_version()'s reading, without platform
        "cgroup_path": path,
        "cgroup_cpu_limit_cores": cpu_limit,
        "cgroup_memory_max_bytes": memory_max,
    }


def allowed_cores(facts: Mapping[str, object]) -> float:
    """How many cores the job may use: its CPU affinity, capped by its cgroup CPU quota.

    Falls back to the logical CPU count when the affinity is unknown; raises ValueError when
    neither is known and there is no quota.
    """
    cpus = facts.get("allowed_cpus")
    if not isinstance(cpus, int):
        cpus = facts.get("logical_cpus")
    limit = facts.get("cgroup_cpu_limit_cores")
    known = [float(v) for v in (cpus, limit) if isinstance(v, int | float)]
    if not known:
        raise ValueError("the number of usable cores is unknown (no affinity, CPU count or quota)")
    return min(known)
