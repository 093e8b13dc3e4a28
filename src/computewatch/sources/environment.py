"""The reproducibility record of a run: what ran, where, from which code, on what software and
hardware. Begun when a run starts (``git``'s calls run as processes of their own while the
command runs), finished when it ends, and stored with the run (``Store.set_meta(key,
"environment", ...)``).

Nothing here imports a framework: PyTorch's CUDA/ROCm build is read from its installed
``torch/version.py`` as text (importing torch costs the supervisor a second or more), the
NVIDIA driver from ``/proc/driver/nvidia/version``, ROCm from ``/opt/rocm/.info/version``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from computewatch.escape import clean_text
from computewatch.redact import (
    MARKER,
    configured_names,
    is_secret_name,
    redact_argv,
    redact_text,
)

__all__ = [
    "DIFF_MAX_BYTES",
    "FRAMEWORKS",
    "GIT_GRACE",
    "GIT_TIMEOUT",
    "Capture",
    "Environment",
    "GitState",
    "capture_environment",
    "diff_text",
    "git_state",
    "redact_config",
]

GIT_TIMEOUT = 5.0
"""Seconds each ``git`` call may take from its start (a huge repository, a hung network
filesystem)."""
GIT_GRACE = 1.0
"""Seconds a call is still read for when the record is taken after :data:`GIT_TIMEOUT` (a run
longer than it): a call that has exited is read whole, one blocked on a full pipe (a large
diff) is drained; one still running after this is killed."""
DIFF_MAX_BYTES = 256_000
"""The most of ``git diff HEAD`` the record keeps (redacted); the hash covers the whole."""

FRAMEWORKS = (
    "torch", "lightning", "pytorch-lightning", "transformers", "accelerate", "deepspeed",
    "tensorflow", "keras", "jax", "jaxlib", "flax", "numpy", "vllm", "triton",
)  # fmt: skip
"""Distributions whose versions are listed apart (the whole list is in ``packages``)."""


class GitState(TypedDict):
    """The code's version: commit, branch (None when detached), whether the tree had changes
    against HEAD (tracked files, and untracked files not ignored), and a SHA-256 of
    ``git diff HEAD`` (so two runs from the same dirty tree can be told apart), and the diff
    itself: redacted (computewatch.redact), at most :data:`DIFF_MAX_BYTES` (``diff_bytes`` is
    the whole diff's size, ``diff_truncated`` says it was cut). Records stored before the diff
    was kept lack the last three."""

    root: str
    commit: str | None
    branch: str | None
    dirty: bool
    diff_sha256: str | None
    untracked: int
    diff: NotRequired[str | None]
    diff_bytes: NotRequired[int]
    diff_truncated: NotRequired[bool]


class Accelerators(TypedDict):
    cuda: str | None  # the CUDA version PyTorch was built with
    rocm: str | None  # HIP/ROCm version PyTorch was built with, else /opt/rocm's
    nvidia_driver: str | None
    cudnn: str | None


class Environment(TypedDict):
    argv: list[str]
    cwd: str
    git: GitState | None
    git_why: str | None
    python: str
    python_executable: str
    platform: str
    packages: dict[str, str]
    frameworks: dict[str, str]
    accelerators: Accelerators
    hardware: dict[str, Any]


def _start_git(cwd: str, *args: str) -> subprocess.Popen[bytes] | None:
    try:
        return subprocess.Popen(
            ["git", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _finish(proc: subprocess.Popen[bytes] | None, deadline: float) -> bytes | None:
    """What ``proc`` printed, whatever its exit status; None if it could not be started or
    read, or outlived ``deadline`` (then killed)."""
    if proc is None:
        return None
    try:
        # communicate(timeout=0) raises TimeoutExpired even for a call that exited long ago:
        # the caller's deadline is never in the past (GitProbe.state moves it on)
        out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    return out


def _output(proc: subprocess.Popen[bytes] | None, deadline: float) -> bytes | None:
    """What ``proc`` printed, None if it failed or outlived ``deadline`` (then killed)."""
    out = _finish(proc, deadline)
    return out if proc is not None and proc.returncode == 0 else None


def _text(out: bytes | None) -> str | None:
    return None if out is None else out.decode("utf-8", "backslashreplace")


class GitProbe:
    """The ``git`` calls that give a tree's state, started side by side at once (a run's fixed
    cost: benchmarks/bench_end.py) and read by :meth:`state`, each within :data:`GIT_TIMEOUT`
    of the start. No thread: the calls are processes of their own."""

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._deadline = time.monotonic() + GIT_TIMEOUT
        # top level, commit and branch in one call ("HEAD" for the branch: detached)
        self._head = _start_git(cwd, "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD")
        self._diff = _start_git(cwd, "diff", "HEAD", "--no-color", "--no-ext-diff")
        self._status = _start_git(cwd, "status", "--porcelain", "--untracked-files=normal")

    def state(self) -> GitState | str:
        """The git state of the tree holding ``cwd``, or why there is none. Read after
        :data:`GIT_TIMEOUT` (a long run), the calls get :data:`GIT_GRACE` more: one that has
        exited is read whole, one still blocked (a hung filesystem) is killed."""
        cwd = self._cwd
        deadline = max(self._deadline, time.monotonic() + GIT_GRACE)
        head = _finish(self._head, deadline)
        ok = self._head is not None and self._head.returncode == 0
        found = ((_text(head) if ok else None) or "").splitlines()
        diff = _output(self._diff, deadline)
        status = _text(_output(self._status, deadline)) or ""
        commit: str | None
        branch: str | None
        if len(found) == 3:
            root, commit, branch = found[0], found[1], found[2] if found[2] != "HEAD" else None
        else:  # no commit yet (HEAD names nothing), or not a work tree at all
            # outside a work tree the first call printed nothing (rev-parse stops before its
            # first argument) and a second would fail alike: asked only when it printed the top
            # level before failing on HEAD (an unborn branch)
            top = (
                _text(_output(_start_git(cwd, "rev-parse", "--show-toplevel"), deadline))
                if head is not None and head.strip()
                else None
            )
            if top is None:
                if self._head is None:
                    return "git is not installed (or could not be started)"
                if self._head.returncode is not None and self._head.returncode < 0:
                    return f"git did not answer within {GIT_TIMEOUT:g} s of the start (killed)"
                return "not a git work tree (or git is not installed)"
            root = top
            branch = _text(
                _output(_start_git(cwd, "symbolic-ref", "--short", "-q", "HEAD"), deadline)
            )
            commit, diff = None, None
        lines = [ln for ln in status.splitlines() if ln.strip()]
        kept, truncated = diff_text(diff) if diff else (None, False)
        return GitState(
            root=root.strip(),
            commit=commit.strip() if commit else None,
            branch=branch.strip() or None if branch else None,
            dirty=bool(lines),
            diff_sha256=_sha256(diff) if diff else None,
            untracked=sum(1 for ln in lines if ln.startswith("??")),
            diff=kept,
            diff_bytes=len(diff) if diff else 0,
            diff_truncated=truncated,
        )

    def close(self) -> None:
        """End the calls not read (the record was not wanted after all): killed and reaped."""
        for proc in (self._head, self._diff, self._status):
            if proc is not None and proc.returncode is None:
                try:
                    proc.kill()
                    proc.communicate()
                except (OSError, subprocess.SubprocessError, ValueError):
                    pass


def _sha256(data: bytes) -> str:
    import hashlib  # only for a diff: OpenSSL's load, ~10 ms, off every run outside a tree

    return hashlib.sha256(data).hexdigest()


_ASSIGNED = re.compile(r"^([+\- ]?\s*[\"']?)([A-Za-z_][\w.\-]*)([\"']?\s*[:=]\s*)(\S.*)$")
"""A line of a diff that sets a name: ``+API_KEY = "x"``, ``-  password: x``."""


def _redact_diff_line(line: str, names: tuple[str, ...]) -> str:
    body = line.rstrip("\r\n")
    end = line[len(body) :]
    m = _ASSIGNED.match(body)
    if m and is_secret_name(m[2], names):
        return f"{m[1]}{m[2]}{m[3]}{MARKER}{end}"
    return redact_text(body, names) + end


def diff_text(diff: bytes, limit: int = DIFF_MAX_BYTES) -> tuple[str, bool]:
    """``git diff``'s output as the record keeps it: decoded (undecodable bytes escaped), cut at
    a line end within ``limit`` bytes, each line redacted (a line that sets a secret's name
    keeps the name and loses the value); True when it was cut."""
    truncated = len(diff) > limit
    if truncated:
        cut = diff.rfind(b"\n", 0, limit)
        diff = diff[: cut + 1 if cut > 0 else limit]
    names = configured_names()
    text = clean_text(diff.decode("utf-8", "backslashreplace"))
    return "".join(_redact_diff_line(ln, names) for ln in text.splitlines(keepends=True)), (
        truncated
    )


def git_state(cwd: str) -> GitState | str:
    """The git state of the tree holding ``cwd``, or why there is none."""
    return GitProbe(cwd).state()


def _packages() -> dict[str, str]:
    """Installed distributions and versions, from the names of the ``*.dist-info`` folders on
    ``sys.path`` (``name-version.dist-info``, PEP 427/376): a directory listing, where
    ``importlib.metadata`` would read every METADATA file (3x the time on a cold cache);
    ``*.egg-info`` and oddly named folders have their header read (:func:`_name_version`)."""
    out: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            stem = name[: -len(".dist-info")]
            if name.endswith(".dist-info") and stem.count("-") == 1:
                dist, version = stem.split("-")
                out.setdefault(dist.replace("_", "-").lower(), version)
            elif name.endswith((".dist-info", ".egg-info")):
                found = _name_version(os.path.join(entry, name))
                if found is not None:
                    out.setdefault(found[0].replace("_", "-").lower(), found[1])
    return dict(sorted(out.items()))


def _name_version(folder: str) -> tuple[str, str] | None:
    """``Name`` and ``Version`` from the header of a distribution's ``METADATA`` (dist-info) or
    ``PKG-INFO`` (egg-info): RFC 822 headers, read as text (``importlib.metadata`` would import
    the email package, ~8 ms, for two lines)."""
    fields: dict[str, str] = {}
    # an old-style egg-info is a single file holding the headers itself
    files = [folder] if os.path.isfile(folder) else [
        os.path.join(folder, "METADATA"), os.path.join(folder, "PKG-INFO")
    ]  # fmt: skip
    for file in files:
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break  # the headers end at the first empty line
                    key, sep, value = line.partition(":")
                    if sep and key in ("Name", "Version"):
                        fields.setdefault(key, value.strip())
        except OSError:
            continue
        break
    name, version = fields.get("Name"), fields.get("Version")
    return (name, version) if name and version else None


_VERSION_LINE = re.compile(r"^(cuda|hip|cudnn)\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]*)['\"]?", re.M)


def _torch_build() -> dict[str, str]:
    """``cuda``/``hip``/``cudnn`` of the installed PyTorch, read from its ``version.py``, found
    with ``find_spec`` (which locates the package without importing it; its RECORD file, which
    ``importlib.metadata.files`` reads, is 100 ms of parsing)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.origin:
        return {}
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            text = f.read()
    except OSError:
        return {}
    return {k: v for k, v in _VERSION_LINE.findall(text) if v and v != "None"}


