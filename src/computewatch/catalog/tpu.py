"""Google TPU chips: ``data/tpu.csv`` (PCI ids, devices per chip, int8 peak, modelled power).

Peaks in bf16, HBM and bandwidth are the chip's row of ``data/accelerators.csv`` (model keys
``TPU-v4``, ``TPU-v5e``, ``TPU-v5p``, ``TPU-v6e``); this table adds what only TPUs need. No TPU
gives the VM a power reading, so power is modelled from this table and always said so.
"""

from __future__ import annotations

import functools

import msgspec

from computewatch.catalog.reference import _read, _rows

__all__ = [
    "TPU_FILE",
    "TPU_PREFIX",
    "TPU_VENDOR_ID",
    "TpuChipRow",
    "accelerator_kind",
    "devices_word",
    "parse_tpu",
    "tpu_by_pci_id",
    "tpu_rows",
]

TPU_FILE = "data/tpu.csv"
TPU_PREFIX = "TPU-"
"""How a TPU chip's catalog key (``TPU-v5e``) and its device id (``TPU-<PCI address>``, as the
TPU source names it) begin."""
TPU_VENDOR_ID = "0x1ae0"  # Google's PCI vendor id (tpu-info device.py: GOOGLE_PCI_VENDOR_ID)
_COLUMNS = (
    "model",
    "pci_device_id",
    "devices_per_chip",
    "int8_tops",
    "idle_watts",
    "busy_watts",
    "power_relative_uncertainty",
    "source",
    "year",
)


class TpuChipRow(msgspec.Struct, frozen=True):
    model: str  # key of accelerators.csv
    pci_device_id: str  # "0x0063"
    devices_per_chip: int
    int8_tops: float
    idle_watts: float
    busy_watts: float
    power_relative_uncertainty: float
    source: str
    year: int

    def watts(self, duty_cycle: float) -> float:
        """Modelled power at a TensorCore duty cycle (0-1): idle + (busy - idle) x duty."""
        d = min(max(duty_cycle, 0.0), 1.0)
        return self.idle_watts + (self.busy_watts - self.idle_watts) * d


def parse_tpu(text: str, filename: str = TPU_FILE) -> dict[str, TpuChipRow]:
    out: dict[str, TpuChipRow] = {}
    for row in _rows(text, filename, _COLUMNS):
        model = row.text("model")
        pci = row.text("pci_device_id").lower()
        if not (pci.startswith("0x") and len(pci) == 6):
            raise row.fail("pci_device_id", f"{pci!r} is not a 0xNNNN PCI device id")
        idle, busy = row.number("idle_watts"), row.number("busy_watts")
        if busy < idle:
            raise row.fail("busy_watts", "must be at least idle_watts")
        if model in out:
            raise row.fail("model", f"duplicate model {model!r}")
        out[model] = TpuChipRow(
            model=model,
            pci_device_id=pci,
            devices_per_chip=row.integer("devices_per_chip"),
            int8_tops=row.number("int8_tops"),
            idle_watts=idle,
            busy_watts=busy,
            power_relative_uncertainty=row.number("power_relative_uncertainty"),
            source=row.source(),
            year=row.year(),
        )
    return out


@functools.cache
def tpu_rows() -> dict[str, TpuChipRow]:
    """The package's TPU table, parsed once."""
    return parse_tpu(_read(TPU_FILE))


def tpu_by_pci_id(device_id: str) -> TpuChipRow | None:
    """The row of a PCI device id (``0x0063`` -> TPU-v5e), or None."""
    key = device_id.strip().lower()
    return next((r for r in tpu_rows().values() if r.pci_device_id == key), None)


def accelerator_kind(*names: object) -> str:
    """``"TPU"`` when any of ``names`` (a device's catalog model, its id, its ``gpu_model``
    label) is a TPU chip's (begins with :data:`TPU_PREFIX`), else ``"GPU"``: the word every
    output uses for that device."""
    return "TPU" if any(str(n or "").startswith(TPU_PREFIX) for n in names) else "GPU"


def devices_word(models: list[object]) -> str:
    """The word for a set of devices by their models: ``"TPU"`` when all are TPU chips,
    ``"GPU"`` otherwise (a mixed or empty set is said as GPUs)."""
    if models and all(accelerator_kind(m) == "TPU" for m in models):
        return "TPU"
    return "GPU"
