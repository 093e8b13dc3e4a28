"""Make the README's pictures from real runs: a run's HTML report and the dashboard's Runs page,
in headless Chromium (Debian's /usr/bin/chromium through Playwright; no browser is downloaded).

    python scripts/screenshots.py            # writes docs/images/*.png and the manifest

Everything runs here, on 127.0.0.1, in a throw-away data home: a few short monitored runs of
examples/train.py (real processes, real measurements), their report, a `computewatch server` on
a free port that the runs are pushed to, and a browser logged in to it. The manifest
(docs/images/screenshots.json) records a hash of every page source the pictures show, so that
tests/test_readme_images.py says when the pages changed and the pictures must be made again.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
MANIFEST = IMAGES / "screenshots.json"
CHROMIUM = "/usr/bin/chromium"
WIDTH = 1280
PAGE_SOURCES = (
    "src/computewatch/server/templates",
    "src/computewatch/server/static",
    "src/computewatch/views/html",
)
"""What the pictures show: a change under these makes the manifest's hash differ."""


def sources_hash(root: Path = ROOT) -> str:
    """SHA-256 over the page sources' paths and contents, in a stable order."""
    h = hashlib.sha256()
    for top in PAGE_SOURCES:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode() + b"\0")
                h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cw(env: dict[str, str], *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "computewatch", *args],
        env=env,
        cwd=ROOT,
        text=True,
        capture_output=True,
        check=True,
        timeout=600,
        **kw,  # type: ignore[arg-type]
    )


def _runs(env: dict[str, str]) -> None:
    examples = [
        ("resnet-bs64", ["team=vision", "model=resnet50"], "3", "64"),
        ("bert-finetune", ["team=nlp", "model=bert-base"], "2", "32"),
        ("llama-eval", ["team=nlp", "stage=eval"], "1", "128"),
    ]
    for name, tags, epochs, batch in examples:
        tag_args = [a for t in tags for a in ("--tag", t)]
        steps = str(int(epochs) * 1000)
        _cw(
            env, "run", "--quiet", "--name", name, *tag_args, "--region", "FR",
            "--total-steps", steps, "--", "python", "examples/train.py",
            "--epochs", epochs, "--batch-size", batch,
        )  # fmt: skip


def _wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not start within 60 s")


def main() -> int:
    # Playwright is a test dependency: imported when the script runs.
    from playwright.sync_api import sync_playwright

    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cw-shots-") as tmp:
        home = Path(tmp) / "home"
        # `python` as a user types it (the interpreter running this script first on PATH)
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = {**os.environ, "COMPUTEWATCH_HOME": str(home), "PATH": path}
        for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL", "COMPUTEWATCH_SERVER"):
            env.pop(k, None)
        _runs(env)
        report = Path(tmp) / "report.html"
        _cw(env, "report", "resnet-bs64", "-o", str(report))
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        db = f"sqlite:///{Path(tmp) / 'server.db'}"
        server = subprocess.Popen(
            [sys.executable, "-m", "computewatch", "server", "--db", db, "--listen",
             f"127.0.0.1:{port}", "--log-level", "warning"],
            env=env, cwd=ROOT, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_healthy(url, server)
            token = _cw(
                env, "server", "token", "create", "--db", db, "--team", "ml", "--scope", "admin"
            ).stdout.strip()
            _cw({**env, "COMPUTEWATCH_TOKEN": token}, "push", "--server", url)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
                )
                page = browser.new_page(viewport={"width": WIDTH, "height": 900})
                page.goto(report.as_uri(), wait_until="load")
                page.wait_for_timeout(500)  # the charts draw after load
                page.screenshot(path=str(IMAGES / "report.png"))
                page.goto(f"{url}/login", wait_until="load")
                page.fill("input[name=token]", token)
                with page.expect_navigation():
                    page.click("button[type=submit]")
                page.goto(f"{url}/runs", wait_until="load")
                page.screenshot(path=str(IMAGES / "dashboard-runs.png"))
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    MANIFEST.write_text(
        json.dumps(
            {
                "made_by": "python scripts/screenshots.py",
                "width": WIDTH,
                "images": ["report.png", "dashboard-runs.png"],
                "page_sources": list(PAGE_SOURCES),
                "sources_sha256": sources_hash(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {IMAGES / 'report.png'}, {IMAGES / 'dashboard-runs.png'} and {MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
