"""HostSource and host_facts against recorded procfs/sysfs/cgroup trees, and once on this host.

Fixture trees live in ``fixtures/``: ``host_basic`` (bare-metal x86 box, job in a nested cgroup
v2 whose parent has the stricter limits), ``host_container`` (cgroup-namespaced container:
``0::/``, no /proc/diskstats, unlimited cgroup) and ``host_v1`` (arm64, cgroup v1 only).
"""

from __future__ import annotations

import math
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from computewatch.readings import Kind, Labels, Reading, labels
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.sources.host import HostSource, allowed_cores, host_facts
from computewatch.sources.procfs import pread_all

FIXTURES = Path(__file__).parent / "fixtures"
HZ = os.sysconf("SC_CLK_TCK")
KIB = 1024
SECTOR = 512

CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
HOST_NAMES = {
    "host_cpu_seconds_total",
    "host_memory_total_bytes",
    "host_memory_available_bytes",
    "host_memory_used_bytes",
    "host_swap_total_bytes",
    "host_swap_used_bytes",
    "host_disk_read_bytes_total",
    "host_disk_written_bytes_total",
    "host_disk_reads_total",
    "host_disk_writes_total",
    "host_network_receive_bytes_total",
    "host_network_transmit_bytes_total",
    "host_load1",
    "host_load5",
    "host_load15",
}
CGROUP_NAMES = {
    "cgroup_memory_current_bytes",
    "cgroup_memory_max_bytes",
    "cgroup_cpu_limit_cores",
    "cgroup_cpu_seconds_total",
}


def tree(name: str) -> dict[str, str]:
    """HostSource/host_facts roots for a fixture tree (or a copy of one)."""
    root = FIXTURES / name if not os.path.isabs(name) else Path(name)
    return {
        "procfs_root": str(root / "proc"),
        "sysfs_root": str(root / "sys"),
        "cgroup_root": str(root / "cgroup"),
    }


def facts_roots(name: str) -> dict[str, str]:
    roots = tree(name)
    del roots["sysfs_root"]
    return roots


@pytest.fixture
def open_source() -> Iterator[list[HostSource]]:
    """Sources opened by a test, closed after it."""
    opened: list[HostSource] = []
    yield opened
    for s in opened:
        s.close()


def make(opened: list[HostSource], name: str, pid: int) -> HostSource:
    s = HostSource(**tree(name), pid=pid)
    opened.append(s)
    return s


def by_key(readings: Sequence[Reading]) -> dict[tuple[str, Labels], Reading]:
    """Readings indexed by series key; fails on a duplicate key."""
    out: dict[tuple[str, Labels], Reading] = {}
    for r in readings:
        key = (r.name, r.labels)
        assert key not in out, f"duplicate series {key}"
        out[key] = r
    return out


def value(readings: Sequence[Reading], name: str, **lbl: object) -> float:
    return by_key(readings)[(name, labels(**lbl))].value


def names(readings: Sequence[Reading]) -> set[str]:
    return {r.name for r in readings}


def copy_tree(name: str, tmp_path: Path) -> str:
    dest = tmp_path / name
    shutil.copytree(FIXTURES / name, dest)
    return str(dest)


def rewrite(path: Path, text: str) -> None:
    """Rewrite a file in place (same inode), as the kernel does for the open descriptor."""
    with open(path, "w") as f:
        f.write(text)


# -- host_basic: every group, exact values -------------------------------------------------------


def test_is_a_source(open_source: list[HostSource]) -> None:
    s = make(open_source, "host_basic", 4242)
    assert isinstance(s, Source)
    assert s.name == "host"


