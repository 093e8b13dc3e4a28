"""Diagnosis on jobs whose cause is known: each scenario is a small PyTorch job (CPU) with one
cause injected, run under ``computewatch run``, and its fixed variant (the diagnosis's own
suggestion applied, with its parameters where it gives one). For each: is the top finding the
injected cause, and how far is its predicted saving from the measured difference between the
slow and the fixed variant's training loop (the loop's own wall time, printed by the job).

    python benchmarks/bench_diagnosis.py [--quick] [--reps N] [--scenario NAME ...]

The test suite runs small versions of the same scenarios (tests/diagnosis/test_scenarios.py):
top finding right, measured saving inside its range, no finding with a saving on the healthy
job, without timing anything against a target.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# The job's common part: a small MLP trained on CPU, one intra-op thread (the machine is shared),
# tracked by the enclosing `computewatch run`; LOOP prints the loop's wall time.
PRELUDE = """
import os, sys, time
import torch
import computewatch
torch.set_num_threads(1)
torch.manual_seed(0)
SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
VARIANT = sys.argv[2] if len(sys.argv) > 2 else "slow"
WORKERS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step(x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss
"""

LOADER = """
class Data(torch.utils.data.Dataset):
    def __init__(self, n, cost, io):
        self.n, self.cost, self.io = n, cost, io
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.io:
            time.sleep(self.io)  # a read waiting on storage
        g = torch.Generator().manual_seed(i)
        x = torch.randn(256, generator=g)
        for _ in range(self.cost):  # a costly transform, in Python
            x = torch.tanh(x * 1.01)
        return x, i % 10

def loop(data, workers):
    # The fixed variant as the suggestion gives it (pin_memory aside: no device here).
    more = dict(persistent_workers=True, prefetch_factor=4) if workers else {}
    loader = torch.utils.data.DataLoader(data, batch_size=16, num_workers=workers, **more)
    with computewatch.track(name="job") as run:
        t0, c0 = time.monotonic(), time.process_time()
        for x, y in run.data(loader):
            with run.phase("compute"):
                for _ in range(COMPUTE):
                    train_step(x, y)
            run.step(samples=len(x))
        print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
"""

SCRIPTS: dict[str, str] = {
    # 1. A serial data loader with a costly transform: the loop waits for every batch.
    "serial_loader": PRELUDE
    + LOADER
    + """
COMPUTE = 6
loop(Data(int(1920 * SCALE), 60, 0.0), 0 if VARIANT == "slow" else WORKERS)
""",
    # 2. I/O waits in loading: each sample waits 4 ms on "storage", in the loop's process.
    "io_waits": PRELUDE
    + LOADER
    + """
COMPUTE = 8
loop(Data(int(960 * SCALE), 0, 0.004), 0 if VARIANT == "slow" else WORKERS)
""",
    # 3. A periodic blocking checkpoint: every 10th step saves a large state synchronously.
    "blocking_checkpoint": PRELUDE
    + """
big = {"w": torch.randn(8_000_000)}
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ckpt-{os.getpid()}.pt")
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(120 * SCALE)):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        for _ in range(6):
            train_step(x, y)
        if i % 10 == 9:
            if VARIANT == "slow":
                torch.save(big, path)  # the loop waits for the write
                os.fsync(os.open(path, os.O_RDONLY))
            # fixed: the save is off the loop. A background writer needs a spare core, which a
            # shared 2-core machine has not: the fixed variant measures the loop without it.
        run.step(samples=32)
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
if os.path.exists(path):
    os.unlink(path)
""",
    # 5. A tiny batch: one sample per step, the per-step overhead paid for each. FLOPs are
    # declared (6 x parameters x samples) against the core's peak, measured here on a large
    # matrix product (the fastest of 30): the hardware's peak for MFU. Fixed: 32 samples per step.
    "tiny_batch": PRELUDE
    + """
a, b = torch.randn(512, 512), torch.randn(512, 512)
for _ in range(3):
    a @ b
# the fastest of 30 products: a product that another process preempted counts for nothing (the
# mean over 20 once read a peak a few times too low on a busy machine, and MFU over the steps
# then reached 100%: nothing left to win)
best = float("inf")
for _ in range(30):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
peak = 2 * 512**3 / best
params = sum(p.numel() for p in model.parameters())
batch = 1 if VARIANT == "slow" else 32
with computewatch.track(name="job", peak_flops=peak) as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(2048 * SCALE) // batch):
        x, y = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
        train_step(x, y)
        run.step(samples=batch, flops=6 * params * batch)
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
""",
    # 4. The healthy job: compute only, on every core it is allowed (one thread on a machine
    # with a free core would leave that core to win), nothing to win.
    "healthy": PRELUDE
    + """
