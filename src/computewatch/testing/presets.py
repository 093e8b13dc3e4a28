"""``COUNTxMODEL`` presets: how ``--gpu-backend fake:PRESET`` and the fakes' ``*from_preset``
name a set of devices (``"8xH100-SXM"``, ``"2xMI300X"``, ``"4xTPU-v5e"``; a bare model is one).

Public, so that code outside the fakes can check a preset without building a fake (the backend
chooser checks a TPU preset before it starts the fake TPU runtime's gRPC server).
"""

from __future__ import annotations

import re

from computewatch.catalog import Accelerator

__all__ = ["parse_preset"]

_PRESET = re.compile(r"\s*(?:(\d+)\s*[xX×]\s*)?(\S+)\s*")


def parse_preset(
    preset: str, catalog: dict[str, Accelerator], vendor: str = ""
) -> tuple[int, Accelerator]:
    """``COUNTxMODEL`` (a bare model means one) as (count, the catalog row of the model, any
    case); ``vendor`` ("AMD ") names the models in errors.

    Raises ValueError, naming the valid models, for a text that is not a preset, a model not in
    ``catalog`` or a count outside 1 to 64."""
    m = _PRESET.fullmatch(preset)
    valid = ", ".join(sorted(catalog))
    if m is None:
        raise ValueError(f"preset {preset!r} is not COUNTxMODEL; {vendor}models: {valid}")
    count = int(m.group(1) or 1)
    by_lower = {k.lower(): a for k, a in catalog.items()}
    acc = by_lower.get(m.group(2).lower())
    if acc is None:
        raise ValueError(
            f"unknown {vendor}model {m.group(2)!r} in preset {preset!r}; models: {valid}"
        )
    if not 1 <= count <= 64:
        raise ValueError(f"preset {preset!r}: count must be 1 to 64")
    return count, acc