def _read_first(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _accelerators() -> Accelerators:
    build = _torch_build()
    driver = _read_first("/proc/driver/nvidia/version")
    if driver is not None:
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9.]+)", driver)
        driver = m.group(1) if m else driver
    rocm = build.get("hip") or _read_first("/opt/rocm/.info/version")
    return Accelerators(
        cuda=build.get("cuda"), rocm=rocm, nvidia_driver=driver, cudnn=build.get("cudnn")
    )


_HARDWARE_KEYS = ("hostname", "cpu_model", "logical_cpus", "allowed_cpus", "memory_bytes", "os")


_PLATFORM_CHARS = str.maketrans(
    {" ": "_", "/": "-", "\\": "-", ":": "-", ";": "-", '"': "-", "(": "-", ")": "-"}
)


def _libc() -> tuple[str, str]:
    """``platform.libc_ver()``: glibc's own answer (``os.confstr``) where it gives one, else
    the module's reading of the interpreter's file (musl and others)."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        found = None
    parts = (found or "").split()
    if len(parts) == 2:  # "glibc 2.39", as platform.libc_ver() reads it first
        return parts[0], parts[1]
    import platform  # no glibc answer: the interpreter's file, as platform.libc_ver() reads it

    return platform.libc_ver()


def _platform_text() -> str:
    """``platform.platform()`` without the processor, which on Linux it asks ``uname -p``
    for: a process started on every run. GNU ``uname -p`` prints ``unknown`` or, patched
    (Fedora), the machine, both of which ``platform.platform()`` leaves out, so the text is the
    same (``Linux-6.8.0-x86_64-with-glibc2.39``) but where a patched ``uname -p`` names the CPU
    (Gentoo). Elsewhere ``platform.platform()`` itself (CPython 3.11, Lib/platform.py)."""
    if sys.platform != "linux":
        import platform  # elsewhere only (~3 ms): glibc says its version itself

        return platform.platform()
    u = os.uname()
    lib, version = _libc()
    parts = (u.sysname, u.release, u.machine, "with", lib + version)
    text = "-".join(p.strip() for p in parts if p).translate(_PLATFORM_CHARS)
    text = text.replace("unknown", "")
    while "--" in text:
        text = text.replace("--", "-")
    return text.rstrip("-")


def hardware_of(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The hardware inventory from the run's host facts: CPU, memory and each GPU."""
    out: dict[str, Any] = {k: facts[k] for k in _HARDWARE_KEYS if k in facts}
    gpus = facts.get("gpus")
    if isinstance(gpus, list):
        out["gpus"] = [
            {
                k: g.get(k)
                for k in (
                    "index",
                    "name",
                    "model",
                    "memory_total_bytes",
                    "power_limit_watts",
                    "simulated",
                )
            }
            for g in gpus
            if isinstance(g, dict)
        ]
    return out


