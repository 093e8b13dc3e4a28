"""NVIDIA's clock-event (throttle) reasons: the bits of the mask NVML reports and their names.

Vendor vocabulary, not a vendor SDK: the NVML source writes the mask as a gauge, and the readers
(summary, diagnosis, the exported metrics) decode it without importing the source.
"""

from __future__ import annotations

__all__ = ["CLOCK_EVENT_REASONS", "decode_clock_events"]

# Bits of nvmlDeviceGetCurrentClocksEventReasons, with pynvml's constant values
# (nvmlClocksEventReason*; 0x200 and 0x400 appear only as nvmlClocksThrottleReason*).
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x0000000000000001, "gpu_idle"),
    (0x0000000000000002, "applications_clocks_setting"),
    (0x0000000000000004, "sw_power_cap"),
    (0x0000000000000008, "hw_slowdown"),
    (0x0000000000000010, "sync_boost"),
    (0x0000000000000020, "sw_thermal_slowdown"),
    (0x0000000000000040, "hw_thermal_slowdown"),
    (0x0000000000000080, "hw_power_brake_slowdown"),
    (0x0000000000000100, "display_clock_setting"),
    (0x0000000000000200, "board_limit"),
    (0x0000000000000400, "reliability"),
)
_KNOWN_CLOCK_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)


def decode_clock_events(mask: float) -> list[str]:
    """Names of the reasons set in a clock-event (throttle) bitmask, lowest bit first.

    Unknown bits come back as ``"bit_N"`` so nothing is silently dropped.
    """
    mask = int(mask)  # a gauge read back from the store is a float
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest = mask & ~_KNOWN_CLOCK_BITS
    n = 0
    while rest:
        if rest & 1:
            names.append(f"bit_{n}")
        rest >>= 1
        n += 1
    return names
