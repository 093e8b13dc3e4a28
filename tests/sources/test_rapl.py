"""RaplSource against recorded powercap trees, and once on this host.

Fixture trees in ``fixtures/`` are laid out as sysfs lays them out: zone directories under
``sys/devices/...`` (sub-zones nested in their package's directory) and a symlink per zone under
``sys/class/powercap``, which is the root the source is given:

- ``powercap_intel_2s``: two-socket Xeon; each package has ``core``, ``uncore`` and ``dram``.
- ``powercap_amd_1s``: one AMD EPYC package with its ``core`` sub-zone and no DRAM zone.
- ``powercap_intel_laptop``: Intel client part: package with ``core``, ``uncore``, ``dram``, a
  ``psys`` zone, and the same package again as ``intel-rapl-mmio:0``.

Tests that change counters copy a tree to ``tmp_path`` first and rewrite ``energy_uj`` in place.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from computewatch.readings import Kind, Reading
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.sources.rapl import (
    METRIC,
    SUMMED_DOMAINS,
    RaplDomain,
    RaplSource,
    rapl_status,
)

FIXTURES = Path(__file__).parent / "fixtures"
PKG_MAX = 262143328850  # the fixtures' max_energy_range_uj: 2^32 x 61.035 µJ
SMALL_MAX = 65712999613  # 2^32 x 15.3 µJ (AMD, and Intel server DRAM)
NOBODY = 65534


def root_of(tree: Path | str) -> str:
    """The powercap root (``sys/class/powercap``) of a fixture name or a copied tree."""
    base = Path(tree) if os.path.isabs(tree) else FIXTURES / tree
    return str(base / "sys" / "class" / "powercap")


def copy_tree(name: str, dest: Path) -> Path:
    """A writable copy of a fixture tree, symlinks kept as symlinks."""
    target = dest / name
    shutil.copytree(FIXTURES / name, target, symlinks=True)
    return target


def set_uj(tree: Path, zone: str, value: int) -> None:
    """Rewrite a zone's ``energy_uj`` in place, as the kernel's counter moves."""
    with open(Path(root_of(tree)) / zone / "energy_uj", "w") as f:
        f.write(f"{value}\n")


def get_uj(tree: Path | str, zone: str) -> int:
    return int((Path(root_of(tree)) / zone / "energy_uj").read_text())


def by_labels(readings: list[Reading]) -> dict[tuple[tuple[str, str], ...], float]:
    assert all(r.name == METRIC and r.kind is Kind.COUNTER for r in readings)
    out = {r.labels: r.value for r in readings}
    assert len(out) == len(readings), "two readings share a series key"
    return out


def key(domain: str, socket: int | None = None, **extra: object) -> tuple[tuple[str, str], ...]:
    pairs = {"domain": domain, **extra}
    if socket is not None:
        pairs["socket"] = socket
    return tuple(sorted((k, str(v)) for k, v in pairs.items()))


def summed(readings: list[Reading]) -> float:
    """What a reader adds up: the package and DRAM series only."""
    return sum(r.value for r in readings if dict(r.labels)["domain"] in SUMMED_DOMAINS)


def make_zone(parent: Path, zone: str, name: str, energy: int, max_uj: int = PKG_MAX) -> Path:
    d = parent / zone
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (d / "enabled").write_text("1\n")
    return d


def make_tree(base: Path, zones: dict[str, str]) -> str:
    """A synthetic sysfs-style tree: ``{"intel-rapl:0": "package-0-die-0", ...}``.

    Sub-zones (``a:b:c``) nest in their parent's directory; every zone gets a class symlink.
    """
    devices = base / "sys" / "devices" / "virtual" / "powercap" / "intel-rapl"
    cls = base / "sys" / "class" / "powercap"
    cls.mkdir(parents=True)
    for zone, name in zones.items():
        parts = zone.split(":")
        parent = devices if len(parts) == 2 else devices / ":".join(parts[:2])
        d = make_zone(parent, zone, name, 1000)
        (cls / zone).symlink_to(os.path.relpath(d, cls))
    return str(cls)


@pytest.fixture
def opened() -> Iterator[list[RaplSource]]:
    """Sources opened by a test, closed after it."""
    sources: list[RaplSource] = []
    yield sources
    for s in sources:
        s.close()


def open_source(opened: list[RaplSource], root: str) -> RaplSource:
    s = RaplSource(root)
    opened.append(s)
    return s


# -- discovery -------------------------------------------------------------------------------


def test_intel_two_sockets_exports_packages_and_dram(opened: list[RaplSource]) -> None:
    s = open_source(opened, root_of("powercap_intel_2s"))
    assert isinstance(s, Source)
    assert s.name == "rapl"
    assert s.domains == [
        RaplDomain("intel-rapl:0", "package", 0, "package-0", None, PKG_MAX),
        RaplDomain("intel-rapl:0:2", "dram", 0, "dram", None, SMALL_MAX),
        RaplDomain("intel-rapl:1", "package", 1, "package-1", None, PKG_MAX),
        RaplDomain("intel-rapl:1:2", "dram", 1, "dram", None, SMALL_MAX),
    ]
    # core and uncore are inside the package: listed as skipped, never exported.
    assert s.skipped == [
        "intel-rapl:0:0 (core): part of package-0, not exported",
        "intel-rapl:0:1 (uncore): part of package-0, not exported",
        "intel-rapl:1:0 (core): part of package-1, not exported",
        "intel-rapl:1:1 (uncore): part of package-1, not exported",
    ]
    first = by_labels(s.read())
    # Cumulative since construction: nothing has moved yet.
    assert first == {
        key("package", 0): 0.0,
        key("dram", 0): 0.0,
        key("package", 1): 0.0,
        key("dram", 1): 0.0,
    }


def test_amd_single_package_has_no_dram(opened: list[RaplSource]) -> None:
    s = open_source(opened, root_of("powercap_amd_1s"))
    assert s.domains == [RaplDomain("intel-rapl:0", "package", 0, "package-0", None, SMALL_MAX)]
    assert s.skipped == ["intel-rapl:0:0 (core): part of package-0, not exported"]
    assert [r.labels for r in s.read()] == [key("package", 0)]


def test_psys_exported_without_socket_and_mmio_duplicate_skipped(
    opened: list[RaplSource],
) -> None:
    s = open_source(opened, root_of("powercap_intel_laptop"))
    assert [(d.zone, d.kind, d.socket) for d in s.domains] == [
        ("intel-rapl:0", "package", 0),
        ("intel-rapl:0:2", "dram", 0),
        ("intel-rapl:1", "psys", None),
    ]
    assert "intel-rapl-mmio:0 (package-0): same package as intel-rapl:0, not counted twice" in (
        s.skipped
    )
    assert set(by_labels(s.read())) == {key("package", 0), key("dram", 0), key("psys")}


def test_mmio_tree_used_when_msr_tree_is_absent(tmp_path: Path, opened: list[RaplSource]) -> None:
    tree = copy_tree("powercap_intel_laptop", tmp_path)
    cls = Path(root_of(tree))
    for link in cls.iterdir():
        if not link.name.startswith("intel-rapl-mmio"):
            link.unlink()  # as with intel_rapl_msr not loaded
    s = open_source(opened, str(cls))
    assert s.domains == [RaplDomain("intel-rapl-mmio:0", "package", 0, "package-0", None, PKG_MAX)]
    set_uj(tree, "intel-rapl-mmio:0", get_uj(tree, "intel-rapl-mmio:0") + 2_500_000)
    assert by_labels(s.read()) == {key("package", 0): 2.5}


def test_multi_die_packages_carry_a_die_label(tmp_path: Path, opened: list[RaplSource]) -> None:
    root = make_tree(
        tmp_path,
        {
            "intel-rapl:0": "package-0-die-0",
            "intel-rapl:0:0": "dram",
            "intel-rapl:1": "package-0-die-1",
            "intel-rapl:1:0": "dram",
        },
    )
    s = open_source(opened, root)
    assert [(d.kind, d.socket, d.die) for d in s.domains] == [
        ("package", 0, 0),
        ("dram", 0, 0),
        ("package", 0, 1),
        ("dram", 0, 1),
    ]
    assert set(by_labels(s.read())) == {
        key("package", 0, die=0),
        key("dram", 0, die=0),
        key("package", 0, die=1),
        key("dram", 0, die=1),
    }


def test_per_package_psys_copies_and_colliding_labels(
    tmp_path: Path, opened: list[RaplSource]
) -> None:
    # SPR-style "psys" and "psys-1", and (no kernel does this) two zones both named "psys":
    # the series keys must still be unique, so the colliding ones get a zone label.
    root = make_tree(
        tmp_path,
        {
            "intel-rapl:0": "package-0",
            "intel-rapl:1": "psys",
            "intel-rapl:2": "psys-1",
            "intel-rapl:3": "psys",
        },
    )
    s = open_source(opened, root)
    assert [(d.zone, d.kind, d.socket) for d in s.domains] == [
        ("intel-rapl:0", "package", 0),
        ("intel-rapl:1", "psys", None),
        ("intel-rapl:2", "psys", 1),
        ("intel-rapl:3", "psys", None),
    ]
    assert set(by_labels(s.read())) == {
        key("package", 0),
        key("psys", zone="intel-rapl:1"),
        key("psys", 1),
        key("psys", zone="intel-rapl:3"),
    }


def test_sub_zone_tree_without_class_symlinks(tmp_path: Path, opened: list[RaplSource]) -> None:
    # Sub-zones are found by nesting, so the top-level sub-zone symlinks are not needed.
    tree = copy_tree("powercap_intel_2s", tmp_path)
    cls = Path(root_of(tree))
    for link in cls.iterdir():
        if link.name.count(":") == 2:
            link.unlink()
    s = open_source(opened, str(cls))
    assert [d.zone for d in s.domains] == [
        "intel-rapl:0",
        "intel-rapl:0:2",
        "intel-rapl:1",
        "intel-rapl:1:2",
    ]


def test_unreadable_dram_is_skipped_with_a_reason(tmp_path: Path, opened: list[RaplSource]) -> None:
    tree = copy_tree("powercap_intel_2s", tmp_path)
    energy = Path(root_of(tree)) / "intel-rapl:1:2" / "energy_uj"
    energy.unlink()
    energy.mkdir()  # opens, then read() fails with EISDIR
    s = open_source(opened, root_of(tree))
    assert [d.zone for d in s.domains] == ["intel-rapl:0", "intel-rapl:0:2", "intel-rapl:1"]
    assert "intel-rapl:1:2 (dram): cannot read energy_uj (Is a directory)" in s.skipped


# -- readings --------------------------------------------------------------------------------


def test_exact_joules_and_summed_domains(tmp_path: Path, opened: list[RaplSource]) -> None:
    tree = copy_tree("powercap_intel_2s", tmp_path)
    s = open_source(opened, root_of(tree))
    start = {z: get_uj(tree, z) for z in ("intel-rapl:0", "intel-rapl:0:2", "intel-rapl:1")}
    set_uj(tree, "intel-rapl:0", start["intel-rapl:0"] + 123_456_789)
    set_uj(tree, "intel-rapl:0:2", start["intel-rapl:0:2"] + 7_000_001)
    set_uj(tree, "intel-rapl:1", start["intel-rapl:1"] + 42)
    # core moves too, but it is part of the package and must not show up anywhere.
    set_uj(tree, "intel-rapl:0:0", get_uj(tree, "intel-rapl:0:0") + 99_000_000)
    first = s.read()
    assert by_labels(first) == {
        key("package", 0): 123.456789,
        key("dram", 0): 7.000001,
        key("package", 1): 0.000042,
        key("dram", 1): 0.0,
    }
    assert summed(first) == pytest.approx(123.456789 + 7.000001 + 0.000042, abs=1e-9)

    set_uj(tree, "intel-rapl:0", start["intel-rapl:0"] + 200_000_000)
    assert by_labels(s.read())[key("package", 0)] == 200.0  # cumulative, not a delta
    assert by_labels(s.read())[key("package", 0)] == 200.0  # unchanged counter


def test_mmio_duplicate_does_not_add_energy(tmp_path: Path, opened: list[RaplSource]) -> None:
    tree = copy_tree("powercap_intel_laptop", tmp_path)
    s = open_source(opened, root_of(tree))
    set_uj(tree, "intel-rapl:0", get_uj(tree, "intel-rapl:0") + 10_000_000)
    set_uj(tree, "intel-rapl-mmio:0", get_uj(tree, "intel-rapl-mmio:0") + 10_000_000)
    set_uj(tree, "intel-rapl:1", get_uj(tree, "intel-rapl:1") + 25_000_000)
    readings = s.read()
    assert by_labels(readings) == {key("package", 0): 10.0, key("dram", 0): 0.0, key("psys"): 25.0}
    assert summed(readings) == 10.0  # psys covers the package: never summed


def test_wraparound_across_a_read(tmp_path: Path, opened: list[RaplSource]) -> None:
    tree = copy_tree("powercap_amd_1s", tmp_path)
    set_uj(tree, "intel-rapl:0", SMALL_MAX - 1_000_000)
    s = open_source(opened, root_of(tree))
    set_uj(tree, "intel-rapl:0", SMALL_MAX - 250_000)
    assert by_labels(s.read()) == {key("package", 0): 0.75}
    # The counter passes max_energy_range_uj and restarts from 0: 250,000 µJ to the top, then
    # 3,000,000 µJ more.
    set_uj(tree, "intel-rapl:0", 3_000_000)
    assert by_labels(s.read()) == {key("package", 0): 4.0}
    set_uj(tree, "intel-rapl:0", 5_000_000)
    assert by_labels(s.read()) == {key("package", 0): 6.0}


def test_wraparound_on_the_first_read_and_repeatedly(
    tmp_path: Path, opened: list[RaplSource]
) -> None:
    tree = copy_tree("powercap_intel_2s", tmp_path)
    set_uj(tree, "intel-rapl:0:2", SMALL_MAX - 10)
    s = open_source(opened, root_of(tree))
    total_uj = 0
    for step in range(3):  # three wraps, each read sees one
        set_uj(tree, "intel-rapl:0:2", 20 + step)
        total_uj += SMALL_MAX - (SMALL_MAX - 10 if step == 0 else SMALL_MAX - 5) + 20 + step
        assert by_labels(s.read())[key("dram", 0)] == total_uj / 1e6
        set_uj(tree, "intel-rapl:0:2", SMALL_MAX - 5)
        total_uj += SMALL_MAX - 5 - (20 + step)
        assert by_labels(s.read())[key("dram", 0)] == total_uj / 1e6
    assert total_uj > 2 * SMALL_MAX


def test_read_makes_no_open_calls(
    tmp_path: Path, opened: list[RaplSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = copy_tree("powercap_intel_2s", tmp_path)
    s = open_source(opened, root_of(tree))

    def no_open(*args: object, **kwargs: object) -> int:
        raise AssertionError("read() opened a file")

    monkeypatch.setattr(os, "open", no_open)
    set_uj(tree, "intel-rapl:1:2", get_uj(tree, "intel-rapl:1:2") + 1_000_000)
    assert by_labels(s.read())[key("dram", 1)] == 1.0


def test_close_is_idempotent_and_read_after_close_fails() -> None:
    s = RaplSource(root_of("powercap_amd_1s"))
    s.close()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.read()


# -- availability ----------------------------------------------------------------------------


def test_missing_tree(tmp_path: Path) -> None:
    root = str(tmp_path / "no" / "powercap")
    with pytest.raises(SourceUnavailable) as exc:
        RaplSource(root)
    assert str(exc.value) == (
        f"no RAPL powercap tree at {root} (virtual machine or kernel without intel_rapl)"
    )
    assert rapl_status(root) == (False, str(exc.value))


def test_powercap_without_rapl_zones(tmp_path: Path) -> None:
    (tmp_path / "dtpm").mkdir()  # another powercap control type, no RAPL
    with pytest.raises(SourceUnavailable, match="no RAPL zones in"):
        RaplSource(str(tmp_path))


def test_no_package_domain(tmp_path: Path) -> None:
    root = make_tree(tmp_path, {"intel-rapl:0": "psys"})
    with pytest.raises(SourceUnavailable, match="no RAPL package zone in"):
        RaplSource(root)


def _construct_unprivileged(root: str) -> str:
    """Construct a RaplSource on ``root`` as an unprivileged user; its failure, or "".

    Tests run as root, and root reads any file whatever its mode, so a chmod alone proves
    nothing. As root, a new thread takes ``nobody``'s file-system identity (setfsuid(2) and
    setfsgid(2) change the calling thread only, and drop the capabilities that let root open any
    file) before constructing the source, so the kernel itself refuses to open the root-owned
    0400 files (the mode energy_uj has had since Linux 5.10). No fork, so other threads running
    in pytest do not matter. As any other user, mode 000 on files the user owns does the same.
    """
    if os.geteuid() != 0:
        try:
            RaplSource(root).close()
        except SourceUnavailable as exc:
            return str(exc)
        return ""
    libc = ctypes.CDLL(None, use_errno=True)
    result: dict[str, str] = {}

    def as_nobody() -> None:
        libc.setfsgid(NOBODY)
        libc.setfsuid(NOBODY)
        try:
            # An invalid id changes nothing and returns the current one.
            result["fsuid"] = str(libc.setfsuid(-1))
            try:
                RaplSource(root).close()
                result["reason"] = ""
            except SourceUnavailable as exc:
                result["reason"] = str(exc)
        finally:
            libc.setfsuid(0)
            libc.setfsgid(0)

    thread = threading.Thread(target=as_nobody)
    thread.start()
    thread.join(60)
    assert result.get("fsuid") == str(NOBODY), f"setfsuid(nobody) did not take: {result}"
    return result["reason"]


def test_energy_uj_readable_only_by_root() -> None:
    # The copy must be reachable by nobody, so not under pytest's 0700 tmp directory.
    base = Path(tempfile.mkdtemp(prefix="cw-rapl-"))
    try:
        base.chmod(0o755)
        tree = copy_tree("powercap_intel_2s", base)
        mode = 0o400 if os.geteuid() == 0 else 0o000
        for dirpath, _dirs, files in os.walk(tree):
            os.chmod(dirpath, 0o755)
            for f in files:
                os.chmod(os.path.join(dirpath, f), mode if f == "energy_uj" else 0o644)
        assert _construct_unprivileged(root_of(tree)) == (
            "RAPL energy counters are readable only by root on this kernel (CVE-2020-8694);"
            " run as root or grant read access to energy_uj"
        )
    finally:
        shutil.rmtree(base)


def test_rapl_status_lists_domains_and_skips() -> None:
    ok, text = rapl_status(root_of("powercap_intel_laptop"))
    assert ok
    assert "package socket 0 (intel-rapl:0, wraps every 262,143 J)" in text
    assert "psys (intel-rapl:1," in text
    assert "Summed: package, dram" in text
    assert "intel-rapl-mmio:0 (package-0): same package as intel-rapl:0" in text


def test_this_machine() -> None:
    # Our CI machines are VMs without a powercap tree; a bare-metal run may have RAPL, and
    # then may or may not be allowed to read it. Either way the answer must say why.
    ok, reason = rapl_status()
    assert isinstance(reason, str) and reason
    try:
        s = RaplSource()
    except SourceUnavailable as exc:
        assert not ok
        assert str(exc)
        return
    try:
        assert ok
        readings = s.read()
        assert readings and all(r.name == METRIC and r.value >= 0 for r in readings)
    finally:
        s.close()
