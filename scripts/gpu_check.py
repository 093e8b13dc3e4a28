"""Check computewatch's NVIDIA readings against a known load on a real GPU.

Not part of the test suite: it needs an NVIDIA GPU, its driver, PyTorch with CUDA and
nvidia-ml-py. It runs one workload under ``computewatch run`` (idle, then a bf16 matmul loop,
then a memory-bound copy), then reads the stored run and checks:

1. utilization near 1 under the matmul and near 0 when idle;
2. the energy counter's delta against the integral of polled power, within 5 %;
3. the workload's per-process GPU memory (NVML) against ``torch.cuda.memory_reserved()``
   (NVML also counts the CUDA context, a few hundred MiB);
4. on Hopper and newer, GPM SM-active under the matmul above 80 %;
5. CUDA-event phases (``computewatch.torch.gpu_phase``): the GPU seconds of the timed phases
   against one pair of events around the whole loop (within 5 %), with the CPU side of each
   phase far shorter than its GPU time (no synchronize per phase);
6. counted FLOPs and MFU: the run's FLOPs are ``counted`` and its MFU, for bf16 matmuls, lies
   between 0.3 and 1 of the catalog's dense peak;
7. ``count_flops`` of a small model on the GPU equals its count on the CPU.

    python scripts/gpu_check.py [--seconds-per-phase 20] [--out results.json]

It prints a table and exits 1 if a check fails. It never changes the GPU's settings.
"""

from __future__ import annotations

import argparse
import itertools
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
import torch

seconds = float(sys.argv[1])
marks = {}
dev = torch.device("cuda:0")
torch.cuda.init()
x = torch.randn(1, device=dev)
torch.cuda.synchronize()

def phase(name, fn):
    start = time.time()
    fn(start)
    torch.cuda.synchronize()
    marks[name] = [start, time.time()]

def idle(start):
    time.sleep(seconds)

def matmul(start):
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    n = 0
    while time.time() - start < seconds:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
        n += 20
    marks["matmul_flops"] = 2 * 8192**3 * n
    marks["memory_reserved_bytes"] = torch.cuda.memory_reserved(dev)
    del a, b, c

def copy(start):
    src = torch.empty(4 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    while time.time() - start < seconds:
        for _ in range(10):
            dst.copy_(src)
        torch.cuda.synchronize()

def train(start):
    # Steps of 20 bf16 matmuls timed with CUDA events by gpu_phase, FLOPs declared per step.
    import computewatch
    from computewatch.torch import GpuTimer, count_flops

    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    per_step = 20 * 2 * 8192**3
    whole = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    cpu_phase = 0.0
    steps = 0
    with computewatch.track(name="gpu-check", flops_per_step=per_step) as run:
        timer = GpuTimer(run)
        whole[0].record()
        while time.time() - start < seconds:
            t0 = time.monotonic()
            with timer.phase("gemm"):
                for _ in range(20):
                    c = a @ b
            cpu_phase += time.monotonic() - t0
            run.step()
            steps += 1
            if steps % 50 == 0:
                torch.cuda.synchronize()  # bound the queue; not per phase
        whole[1].record()
        torch.cuda.synchronize()
        timer.close()
    marks["train_steps"] = steps
    marks["train_gpu_seconds"] = whole[0].elapsed_time(whole[1]) / 1000
    marks["train_cpu_phase_seconds"] = cpu_phase
    nn = torch.nn
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 10))
    batch = torch.randn(64, 512)
    marks["count_flops_cpu"] = count_flops(model, batch)
    marks["count_flops_gpu"] = count_flops(model.to(dev), batch.to(dev))

