"""`tbgen test --soak` against planted faults, in a real server: a python model that keeps every request (its
stub's memory grows), a python model that gets slower with every call (its latency drifts) and a C++ backend
that loses 64 bytes per call (the server's memory grows) are each flagged, in the right process and with a
slope; the clean models served beside them (a plain one, a decoupled one over streams) pass; the report's
files are written; nothing is left running.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from conftest import (
    check_results,
    new_project,
    replace_once,
    run_tbgen,
    triton_processes_of,
    triton_sources_or_skip,
)

pytestmark = pytest.mark.slow

SOAK = "20s"


def _planted_python(project):
    """Two models beside the template's add_sub: grows keeps four copies of every request's INPUT0 forever,
    slows sleeps a few microseconds longer on every call than on the one before; and a clean decoupled model,
    streams (its soak over gRPC streams)."""
    for name, *template in (
        ("grows",),
        ("slows",),
        ("streams", "-t", "decoupled-backend", "--set", "language=python"),
    ):
        added = run_tbgen("add", "model", name, *template, "--project", str(project))
        assert added.returncode == 0, added.stdout + added.stderr
    grows = project / "model_repository" / "grows" / "1" / "compute.py"
    replace_once(grows, "# ---- Your logic ----\n", "# ---- Your logic ----\n_KEPT = []\n\n\n")
    replace_once(
        grows, "    in0 = inputs[INPUT0]\n", "    in0 = inputs[INPUT0]\n    _KEPT.append([in0.copy()] * 4)\n"
    )
    slows = project / "model_repository" / "slows" / "1" / "compute.py"
    replace_once(slows, "import numpy as np\n", "import time\n\nimport numpy as np\n")
    replace_once(slows, "# ---- Your logic ----\n", "# ---- Your logic ----\n_CALLS = [0]\n\n\n")
    replace_once(
        slows,
        "    in0 = inputs[INPUT0]\n",
        "    in0 = inputs[INPUT0]\n    _CALLS[0] += 1\n    time.sleep(_CALLS[0] * 4e-6)\n",
    )


def test_soak_flags_a_growing_list_and_a_growing_latency_in_their_own_models(tmp_path, server_or_skip):
    project = new_project(tmp_path, "python-backend")
    _planted_python(project)
    junit = tmp_path / "soak.xml"
    # 25 s: a drift is judged over at least 14 s after the 5 s warm-up (growth.DRIFT_MIN_STRETCH_S)
    run = run_tbgen("test", str(project), "--soak", "25s", "--no-unit", "--junit-xml", str(junit))
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    results = check_results(run.stdout)
    assert results["soak memory: python stub grows grows_0_0"] == "FAIL", out
    leak = re.search(
        r"soak memory: python stub grows grows_0_0  [\d.]+ s\n    a leak: \+([\d,.]+) KiB per 1,000", out
    )
    assert leak and float(leak.group(1).replace(",", "")) > 500, out  # 4 x 16 floats kept: ~1 KiB a request
    assert results["soak slows"] == "FAIL" and "latency drifts" in out, out
    for clean in ("soak add_sub", "soak grows", "soak streams", "soak memory: tritonserver"):
        assert results[clean] == "pass", out
    for stub in ("add_sub add_sub_0_0", "streams streams_0_0"):
        assert results[f"soak memory: python stub {stub}"] == "pass", out
    failed = {
        case.get("name")
        for case in ET.parse(junit).getroot().iter("testcase")
        if case.find("failure") is not None
    }
    assert failed == {"soak memory: python stub grows grows_0_0", "soak slows"}, failed
    report = project / "build" / "tbgen" / "soak"
    assert {p.name for p in report.iterdir()} >= {"report.html", "memory.png", "latency.png", "samples.json"}
    assert f"soak report: {report / 'report.html'}" in out
    assert triton_processes_of(project) == []


@pytest.mark.cpp
def test_soak_flags_a_cpp_backend_that_loses_memory_in_the_server(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend")
    marker = "  for (size_t i = 0; i < batch_size * a.row_size; ++i) {\n"
    replace_once(
        project / "src" / "compute.cc",
        marker,
        "  static char* volatile lost = nullptr;  // planted: 64 bytes lost on every call\n"
        "  lost = new char[64];\n  lost[0] = 1;\n" + marker,
    )
    run = run_tbgen("test", str(project), "--soak", SOAK, "--no-unit")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    results = check_results(run.stdout)
    assert results["soak memory: tritonserver"] == "FAIL" and results["soak"] == "pass", out
    slope = re.search(
        r"soak memory: tritonserver  [\d.]+ s\n    a leak: \+([\d.]+) KiB per 1,000 requests \(\+", out
    )
    # 64 bytes and the allocator's own 16 a call: about 80 bytes a request
    assert slope and 50 <= float(slope.group(1)) <= 200, out
    assert triton_processes_of(project) == []