torch.set_num_threads(len(os.sched_getaffinity(0)))
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(160 * SCALE)):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        with run.phase("compute"):
            for _ in range(6):
                train_step(x, y)
        run.step(samples=32)
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
""",
}

# The job's simulated GPU, for the causes that live on a device (this machine has none): the
# run's fake GPUs (--gpu-backend fake:PRESET) report what the job writes to the state file
# (computewatch.testing.job_state), so the device is busy, idle or throttled when the job's
# own timeline says so. Kernels run one after another on the device's timeline; the host waits
# only when it reads a result (a synchronisation: .item(), .cpu()) or when QUEUE seconds of
# work are already queued (CUDA's launch queue), as with a real GPU.
DEVICE = """
from computewatch.testing.job_state import write_state
TOP_MHZ = 1410  # the A100's highest SM clock (the fake:1xA100-80GB preset)
QUEUE = 0.1

class Device:
    def __init__(self):
        self.free_at = time.monotonic()
        self.busy = 0.0
        self.clock = TOP_MHZ
        self.readings = {"sm_clock_mhz": TOP_MHZ, "clock_events": 0, "temperature_c": 60,
                         "process_memory_bytes": 2 << 30}
        self._write()
    def set(self, **readings):
        self.readings.update(readings)
        self.clock = self.readings["sm_clock_mhz"]
        self._write()
    def launch(self, seconds):  # a kernel taking `seconds` at the top clock
        k = seconds * TOP_MHZ / self.clock
        now = time.monotonic()
        self.free_at = max(now, self.free_at) + k
        self.busy += k
        self._write()
        if self.free_at - now > QUEUE:  # the queue is full: the host blocks
            time.sleep(self.free_at - now - QUEUE)
    def sync(self):  # loss.item(): the host waits for the queued work
        wait = self.free_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    def release(self):  # the job is done with the device: it goes idle and cools down
        self.readings.update(process_memory_bytes=0, clock_events=1, temperature_c=40)
        self._write()
    def _write(self):
        write_state(os.environ["COMPUTEWATCH_FAKE_GPU_STATE"],
                    {**self.readings, "busy_seconds_total": self.busy})
"""

GPU_SCRIPTS: dict[str, str] = {
    # 6. A host-device synchronisation every step: the loss read with .item() after each step,
    # so the host waits for the device and the device for the host's next launches. Fixed:
    # the loss read every 10th step.
    "device_sync": PRELUDE
    + DEVICE
    + """
dev = Device()
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(160 * SCALE)):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        for _ in range(8):  # the host's part of the step: Python, launches, bookkeeping
            train_step(x, y)
        dev.launch(0.04)  # the device's part
        if VARIANT == "slow" or i % 10 == 9:
            dev.sync()  # print(loss.item())
        run.step(samples=32)
    dev.sync()
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
dev.release()
""",
    # 7. An idle allocation: after training, the job waits holding its GPU (for an evaluation
    # service, an upload, a person). Fixed: the job ends when training ends.
    "idle_allocation": PRELUDE
    + DEVICE
    + """
dev = Device()
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(60 * SCALE)):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        for _ in range(4):
            train_step(x, y)
        dev.launch(0.04)
        run.step(samples=32)
    dev.sync()
    if VARIANT == "slow":
        time.sleep(6 * SCALE)  # holding the GPU, doing nothing with it
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
dev.release()
""",
    # 8. A throttled GPU: from 30% of the steps on the device is hot and its SM clock held at
    # 900 MHz (thermal slowdown, the reasons NVML gives). Fixed: the unthrottled device.
    "throttled_gpu": PRELUDE
    + DEVICE
    + """
dev = Device()
n = int(100 * SCALE)
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(n):
        if VARIANT == "slow" and i == int(0.3 * n):
            dev.set(sm_clock_mhz=900, clock_events=0x20 | 0x40, temperature_c=91)
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        for _ in range(4):
            train_step(x, y)
        dev.launch(0.04)
        run.step(samples=32)
    dev.sync()
    print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
