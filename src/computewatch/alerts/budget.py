"""What a job has cost so far, from its exported counters and the prices the accounting uses.

The price comes from the configuration the way the run's accounting resolves it
(``computewatch.accounting.engine``): a configured GPU-hour rate, else a configured rate for the
whole machine per hour, else the cloud instance's list price (``[cost] instance_type``, else the
instance named in DMI) less the configured discount; plus, when ``[cost] usd_per_kwh`` is set,
the job's energy (``computewatch_job_energy_joules_total``) times the PUE times that price.
Every figure comes with a sentence saying how it was obtained.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewatch.accounting.region import DEFAULT_DMI_ROOT, detect_cloud
from computewatch.catalog import reference
from computewatch.config import Config
from computewatch.errors import ComputewatchError

J_PER_KWH = 3.6e6

__all__ = ["J_PER_KWH", "NoPriceError", "Pricing", "pricing_from_config"]


class NoPriceError(ComputewatchError, ValueError):
    """No price is known, so a cost budget cannot be checked."""


@dataclass(frozen=True, slots=True)
class Pricing:
    """Prices for a running job's cost; ``how`` names where each came from."""

    usd_per_gpu_hour: float | None = None
    usd_per_hour: float | None = None  # the whole machine or instance, discount applied
    instance_gpus: int = 0  # with an instance price: its GPUs, to charge a job its share
    usd_per_kwh: float | None = None
    pue: float = 1.0
    how: str = ""

    def cost(self, kwh: float, gpu_seconds: float, elapsed_s: float) -> tuple[float, str]:
        """Dollars so far for a job with this energy, GPU time and age, and how they add up."""
        parts: list[str] = []
        usd = 0.0
        gpu_h = gpu_seconds / 3600
        hours = elapsed_s / 3600
        if self.usd_per_gpu_hour is not None and gpu_seconds > 0:
            usd += gpu_h * self.usd_per_gpu_hour
            parts.append(f"{gpu_h:.3f} GPU-h x ${self.usd_per_gpu_hour:g}")
        elif self.usd_per_hour is not None:
            if self.instance_gpus and gpu_seconds > 0:
                share = gpu_h / self.instance_gpus
                usd += share * self.usd_per_hour
                parts.append(
                    f"{gpu_h:.3f} GPU-h / {self.instance_gpus} GPUs x ${self.usd_per_hour:g}/h"
                )
            else:
                usd += hours * self.usd_per_hour
                parts.append(f"{hours:.3f} h x ${self.usd_per_hour:g}/h")
        if self.usd_per_kwh is not None:
            fac = kwh * self.pue
            usd += fac * self.usd_per_kwh
            pue = f" x PUE {self.pue:g}" if self.pue != 1.0 else ""
            parts.append(f"{kwh:.4g} kWh{pue} x ${self.usd_per_kwh:g}/kWh")
        return usd, " + ".join(parts) + (f" ({self.how})" if self.how else "")


def pricing_from_config(cfg: Config, *, dmi_root: str = DEFAULT_DMI_ROOT) -> Pricing:
    """The prices a cost budget uses; :class:`NoPriceError` when nothing gives one."""
    how: list[str] = []
    gpu_rate = cfg.usd_per_gpu_hour
    hourly: float | None = None
    inst_gpus = 0
    src = str(cfg.path) if cfg.path else "configuration"
    if gpu_rate is not None:
        how.append(f"GPU-hour rate from {src}")
    if cfg.usd_per_hour is not None:
        hourly = cfg.usd_per_hour
        how.append(f"hourly rate from {src}")
    elif gpu_rate is None:
        key = cfg.instance_type
        found_by = src
        if not key:
            host = detect_cloud(dmi_root)
            if host.provider and host.instance_type:
                key, found_by = f"{host.provider}:{host.instance_type}", "DMI"
        if key:
            provider, _, name = key.partition(":")
            inst = reference.find_instance(provider, name, cfg.extra_instances) if name else None
            if inst is None:
                raise NoPriceError(
                    f"instance type {key!r} (from {found_by}) is not in the price catalog"
                )
            hourly = inst.usd_per_hour * (1 - cfg.discount)
            inst_gpus = inst.gpus
            disc = f" less {cfg.discount:.0%}" if cfg.discount else ""
            how.append(
                f"{inst.key} on-demand ${inst.usd_per_hour:g}/h{disc} "
                f"({inst.source}, {inst.as_of}; instance from {found_by})"
            )
    if cfg.usd_per_kwh is not None:
        how.append(f"electricity price from {src}")
        if cfg.pue is None:
            how.append("device energy without PUE (set [energy] pue to include the facility)")
    if gpu_rate is None and hourly is None and cfg.usd_per_kwh is None:
        raise NoPriceError(
            "a cost budget needs a price: set [cost] usd_per_gpu_hour, usd_per_hour, "
            "instance_type or usd_per_kwh in the configuration"
        )
    return Pricing(
        usd_per_gpu_hour=gpu_rate,
        usd_per_hour=hourly,
        instance_gpus=inst_gpus,
        usd_per_kwh=cfg.usd_per_kwh,
        pue=cfg.pue or 1.0,
        how="; ".join(how),
    )
