"""bench/soak.py's smoke run: the soak path no other test takes (a sequence model's whole sequences), the
template's default project passing a short soak with the slope of every process and the p99 of each stretch
reported (a decoupled model's soak over streams runs in tests/smoke/test_soak.py)."""

from __future__ import annotations

import json

import pytest
from conftest import run_bench_script

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bench-soak")]


def test_bench_soak_runs_the_sequence_soak_and_reports_its_figures(tmp_path, server_or_skip):
    figures = tmp_path / "figures.json"
    out = run_bench_script("soak", "--quick", "--templates", "sequence", "--json", str(figures), timeout=600)
    rows = {row["case"]: row for row in json.loads(figures.read_text())}
    assert set(rows) == {"sequence"}, out
    for case, row in rows.items():
        assert row["passed"] and row["requests_per_s"] > 0, out
        assert "tritonserver" in row["slopes"], out
        stubs = [process for process in row["slopes"] if process.startswith("python stub ")]
        assert len(stubs) == 1, (case, out)  # the model's one instance, named with it
        assert len(row["p99_ms"]) == 1 and all(ms > 0 for ms in next(iter(row["p99_ms"].values()))), out
