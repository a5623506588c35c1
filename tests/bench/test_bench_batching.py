"""A smoke run of bench/batching.py (--quick: one short pass per model at concurrency 4): its table has a row
for each of the four configurations (no batching, plain dynamic batching, the volume and tokens strategies)
with numeric figures, and its conclusion line. The figures of this run mean nothing; what is checked is that
every part (the project made with `tbgen new`/`add model`/`add batcher`, its build, the server, the load
generator, the statistics) runs to its end."""

from __future__ import annotations

import re

import pytest
from conftest import run_bench_script, triton_sources_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.cpp, pytest.mark.xdist_group("bench-batching")]

NUMBER = r"\d+(?:\.\d+)?"
RATIO = r"\d+\.\d\dx"


def row(model: str, over: str) -> str:
    """A table row: rows/s, req/s, p50, p99, executions, rows/exec, max, over, then four ratios."""
    figures = r" +".join([NUMBER] * 7)
    return rf"^{model} +{figures} +{over} +{RATIO} +{RATIO} +{RATIO} +{RATIO}$"


def test_batching_benchmark_prints_a_row_per_configuration(tmp_path, server_or_skip):
    triton_sources_or_skip("r24.10")
    out = run_bench_script("batching", "--quick", "--work-dir", str(tmp_path), timeout=600)
    for model in ("none", "dynamic"):
        assert re.search(row(model, "-"), out, re.M), out
    for model in ("volume", "tokens"):
        assert re.search(row(model, r"\d+"), out, re.M), out
    # Against themselves, the baselines are 1.00x.
    assert re.search(r"^dynamic .* 1\.00x +1\.00x +\d+\.\d\dx +\d+\.\d\dx$", out, re.M), out
    assert re.search(r"^none .* 1\.00x +1\.00x$", out, re.M), out
    assert re.search(r"^conclusion: volume gives \d+\.\d\dx .*; tokens gives \d+\.\d\dx .*\.$", out, re.M), (
        out
    )
    # The strategies were built and loaded from the models' directories.
    project = tmp_path / "bench-batching" / "model_repository"
    assert (project / "volume" / "batchstrategy.so").is_file()
    assert (project / "tokens" / "batchstrategy.so").is_file()