dev.release()
""",
}
SCRIPTS.update(GPU_SCRIPTS)
GPU_PRESET = "1xA100-80GB"
INITIAL_DEVICE = {"gpu_util_percent": 0, "clock_events": 1, "sm_clock_mhz": 1410,
                  "temperature_c": 35, "process_memory_bytes": 0}  # fmt: skip
"""The fake device before the job touches it: idle, nothing of the job's held."""

STRAGGLER = """
import os, sys, time
import torch
import torch.distributed as dist
import computewatch
torch.set_num_threads(1)
SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
VARIANT = sys.argv[2] if len(sys.argv) > 2 else "slow"
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(64, 8)
dist.barrier()
with computewatch.track(name="job") as run:
    t0, c0 = time.monotonic(), time.process_time()
    for i in range(int(60 * SCALE)):
        x = torch.randn(16, 64)
        time.sleep(0.02)  # the step's own work, the same on every rank
        if rank == 1 and VARIANT == "slow":
            time.sleep(0.05)  # rank 1 is slower: its node is shared, say
        loss = model(x).pow(2).mean()
        loss.backward()
        with run.phase("comm"):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        model.zero_grad()
        run.step(samples=16)
    if rank == 0:
        print("LOOP", time.monotonic() - t0, time.process_time() - c0, flush=True)
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
"""

EXPECTED = {
    "serial_loader": "data_starvation",
    "io_waits": "data_starvation",
    "blocking_checkpoint": "outlier_steps",
    "stragglers": "stragglers",
    "tiny_batch": "low_mfu",
    "device_sync": "host_device_sync",
    "idle_allocation": "idle_allocation",
    "throttled_gpu": "gpu_throttling",
    "healthy": None,
}
SCENARIOS = tuple(EXPECTED)
GPU_SCENARIOS = frozenset(GPU_SCRIPTS)

# The idle stage lasts seconds here, not the minutes of a real one: the idle rule is told so.
CONFIGS = {"idle_allocation": "[diagnosis]\nidle_min_seconds = 2.0\n"}
SMALL = """[diagnosis]
min_seconds_at_stake = 0.1
idle_min_seconds = 0.5
throttle_share = 0.05
"""
"""The small versions' configuration: their symptoms last tenths of a second, not seconds."""


@dataclass
class Outcome:
    """One scenario over its repetitions: what the diagnoses of the slow variant said, and what
    fixing it did (medians over the repetitions; each repetition runs slow then fixed)."""

    name: str
    expected: str | None
    tops: list[str | None]
    predicted: list[float]  # the top finding's saving, seconds, per repetition
    lows: list[float]
    highs: list[float]
    fix: str
    slow: list[tuple[float, float]]  # (wall, CPU) of the slow loop per repetition
    fixed: list[tuple[float, float]]
    findings: list[list[dict[str, Any]]] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)  # the load average at each repetition's start

    @property
    def top(self) -> str | None:
        """The top finding of most repetitions."""
        return max(set(self.tops), key=self.tops.count, default=None)

    @property
    def measured(self) -> float:
        """Median over the repetitions of the slow loop less the fixed loop (paired)."""
        return median([a[0] - b[0] for a, b in zip(self.slow, self.fixed, strict=True)])

    @property
    def measured_cpu(self) -> float:
        return median([a[1] - b[1] for a, b in zip(self.slow, self.fixed, strict=True)])

    @property
    def prediction(self) -> tuple[float, float, float]:
        """Median predicted saving, low and high over the repetitions."""
        return median(self.predicted), median(self.lows), median(self.highs)

    @property
    def big(self) -> list[str]:
        """For the healthy job: the findings with a saving above 5% of the run, by repetition
        (``step_regression (7%, rep 2)``)."""
        return [f"{f['id']} ({f['saving']['fraction']:.0%}, rep {i + 1})"
                for i, fs in enumerate(self.findings) for f in fs
                if (f["saving"]["fraction"] or 0) > 0.05]  # fmt: skip

    @property
    def top_right(self) -> bool:
        if self.expected is None:
            return all(f["saving"]["fraction"] is None or f["saving"]["fraction"] <= 0.05
                       for fs in self.findings for f in fs)  # fmt: skip
        return self.top == self.expected

    @property
    def error(self) -> float | None:
        """|predicted - measured| / measured (None for the healthy job)."""
        if self.expected is None or self.measured <= 0:
            return None
        return abs(self.prediction[0] - self.measured) / self.measured

    @property
    def inside(self) -> bool:
        _, low, high = self.prediction
        return low <= self.measured <= high


def median(values: list[float]) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "computewatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "computewatch"]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def _free_port() -> int:
    from common import free_loopback_port

    return free_loopback_port()


