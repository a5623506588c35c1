"""The fuzzer without a server: deterministic plans, the requests they build, memory readings, the report."""

from __future__ import annotations

import os
import random
from collections import Counter

from triton_backend_gen.project import load_project
from triton_backend_gen.smoke import (
    FUZZ_KINDS,
    FuzzReport,
    fuzz_tensors,
    memory_limit,
    memory_of,
    plan_fuzz,
)

MIB = 1024 * 1024


def signature(cases):
    return [(c.index, c.kind, c.protocol, c.seed) for c in cases]


def test_a_plan_is_deterministic_for_its_seed(render_template):
    project = load_project(render_template("python-backend"))
    first, again, other = (
        plan_fuzz(project, 200, seed=7),
        plan_fuzz(project, 200, seed=7),
        plan_fuzz(project, 200, seed=8),
    )
    assert len(first) == 200 and signature(first) == signature(again)
    assert signature(first) != signature(other)
    assert {c.plan_seed for c in first} == {7}
    # Over 200 cases every kind (but the sequence models' own) and both protocols turn up.
    assert set(Counter(c.kind for c in first)) == set(FUZZ_KINDS) - {"sequence controls"}
    assert {c.protocol for c in first} == {"http", "grpc"}


def test_the_requests_of_a_case_are_rebuilt_identically(render_template):
    project = load_project(render_template("python-backend"))
    for case in plan_fuzz(project, 120, seed=3):
        if case.kind in ("valid", "cancelled mid-flight", "client disconnects", "malformed message"):
            continue
        model_a, wires_a = fuzz_tensors(case, random.Random(case.seed))
        model_b, wires_b = fuzz_tensors(case, random.Random(case.seed))
        assert model_a == model_b and wires_a == wires_b, case.label


def test_kinds_follow_the_model(render_template, tmp_path):
    decoupled = load_project(render_template("decoupled-backend", language="python"))
    kinds = Counter(c.kind for c in plan_fuzz(decoupled, 300))
    assert "batch too large" not in kinds  # max_batch_size 0
    assert "garbage values" not in kinds  # random DELAY values could stream for days
    # ... unless the reference bounds its streams (MAX_RESPONSES: the placeholder of a signature's own).
    streams = load_project(
        render_template(
            "decoupled-backend",
            project_name="streams",
            signature={
                "inputs": [{"name": "N", "datatype": "INT32", "dims": [1]}],
                "outputs": [{"name": "OUT", "datatype": "INT32", "dims": [1]}],
            },
        )
    )
    assert "garbage values" in {c.kind for c in plan_fuzz(streams, 300)}
    # HTTP refuses every inference request to a decoupled model: most cases go over gRPC streams.
    protocols = Counter(c.protocol for c in plan_fuzz(decoupled, 300))
    assert protocols["grpc"] > 2 * protocols["http"] > 0
    unbatched = load_project(
        render_template("python-backend", project_name="flat", max_batch_size=0, dims="-1")
    )
    assert "batch too large" not in {c.kind for c in plan_fuzz(unbatched, 300)}
    sequence = load_project(render_template("python-backend", project_name="seq", sequence="oldest"))
    kinds = Counter(c.kind for c in plan_fuzz(sequence, 300))
    assert kinds["sequence controls"] > 20 and "sequence controls" not in {
        c.kind for c in plan_fuzz(unbatched, 300)
    }


def test_malformed_tensors_are_malformed(render_template):
    project = load_project(render_template("python-backend"))  # FP32 [16], max_batch_size 8
    rng_cases = {c.kind: c for c in plan_fuzz(project, 300, seed=1)}
    model, wires = fuzz_tensors(rng_cases["batch too large"], random.Random(1))
    assert all(w.shape[0] > 8 for w in wires)
    model, wires = fuzz_tensors(rng_cases["empty tensor"], random.Random(1))
    assert all(w.shape[0] == 0 and w.payload == b"" for w in wires)
    model, wires = fuzz_tensors(rng_cases["huge tensor"], random.Random(1), huge_mib=16)
    assert max(len(w.payload) for w in wires) >= 16 * MIB
    model, wires = fuzz_tensors(rng_cases["unknown model"], random.Random(1))
    assert model != "add_sub"
    model, wires = fuzz_tensors(rng_cases["missing input"], random.Random(1))
    assert len(wires) == 1


def test_memory_of_reads_this_process_and_not_a_gone_one():
    assert memory_of(os.getpid()) > 1 * MIB
    assert memory_of(2**22 + 12345) is None  # above the kernel's default pid_max
    assert memory_limit(100 * MIB) > 125 * MIB + 64 * MIB


def test_report_passes_only_when_answered_healthy_and_memory_came_back():
    report = FuzzReport(
        seed=0,
        planned=3,
        requests=3,
        outcomes=Counter({"ok": 1, "http 400": 2}),
        rss_before=100 * MIB,
        rss_after=120 * MIB,
        rss_limit=200 * MIB,
    )
    assert report.passed and report.errors == Counter({"http 400": 2})
    assert "3 requests" in report.summary() and "100.0 MiB before, 120.0 MiB after" in report.summary()
    assert [r.passed for r in report.as_results()] == [True]
    report.rss_after = 300 * MIB
    assert not report.passed and "ABOVE the limit" in report.memory_line()
    report.rss_after, report.healthy = 120 * MIB, False
    assert not report.passed
    report.healthy = True
    report.failures.append("#4 valid [grpc]: OUTPUT0 differs")
    results = report.as_results()
    assert not report.passed and [r.passed for r in results] == [False, False]
    assert results[0].name == "fuzz #4 valid [grpc]"
