"""Against CodeCarbon: one job measured by both tools, their figures side by side, and why
they differ.

One execution of the fixed-work numpy loop of ``workload.py`` (about 10 s, 4 s with
``--quick``) runs under ``computewatch run --region FR --pue 1.0 --json FILE`` with CodeCarbon's
``OfflineEmissionsTracker(country_iso_code="FRA", pue=1.0, measure_power_secs=1)`` started
inside it, so both tools see the same seconds of the same machine. The script reads
computewatch's JSON summary and CodeCarbon's ``emissions.csv`` (plus what its tracker set up:
CPU mode, TDP, RAM model, the intensity row it used) and derives every figure and every
"why" from them. A failing CodeCarbon is reported in the section, not raised.

    python benchmarks/bench_codecarbon.py [--quick]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import HERE, Section, cli_main, computewatch_cli

J_PER_KWH = 3.6e6
REGION = "FR"  # computewatch's code for France
COUNTRY_ISO3 = "FRA"  # CodeCarbon's
PUE = 1.0
CHILD_FLAG = "--codecarbon-child"


# -- the job (child process) ----------------------------------------------------------------


def _child(argv: list[str]) -> int:
    """The monitored job: CodeCarbon's offline tracker around ``workload.work``. Writes what
    the tracker set up and returned to ``OUT/child.json``; CodeCarbon failing is recorded
    there and the loop still runs."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import workload

    out: dict[str, Any] = {}
    tracker = None
    try:
        from codecarbon import OfflineEmissionsTracker

        tracker = OfflineEmissionsTracker(
            country_iso_code=COUNTRY_ISO3,
            pue=PUE,
            measure_power_secs=1,
            save_to_file=True,
            output_dir=a.out,
            log_level="error",
        )
        tracker.start()
    except Exception as e:  # recorded in the section, not raised
        out["error"] = f"start: {type(e).__name__}: {e}"
        tracker = None
    out["work_seconds"], out["work_cpu_seconds"] = workload.work(a.steps, lambda n: None)
    if tracker is not None:
        try:
            out["stop_kg"] = tracker.stop()
        except Exception as e:
            out["error"] = f"stop: {type(e).__name__}: {e}"
        out["setup"] = _tracker_setup(tracker, a.out)
    (Path(a.out) / "child.json").write_text(json.dumps(out, default=str))
    return 0


class _FixedLoad:
    """A stand-in for CodeCarbon's system load meter, reading a fixed percentage."""

    def __init__(self, pct: float) -> None:
        self.pct = pct

    def percent(self) -> float:
        return self.pct


