"""TPUs are said as TPUs, not GPUs: the summary's energy component and hardware line, its
notes and assumptions, each chip's HBM bandwidth, and
``devices``, whose energy column says the TPU's energy is modelled (no TPU gives a power
reading); TPU v7x (Ironwood) is in the catalog."""

from __future__ import annotations

from typing import Any

from computewatch.catalog import load_accelerators
from computewatch.catalog.tpu import tpu_by_pci_id


def test_a_run_on_tpus_says_tpu(cw: Any) -> None:
    cw.ok("run", "--quiet", "--gpu-backend", "fake:2xTPU-v5e", "--name", "t", "--", "sleep", "3")
    text = cw.ok("show", "t").stdout
    energy = next(line for line in text.splitlines() if line.startswith("energy"))
    assert "· tpu " in energy and "gpu " not in energy, energy
    hardware = " ".join(text[text.index("hardware") :].split())
    assert "TPU 0 Google TPU v5e" in hardware and "GPU 0" not in hardware
    # each chip's row has its HBM bandwidth; the notes and the energy's assumptions say TPU
    rows = [line for line in text.splitlines() if line.startswith("tpu ")]
    assert len(rows) == 2 and all("HBM bandwidth" in r for r in rows), rows
    assert "TPU figures are simulated" in text and "GPU figures" not in text
    doc = cw.json("show", "t")
    assert all(g.get("hbm_bandwidth_mean") is not None for g in doc["gpus"])
    said = [*doc["energy"]["attribution"], *doc["energy"]["components"]["gpu"]["assumptions"]]
    assert any(a.startswith("TPU 0") for a in said)
    assert not [a for a in said if a.startswith("GPU ")], said
    # the JSON key stays what it was (a contract): the component is "gpu"
    assert "gpu" in doc["energy"]["components"]


def test_devices_says_tpu_energy_is_modelled(cw: Any) -> None:
    text = cw.ok("devices", "--gpu-backend", "fake:1xTPU-v7x").stdout
    head = next(line for line in text.splitlines() if line.startswith("#"))
    assert "accelerator" in head and "GPU" not in head
    row = text[text.index("Google TPU v7x") - 10 :]
    assert "modelled" in row and "polled power" not in row


def test_tpu_v7x_is_in_the_catalog() -> None:
    acc = load_accelerators()["TPU-v7x"]
    assert acc.memory_bytes == 192 * 2**30
    row = tpu_by_pci_id("0x0076")
    assert row is not None and row.model == "TPU-v7x" and row.devices_per_chip == 2


def test_the_report_of_a_tpu_run_says_tpu(cw: Any, tmp_path: Any) -> None:
    cw.ok("run", "--quiet", "--gpu-backend", "fake:2xTPU-v5e", "--name", "t", "--", "sleep", "3")
    out = tmp_path / "t.html"
    cw.ok("report", "t", "-o", out)
    html = out.read_text()
    assert "TPU util" in html and "mean over 2 TPUs" in html and "GPU util" not in html
    assert "TPU-hours" in html and "device_hours." not in html
    # the chips' own HBM bandwidth reading has its chart
    assert '"title":"TPU HBM bandwidth"' in html and '"label":"TPU 0"' in html
