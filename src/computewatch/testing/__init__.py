"""Public test and demo helpers: hardware faked at its boundary (docs/gpus.md).

``FakeNVML`` stands in for nvidia-ml-py's ``pynvml`` module (pass it as ``nvml=`` to
:class:`computewatch.sources.nvidia.NvidiaSource`), ``FakeAmdSmi`` for ``amdsmi`` (``amdsmi=``
of :class:`computewatch.sources.amd.AmdSource`). Everything they report is simulated.
:func:`parse_preset` reads the ``COUNTxMODEL`` presets that ``from_preset``,
``amd_from_preset`` and ``--gpu-backend fake:PRESET`` take.
"""

from computewatch.testing.fake_amdsmi import FakeAmdDevice, FakeAmdSmi, amd_from_preset
from computewatch.testing.fake_nvml import FakeDevice, FakeNVML, ManualClock, from_preset
from computewatch.testing.presets import parse_preset

__all__ = [
    "FakeAmdDevice",
    "FakeAmdSmi",
    "FakeDevice",
    "FakeNVML",
    "ManualClock",
    "amd_from_preset",
    "from_preset",
    "parse_preset",
]
