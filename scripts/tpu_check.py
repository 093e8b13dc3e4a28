"""Check computewatch's TPU readings against a known load on a real Cloud TPU VM.

Not part of the test suite, and not run yet (no TPU is available to the project): it needs a TPU
VM (v4, v5e, v5p or v6e), ``jax[tpu]`` and ``tpu-info`` (the ``tpu`` extra). It runs one JAX
workload under ``computewatch run --gpu-backend tpu`` (idle, then a bf16 matmul loop on every
chip), then reads the stored run and checks:

1. ``computewatch devices`` lists every chip tpu-info finds, with its generation;
2. libtpu's metric service answered: duty cycle, HBM used and total readings were stored;
3. the duty cycle near 0 when idle and above 0.8 under the matmul;
4. HBM in use per chip against JAX's ``memory_stats()['bytes_in_use']`` (within 10 % or
   256 MiB), HBM total against the catalog's (within 10 %);
5. the workload's process is attributed to every chip (``gpus_used``);
6. the modelled energy rises under load and stays within the catalog's idle-busy range x time.

    python scripts/tpu_check.py [--seconds-per-phase 20] [--out results.json]

It prints a table and exits 1 if a check fails. It never changes the TPU's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOAD = r"""
import json, sys, time
import jax, jax.numpy as jnp

seconds = float(sys.argv[1])
marks = {}
devs = jax.local_devices()

def phase(name, fn):
    start = time.time()
    fn(start)
    marks[name] = [start, time.time()]

def idle(start):
    time.sleep(seconds)

def matmul(start):
    f = jax.pmap(lambda a, b: a @ b)
    a = jnp.ones((len(devs), 8192, 8192), jnp.bfloat16)
    b = jnp.ones((len(devs), 8192, 8192), jnp.bfloat16)
    n = 0
    while time.time() - start < seconds:
        f(a, b).block_until_ready()
        n += 1
    marks["bytes_in_use"] = [d.memory_stats().get("bytes_in_use") for d in devs]
    marks["matmuls"] = n