def capture_environment(
    argv: Sequence[str],
    cwd: str,
    facts: Mapping[str, Any] | None = None,
    git: GitProbe | None = None,
) -> Environment:
    """The reproducibility record. ``argv`` is redacted (computewatch.redact: ``--password=``,
    ``--token X``, ``*_KEY=`` ...) before it is kept; ``git``: the tree's probe if already
    started."""
    state = (git or GitProbe(cwd)).state()
    packages = _packages()
    frameworks = {n: packages[n] for n in FRAMEWORKS if n in packages}
    return Environment(
        # undecodable bytes escaped as everywhere else (computewatch.escape), then redacted with
        # [privacy] redact's names too
        argv=redact_argv([clean_text(a) for a in argv], configured_names()),
        cwd=clean_text(cwd),
        git=state if not isinstance(state, str) else None,
        git_why=state if isinstance(state, str) else None,
        python=sys.version.split()[0],  # platform.python_version()'s reading, without platform
        python_executable=sys.executable,
        platform=_platform_text(),
        packages=packages,
        frameworks=frameworks,
        accelerators=_accelerators(),
        hardware=hardware_of(facts or {}),
    )


class Capture:
    """:func:`capture_environment`, begun at once (the ``git`` calls start: :class:`GitProbe`)
    and finished by :meth:`result`, which waits for git at most until :data:`GIT_TIMEOUT`
    after the start. Never raises: a failure is the record's ``None`` and a reason."""

    def __init__(self, argv: Sequence[str], cwd: str) -> None:
        self._argv = list(argv)
        self.cwd = cwd
        self.error: str | None = None
        self._git: GitProbe | None = None
        try:
            self._git = GitProbe(cwd)
        except Exception as e:  # the record is best-effort: the run never depends on it
            self.error = f"{type(e).__name__}: {e}"

    def close(self) -> None:
        """Drop the record: what still runs for it is ended (after :meth:`result`, nothing)."""
        if self._git is not None:
            self._git.close()

    def result(self, facts: Mapping[str, Any] | None = None) -> Environment | None:
        """The record, with the hardware inventory from ``facts``; None if it failed."""
        if self._git is None:
            return None
        try:
            return capture_environment(self._argv, self.cwd, facts, self._git)
        except Exception as e:  # the record is best-effort: the run never depends on it
            self.error = f"{type(e).__name__}: {e}"
            return None


_JSON_SCALARS = (str, int, float, bool, type(None))
MAX_CONFIG_DEPTH = 6


def redact_config(values: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """Hyperparameters made safe to store: a key that names a secret (``api_key``,
    ``WANDB_API_KEY``, ``password`` ...; computewatch.redact's rule) has its value replaced by
    ``***``, string values have URL passwords and ``KEY=secret`` pairs redacted, and values
    that are not JSON (a tensor, a class, NaN) become their ``repr`` (at most 200 characters)."""
    return {
        clean_text(str(k)): MARKER
        if is_secret_name(str(k), configured_names())
        else _config_value(v, depth)
        for k, v in values.items()
    }


def _config_value(v: Any, depth: int) -> Any:
    if isinstance(v, Mapping) and depth < MAX_CONFIG_DEPTH:
        return redact_config(v, depth + 1)
    if isinstance(v, list | tuple) and depth < MAX_CONFIG_DEPTH:
        return [_config_value(x, depth + 1) for x in v]
    if isinstance(v, str):
        return redact_text(clean_text(v), configured_names())
    if isinstance(v, float) and not math.isfinite(v):  # NaN, inf: not JSON
        return repr(v)
    if isinstance(v, _JSON_SCALARS):
        return v
    return repr(v)[:200]
