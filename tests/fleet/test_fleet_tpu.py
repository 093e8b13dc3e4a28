"""Fleet reports know TPU chips by the agent's ``gpu_model`` label ("Google TPU v5e")."""

from __future__ import annotations

from computewatch.catalog.reference import parse_instances
from computewatch.config import Config
from computewatch.fleet.report import FleetOptions, _accelerator, gpu_hour_rate


def test_tpu_model_labels_find_their_catalog_rows() -> None:
    assert getattr(_accelerator("Google TPU v5e"), "model", None) == "TPU-v5e"
    assert getattr(_accelerator("Google TPU v6e (simulated)"), "model", None) == "TPU-v6e"
    assert getattr(_accelerator("AMD Instinct MI300X"), "model", None) == "MI300X"
    assert _accelerator("Google TPU v9") is None


def test_tpu_hours_priced_from_a_users_instance_row() -> None:
    rows = parse_instances(
        "provider,instance,gpus,gpu_model,usd_per_hour,price_region,as_of,source,year\n"
        "gcp,ct5lp-hightpu-4t,4,TPU-v5e,4.80,us-central1,2026-11,my price list,2026\n",
        "prices.csv",
    )
    opts = FleetOptions(start=0, end=3600, config=Config(extra_instances=rows))
    rate = gpu_hour_rate("Google TPU v5e", opts)
    assert rate is not None and rate.usd == 1.2
