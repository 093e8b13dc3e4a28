"""CPU package and DRAM energy from the Linux powercap tree (Intel RAPL, and AMD's RAPL MSRs).

Both vendors' counters appear as ``intel-rapl`` zones: intel_rapl_msr drives Intel's RAPL MSRs
and, on recent kernels, AMD's (Family 17h and later) as well. Intel client parts may show the
same package again through the processor thermal device as ``intel-rapl-mmio``. AMD's older
hwmon driver (amd_energy) is not read.

Readings: one counter ``cpu_energy_joules_total`` per exported domain, labelled ``domain``
(``package``, ``dram`` or ``psys``) and ``socket`` (plus ``die`` on multi-die packages):

- ``package`` and ``dram`` are disjoint and are what a reader sums (:data:`SUMMED_DOMAINS`).
- ``psys`` (platform) covers what the platform reports, packages and DRAM included: exported
  for whoever wants it, never summed.
- ``core`` and ``uncore`` (PP0/PP1) lie inside their package: they are not exported at all, so no
  reader can double count them (they are listed in :attr:`RaplSource.skipped`).

Values are cumulative joules since the source was constructed (0 at construction): the raw
``energy_uj`` is a 32-bit hardware counter scaled to microjoules, which wraps to 0 after
``max_energy_range_uj``; the source keeps its own wider total. A wrap is seen as a raw value
lower than the previous one, so the sampling interval must stay shorter than one wrap period:
``max_energy_range_uj`` / power, e.g. 65,713 J (AMD and Intel server DRAM, 15.3 µJ units) at
360 W is about 3 minutes, 262,143 J (Intel's usual 61 µJ unit) at 200 W about 22 minutes. Two
wraps between reads cannot be told from one and lose a whole range; a counter reset (which some
parts may do on resume from suspend) is taken for a wrap.

Each ``energy_uj`` is opened once and re-read with ``pread`` at offset 0: sysfs attributes are
seq_files whose text is built afresh on a read at offset 0 (fs/kernfs/file.c, fs/seq_file.c).
A zone that vanishes (CPU hotplug) makes ``read()`` raise, which the sampler reports once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re

import msgspec

from computewatch.readings import Kind, Labels, Reading, labels
from computewatch.sources.base import SourceUnavailable

__all__ = ["METRIC", "SUMMED_DOMAINS", "RaplDomain", "RaplSource", "rapl_status"]

METRIC = "cpu_energy_joules_total"

SUMMED_DOMAINS: tuple[str, ...] = ("package", "dram")
"""The ``domain`` label values whose energies add up to the CPUs' and their memory's energy."""

DEFAULT_ROOT = "/sys/class/powercap"

# Control types in order of preference. intel-rapl-mmio (drivers/thermal/intel/
# int340x_thermal/processor_thermal_rapl.c) exposes the same package counter as the MSR driver
# on recent Intel client parts; it is used only for a package the MSR tree does not have.
_CONTROL_TYPES = ("intel-rapl", "intel-rapl-mmio")
_TOP_ZONE = re.compile(r"(intel-rapl(?:-mmio)?):(\d+)")

# drivers/powercap/intel_rapl_common.c: packages are "package-%d" or, with several dies per
# package, "package-%d-die-%d" (physical package id, die id); the platform domain is "psys",
# or "psys-%d" for the copies on packages other than the first (only the master package's copy
# reads non-zero, commit "enumerate Psys RAPL domain together with package RAPL domain", 2020).
# Sub-zones are "core" (PP0), "uncore" (PP1, client graphics) and "dram".
_PACKAGE_NAME = re.compile(r"package-(\d+)(?:-die-(\d+))?")
_PSYS_NAME = re.compile(r"psys(?:-(\d+))?")
_INSIDE_PACKAGE = ("core", "uncore")

# Since Linux 5.10 (commit 949dd0104c49 "powercap: restrict energy meter to root access", the
# fix for CVE-2020-8694, "PLATYPUS") energy_uj is mode 0400, owned by root.
_ROOT_ONLY = (
    "RAPL energy counters are readable only by root on this kernel (CVE-2020-8694); run as root"
    " or grant read access to energy_uj"
)

_READ_SIZE = 64  # "%llu\n" of a u64 is at most 21 bytes


class RaplDomain(msgspec.Struct, frozen=True):
    """One exported RAPL energy counter."""

    zone: str
    """The powercap zone, e.g. ``intel-rapl:0`` or ``intel-rapl:0:2``."""
    kind: str
    """``package``, ``dram``, ``psys`` or another name the kernel gave."""
    socket: int | None
    """The physical package id from the zone's name; None for a platform-wide ``psys``."""
    name: str
    """The zone's ``name`` file: ``package-0``, ``dram``, ``psys``..."""
    die: int | None = None
    """The die within the package, on multi-die packages (``package-0-die-1``); else None."""
    max_energy_range_uj: int = 0
    """Where the raw ``energy_uj`` counter wraps to 0, in microjoules."""

    def labels(self) -> Labels:
        """The series labels: ``domain``, and ``socket``/``die`` where known."""
        pairs: dict[str, object] = {"domain": self.kind}
        if self.socket is not None:
            pairs["socket"] = self.socket
        if self.die is not None:
            pairs["die"] = self.die
        return labels(**pairs)