def _run(
    home: Path, name: str, scale: float, variant: str, workers: int = 1, tag: str = ""
) -> tuple[float, float]:
    """Run one variant under ``computewatch run`` (named ``NAME-VARIANT[TAG]``); its loop's
    wall and CPU time."""
    env = dict(os.environ, COMPUTEWATCH_HOME=str(home), OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", TMPDIR=str(home))  # fmt: skip
    env.pop("COMPUTEWATCH_RUN_ID", None)
    env.pop("COMPUTEWATCH_SPOOL", None)
    script = home / f"{name}.py"
    script.write_text(textwrap.dedent(STRAGGLER if name == "stragglers" else SCRIPTS[name]))
    job: list[str] = [sys.executable, str(script)]
    if name == "stragglers":
        job = [*_torchrun(), "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", str(script)]  # fmt: skip
    gpu: list[str] = ["--gpu-backend", "none"]
    if name in GPU_SCENARIOS:
        from computewatch.testing.job_state import STATE_ENV, write_state  # the bench's fakes

        state = home / f"{name}-{variant}{tag}.gpu.json"
        write_state(state, INITIAL_DEVICE)
        env[STATE_ENV] = str(state)
        gpu = ["--gpu-backend", f"fake:{GPU_PRESET}"]
    cmd = [*_cli(), "run", "--quiet", "--interval", "0.25", *gpu,
           "--name", f"{name}-{variant}{tag}",
           "--", *job, str(scale), variant, str(workers)]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{name} {variant}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    loops = re.findall(r"^LOOP ([0-9.]+) ([0-9.]+)$", r.stdout, re.M)
    if not loops:
        raise RuntimeError(f"{name} {variant}: no LOOP line\n{r.stdout}\n{r.stderr}")
    return float(loops[-1][0]), float(loops[-1][1])


def _diagnosis(home: Path, run: str, config: Path | None = None) -> dict[str, Any]:
    env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
    more = ["--config", str(config)] if config is not None else []
    r = subprocess.run([*_cli(), "diagnose", run, "--json", *more], env=env, capture_output=True,
                       text=True, timeout=300, check=True)  # fmt: skip
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _config(home: Path, name: str, scale: float) -> Path | None:
    text = SMALL if scale < 0.5 else CONFIGS.get(name)
    if text is None:
        return None
    path = home / f"{name}.toml"
    path.write_text(text)
    return path


def diagnose_slow(name: str, scale: float, home: Path) -> dict[str, Any]:
    """Run the slow variant of ``name`` at ``scale`` under ``computewatch run`` in ``home`` and
    diagnose it (with :data:`SMALL` thresholds below a scale of 0.5): ``diagnose --json``."""
    _run(home, name, scale, "slow")
    return _diagnosis(home, f"{name}-slow", _config(home, name, scale))


def run_scenario(name: str, scale: float = 1.0, reps: int = 1, home: Path | None = None) -> Outcome:
    """``reps`` times: the slow variant, its diagnosis, then the fixed variant with the top
    finding's own parameters (loader workers) where it gives them."""
    o = Outcome(name, EXPECTED[name], [], [], [], [], "", [], [])
    with tempfile.TemporaryDirectory(prefix=f"cw-{name}-") as tmp:
        where = home or Path(tmp)
        config = _config(where, name, scale)
        for rep in range(reps):
            tag = f"-{rep}"
            o.loads.append(_load())
            o.slow.append(_run(where, name, scale, "slow", tag=tag))
            diag = _diagnosis(where, f"{name}-slow{tag}", config)
            found = diag["findings"]
            # A step-time regression is the symptom a cause arriving mid-run leaves in any job
            # (the throttled GPU, another job on the machine): the cause must lead the rest.
            causes = [f for f in found if f["id"] != "step_regression"]
            top = causes[0] if causes else None
            fix = top["saving"]["fix"] if top else ""
            m = re.search(r"num_workers=(\d+)", fix)
            o.fixed.append(_run(where, name, scale, "fixed", int(m.group(1)) if m else 1, tag))
            s = top["saving"] if top else {"seconds": 0.0, "low_seconds": 0.0, "high_seconds": 0.0}
            o.tops.append(top["id"] if top else None)
            o.predicted.append(s["seconds"])
            o.lows.append(s["low_seconds"])
            o.highs.append(s["high_seconds"])
            o.fix = o.fix or fix
            o.findings.append(found)
            o.durations.append(diag["run"]["duration_seconds"] or 0.0)
    return o


def _fix_of(findings: list[dict[str, Any]], top: str | None) -> str:
    """The fix the top finding of one repetition gave (its workers), ``-`` without one."""
    fix = next((f["saving"]["fix"] for f in findings if f["id"] == top), "-")
    m = re.search(r"num_workers=(\d+)", fix)
    return f"{m.group(1)} worker(s)" if m else fix


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run(quick: bool, reps: int = 3, only: tuple[str, ...] = ()) -> Any:
    from common import Section

    s = Section("Diagnosis on jobs whose cause is known (bench_diagnosis.py)")
    s.add(
        "Each scenario injects one cause into a small PyTorch job on CPU (one intra-op thread), "
        "runs it under `computewatch run`, diagnoses it, then runs its fixed variant (the top "
        "finding's own parameters applied: its loader workers; or the cause removed). The "
        "causes that live on a GPU run on a fake A100 that reports what the job's simulated "
        "device does (busy, idle, throttled: `computewatch.testing.job_state`). *Measured* is "
        "the median over the repetitions of the slow loop's wall time less the fixed loop's "
        "(each repetition runs slow then fixed, as the jobs print them), *predicted* the median "
        f"of the top findings' `saving.seconds` and ranges. {reps} repetition(s) of each, on a "
        "2-core virtual machine shared with other work (the share other processes used and the "
        "load are below). The healthy job's two variants are the same job: their difference is "
        "the noise of a measurement here.",
        "",
    )
    rows = []
    outcomes = []
    for name in only or SCENARIOS:
        t0 = time.monotonic()
        load = _load()
        o = run_scenario(name, 0.5 if quick else 1.0, reps)
        outcomes.append(o)
        err = o.error
        pred, low, high = o.prediction
        rows.append((
            name, o.expected or "(none)",
            o.top or ("; ".join(o.big) if o.expected is None and o.big else "(none)"),
            "yes" if o.top_right else "no",
            f"{median([w for w, _ in o.slow]):.2f}", f"{median([w for w, _ in o.fixed]):.2f}",
            f"{o.measured:.2f}", f"{o.measured_cpu:.2f}", f"{pred:.2f} ({low:.2f}-{high:.2f})",
            "n/a" if err is None else f"{err:.0%}",
            "n/a" if o.expected is None else ("yes" if o.inside else "no"),
            o.fix or "-", load, f"{time.monotonic() - t0:.0f}",
        ))  # fmt: skip
    s.table(
        ("scenario", "injected", "top finding", "right", "slow loop s", "fixed loop s",
         "measured s", "measured CPU s", "predicted s (range)", "error / measured",
         "inside range", "fix applied", "load at start", "wall s"),
        rows,
    )  # fmt: skip
    s.add("Each repetition (slow, then fixed), the top finding's saving against what the fix "
          "measured:", "")  # fmt: skip
    s.table(
        ("scenario", "rep", "top finding", "predicted s (range)", "measured s",
         "fix applied", "load at start"),
        [(o.name, i + 1, o.tops[i] or "(none)",
          f"{o.predicted[i]:.2f} ({o.lows[i]:.2f}-{o.highs[i]:.2f})",
          f"{o.slow[i][0] - o.fixed[i][0]:.2f}",
          _fix_of(o.findings[i], o.tops[i]), o.loads[i] if i < len(o.loads) else "")
         for o in outcomes for i in range(len(o.slow))],
    )  # fmt: skip
    causes = [o for o in outcomes if o.expected is not None]
    right = sum(o.top_right for o in outcomes)
    close = sum(1 for o in causes if o.error is not None and o.error <= 0.25 and o.inside)
    s.target("top finding right in every scenario", f"{right} of {len(outcomes)}",
             right == len(outcomes))  # fmt: skip
    s.target("|predicted - measured| <= 25% of measured and measured in [low, high]",
             f"{close} of {len(causes)}", close >= len(causes) - 1)  # fmt: skip
    return s


def main() -> None:
    import argparse  # only the command line needs it

    from common import cli_main

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each scenario")
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, default=[],
                    help="only this scenario (repeatable)")  # fmt: skip
    a, rest = ap.parse_known_args()
    if "-h" in rest or "--help" in rest:
        ap.print_help()  # this parser's options; cli_main prints --quick's
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    sys.argv[1:] = rest
    cli_main(lambda quick: run(quick, a.reps, tuple(a.scenario)), __doc__)


if __name__ == "__main__":
    main()
