"""Where the machine runs, for grid carbon intensity: from the user, the environment or DMI.

The location comes, first found wins, from ``--region CODE``, the configuration, the
``COMPUTEWATCH_REGION`` variable, then the region variables of cloud tools (see
:data:`CLOUD_REGION_VARIABLES`). A code the user gave that is not in the table is an error that
names it and suggests close matches; nothing is guessed. With no location at all the world
average is used and said to be so, with a wide uncertainty. The cloud provider is read from
local DMI files (``/sys/class/dmi/id``); no network call is ever made here (no metadata
endpoint, no IP geolocation: docs/security.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from computewatch.catalog.reference import (
    GridIntensity,
    defaults,
    grid_rows,
    normalize_code,
    world_average,
)
from computewatch.errors import ComputewatchError

__all__ = [
    "CLOUD_REGION_VARIABLES",
    "DEFAULT_DMI_ROOT",
    "REGION_VARIABLE",
    "CloudHost",
    "Location",
    "RegionError",
    "close_matches",
    "detect_cloud",
    "lookup",
    "resolve_location",
]

DEFAULT_DMI_ROOT = "/sys/class/dmi/id"

REGION_VARIABLE = "COMPUTEWATCH_REGION"
"""computewatch's own variable: any code of the table ("FR", "US-CA", "aws:us-east-1")."""

CLOUD_REGION_VARIABLES: tuple[tuple[str, str], ...] = (
    ("AWS_REGION", "aws"),  # AWS SDKs; set by Lambda, ECS, Batch and SageMaker jobs
    ("AWS_DEFAULT_REGION", "aws"),  # AWS CLI
    ("CLOUDSDK_COMPUTE_REGION", "gcp"),  # gcloud's compute/region property as a variable
    ("GOOGLE_CLOUD_REGION", "gcp"),  # conventional in Google Cloud deployment templates
    ("AZURE_DEFAULTS_LOCATION", "azure"),  # Azure CLI's defaults.location as a variable
    ("REGION_NAME", "azure"),  # set by Azure App Service and Azure Functions
)
"""Region variables of cloud tools, in the order they are read, with the provider they name.
Their values are bare region names ("us-east-1", "West Europe"); the provider is prefixed."""

# SMBIOS chassis asset tag that Azure puts on its VMs (Azure docs, "detect if a Linux VM runs
# on Azure"); plain Hyper-V VMs share the "Microsoft Corporation" vendor but not this tag.
_AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
# On Nitro, EC2 reports the instance type as the DMI product name ("p5.48xlarge").
_EC2_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+")
_DMI_FILES = ("sys_vendor", "product_name", "chassis_asset_tag", "bios_vendor", "bios_version")


class RegionError(ComputewatchError, ValueError):
    """A location code that is not in the grid table."""


class CloudHost(msgspec.Struct, frozen=True):
    """The cloud provider as local DMI files show it; ``provider`` None when not identified."""

    provider: str | None  # "aws" | "gcp" | "azure" | None
    instance_type: str | None  # known from DMI on AWS Nitro only
    evidence: str  # what was read, for the report


class Location(msgspec.Struct, frozen=True):
    """The resolved location and how it was found."""

    code: str
    row: GridIntensity
    how: str  # "--region" | "config" | "env:COMPUTEWATCH_REGION" | "env:AWS_REGION" | "unknown"
    provider: str | None  # from the cloud code, else from DMI
    note: str | None  # said to the user alongside the figure
    relative_uncertainty: float | None = None  # set for the world-average fallback

    @property
    def known(self) -> bool:
        return self.how != "unknown"


def close_matches(code: str, limit: int = 5) -> list[str]:
    """Table codes that look like ``code``: same region under a provider prefix, similar codes
    or names ("France" -> "FR")."""
    rows = grid_rows()
    query = normalize_code(code).casefold()
    found: list[str] = []
    if ":" not in query:
        found += [c for c in rows if c.casefold().endswith(":" + query)]
    candidates: dict[str, str] = {}
    for key, row in rows.items():
        candidates.setdefault(key.casefold(), key)
        candidates.setdefault(row.name.casefold(), key)
    import difflib  # on an unknown code only: not on every run's start-up

    for match in difflib.get_close_matches(query, list(candidates), n=limit * 2, cutoff=0.6):
        key = candidates[match]
        if key not in found:
            found.append(key)
    return found[:limit]