phase("idle", idle)
phase("matmul", matmul)
phase("copy", copy)
phase("train", train)
json.dump(marks, open(sys.argv[2], "w"))
"""


def _series(store: Any, run: Any, name: str) -> dict[str, list[tuple[float, float]]]:
    """Per GPU uuid: (wall time, value) points of one metric."""
    wall = {seq: w for seq, _, w in store.ticks(run.key)}
    out: dict[str, list[tuple[float, float]]] = {}
    for s in store.series(run.key):
        if s.name == name:
            key = s.labels.get("gpu", "") + (f"/{s.labels['pid']}" if "pid" in s.labels else "")
            out[key] = [(wall[q], v) for q, v in store.points(run.key, s.idx) if q in wall]
    return out


def _mean_in(points: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    vals = [v for t, v in points if lo <= t <= hi]
    return sum(vals) / len(vals) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds-per-phase", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args()

    from computewatch.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="cw-gpu-check-"))
    db = tmp / "computewatch.db"
    marks_file = tmp / "marks.json"
    script = tmp / "workload.py"
    script.write_text(WORKLOAD)
    cmd = [
        sys.executable, "-m", "computewatch", "run", "--db", str(db), "--quiet",
        "--interval", str(args.interval), "--json", str(tmp / "summary.json"),
        "--gpu-backend", "nvidia", "--", sys.executable, str(script),
        str(args.seconds_per_phase), str(marks_file),
    ]  # fmt: skip
    t0 = time.time()
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        print(f"workload failed with exit status {proc.returncode}", file=sys.stderr)
        return 1
    marks = json.loads(marks_file.read_text())
    summary = json.loads((tmp / "summary.json").read_text())
    results: dict[str, Any] = {
        "elapsed_seconds": round(time.time() - t0, 1),
        "gpus": summary["gpus"],
        "notes": summary["notes"],
        "checks": [],
    }
    with Store.open(db) as store:
        run = store.find_run("last")
        util = _series(store, run, "gpu_utilization_ratio")
        energy = _series(store, run, "gpu_energy_joules_total")
        power = _series(store, run, "gpu_power_watts")
        procmem = _series(store, run, "gpu_process_memory_used_bytes")
        smact = _series(store, run, "gpu_sm_active_ratio")
        phases = store.phases(run.key)
        methods = {
            s.labels.get("gpu"): s.labels.get("method")
            for s in store.series(run.key)
            if s.name == "gpu_energy_joules_total"
        }
    gpu = next(iter(util), None)
    checks = results["checks"]

    def check(name: str, value: Any, ok: bool, expect: str) -> None:
        checks.append({"check": name, "value": value, "expected": expect, "ok": bool(ok)})

    if gpu is None:
        check("a GPU was monitored", None, False, "one GPU with readings")
    else:
        # Margins of 2 s at each phase edge: NVML's utilization is averaged over a past window.
        idle_u = _mean_in(util[gpu], marks["idle"][0] + 2, marks["idle"][1] - 1)
        mm_u = _mean_in(util[gpu], marks["matmul"][0] + 2, marks["matmul"][1] - 1)
        check("utilization idle", idle_u, idle_u is not None and idle_u < 0.05, "< 0.05")
        check("utilization matmul", mm_u, mm_u is not None and mm_u > 0.95, "> 0.95")
        e = next((v for k, v in energy.items() if k.startswith(gpu)), [])
        p = power.get(gpu, [])
        if e and len(p) > 1 and methods.get(gpu) == "counter":
            lo, hi = max(e[0][0], p[0][0]), min(e[-1][0], p[-1][0])
            e_in = [v for t, v in e if lo <= t <= hi]
            counted = e_in[-1] - e_in[0]
            pts = [(t, v) for t, v in p if lo <= t <= hi]
            integ = sum(
                (t1 - t0_) * (v0 + v1) / 2 for (t0_, v0), (t1, v1) in itertools.pairwise(pts)
            )
            rel = abs(counted - integ) / counted if counted else None
            check(
                "energy counter vs integrated power",
                {"counter_j": round(counted, 1), "integrated_j": round(integ, 1), "rel": rel},
                rel is not None and rel < 0.05,
                "relative difference < 0.05",
            )
        else:
            check("energy counter present", methods.get(gpu), False, "method 'counter'")
        mine = [v for k, pts_ in procmem.items() if k.startswith(gpu) for _, v in pts_]
        reserved = marks.get("memory_reserved_bytes")
        peak = max(mine) if mine else None
        ok = peak is not None and reserved is not None and reserved <= peak <= reserved + (1 << 30)
        check(
            "per-process memory vs torch.cuda.memory_reserved()",
            {"nvml_peak_bytes": peak, "reserved_bytes": reserved},
            ok,
            "reserved <= NVML <= reserved + 1 GiB (CUDA context)",
        )
        if gpu in smact:
            sm = _mean_in(smact[gpu], marks["matmul"][0] + 2, marks["matmul"][1] - 1)
            check("GPM SM active under matmul", sm, sm is not None and sm > 0.8, "> 0.8")
        else:
            check("GPM SM active under matmul", None, True, "skipped: no GPM on this GPU")
        secs = marks["matmul"][1] - marks["matmul"][0]
        results["matmul_tflops"] = round(marks["matmul_flops"] / secs / 1e12, 1)
        accel = sum(p.accel_seconds or 0.0 for p in phases if p.name == "gemm")
        timed = sum(1 for p in phases if p.name == "gemm" and p.accel_seconds is not None)
        whole = marks["train_gpu_seconds"]
        rel = abs(accel - whole) / whole if whole else None
        check(
            "CUDA-event phases vs one event pair around the loop",
            {"phases": timed, "steps": marks["train_steps"], "phases_gpu_s": round(accel, 3),
             "loop_gpu_s": round(whole, 3), "rel": rel},
            rel is not None and rel < 0.05 and timed >= 0.95 * marks["train_steps"],
            "relative difference < 0.05, >= 95 % of the phases resolved",
        )  # fmt: skip
        cpu = marks["train_cpu_phase_seconds"]
        check(
            "no synchronize per phase (CPU time inside the phases vs their GPU time)",
            {"cpu_s": round(cpu, 3), "gpu_s": round(accel, 3)},
            cpu < 0.5 * accel,
            "CPU side < half the GPU time",
        )
        flops = summary.get("flops") or {}
        mfu = flops.get("mfu")
        mfu_v = mfu.get("value") if isinstance(mfu, dict) else mfu
        check(
            "counted FLOPs and MFU of bf16 matmul steps",
            {"method": flops.get("method"), "mfu": mfu_v, "peak": flops.get("peak_flops")},
            flops.get("method") == "counted" and mfu_v is not None and 0.3 < mfu_v <= 1.0,
            "method counted, 0.3 < MFU <= 1",
        )
        check(
            "count_flops on the GPU equals the CPU count",
            {"cpu": marks["count_flops_cpu"], "gpu": marks["count_flops_gpu"]},
            marks["count_flops_cpu"] == marks["count_flops_gpu"],
            "equal",
        )

    for c in checks:
        verdict = "PASS" if c["ok"] else "FAIL"
        print(f"{verdict}  {c['check']}: {c['value']} (expected {c['expected']})")
    if "matmul_tflops" in results:
        print(f"bf16 matmul throughput: {results['matmul_tflops']} TFLOP/s")
    out = args.out or (
        os.path.join(os.environ["OUT"], "gpu_check.json") if "OUT" in os.environ else None
    )
    if out:
        Path(out).write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