def _tracker_setup(tracker: Any, a_dir: str) -> dict[str, Any]:
    """What CodeCarbon chose on this machine, read from its tracker objects and data files
    (private attributes of codecarbon 3.x: each read may fail and is then left out)."""
    setup: dict[str, Any] = {"hardware": [], "errors": []}
    try:
        from codecarbon.external import hardware, ram

        setup["generic_cpu_watts"] = hardware.POWER_CONSTANT
        setup["ram_slot_watts"] = ram.RAM_SLOT_POWER_X86
    except Exception as e:
        setup["errors"].append(f"constants: {type(e).__name__}: {e}")
    for h in getattr(tracker, "_hardware", []):
        d: dict[str, Any] = {"kind": type(h).__name__}
        try:
            d["description"] = h.description()
            for attr in ("_mode", "_tdp", "_is_generic_tdp", "_tracking_mode", "_model"):
                if hasattr(h, attr):
                    d[attr.lstrip("_")] = getattr(h, attr)
            if d["kind"] == "RAM":
                gb = float(h.machine_memory_GB)
                d["memory_gb"] = gb
                d["dimms"] = h._estimate_dimm_count(gb)
                d["watts"] = float(h.total_power().W)
                d["forced_watts"] = h._force_ram_power
        except Exception as e:
            setup["errors"].append(f"{d['kind']}: {type(e).__name__}: {e}")
        setup["hardware"].append(d)
    try:
        # How the CPU's watts were found: its TDP table, else a default per thread.
        from codecarbon.core import cpu as cc_cpu
        from codecarbon.core.hardware_cache import get_cached_tdp

        tdp = get_cached_tdp(cc_cpu)
        setup["tdp_lookup"] = {
            "model": tdp.model,
            "watts": tdp.tdp,
            "table_watts": tdp._get_cpu_power_from_registry(tdp.model) if tdp.model else None,
            "default_watts_per_thread": getattr(cc_cpu, "DEFAULT_POWER_PER_CORE", None),
            "threads": tracker._conf.get("cpu_count"),
            "physical_cpus": tracker._conf.get("cpu_physical_count"),
        }
    except Exception as e:
        setup["errors"].append(f"TDP lookup: {type(e).__name__}: {e}")
    try:
        # The load curve, quoted from the installed source rather than restated here.
        import inspect

        from codecarbon.external.hardware import CPU

        src = inspect.getsource(CPU._get_power_from_cpu_load)
        m = re.search(r"load_factor = (.+)", src)
        if m:
            setup["load_factor"] = m.group(1).strip()
        # ... and tabulated by calling it, on a 100 W CPU whose load meter reads 0..100 %.
        probe = CPU(a_dir, "cpu_load", "probe", 100, tracking_mode="machine")
        curve = []
        for pct in range(101):
            probe._cpu_load_meter = _FixedLoad(pct)
            curve.append(float(probe._get_power_from_cpu_load().W) / 100)
        setup["load_curve"] = curve  # fraction of TDP at 0, 1, ..., 100 % system load
    except Exception as e:
        setup["errors"].append(f"load curve: {type(e).__name__}: {e}")
    try:
        from codecarbon.input import DataSource

        mix = DataSource().get_global_energy_mix_data().get(COUNTRY_ISO3) or {}
        setup["mix"] = {
            k: mix.get(k) for k in ("country_name", "year", "carbon_intensity", "total_TWh")
        }
        setup["mix_file"] = DataSource().config.get("global_energy_mix_data_path")
    except Exception as e:
        setup["errors"].append(f"energy mix: {type(e).__name__}: {e}")
    return setup


# -- measuring ------------------------------------------------------------------------------


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CODECARBON_", "COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL"))
    }
    env["COMPUTEWATCH_HOME"] = str(tmp / "home")
    return env


def _calibrate(env: dict[str, str], seconds: float) -> int:
    """Steps of ``workload.py`` for about ``seconds`` of loop (the fastest of three probes:
    a busy neighbour only ever makes a probe slower)."""
    probe = 200
    per_step = float("inf")
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, str(HERE / "workload.py"), "--steps", str(probe)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        line = next(x for x in out.splitlines() if x.startswith("WORKLOAD "))
        per_step = min(per_step, json.loads(line[9:])["work_seconds"] / probe)
    return max(100, round(seconds / per_step))


