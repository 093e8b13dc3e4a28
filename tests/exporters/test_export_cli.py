"""``agent --otlp``/``--emf`` and ``run --otlp``/``--emf`` end to end: the real CLI as a child
process, a local OTLP receiver decoding with opentelemetry-proto, EMF lines checked against
CloudWatch's documented format (with aws-embedded-metrics' own validators)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aws_embedded_metrics import validator
from aws_embedded_metrics.storage_resolution import StorageResolution
from aws_embedded_metrics.unit import Unit

UNITS = {u.value for u in Unit}


def check_emf(doc: dict[str, Any]) -> None:
    """One EMF document against the specification ("Specification: Embedded metric format")."""
    aws = doc["_aws"]
    assert isinstance(aws["Timestamp"], int) and aws["Timestamp"] > 1_600_000_000_000
    directives = aws["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for d in directives:
        validator.validate_namespace(d["Namespace"])
        assert isinstance(d["Dimensions"], list)
        for dset in d["Dimensions"]:
            assert len(dset) <= 30
            dims = {}
            for key in dset:
                assert isinstance(doc[key], str), key  # every dimension is a member
                dims[key] = doc[key]
            validator.validate_dimension_set(dims)
        assert 0 < len(d["Metrics"]) <= 100
        seen: dict[str, Any] = {}
        for m in d["Metrics"]:
            assert m["Unit"] in UNITS, m
            value = doc[m["Name"]]  # every metric is a member
            assert isinstance(value, (int, float))
            validator.validate_metric(m["Name"], value, m["Unit"], StorageResolution.STANDARD, seen)
            seen[m["Name"]] = StorageResolution.STANDARD


def test_agent_once_pushes_otlp_and_writes_emf(cw: Any, otlp_receiver: Any, tmp_path: Path) -> None:
    emf = tmp_path / "emf.log"
    # --otlp-timeout: a loaded machine's last export may take more than the default 1 s
    r = cw.ok(
        "agent", "--once", "--interval", "0.2", "--gpu-backend", "fake:2xH100-SXM",
        "--node", "n1", "--otlp", otlp_receiver.url, "--emf", str(emf), "--otlp-timeout", "60",
    )  # fmt: skip
    assert "computewatch_gpu_sm_active_ratio" in r.stdout  # the exposition, as without flags
    otlp_receiver.wait(lambda rec: rec.points("hw.gpu.utilization"))
    utils = otlp_receiver.points("hw.gpu.utilization")
    assert {p.attributes["computewatch.gpu_index"] for p in utils} == {"0", "1"}
    assert all(p.attributes["computewatch.simulated"] == "true" for p in utils)
    assert all("host.name" not in p.attributes for p in utils)
    assert all(p.resource["host.name"] == "n1" for p in utils)
    assert otlp_receiver.points("computewatch.gpu.tensor_active")
    assert otlp_receiver.points("hw.energy")
    docs = [json.loads(line) for line in emf.read_text().splitlines()]
    assert docs
    for d in docs:
        check_emf(d)
    gpu_docs = [d for d in docs if "computewatch_gpu_power_watts" in d]
    assert {d["gpu_index"] for d in gpu_docs} == {"0", "1"}
    # counters: the increase since the previous tick, named without _total
    energy = [d for d in docs if "computewatch_gpu_energy_joules" in d]
    assert energy and all(d["computewatch_gpu_energy_joules"] >= 0 for d in energy)
    assert not any("computewatch_gpu_energy_joules_total" in d for d in docs)


def test_run_otlp_pushes_the_runs_metrics(
    cw: Any, otlp_receiver: Any, make_script: Any, tmp_path: Path
) -> None:
    script = make_script(
        "job.py",
        """
        import time, computewatch
        with computewatch.track() as run:
            for _ in range(30):
                time.sleep(0.02)
                run.step()
        """,
    )
    emf = tmp_path / "run-emf.log"
    cw.ok(
        "run", "--quiet", "--interval", "0.2", "--otlp", otlp_receiver.url, "--emf", str(emf),
        "--otlp-timeout", "60", "--", sys.executable, str(script),
    )  # fmt: skip
    otlp_receiver.wait(lambda rec: rec.points("computewatch.job.steps"))
    run_id = cw.show()["id"]
    steps = otlp_receiver.points("computewatch.job.steps")
    assert all(p.attributes["computewatch.job"] == run_id for p in steps)
    assert all(p.resource["host.name"] and "host.name" not in p.attributes for p in steps)
    assert max(p.value for p in steps) == 30  # the last tick was exported at the end
    assert steps[-1].monotonic and steps[-1].kind == "sum"
    docs = [json.loads(line) for line in emf.read_text().splitlines()]
    for d in docs:
        check_emf(d)
    assert any(d.get("job") == run_id for d in docs)


def test_bad_otlp_url_and_emf_path_are_usage_errors(cw: Any, tmp_path: Path) -> None:
    r = cw("run", "--otlp", "localhost:4318", "--", "true")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "computewatch: --otlp: not an http(s) URL: 'localhost:4318' (e.g. http://127.0.0.1:4318)"
    ]
    r = cw("agent", "--once", "--gpu-backend", "none", "--emf", str(tmp_path / "no" / "x.log"))
    assert r.returncode == 2
    assert "--emf: cannot open" in r.stderr and "Traceback" not in r.stderr
