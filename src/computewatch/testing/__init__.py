"""Public test and demo helpers: hardware faked at its boundary (DESIGN.md, "Principles").

``FakeNVML`` stands in for nvidia-ml-py's ``pynvml`` module: pass it as ``nvml=`` to
:class:`computewatch.sources.nvidia.NvidiaSource`. Everything it reports is simulated.
"""

from computewatch.testing.fake_nvml import FakeDevice, FakeNVML, ManualClock, from_preset

__all__ = ["FakeDevice", "FakeNVML", "ManualClock", "from_preset"]