phase("idle", idle)
phase("matmul", matmul)
json.dump(marks, open(sys.argv[2], "w"))
"""


def _series(store: Any, run: Any, name: str) -> dict[str, list[tuple[float, float]]]:
    wall = {seq: w for seq, _, w in store.ticks(run.key)}
    out: dict[str, list[tuple[float, float]]] = {}
    for s in store.series(run.key):
        if s.name == name and "pid" not in s.labels:
            out[s.labels.get("gpu", "")] = [
                (wall[q], v) for q, v in store.points(run.key, s.idx) if q in wall
            ]
    return out


def _mean_in(points: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    vals = [v for t, v in points if lo <= t <= hi]
    return sum(vals) / len(vals) if vals else None


def _at(points: list[tuple[float, float]], t: float) -> float | None:
    before = [v for tt, v in points if tt <= t]
    return before[-1] if before else None


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds-per-phase", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args()

    from tpu_info import device as tpu_device  # type: ignore[import-untyped]

    from computewatch.catalog import load_accelerators
    from computewatch.catalog.tpu import tpu_rows
    from computewatch.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="cw-tpu-check-"))
    db = tmp / "computewatch.db"
    marks_file = tmp / "marks.json"
    script = tmp / "workload.py"
    script.write_text(WORKLOAD)
    checks: list[dict[str, Any]] = []

    def check(name: str, value: Any, ok: bool, expect: str) -> None:
        checks.append({"check": name, "value": value, "expected": expect, "ok": bool(ok)})

    devices = json.loads(
        subprocess.run(
            [sys.executable, "-m", "computewatch", "devices", "--gpu-backend", "tpu", "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    chip_type, count = tpu_device.get_local_chips()
    if chip_type is None or not count:
        print("no TPU chip found here (tpu-info sees none): run this on a Cloud TPU VM")
        return 1
    ours = [g["model"] for g in devices["gpus"]]
    check(
        "devices lists every chip tpu-info finds",
        f"{ours} vs tpu-info {chip_type} x {count}",
        len(ours) == count and all(m == f"TPU-{chip_type.value.name}" for m in ours),
        "same count and generation",
    )
    cmd = [
        sys.executable, "-m", "computewatch", "run", "--db", str(db), "--quiet",
        "--interval", str(args.interval), "--json", str(tmp / "summary.json"),
        "--gpu-backend", "tpu", "--", sys.executable, str(script),
        str(args.seconds_per_phase), str(marks_file),
    ]  # fmt: skip
    t0 = time.time()
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        print(f"workload failed with exit status {proc.returncode}", file=sys.stderr)
        return 1
    marks = json.loads(marks_file.read_text())
    summary = json.loads((tmp / "summary.json").read_text())
    with Store.open(db) as store:
        run = store.find_run("last")
        util = _series(store, run, "gpu_utilization_ratio")
        used = _series(store, run, "gpu_memory_used_bytes")
        total = _series(store, run, "gpu_memory_total_bytes")
        energy = _series(store, run, "gpu_energy_joules_total")
    check("metric service answered", sorted(util), bool(util) and bool(used), "readings stored")
    accs, rows = load_accelerators(), tpu_rows()
    (i0, i1), (m0, m1) = marks["idle"], marks["matmul"]
    for n, uuid in enumerate(sorted(util)):
        g: dict[str, Any] = next((x for x in summary["gpus"] if x["uuid"] == uuid), {})
        model = g.get("model") or ""
        idle_u = _mean_in(util[uuid], i0 + 2, i1 - 1)
        busy_u = _mean_in(util[uuid], m0 + 5, m1 - 1)
        check(f"{uuid} duty cycle idle", idle_u, idle_u is not None and idle_u < 0.05, "< 0.05")
        check(f"{uuid} duty cycle matmul", busy_u, busy_u is not None and busy_u > 0.8, "> 0.8")
        jax_bytes = (marks.get("bytes_in_use") or [None] * (n + 1))[n]
        ours_b = _at(used.get(uuid, []), m1)
        ok = jax_bytes is not None and ours_b is not None
        ok = ok and abs(ours_b - jax_bytes) <= max(0.1 * jax_bytes, 256 << 20)
        check(f"{uuid} HBM in use vs JAX", [ours_b, jax_bytes], ok, "within 10 % or 256 MiB")
        tot = _at(total.get(uuid, []), m1)
        cat = accs[model].memory_bytes if model in accs else None
        ok = tot is not None and cat is not None and abs(tot - cat) <= 0.1 * cat
        check(f"{uuid} HBM total vs catalog", [tot, cat], ok, "within 10 %")
        e = energy.get(uuid, [])
        e_idle = (_at(e, i1) or 0) - (_at(e, i0) or 0)
        e_busy = (_at(e, m1) or 0) - (_at(e, m0) or 0)
        row = rows.get(model)
        span = m1 - m0
        ok = (
            row is not None
            and e_busy > e_idle
            and (row.idle_watts * span * 0.5 <= e_busy <= row.busy_watts * span * 1.1)
        )
        check(f"{uuid} modelled energy", [e_idle, e_busy], ok, "busy > idle, within model range")
    used_chips = set(summary.get("gpus_used") or [g["uuid"] for g in summary["gpus"]])
    check("process attributed to every chip", sorted(used_chips), used_chips >= set(util), "all")
    results = {"elapsed_seconds": round(time.time() - t0, 1), "checks": checks,
               "notes": summary.get("notes", [])}  # fmt: skip
    width = max(len(c["check"]) for c in checks)
    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['check']:<{width}}  {c['value']}")
    out = args.out or (
        os.path.join(os.environ["OUT"], "tpu_check.json") if "OUT" in os.environ else None
    )
    if out:
        Path(out).write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