class _Counter:
    """A domain's open ``energy_uj`` and its running total since construction."""

    __slots__ = ("fd", "labels", "max_uj", "prev_uj", "total_uj")

    def __init__(self, fd: int, lbl: Labels, max_uj: int, first_uj: int) -> None:
        self.fd = fd
        self.labels = lbl
        self.max_uj = max_uj
        self.prev_uj = first_uj
        self.total_uj = 0


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_uj(path: str) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _index_key(zone: str) -> tuple[int, ...]:
    return tuple(int(part) for part in zone.split(":")[1:])


def _sub_zones(zone_dir: str, zone: str) -> list[str]:
    """The sub-zones nested in a zone's directory (``intel-rapl:0:0``...), in index order."""
    try:
        entries = os.listdir(zone_dir)
    except OSError:
        return []
    prefix = zone + ":"
    subs = [e for e in entries if e.startswith(prefix) and e[len(prefix) :].isdigit()]
    return sorted(subs, key=_index_key)


class RaplSource:
    """Cumulative CPU package, DRAM and platform energy from RAPL, through powercap.

    Raises :class:`SourceUnavailable` when there is no powercap tree, no RAPL package zone, or
    the package counters cannot be read (root-only since Linux 5.10).
    """

    name = "rapl"

    def __init__(self, powercap_root: str = DEFAULT_ROOT) -> None:
        self.powercap_root = powercap_root
        self.domains: list[RaplDomain] = []
        self.skipped: list[str] = []  # zones found but not exported: "zone (name): why"
        self._counters: list[_Counter] = []
        self._closed = False
        try:
            self._discover(powercap_root)
        except BaseException:
            self.close()
            raise

    def _discover(self, root: str) -> None:
        if not os.path.isdir(root):
            raise SourceUnavailable(
                f"no RAPL powercap tree at {root} (virtual machine or kernel without intel_rapl)"
            )
        try:
            entries = os.listdir(root)
        except OSError as exc:
            raise SourceUnavailable(f"cannot list {root} ({exc.strerror})") from exc
        tops: dict[str, list[str]] = {ct: [] for ct in _CONTROL_TYPES}
        for entry in entries:
            m = _TOP_ZONE.fullmatch(entry)
            if m:
                tops[m.group(1)].append(entry)
        if not any(tops.values()):
            raise SourceUnavailable(
                f"no RAPL zones in {root} (virtual machine, a CPU without RAPL, or the"
                " intel_rapl_msr module not loaded)"
            )

        packages: dict[tuple[int, int | None], str] = {}  # (socket, die) -> zone counted
        package_seen = False
        denied: list[str] = []
        for control_type in _CONTROL_TYPES:
            for zone in sorted(tops[control_type], key=_index_key):
                zone_dir = os.path.join(root, zone)
                name = _read_text(os.path.join(zone_dir, "name")) or ""
                pkg = _PACKAGE_NAME.fullmatch(name)
                psys = _PSYS_NAME.fullmatch(name)
                if pkg:
                    package_seen = True
                    socket, die = int(pkg.group(1)), pkg.group(2)
                    key = (socket, None if die is None else int(die))
                    if key in packages:
                        self.skipped.append(
                            f"{zone} ({name}): same package as {packages[key]}, not counted twice"
                        )
                        continue
                    domain = RaplDomain(zone, "package", key[0], name, key[1])
                    if self._add(zone_dir, domain, denied):
                        packages[key] = zone
                    else:
                        continue  # its sub-zones would have no package to belong to
                    for sub in _sub_zones(zone_dir, zone):
                        self._add_sub(os.path.join(zone_dir, sub), sub, domain, denied)
                elif psys:
                    socket_text = psys.group(1)
                    socket_id = None if socket_text is None else int(socket_text)
                    self._add(zone_dir, RaplDomain(zone, "psys", socket_id, name), denied)
                else:
                    self.skipped.append(f"{zone} ({name or '?'}): unknown RAPL zone")

        if not packages:
            if denied:
                raise SourceUnavailable(_ROOT_ONLY)
            if not package_seen:
                raise SourceUnavailable(f"no RAPL package zone in {root}")
            raise SourceUnavailable(
                f"RAPL package counters in {root} cannot be read: {'; '.join(self.skipped)}"
            )
        # Readable packages but root-only other zones (read access granted to some zones only).
        self.skipped.extend(f"{zone}: {_ROOT_ONLY}" for zone in denied)
        self._unique_labels()

    def _add_sub(self, zone_dir: str, zone: str, package: RaplDomain, denied: list[str]) -> None:
        name = _read_text(os.path.join(zone_dir, "name")) or ""
        if name == "dram":
            self._add(zone_dir, RaplDomain(zone, "dram", package.socket, name, package.die), denied)
        elif name in _INSIDE_PACKAGE:
            self.skipped.append(f"{zone} ({name}): part of {package.name}, not exported")
        else:
            self.skipped.append(f"{zone} ({name or '?'}): unknown RAPL sub-zone")

    def _add(self, zone_dir: str, domain: RaplDomain, denied: list[str]) -> bool:
        """Open the domain's counter and take its first value; False (and why) when it can't."""
        what = f"{domain.zone} ({domain.name})"
        max_uj = _read_uj(os.path.join(zone_dir, "max_energy_range_uj"))
        if max_uj is None or max_uj <= 0:
            self.skipped.append(f"{what}: no max_energy_range_uj, so wraps cannot be handled")
            return False
        path = os.path.join(zone_dir, "energy_uj")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                denied.append(domain.zone)
            else:
                self.skipped.append(f"{what}: cannot open energy_uj ({exc.strerror})")
            return False
        try:
            first = int(os.pread(fd, _READ_SIZE, 0))
        except (OSError, ValueError) as exc:
            os.close(fd)
            why = exc.strerror if isinstance(exc, OSError) else "not a number"
            self.skipped.append(f"{what}: cannot read energy_uj ({why})")
            return False
        domain = msgspec.structs.replace(domain, max_energy_range_uj=max_uj)
        self.domains.append(domain)
        self._counters.append(_Counter(fd, domain.labels(), max_uj, first))
        return True

    def _unique_labels(self) -> None:
        """Give a ``zone`` label to domains whose labels would collide (two ``psys`` zones)."""
        seen: dict[Labels, int] = {}
        for counter in self._counters:
            seen[counter.labels] = seen.get(counter.labels, 0) + 1
        for domain, counter in zip(self.domains, self._counters, strict=True):
            if seen[counter.labels] > 1:
                counter.labels = tuple(sorted((*counter.labels, ("zone", domain.zone))))

    def read(self) -> list[Reading]:
        """Each domain's energy since construction, in joules (wraps of ``energy_uj`` undone)."""
        if self._closed:
            raise ValueError("read() on a closed RaplSource")
        out: list[Reading] = []
        add = out.append
        for c in self._counters:
            raw = int(os.pread(c.fd, _READ_SIZE, 0))
            prev = c.prev_uj
            # The counter counts up to max_energy_range_uj and restarts at 0; one wrap at most.
            c.total_uj += raw - prev if raw >= prev else c.max_uj - prev + raw
            c.prev_uj = raw
            add(Reading(METRIC, c.labels, c.total_uj / 1e6, Kind.COUNTER))
        return out

    def close(self) -> None:
        """Close the cached descriptors; safe to call twice."""
        self._closed = True
        counters, self._counters = self._counters, []
        for c in counters:
            with contextlib.suppress(OSError):
                os.close(c.fd)


def _describe(domain: RaplDomain) -> str:
    where = "" if domain.socket is None else f" socket {domain.socket}"
    if domain.die is not None:
        where += f" die {domain.die}"
    wrap_j = domain.max_energy_range_uj / 1e6
    return f"{domain.kind}{where} ({domain.zone}, wraps every {wrap_j:,.0f} J)"


def rapl_status(powercap_root: str = DEFAULT_ROOT) -> tuple[bool, str]:
    """Whether RAPL energy can be read here, and the domains found or the reason why not."""
    try:
        source = RaplSource(powercap_root)
    except SourceUnavailable as exc:
        return False, str(exc)
    try:
        text = "; ".join(_describe(d) for d in source.domains)
        summed = ", ".join(SUMMED_DOMAINS)
        text += f". Summed: {summed}"
        if source.skipped:
            text += ". Skipped: " + "; ".join(source.skipped)
        return True, text
    finally:
        source.close()