def lookup(code: str, *, origin: str | None = None) -> GridIntensity:
    """The grid row for a user's code (case-insensitive), or RegionError with suggestions."""
    row = grid_rows().get(normalize_code(code))
    if row is not None:
        return row
    matches = close_matches(code)
    hint = (
        f"close matches: {', '.join(matches)}"
        if matches
        else "no close match; use an ISO 3166 country code (FR), a sub-national code (US-CA)"
        " or a cloud region (aws:us-east-1, gcp:europe-west4, azure:westeurope)"
    )
    where = f" (from {origin})" if origin else ""
    raise RegionError(f"unknown region {code.strip()!r}{where}; {hint}")


def _read_dmi(root: Path, name: str) -> str | None:
    try:
        return (root / name).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def detect_cloud(dmi_root: str = DEFAULT_DMI_ROOT) -> CloudHost:
    """The cloud provider from DMI (SMBIOS) files under ``dmi_root``; unreadable -> None."""
    root = Path(dmi_root)
    dmi = {name: _read_dmi(root, name) for name in _DMI_FILES}
    if all(value is None for value in dmi.values()):
        return CloudHost(None, None, f"DMI not readable under {dmi_root}")
    vendor = dmi["sys_vendor"] or ""
    product = dmi["product_name"] or ""
    seen = ", ".join(f"{k}={v!r}" for k, v in dmi.items() if v and k != "bios_version")
    if vendor == "Amazon EC2":
        instance = product if _EC2_INSTANCE_TYPE.fullmatch(product) else None
        return CloudHost("aws", instance, seen)
    if "amazon" in (dmi["bios_version"] or "").lower():  # Xen-based EC2 generations
        return CloudHost("aws", None, f"bios_version={dmi['bios_version']!r}")
    if product == "Google Compute Engine" or vendor == "Google":
        return CloudHost("gcp", None, seen)
    if vendor == "Microsoft Corporation":
        if dmi["chassis_asset_tag"] == _AZURE_ASSET_TAG:
            return CloudHost("azure", None, seen)
        return CloudHost(None, None, f"Hyper-V virtual machine, not identified as Azure ({seen})")
    return CloudHost(None, None, seen or "DMI files empty")


def _provider_note(row: GridIntensity, host: CloudHost) -> str | None:
    if row.provider and host.provider and row.provider != host.provider:
        return (
            f"region {row.code} is on {row.provider}, but DMI shows {host.provider}"
            f" ({host.evidence}); check the region setting"
        )
    return None


def _found(code: str, how: str, host: CloudHost, notes: list[str]) -> Location:
    row = lookup(code, origin=None if how == "--region" else how)
    note = _provider_note(row, host)
    all_notes = [*notes, note] if note else notes
    return Location(
        code=row.code,
        row=row,
        how=how,
        provider=row.provider or host.provider,
        note="; ".join(all_notes) or None,
    )


def resolve_location(
    explicit: str | None = None,
    *,
    config_region: str | None = None,
    environ: Mapping[str, str] = os.environ,
    dmi_root: str = DEFAULT_DMI_ROOT,
) -> Location:
    """Where this machine's electricity comes from, and how that was found.

    Order: ``explicit`` (``--region``), ``config_region``, ``COMPUTEWATCH_REGION``, then
    :data:`CLOUD_REGION_VARIABLES`. The first three raise RegionError for a code not in the
    table; a cloud tool's variable naming a region the table lacks is skipped with a note.
    Nothing found: the world average, ``how="unknown"``, a note saying so and the documented
    wide uncertainty.
    """
    host = detect_cloud(dmi_root)
    if explicit and explicit.strip():
        return _found(explicit, "--region", host, [])
    if config_region and config_region.strip():
        return _found(config_region, "config", host, [])
    own = environ.get(REGION_VARIABLE, "").strip()
    if own:
        return _found(own, f"env:{REGION_VARIABLE}", host, [])
    notes: list[str] = []
    for variable, provider in CLOUD_REGION_VARIABLES:
        value = environ.get(variable, "").strip()
        if not value:
            continue
        code = normalize_code(f"{provider}:{value}")
        if code in grid_rows():
            return _found(code, f"env:{variable}", host, notes)
        notes.append(f"{variable}={value!r} is not a {provider} region in the table")
    world = world_average()
    uncertainty = defaults()["world_intensity_relative_uncertainty"].value
    message = (
        f"location unknown: using the world average ({world.g_per_kwh:g} gCO2e/kWh,"
        f" {world.year}) with +/-{uncertainty:.0%} uncertainty; set --region CODE, the"
        f" configured region or {REGION_VARIABLE}"
    )
    if host.provider:
        message += f"; DMI shows {host.provider} but not the region"
    return Location(
        code=world.code,
        row=world,
        how="unknown",
        provider=host.provider,
        note="; ".join([*notes, message]),
        relative_uncertainty=uncertainty,
    )
