"""`tbgen bench` end to end against the embedded server: perf_analyzer and the asyncio generator, C++, Python
and decoupled models, the JSON report, --compare and the HTML report (--report)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import new_project, run_tbgen, triton_sources_or_skip

from triton_backend_gen.perf import BenchReport
from triton_backend_gen.perf.perf_analyzer import find_perf_analyzer

pytestmark = pytest.mark.slow


def perf_analyzer_or_skip() -> None:
    if find_perf_analyzer() is None:
        pytest.skip("perf_analyzer is not installed (tritonclient==2.51.0's wheel ships it)")


def bench(project, *args) -> BenchReport:
    out = project / "bench.json"
    result = run_tbgen(
        "bench", str(project), "--concurrency", "1,4", "--duration", "1s", "--json", str(out), *args
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return BenchReport.read(out)


def assert_measured(report: BenchReport) -> None:
    assert [level.concurrency for level in report.levels] == [1, 4]
    for level in report.levels:
        assert level.throughput > 0 and level.requests > 0 and level.errors == 0
        assert 0 < level.p50_us <= level.p90_us <= level.p99_us
        assert level.server_compute_us > 0  # from the statistics extension
        assert level.client_cpu > 0 and level.server_cpu > 0


def test_python_model_with_perf_analyzer_and_then_the_builtin_generator(tmp_path, server_or_skip):
    perf_analyzer_or_skip()
    project = new_project(tmp_path, "python-backend")
    first = bench(project)
    assert first.tool == "perf_analyzer" and first.model == "add_sub"
    assert_measured(first)

    second = run_tbgen(
        "bench",
        str(project),
        "--concurrency",
        "1,4",
        "--duration",
        "1s",
        "--tool",
        "builtin",
        "--compare",
        str(project / "bench.json"),
        "--report",
        str(project / "bench-out"),
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "tbgen (asyncio gRPC)" in second.stdout
    page = (project / "bench-out" / "bench-report.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and (project / "bench-out" / "bench.png").stat().st_size
    assert f"Report: {project / 'bench-out' / 'bench-report.html'}" in second.stdout
    assert "This run / " in second.stdout
    ratios = [line for line in second.stdout.splitlines() if re.fullmatch(r"\d+(  [\d.]+x){3}", line)]
    assert len(ratios) == 2, second.stdout  # a ratio per column at both levels


def test_decoupled_model_streams_four_responses_per_request(tmp_path, server_or_skip):
    project = new_project(tmp_path, "decoupled-backend", "language=python")
    report = bench(project, "--tool", "builtin")
    assert_measured(report)
    for level in report.levels:
        # The reference request streams 4 responses; each counted one, requests counted once.
        assert level.responses_per_s == pytest.approx(4 * level.throughput, rel=0.05)


def test_decoupled_model_under_perf_analyzer_streaming(tmp_path, server_or_skip):
    perf_analyzer_or_skip()
    project = new_project(tmp_path, "decoupled-backend", "language=python")
    report = bench(project)
    assert report.tool == "perf_analyzer"
    assert_measured(report)


@pytest.mark.cpp
def test_cpp_model_with_batches(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    perf_analyzer_or_skip()
    project = new_project(tmp_path, "cpp-backend")
    report = bench(project, "--batch-size", "4")
    assert report.batch_size == 4
    assert_measured(report)


@pytest.mark.parametrize(
    ("template", "args", "fragment"),
    [
        ("decoupled-backend", ["--protocol", "http"], "stream over gRPC only"),
        ("decoupled-backend", ["--batch-size", "2"], "does not batch"),
        ("python-backend", ["--batch-size", "9"], "above add_sub's max_batch_size 8"),
        ("python-backend", ["--model", "nope"], "has no model 'nope'"),
        ("python-backend", ["--concurrency", "0"], "--concurrency"),
        ("python-backend", ["--tool", "wrk"], "--tool 'wrk'"),
    ],
)
def test_bad_options_exit_2_before_any_server_starts(tmp_path, template, args, fragment):
    project = new_project(tmp_path, template)
    result = run_tbgen("bench", str(project), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in " ".join(result.stderr.split())
    assert not (project / "build" / "tbgen" / "server.log").exists()


def test_json_report_has_every_figure(tmp_path, server_or_skip):
    project = new_project(tmp_path, "python-backend")
    report = bench(project, "--tool", "builtin")
    data = json.loads((project / "bench.json").read_text())
    assert set(data["levels"][0]) >= {
        "throughput",
        "p50_us",
        "p90_us",
        "p99_us",
        "server_queue_us",
        "server_compute_us",
        "client_cpu",
        "server_cpu",
    }
    assert report.levels[0].throughput == data["levels"][0]["throughput"]
