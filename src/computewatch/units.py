"""One formatter per unit, for every view: SI values in, short human text out.

Every formatter prints a missing value (None, NaN, an infinity) as :data:`MISSING` and never
uses scientific notation for a value a person reads (``9.6e-06 kWh`` is ``0.035 J``); only
:func:`format_flop` writes large counts as ``1.23e+24 FLOP``, as the compute thresholds are
written. Binary prefixes for bytes (KiB = 1,024 B), 1 Wh = 3,600 J.
"""

from __future__ import annotations

import math

__all__ = [
    "BYTE_UNITS",
    "MISSING",
    "format_bytes",
    "format_count",
    "format_duration",
    "format_energy",
    "format_flop",
    "format_grams",
    "format_kwh",
    "format_number",
    "format_percent",
    "format_promql_duration",
    "format_rate",
    "format_seconds",
    "format_significant",
    "format_usd",
    "format_watts",
]

MISSING = "n/a"
"""How every formatter prints a value that is not there (None, NaN, an infinity)."""

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
"""What :func:`format_bytes` prints after the number, by powers of 1,024."""
_MAX_DECIMALS = 9


def _value(v: float | None, scale: float = 1.0) -> float | None:
    """``v`` (times ``scale``) as a finite float, or None when it is missing or overflows."""
    if v is None:
        return None
    f = float(v) * scale
    return f if math.isfinite(f) else None


def _sig(v: float, digits: int) -> str:
    """``v`` with about ``digits`` significant digits in fixed point (thousands separated):
    never scientific notation; below 10⁻⁹ in magnitude, ``<0.000000001``."""
    if v == 0:
        return "0"
    mag = abs(v)
    if mag >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(mag))
    if decimals > _MAX_DECIMALS:
        return ("-" if v < 0 else "") + f"<{10.0**-_MAX_DECIMALS:.{_MAX_DECIMALS}f}"
    text = f"{v:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_significant(v: float | None, digits: int = 4) -> str:
    """About ``digits`` significant digits in fixed point, thousands separated, never in
    scientific notation: ``0.00008925``, ``12.35``, ``123,457``."""
    x = _value(v)
    return MISSING if x is None else _sig(x, digits)


def format_number(v: float | None, decimals: int = 1) -> str:
    """A plain number with thousands separated: ``1,234.5``."""
    x = _value(v)
    return MISSING if x is None else f"{x:,.{decimals}f}"


def format_count(n: float | None) -> str:
    """A count (steps, tokens, processes): ``1,234,567``."""
    return format_number(n, 0)


def format_bytes(n: float | None) -> str:
    """Binary units, three significant digits or so: ``512 B``, ``1.5 KiB``, ``150 MiB``."""
    x = _value(n)
    if x is None:
        return MISSING
    sign = "-" if x < 0 else ""
    value = abs(x)
    text = f"{value:.0f}"
    if float(text) < 1024:
        return f"{sign if text != '0' else ''}{text} B"
    for unit in BYTE_UNITS[1:]:
        value /= 1024
        text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
        if float(text) < 1024 or unit == BYTE_UNITS[-1]:
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def format_rate(n: float | None) -> str:
    """Bytes per second: ``1.5 MiB/s``."""
    text = format_bytes(n)
    return text if text == MISSING else f"{text}/s"


def format_duration(s: float | None) -> str:
    """Whole seconds as ``H:MM:SS`` (hours grow past 9): ``0:00:12``, ``26:03:09``."""
    x = _value(s)
    if x is None:
        return MISSING
    total = int(max(0.0, x))
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def format_seconds(s: float | None, digits: int = 3, *, clock: bool = True) -> str:
    """A short span: µs below 1 ms, ms below 1 s, else ``digits`` significant seconds, and
    from 100 s on as ``H:MM:SS`` (:func:`format_duration`) unless ``clock`` is false."""
    x = _value(s)
    if x is None:
        return MISSING
    if x < 0:
        return f"-{format_seconds(-x, digits, clock=clock)}"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.{max(digits - 2, 0)}f} ms"
    if x >= 100 and clock:
        return format_duration(x)
    return f"{_sig(x, digits).replace(',', '')} s"


def format_promql_duration(seconds: float | None) -> str:
    """The shortest Prometheus spelling of a whole number of seconds: ``900`` -> ``15m``,
    ``5400`` -> ``1h30m``, ``0`` -> ``0s`` (rules' ``for:``, query ranges)."""
    x = _value(seconds)
    if x is None:
        return MISSING
    s = round(x)
    if s <= 0:
        return "0s"
    out = ""
    for unit, name in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        n, s = divmod(s, unit)
        if n:
            out += f"{n}{name}"
    return out


def format_percent(ratio: float | None, digits: int = 1) -> str:
    """A 0-1 ratio as a percentage: ``0.125`` -> ``12.5%``."""
    x = _value(ratio, 100)
    return MISSING if x is None else f"{x:.{digits}f}%"


def format_mfu(ratio: float | None) -> str:
    """MFU as a percentage, never above 100 %: more than the hardware's peak means the counted
    FLOPs or the peak are wrong, and is said so rather than printed."""
    if ratio is not None and ratio > 1:
        return "implausible (over 100%: counted FLOPs above the hardware's peak)"
    return format_percent(ratio)


def format_watts(watts: float | None) -> str:
    """Power in whole watts with thousands separated: ``350 W``, ``5,600 W``."""
    x = _value(watts)
    return MISSING if x is None else f"{x:,.0f} W"


def format_energy(joules: float | None) -> str:
    """Joules below 1 Wh, then Wh, then kWh (1 Wh = 3,600 J): ``0.035 J``, ``1,200 J``,
    ``2.5 Wh``, ``3.2 kWh``, ``1,250 kWh``."""
    x = _value(joules)
    if x is None:
        return MISSING
    mag = abs(x)
    if mag < 10:
        return f"{_sig(x, 2)} J"
    if mag < 3600:
        return f"{x:,.0f} J"
    if mag < 3.6e6:
        return f"{x / 3600:,.1f} Wh"
    return f"{_sig(x / 3.6e6, 3)} kWh"


def format_kwh(kwh: float | None) -> str:
    """Energy given in kWh, printed as :func:`format_energy` does."""
    x = _value(kwh, 3.6e6)
    return MISSING if x is None else format_energy(x)


def format_grams(grams: float | None) -> str:
    """CO2e in g, or kg from 1,000 g: ``12.3 g CO2e``, ``1.5 kg CO2e``."""
    x = _value(grams)
    if x is None:
        return MISSING
    if abs(x) >= 1000:
        return f"{_sig(x / 1000, 3)} kg CO2e"
    return f"{_sig(x, 3)} g CO2e"


def format_usd(usd: float | None) -> str:
    """Dollars: cents from $1, else four significant digits: ``$12.50``, ``$0.04321``."""
    x = _value(usd)
    if x is None:
        return MISSING
    return f"${x:,.2f}" if x >= 1 else f"${_sig(x, 4)}"


def format_flop(flop: float | None, digits: int = 3) -> str:
    """Floating-point operations: ``5.5e+14 FLOP`` from 1,000 on (as compute thresholds are
    written), else the plain number: ``250 FLOP``."""
    x = _value(flop)
    if x is None:
        return MISSING
    return f"{x:.{digits}g} FLOP" if abs(x) >= 1000 else f"{_sig(x, digits)} FLOP"