def test_cpu_seconds_per_core_and_mode(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    cpu = [r for r in readings if r.name == "host_cpu_seconds_total"]
    expected_ticks = {
        "0": (12345, 67, 4321, 456789, 1011, 12, 1314, 15),
        "1": (22222, 0, 3333, 444444, 555, 0, 666, 77),
    }
    expected = {
        labels(cpu=n, mode=m): t / HZ
        for n, ticks in expected_ticks.items()
        for m, t in zip(CPU_MODES, ticks, strict=True)
    }
    # No aggregate "cpu" series and no guest/guest_nice (already inside user/nice).
    assert {r.labels: r.value for r in cpu} == expected
    assert all(r.kind is Kind.COUNTER for r in cpu)


def test_memory(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    assert value(readings, "host_memory_total_bytes") == 16384000 * KIB
    assert value(readings, "host_memory_available_bytes") == 8192000 * KIB
    assert value(readings, "host_memory_used_bytes") == (16384000 - 8192000) * KIB
    assert value(readings, "host_swap_total_bytes") == 2097148 * KIB
    assert value(readings, "host_swap_used_bytes") == (2097148 - 1048572) * KIB
    mem = [r for r in readings if r.name.startswith(("host_memory", "host_swap"))]
    assert all(r.kind is Kind.GAUGE and r.labels == () for r in mem)


def test_disks_whole_only(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    disk = [r for r in readings if r.name.startswith("host_disk_")]
    # sda1, nvme0n1p1/p2 are partitions (not in sys/block); loop0 and ram0 are excluded by name.
    assert {dict(r.labels)["device"] for r in disk} == {"nvme0n1", "sda"}
    assert value(disk, "host_disk_reads_total", device="nvme0n1") == 200000
    assert value(disk, "host_disk_read_bytes_total", device="nvme0n1") == 16000000 * SECTOR
    assert value(disk, "host_disk_writes_total", device="nvme0n1") == 100000
    assert value(disk, "host_disk_written_bytes_total", device="nvme0n1") == 24000000 * SECTOR
    assert value(disk, "host_disk_reads_total", device="sda") == 5000
    assert value(disk, "host_disk_read_bytes_total", device="sda") == 400000 * SECTOR
    assert value(disk, "host_disk_writes_total", device="sda") == 2500
    assert value(disk, "host_disk_written_bytes_total", device="sda") == 200000 * SECTOR
    assert all(r.kind is Kind.COUNTER for r in disk)


def test_network_every_interface(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    rx = {
        dict(r.labels)["interface"]: r.value
        for r in readings
        if r.name == "host_network_receive_bytes_total"
    }
    tx = {
        dict(r.labels)["interface"]: r.value
        for r in readings
        if r.name == "host_network_transmit_bytes_total"
    }
    # docker0 is flush against its colon ("%6s:" with a 7-character name).
    assert rx == {"lo": 987654, "eth0": 123456789012, "docker0": 5000}
    assert tx == {"lo": 987654, "eth0": 45678901234, "docker0": 7000}


def test_load(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    assert value(readings, "host_load1") == 1.25
    assert value(readings, "host_load5") == 0.75
    assert value(readings, "host_load15") == 0.5


def test_cgroup_nested_stricter_ancestor(open_source: list[HostSource]) -> None:
    s = make(open_source, "host_basic", 4242)
    assert s.cgroup_path == "/batch.slice/job-42.scope"
    readings = s.read()
    assert value(readings, "cgroup_memory_current_bytes") == 1234567890
    # The leaf allows 16 GiB and 4 cores; batch.slice allows 8 GiB and 1.5 cores.
    assert value(readings, "cgroup_memory_max_bytes") == 8589934592
    assert value(readings, "cgroup_cpu_limit_cores") == 1.5
    assert value(readings, "cgroup_cpu_seconds_total") == 987654321 / 1e6
    kinds = {r.name: r.kind for r in readings if r.name.startswith("cgroup_")}
    assert kinds == {
        "cgroup_memory_current_bytes": Kind.GAUGE,
        "cgroup_memory_max_bytes": Kind.GAUGE,
        "cgroup_cpu_limit_cores": Kind.GAUGE,
        "cgroup_cpu_seconds_total": Kind.COUNTER,
    }


def test_all_names_and_no_duplicates(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 4242).read()
    by_key(readings)
    assert names(readings) == HOST_NAMES | CGROUP_NAMES
    assert all(isinstance(r.value, float) for r in readings)


# -- container, v1, missing files ---------------------------------------------------------------


def test_container_root_cgroup_unlimited_and_no_diskstats(open_source: list[HostSource]) -> None:
    s = make(open_source, "host_container", 7)
    readings = s.read()
    assert s.cgroup_path == "/"
    # memory.max "max" and cpu.max "max 100000" mean no limit: those gauges are absent.
    assert names(readings) & CGROUP_NAMES == {
        "cgroup_memory_current_bytes",
        "cgroup_cpu_seconds_total",
    }
    assert value(readings, "cgroup_memory_current_bytes") == 52428800
    assert value(readings, "cgroup_cpu_seconds_total") == 4.2
    # sys/block/vda exists but /proc/diskstats does not: the disk group is absent.
    assert not any(r.name.startswith("host_disk_") for r in readings)
    assert value(readings, "host_swap_used_bytes") == 0


def test_container_root_cgroup_with_limits(tmp_path: Path, open_source: list[HostSource]) -> None:
    # In a cgroup namespace the mounted root is the container's own cgroup and has limit files.
    root = copy_tree("host_container", tmp_path)
    rewrite(Path(root, "cgroup", "memory.max"), "2147483648\n")
    rewrite(Path(root, "cgroup", "cpu.max"), "50000 100000\n")
    readings = make(open_source, root, 7).read()
    assert value(readings, "cgroup_memory_max_bytes") == 2147483648
    assert value(readings, "cgroup_cpu_limit_cores") == 0.5


def test_cgroup_v1_only_gives_no_cgroup_readings(open_source: list[HostSource]) -> None:
    s = make(open_source, "host_v1", 99)
    readings = s.read()
    assert s.cgroup_path is None
    assert not names(readings) & CGROUP_NAMES
    # No sys/, no diskstats, no net/dev, no loadavg in this tree: only CPU and memory remain.
    assert names(readings) == {
        "host_cpu_seconds_total",
        "host_memory_total_bytes",
        "host_memory_available_bytes",
        "host_memory_used_bytes",
        "host_swap_total_bytes",
        "host_swap_used_bytes",
    }


def test_no_cgroup_file_for_pid(open_source: list[HostSource]) -> None:
    readings = make(open_source, "host_basic", 999999).read()
    assert not names(readings) & CGROUP_NAMES


def test_cgroup_directory_missing(tmp_path: Path, open_source: list[HostSource]) -> None:
    root = copy_tree("host_basic", tmp_path)
    shutil.rmtree(Path(root, "cgroup", "batch.slice"))
    s = make(open_source, root, 4242)
    assert s.cgroup_path is None
    assert not names(s.read()) & CGROUP_NAMES


@pytest.mark.parametrize("missing", ["stat", "meminfo"])
def test_missing_required_file_is_unavailable(missing: str, tmp_path: Path) -> None:
    root = copy_tree("host_basic", tmp_path)
    os.remove(Path(root, "proc", missing))
    fds_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(SourceUnavailable, match=f"proc/{missing}"):
        HostSource(**tree(root), pid=4242)
    # A failed constructor closes what it had opened.
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_empty_root_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="procfs"):
        HostSource(procfs_root=str(tmp_path), sysfs_root=str(tmp_path), cgroup_root=str(tmp_path))


# -- re-reading ----------------------------------------------------------------------------------


def test_changes_are_seen_on_next_read(tmp_path: Path, open_source: list[HostSource]) -> None:
    root = Path(copy_tree("host_basic", tmp_path))
    s = make(open_source, str(root), 4242)
    first = s.read()
    assert value(first, "host_cpu_seconds_total", cpu="0", mode="user") == 12345 / HZ

    stat = (root / "proc/stat").read_text()
    rewrite(root / "proc/stat", stat.replace("cpu0 12345 ", "cpu0 12400 "))
    meminfo = (root / "proc/meminfo").read_text()
    rewrite(root / "proc/meminfo", meminfo.replace("8192000 kB", "4096000 kB"))
    netdev = (root / "proc/net/dev").read_text()
    rewrite(root / "proc/net/dev", netdev.replace("123456789012", "123456799999"))
    diskstats = (root / "proc/diskstats").read_text()
    rewrite(root / "proc/diskstats", diskstats.replace("sda 5000 ", "sda 5001 "))
    rewrite(root / "proc/loadavg", "2.00 1.00 0.50 1/812 45679\n")
    job = root / "cgroup/batch.slice/job-42.scope"
    rewrite(job / "memory.current", "42\n")
    rewrite(job / "cpu.max", "100000 100000\n")  # now stricter than batch.slice's 1.5
    rewrite(job / "cpu.stat", "usage_usec 987654999\nuser_usec 1\nsystem_usec 2\n")

    second = s.read()
    assert value(second, "host_cpu_seconds_total", cpu="0", mode="user") == 12400 / HZ
    assert value(second, "host_memory_available_bytes") == 4096000 * KIB
    assert value(second, "host_memory_used_bytes") == (16384000 - 4096000) * KIB
    assert value(second, "host_network_receive_bytes_total", interface="eth0") == 123456799999
    assert value(second, "host_disk_reads_total", device="sda") == 5001
    assert value(second, "host_load1") == 2.0
    assert value(second, "cgroup_memory_current_bytes") == 42
    assert value(second, "cgroup_cpu_limit_cores") == 1.0
    assert value(second, "cgroup_cpu_seconds_total") == 987654999 / 1e6


def test_new_cpu_and_interface_appear(tmp_path: Path, open_source: list[HostSource]) -> None:
    root = Path(copy_tree("host_basic", tmp_path))
    s = make(open_source, str(root), 4242)
    s.read()
    stat = (root / "proc/stat").read_text()
    rewrite(root / "proc/stat", stat.replace("intr ", "cpu2 1 2 3 4 5 6 7 8 9 10\nintr ", 1))
    netdev = (root / "proc/net/dev").read_text()
    rewrite(
        root / "proc/net/dev",
        netdev + "  veth1:  10  1  0  0  0  0  0  0  20  2  0  0  0  0  0  0\n",
    )
    readings = s.read()
    assert value(readings, "host_cpu_seconds_total", cpu="2", mode="steal") == 8 / HZ
    assert value(readings, "host_network_transmit_bytes_total", interface="veth1") == 20


def test_file_larger_than_one_read(tmp_path: Path, open_source: list[HostSource]) -> None:
    # More than the 64 KiB of one pread: every interface must still be read.
    root = Path(copy_tree("host_basic", tmp_path))
    netdev = (root / "proc/net/dev").read_text()
    extra = "".join(f"veth{i:05d}: {i} 1 0 0 0 0 0 0 {2 * i} 1 0 0 0 0 0 0\n" for i in range(1500))
    rewrite(root / "proc/net/dev", netdev + extra)
    assert (root / "proc/net/dev").stat().st_size > 65536
    readings = make(open_source, str(root), 4242).read()
    assert value(readings, "host_network_transmit_bytes_total", interface="veth01499") == 2998


def test_close_twice_then_read_fails(open_source: list[HostSource]) -> None:
    s = make(open_source, "host_basic", 4242)
    s.close()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.read()


# -- host_facts ----------------------------------------------------------------------------------


def test_host_facts_basic() -> None:
    facts = host_facts(**facts_roots("host_basic"), pid=4242)
    assert facts["cpu_model"] == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    assert facts["memory_bytes"] == 16384000 * KIB
    assert facts["cgroup_path"] == "/batch.slice/job-42.scope"
    assert facts["cgroup_cpu_limit_cores"] == 1.5
    assert facts["cgroup_memory_max_bytes"] == 8589934592
    # These come from the machine running the test, not from the tree.
    assert isinstance(facts["hostname"], str)
    assert facts["logical_cpus"] == os.cpu_count()
    assert facts["allowed_cpus"] is None or isinstance(facts["allowed_cpus"], int)
    assert isinstance(facts["os"], str) and facts["os"].startswith(os.uname().sysname)
    assert isinstance(facts["python"], str)
    assert set(facts) == {
        "hostname",
        "cpu_model",
        "logical_cpus",
        "allowed_cpus",
        "memory_bytes",
        "os",
        "python",
        "cgroup_path",
        "cgroup_cpu_limit_cores",
        "cgroup_memory_max_bytes",
    }


def test_host_facts_container_unlimited() -> None:
    facts = host_facts(**facts_roots("host_container"), pid=7)
    assert facts["cpu_model"] == "AMD EPYC 7763 64-Core Processor"
    assert facts["cgroup_path"] == "/"
    assert facts["cgroup_cpu_limit_cores"] is None
    assert facts["cgroup_memory_max_bytes"] is None


def test_host_facts_arm64_cgroup_v1() -> None:
    facts = host_facts(**facts_roots("host_v1"), pid=99)
    assert facts["cpu_model"] == "CPU implementer 0x41 part 0xd0c"
    assert facts["memory_bytes"] == 8000000 * KIB
    assert facts["cgroup_path"] is None
    assert facts["cgroup_cpu_limit_cores"] is None
    assert facts["cgroup_memory_max_bytes"] is None


def test_host_facts_empty_tree(tmp_path: Path) -> None:
    facts = host_facts(procfs_root=str(tmp_path), cgroup_root=str(tmp_path), pid=1)
    assert facts["cpu_model"] == "unknown"
    assert facts["memory_bytes"] is None
    assert facts["cgroup_path"] is None


def test_allowed_cores() -> None:
    assert allowed_cores({"allowed_cpus": 8, "logical_cpus": 16}) == 8.0
    limited = {"allowed_cpus": 8, "logical_cpus": 16, "cgroup_cpu_limit_cores": 1.5}
    assert allowed_cores(limited) == 1.5
    assert allowed_cores({"allowed_cpus": 2, "cgroup_cpu_limit_cores": 4.0}) == 2.0
    assert allowed_cores({"allowed_cpus": None, "logical_cpus": 16}) == 16.0
    with pytest.raises(ValueError, match="unknown"):
        allowed_cores({"allowed_cpus": None, "logical_cpus": None})


# -- this machine --------------------------------------------------------------------------------


def test_seq_file_returns_one_page_per_read() -> None:
    # The kernel behaviour pread_all(records=True) exists for: a multi-record seq_file such as
    # /proc/self/maps yields at most one buffer per read, however large the read.
    # A bare interpreter's maps can fit in one page (3.8 KB here), so first make it long: each
    # mapping of a file at offset 0 is its own line, about 100 bytes with the path.
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * mmap.PAGESIZE)
        f.flush()
        maps = [mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ) for _ in range(200)]
        try:
            fd = os.open("/proc/self/maps", os.O_RDONLY)
            try:
                one = os.pread(fd, 65536, 0)
                whole = pread_all(fd, records=True)
            finally:
                os.close(fd)
        finally:
            for m in maps:
                m.close()
    assert len(whole) > 200 * 50
    assert len(one) < len(whole)
    assert whole.endswith(b"\n")
    assert whole.count(b"\n") > one.count(b"\n")


@pytest.mark.skipif(not os.path.isfile("/proc/stat"), reason="needs Linux procfs")
def test_real_host_smoke() -> None:
    s = HostSource()
    try:
        first = s.read()
        by_key(first)
        assert names(first) >= {"host_cpu_seconds_total", "host_memory_total_bytes"}
        assert names(first) <= HOST_NAMES | CGROUP_NAMES
        assert value(first, "host_memory_total_bytes") > 0
        assert all(math.isfinite(r.value) and r.value >= 0 for r in first)
        cpus = {dict(r.labels)["cpu"] for r in first if r.name == "host_cpu_seconds_total"}
        assert len(cpus) >= 1
        total = sum(r.value for r in first if r.name == "host_cpu_seconds_total")
        # Every core's idle or busy time grows with wall time; wait for one clock tick of it.
        deadline = time.monotonic() + 30
        while True:
            later = s.read()
            now = sum(r.value for r in later if r.name == "host_cpu_seconds_total")
            if now > total or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        assert now > total
    finally:
        s.close()


def test_real_host_facts() -> None:
    facts = host_facts()
    assert isinstance(facts["memory_bytes"], int) and facts["memory_bytes"] > 0
    assert allowed_cores(facts) > 0