def measure(steps: int, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    """One job, both tools; returns what each wrote and why anything is missing."""
    cc_dir = tmp / "codecarbon"
    cc_dir.mkdir()
    summary_path = tmp / "summary.json"
    config = tmp / "empty-config.toml"  # the defaults, not the user's configuration
    config.write_text("")
    cmd = [
        *computewatch_cli(),
        "run",
        "--quiet",
        "--region",
        REGION,
        "--pue",
        f"{PUE:g}",
        "--config",
        str(config),
        "--json",
        str(summary_path),
        "--",
        sys.executable,
        str(Path(__file__).resolve()),
        CHILD_FLAG,
        "--steps",
        str(steps),
        "--out",
        str(cc_dir),
    ]
    res: dict[str, Any] = {"steps": steps, "cw": None, "cc": None, "child": None, "why": {}}
    try:
        proc = subprocess.run(
            cmd, check=False, cwd=tmp, env=env, capture_output=True, text=True, timeout=60 + steps
        )
        res["stderr"] = proc.stderr
        if proc.returncode != 0:
            res["why"]["job"] = f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    except subprocess.TimeoutExpired as e:
        res["why"]["job"] = f"timed out after {e.timeout:.0f} s"
        res["stderr"] = ""
    if summary_path.exists():
        res["cw"] = json.loads(summary_path.read_text())
        if "energy" not in res["cw"]:
            res["why"]["cw"] = "no energy section: " + "; ".join(res["cw"].get("notes", []))
    else:
        res["why"]["cw"] = "computewatch wrote no JSON summary"
    child = cc_dir / "child.json"
    if child.exists():
        res["child"] = json.loads(child.read_text())
        if res["child"].get("error"):
            res["why"]["cc"] = f"CodeCarbon failed: {res['child']['error']}"
    else:
        res["why"].setdefault("cc", "the job wrote no record (it did not finish)")
    rows = []
    emissions = cc_dir / "emissions.csv"
    if emissions.exists():
        with emissions.open(newline="") as f:
            rows = list(csv.DictReader(f))
    if rows:
        res["cc"] = rows[-1]
    else:
        res["why"].setdefault("cc", "CodeCarbon wrote no emissions.csv row")
    return res


# -- reading the two outputs ----------------------------------------------------------------


def _f(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _wh(kwh: float | None) -> str:
    return "–" if kwh is None else f"{kwh * 1000:.4g} Wh"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.3g}×"


def _cw_view(cw: dict[str, Any]) -> dict[str, Any]:
    """computewatch's figures, plus the model parameters recoverable from its summary."""
    energy, carbon = cw["energy"], cw["carbon"]
    comps = energy["components"]
    duration = float(cw.get("duration_seconds") or 0.0)
    v: dict[str, Any] = {
        "duration": duration,
        "comps": comps,
        "device": energy["device"],
        "facility": energy["facility"],
        "pue": energy["pue"],
        "attribution": energy.get("attribution", []),
        "intensity": carbon["intensity"],
        "carbon": carbon["total"],
        "util": _f((cw.get("cpu") or {}).get("utilization_mean")),
    }
    cpu = comps.get("cpu") or {}
    inputs = cpu.get("inputs") or {}
    if inputs:  # the CPU model's own numbers (absent when RAPL measured the CPU)
        v["cpu_inputs"] = inputs
        v["cpu_share"] = float(inputs["share"])
    mem = cw.get("memory") or {}
    rss, used = _f(mem.get("peak_rss_bytes")), _f(mem.get("peak_host_used_bytes"))
    total = _f(mem.get("host_total_bytes"))
    v["mem_gib"] = total / 2**30 if total else None
    v["mem_share"] = min(rss / used, 1.0) if rss is not None and used else None
    mem_fig = comps.get("memory") or {}
    if mem_fig.get("method") == "modeled" and v["mem_gib"] and v["mem_share"] and duration:
        # watts for the whole machine's memory, before the run's share
        v["mem_machine_watts"] = (
            mem_fig["value"] * J_PER_KWH / duration / v["mem_share"] if v["mem_share"] else None
        )
    return v


def _cc_view(row: dict[str, str], child: dict[str, Any] | None) -> dict[str, Any]:
    setup = (child or {}).get("setup") or {}
    hw = {h.get("kind"): h for h in setup.get("hardware", [])}
    v: dict[str, Any] = {k: _f(row.get(k)) for k in row}
    v.update({k: row.get(k) for k in ("cpu_model", "tracking_mode", "country_name")})
    v.update({k: row.get(k) for k in ("country_iso_code", "codecarbon_version", "gpu_model", "os")})
    v["cpu_hw"] = hw.get("CPU") or {}
    v["ram_hw"] = hw.get("RAM") or {}
    v["gpu_hw"] = hw.get("GPU")
    v["setup"] = setup
    energy, kg = v.get("energy_consumed"), v.get("emissions")
    v["g_per_kwh"] = kg * 1000 / energy if kg is not None and energy else None
    return v


# -- the section ----------------------------------------------------------------------------


def _cc_tdp_text(cc: dict[str, Any]) -> str:
    """Where CodeCarbon's CPU watts came from, as it recorded them."""
    h, look = cc["cpu_hw"], cc["setup"].get("tdp_lookup") or {}
    tdp = h.get("tdp")
    if h.get("is_generic_tdp"):
        return f"TDP {tdp} W, its generic figure (no TDP found for {cc.get('cpu_model')!r})"
    if not look:
        return f"TDP {tdp} W"
    if look.get("table_watts"):
        found = f"{look['table_watts']:g} W from its TDP table for {look.get('model')!r}"
    else:
        found = (
            f"{look.get('model')!r} not in its TDP table: {look.get('default_watts_per_thread')} "
            f"W per thread × {look.get('threads')} threads = {look.get('watts')} W"
        )
    return f"TDP {tdp} W ({found}, × {look.get('physical_cpus')} physical CPU(s))"


def _load_at(curve: list[float] | None, factor: float) -> float | None:
    """The system load (%) at which CodeCarbon's tabulated load curve gives ``factor``."""
    if not curve or not curve[0] <= factor <= curve[-1] + 1e-9:
        return None
    for pct in range(1, len(curve)):
        if curve[pct] >= factor:
            lo, hi = curve[pct - 1], curve[pct]
            return pct - 1 + ((factor - lo) / (hi - lo) if hi > lo else 0.0)
    return float(len(curve) - 1)


def _cc_cpu_method(cc: dict[str, Any]) -> str:
    h = cc["cpu_hw"]
    if not h:
        return "mode not recorded"
    mode = h.get("mode")
    text = f"`{mode}` mode, tracking the {cc.get('tracking_mode')}: {_cc_tdp_text(cc)}"
    formula = cc["setup"].get("load_factor")
    if mode == "cpu_load" and formula and cc.get("tracking_mode") == "machine":
        text += f" × `{formula}` (its source), on the whole machine's load"
    if cc.get("cpu_power") is not None:
        text += f"; mean of its samples {cc['cpu_power']:.3g} W"
    load = cc.get("cpu_utilization_percent")
    if load is not None:
        text += f"; `cpu_utilization_percent` {load:.0f}"
    return text


def _cc_ram_method(cc: dict[str, Any]) -> str:
    h = cc["ram_hw"]
    if h.get("forced_watts") is not None:
        return f"forced {h['forced_watts']} W"
    if "dimms" in h:
        slot = cc["setup"].get("ram_slot_watts")
        return (
            f"{h['dimms']} DIMMs guessed from {h['memory_gb']:.1f} GB installed × "
            f"{slot} W per DIMM (less per DIMM beyond 4) = {h['watts']:.3g} W for the "
            f"machine's memory, whatever the job uses"
        )
    return f"{cc.get('ram_power')} W (model not recorded)"


def _table(s: Section, cw: dict[str, Any] | None, cc: dict[str, Any] | None) -> None:
    rows: list[list[object]] = []

    def row(what: str, a: float | None, b: float | None, fmt: Any, ma: str, mb: str) -> None:
        rows.append([what, fmt(a), fmt(b), _ratio(b, a), ma, mb])

    def w(kwh: float | None, seconds: float | None) -> str:
        if kwh is None:
            return "–"
        mean = f" ({kwh * J_PER_KWH / seconds:.3g} W mean)" if seconds else ""
        return _wh(kwh) + mean

    dcw = cw["duration"] if cw else None
    dcc = cc.get("duration") if cc else None
    row(
        "window",
        dcw,
        dcc,
        lambda x: "–" if x is None else f"{x:.2f} s",
        "the job from spawn to exit (interpreter start-up, imports, tracker set-up included)"
        if cw
        else "–",
        "`start()` to `stop()` inside the job" if cc else "–",
    )
    comps = cw["comps"] if cw else {}

    def cw_fig(name: str) -> tuple[float | None, str]:
        f = comps.get(name)
        if not f:
            return None, "not counted (no such device)" if cw and name == "gpu" else "–"
        rng = f" [{_wh(f['low'])}–{_wh(f['high'])}]" if f["low"] != f["high"] else ""
        return f["value"], f"{f['method']}{rng}"

    cpu_v, cpu_m = cw_fig("cpu")
    if comps.get("cpu"):  # what the model did: the TDP used and the energy formula
        cpu_m += ": " + "; ".join(comps["cpu"]["assumptions"][1:3])
    rows.append(
        [
            "CPU energy",
            w(cpu_v, dcw),
            w(cc.get("cpu_energy"), dcc) if cc else "–",
            _ratio(cc.get("cpu_energy") if cc else None, cpu_v),
            cpu_m,
            _cc_cpu_method(cc) if cc else "–",
        ]
    )
    mem_v, mem_m = cw_fig("memory")
    if comps.get("memory"):
        mem_m += ": " + "; ".join(comps["memory"]["assumptions"][1:] or ["–"])
    rows.append(
        [
            "memory energy",
            w(mem_v, dcw),
            w(cc.get("ram_energy"), dcc) if cc else "–",
            _ratio(cc.get("ram_energy") if cc else None, mem_v),
            mem_m,
            _cc_ram_method(cc) if cc else "–",
        ]
    )
    gpu_v, gpu_m = cw_fig("gpu")
    gpu_cc = "–"
    if cc:
        gpu_cc = (
            f"{int(cc.get('gpu_count') or 0)} GPU(s) found"
            + (f": {cc['gpu_model']}" if cc.get("gpu_model") else "")
            + (" (tracker: none)" if not cc.get("gpu_hw") else "")
        )
    rows.append(
        [
            "GPU energy",
            w(gpu_v, dcw) if gpu_v is not None else "–",
            w(cc.get("gpu_energy"), dcc) if cc else "–",
            _ratio(cc.get("gpu_energy") if cc else None, gpu_v),
            gpu_m,
            gpu_cc,
        ]
    )
    for name, f in comps.items():
        if name not in ("cpu", "memory", "gpu"):
            rows.append(
                [
                    f"{name} energy",
                    w(f["value"], dcw),
                    "–",
                    "–",
                    f"{f['method']}: " + "; ".join(f["assumptions"]),
                    "not modelled",
                ]
            )
    fac = cw["facility"] if cw else None
    cc_pue = cc.get("pue") if cc else None
    rows.append(
        [
            "total energy at the facility",
            w(fac["value"], dcw) if fac else "–",
            w(cc.get("energy_consumed"), dcc) if cc else "–",
            _ratio(cc.get("energy_consumed") if cc else None, fac["value"] if fac else None),
            f"parts summed × PUE {cw['pue']['value']:g} ({cw['pue']['source']})" if cw else "–",
            f"parts summed × PUE {cc_pue:g} (`pue=`)" if cc_pue is not None else "–",
        ]
    )
    it = cw["intensity"] if cw else None
    mix = cc["setup"].get("mix", {}) if cc else {}
    cc_src = "emissions ÷ energy_consumed"
    if mix:
        how = (
            "its `carbon_intensity` field"
            if mix.get("carbon_intensity") is not None
            else "the mix × per-source factors"
        )
        cc_src += (
            f"; {mix.get('country_name')} in CodeCarbon's `{cc['setup'].get('mix_file')}`, "
            f"{how} ({mix.get('carbon_intensity')} g/kWh), year {mix.get('year')}"
        )
    rows.append(
        [
            "grid intensity",
            f"{it['g_per_kwh']:g} g/kWh" if it else "–",
            f"{cc['g_per_kwh']:.4g} g/kWh" if cc and cc.get("g_per_kwh") else "–",
            _ratio(cc.get("g_per_kwh") if cc else None, it["g_per_kwh"] if it else None),
            f"{it['name']} ({it['region']}, by {it['how']}): {it['source']}, {it['method']}"
            if it
            else "–",
            cc_src if cc else "–",
        ]
    )
    cg = cw["carbon"] if cw else None
    cc_g = cc["emissions"] * 1000 if cc and cc.get("emissions") is not None else None
    rows.append(
        [
            "carbon",
            f"{cg['value']:.4g} g [{cg['low']:.3g}–{cg['high']:.3g}]" if cg else "–",
            f"{cc_g:.4g} g" if cc_g is not None else "–",
            _ratio(cc_g, cg["value"] if cg else None),
            "facility kWh × intensity; range from the energy range and the intensity's",
            "energy_consumed × intensity, no range" if cc else "–",
        ]
    )
    per_h_cw = cg["value"] / dcw * 3600 if cg and dcw else None
    per_h_cc = cc["emissions_rate"] * 1000 * 3600 if cc and cc.get("emissions_rate") else None
    row(
        "carbon per hour of job",
        per_h_cw,
        per_h_cc,
        lambda x: "–" if x is None else f"{x:.4g} g/h",
        "carbon ÷ window",
        "`emissions_rate` (kg/s)" if cc else "–",
    )
    s.table(
        (
            "",
            "computewatch",
            "CodeCarbon",
            "CodeCarbon ÷ computewatch",
            "computewatch: how",
            "CodeCarbon: how",
        ),
        rows,
    )


def _why(cw: dict[str, Any], cc: dict[str, Any]) -> list[str]:
    """The differences, each a factor computed from the two outputs."""
    out: list[str] = []
    dcw, dcc = cw["duration"], cc.get("duration")
    win = dcc / dcw if dcc and dcw else None
    if win is not None:
        out.append(
            f"**Window ×{win:.3f}.** computewatch charges the whole job ({dcw:.2f} s, "
            f"start-up and imports included); CodeCarbon the tracked block ({dcc:.2f} s). "
            "Every energy ratio below includes this factor."
        )
    cpu = cw["comps"].get("cpu") or {}
    e_cw, e_cc = cpu.get("value"), cc.get("cpu_energy")
    tdp_cc, share = cc["cpu_hw"].get("tdp"), cw.get("cpu_share")
    inp = cw.get("cpu_inputs")
    if e_cw and e_cc and dcc and dcw and share and inp and tdp_cc:
        tdp_cw = float(inp["tdp_watts"])
        f_cw = float(inp["mean_watts"]) / tdp_cw  # the run's mean charge, as a share of TDP
        lf_cc = e_cc * J_PER_KWH / dcc / float(tdp_cc)
        at = _load_at(cc["setup"].get("load_curve"), lf_cc)
        rec = cc.get("cpu_utilization_percent")
        out.append(
            f"**CPU ×{e_cc / e_cw:.3g}** = TDP ×{float(tdp_cc) / tdp_cw:.3g} "
            f"(CodeCarbon {_cc_tdp_text(cc)}; computewatch {tdp_cw:.3g} W for the "
            f"{inp['logical_cpus']:g} logical CPUs it sees) × charge per watt of TDP "
            f"×{lf_cc / f_cw:.3g} (CodeCarbon's mean power was {lf_cc:.1%} of its TDP"
            + (f", which its curve gives at {at:.0f} % system load" if at is not None else "")
            + (f" (its own `cpu_utilization_percent`: {rec:.0f})" if rec is not None else "")
            + f", for the whole machine; computewatch charged the run {f_cw:.1%} of its TDP: "
            f"{inp['idle_fraction']:g} × TDP × its CPU share {share:.1%}, plus "
            f"{1 - inp['idle_fraction']:g} × TDP × its {inp['cpu_seconds']:.1f} CPU-s ÷ "
            f"{inp['logical_cpus']:g} CPUs ÷ {dcw:.2f} s) × window ×{win:.3f}."
        )
    elif e_cw and e_cc:
        out.append(
            f"**CPU ×{e_cc / e_cw:.3g}**: the models could not be split into factors "
            "(computewatch measured RAPL or its assumptions were not parsed)."
        )
    mem = cw["comps"].get("memory") or {}
    m_cw, m_cc = mem.get("value"), cc.get("ram_energy")
    mw = cw.get("mem_machine_watts")
    if m_cw and m_cc and mw and cw.get("mem_share") and dcc and win:
        gib = cw["mem_gib"]
        ram_w = m_cc * J_PER_KWH / dcc  # its mean over the tracked block
        out.append(
            f"**Memory ×{m_cc / m_cw:.3g}** = machine's memory power ×{ram_w / mw:.3g} "
            f"(CodeCarbon {ram_w:.3g} W for {cc.get('ram_total_size') or 0:.1f} GB, i.e. "
            f"{ram_w / gib:.3g} W/GiB; computewatch {mw:.3g} W = {mw / gib:.3g} W/GiB × "
            f"{gib:.1f} GiB) × attribution ×{1 / cw['mem_share']:.3g} (CodeCarbon: all of "
            f"it, used or not; computewatch: peak RSS ÷ host peak used = "
            f"{cw['mem_share']:.1%}) × window ×{win:.3f}."
        )
        src = mem.get("source") or ""
        m = re.search(r"CodeCarbon uses ([^;]*)", src)
        if m:
            out.append(
                f"computewatch's memory figure cites CodeCarbon as using {m.group(1).strip()}; "
                f"this CodeCarbon ({cc.get('codecarbon_version')}) modelled "
                f"{ram_w / (cc.get('ram_total_size') or gib):.3g} W/GB here, "
                f"{ram_w / (cc.get('ram_total_size') or gib) / (mw / gib):.3g}× that."
            )
    it_cw, it_cc = cw["intensity"]["g_per_kwh"], cc.get("g_per_kwh")
    mix = cc["setup"].get("mix", {})
    if it_cc:
        out.append(
            f"**Intensity ×{it_cc / it_cw:.3g}**: computewatch {it_cw:g} g/kWh "
            f"({cw['intensity']['source']}); CodeCarbon {it_cc:.4g} g/kWh "
            f"({mix.get('country_name', '?')}, its energy-mix file, year {mix.get('year', '?')})."
        )
    cg, cc_kg = cw["carbon"]["value"], cc.get("emissions")
    fac, cc_kwh = cw["facility"]["value"], cc.get("energy_consumed")
    if cg and cc_kg and fac and cc_kwh and it_cc:
        out.append(
            f"**Carbon ×{cc_kg * 1000 / cg:.3g}** = energy ×{cc_kwh / fac:.3g} × intensity "
            f"×{it_cc / it_cw:.3g}."
        )
    pue_cw, pue_cc = cw["pue"]["value"], cc.get("pue")
    out.append(
        f"PUE: computewatch {pue_cw:g} ({cw['pue']['source']}), CodeCarbon "
        f"{'?' if pue_cc is None else f'{pue_cc:g}'}"
        + (": no difference from the facility." if pue_cc == pue_cw else ": they differ.")
    )
    if cw.get("attribution"):
        out.append("computewatch's attribution rule: " + "; ".join(cw["attribution"]) + ".")
    return out


def _recorded(s: Section, res: dict[str, Any], cc: dict[str, Any] | None) -> None:
    s.add("### What each tool recorded", "")
    child = res.get("child") or {}
    printed = [
        ln.strip()
        for ln in (res.get("stderr") or "").splitlines()
        if ln.strip() and "WORKLOAD" not in ln
    ]
    if cc:
        h = cc["cpu_hw"]
        s.add(
            f"- CodeCarbon {cc.get('codecarbon_version')}: country {cc.get('country_name')} "
            f"({cc.get('country_iso_code')}), tracking mode `{cc.get('tracking_mode')}`, "
            f"CPU model {cc.get('cpu_model')!r} ({int(cc.get('cpu_count') or 0)} CPUs), "
            f"RAM {cc.get('ram_total_size') or 0:.2f} GB, "
            f"cpu_power {cc.get('cpu_power') or 0:.3g} W, ram_power "
            f"{cc.get('ram_power') or 0:.3g} W, cpu_utilization_percent "
            f"{cc.get('cpu_utilization_percent') or 0:.1f}, ram_used_gb "
            f"{cc.get('ram_used_gb') or 0:.2f}, emissions {cc.get('emissions') or 0:.4g} kg, "
            f"emissions_rate {cc.get('emissions_rate') or 0:.4g} kg/s.",
            "- CodeCarbon's hardware: "
            + ", ".join(
                str(x.get("description"))
                + (
                    f" [mode {x.get('mode')}, TDP {x.get('tdp')} W"
                    f"{', generic' if x.get('is_generic_tdp') else ''}]"
                    if x.get("kind") == "CPU"
                    else ""
                )
                for x in cc["setup"].get("hardware", [])
            )
            + (f"; read errors: {cc['setup']['errors']}" if cc["setup"].get("errors") else "")
            + (
                f". No RAPL, so it fell back on `{h.get('mode')}`"
                + (
                    ""
                    if any("RAPL" in ln or "Falling back" in ln for ln in printed)
                    else ' and, at `log_level="error"`, printed nothing about it'
                )
                + "."
                if h.get("mode") in ("cpu_load", "constant")
                else "."
            ),
        )
    if printed:
        shown = list(dict.fromkeys(printed))[:6]
        s.add("- The job's stderr: " + " / ".join(f"`{ln[:200]}`" for ln in shown))
    if child:
        s.add(
            f"- The loop: {res['steps']} steps, {child.get('work_seconds', 0):.2f} s, "
            f"{child.get('work_cpu_seconds', 0):.2f} CPU s (every thread of the job)."
        )
    s.add("")


def run(quick: bool) -> Section:
    s = Section("7. Against CodeCarbon: one job, both tools' figures")
    seconds = 4.0 if quick else 10.0
    s.add(
        f"One execution of `workload.py`'s numpy loop (about {seconds:.0f} s) under "
        f"`computewatch run --region {REGION} --pue {PUE:g} --json FILE` (an empty "
        "configuration: the defaults), with CodeCarbon's `OfflineEmissionsTracker("
        f'country_iso_code="{COUNTRY_ISO3}", pue={PUE:g}, measure_power_secs=1, '
        'save_to_file=True, log_level="error")` started inside the job: both tools see the '
        "same seconds. Figures are read from computewatch's JSON summary and CodeCarbon's "
        "`emissions.csv`; the factors are computed from them.",
        "",
    )
    with tempfile.TemporaryDirectory(prefix="cw-bench-codecarbon-") as d:
        tmp = Path(d)
        env = _env(tmp)
        try:
            steps = _calibrate(env, seconds)
        except (subprocess.CalledProcessError, StopIteration) as e:
            s.add(f"**The workload could not run**: {e}", "")
            return s
        res = measure(steps, tmp, env)
    why = res["why"]
    cw = _cw_view(res["cw"]) if res["cw"] and "cw" not in why else None
    cc = _cc_view(res["cc"], res["child"]) if res["cc"] else None
    labels = {"job": "The job", "cw": "computewatch", "cc": "CodeCarbon"}
    for k, label in labels.items():
        if k in why:
            s.add(f"**{label}**: {why[k]}")
    if why:
        s.add("")
    _table(s, cw, cc)
    if cw and cc:
        s.add("### Why they differ", "")
        s.add(*(f"- {line}" for line in _why(cw, cc)), "")
    _recorded(s, res, cc)
    return s


if __name__ == "__main__":
    if sys.argv[1:2] == [CHILD_FLAG]:
        sys.exit(_child(sys.argv[2:]))
    cli_main(run, __doc__)
